/* kjit serve: the node-local JIT service (src/server, docs/PROTOCOL.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "cli/cli.h"
#include "kjit.h"
#include "server/server.h"

static const char help[] =
    "usage: kjit serve [--socket PATH] [--cache-dir DIR] [--max-clients N] [--max-pending N]\n"
    "                  [--idle-timeout S] [--allow-uid LIST] [--allow-gid LIST]\n"
    "\n"
    "Serves compiles, prewarms and stats to the processes of this node over a\n"
    "Unix socket (protocol: docs/PROTOCOL.md), one compile per kernel for all\n"
    "of them; with a GPU (device 0) also runs ops on buffers clients share\n"
    "through CUDA IPC, and tunes. Runs until SIGTERM, SIGINT, SIGHUP (unless\n"
    "started ignoring it, as under nohup) or a `shutdown`\n"
    "request, then stops accepting, finishes the work in flight, removes the\n"
    "socket and exits 0.\n"
    "\n"
    "  --socket PATH      (default: $XDG_RUNTIME_DIR/kjit/kjit.sock where that is an\n"
    "                     absolute path, else /tmp/kjit-$UID/kjit.sock); the socket is\n"
    "                     0600 in a 0700 directory owned by this user. A stale socket of a dead\n"
    "                     server is replaced; a live server is never displaced.\n"
    "  --cache-dir DIR    cubin cache (default: $KJIT_CACHE_DIR, $XDG_CACHE_HOME/kjit, ~/.cache/kjit)\n"
    "  --max-clients N    connections at once, more are refused (default 256)\n"
    "  --max-pending N    unanswered requests per connection before the server\n"
    "                     stops reading from it (default 64)\n"
    "  --idle-timeout S   close connections silent for S seconds, 0: never (default 300)\n"
    "  --allow-uid LIST   also serve these user ids (comma list)\n"
    "  --allow-gid LIST   also serve users whose primary group is one of these\n"
    "                     (with either list the directory becomes 0711 and the socket\n"
    "                     0666; peers are then checked with SO_PEERCRED)\n"
    "\n"
    "Exit status: 0 after a clean stop, 1 when it cannot start (a server already\n"
    "listens on the socket, a bad directory), 2 on bad usage.\n";

static int id_list(const char *opt, char *arg, unsigned *out, int *n)
{
    char *items[KJIT_SERVER_MAX_ALLOW];
    const int k = kjit_cli_split_opt("serve", opt, "numeric ids", arg, items, KJIT_SERVER_MAX_ALLOW);
    if (k < 0) return KJIT_EXIT_USAGE;
    if (*n + k > KJIT_SERVER_MAX_ALLOW)
        return kjit_cli_usage_error("serve", "%s: more than %d ids in all", opt, KJIT_SERVER_MAX_ALLOW);
    for (int i = 0; i < k; ++i) {
        long v;
        if (kjit_cli_int(items[i], 0, 4294967294L, &v))
            return kjit_cli_usage_error("serve", "%s: '%s' is not a numeric id in 0..4294967294", opt, items[i]);
        out[(*n)++] = (unsigned)v;
    }
    return 0;
}

int kjit_cli_serve(int argc, char **argv)
{
    kjit_server_config cfg;
    kjit__server_config_init(&cfg);
    unsigned uids[KJIT_SERVER_MAX_ALLOW], gids[KJIT_SERVER_MAX_ALLOW];
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            return 0;
        }
        if (!strcmp(a, "--test-refuse-own-uid")) {
            cfg.refuse_own_uid = 1;
            continue;
        }
        static const char *const with_value[] = {"--socket", "--cache-dir", "--max-clients", "--max-pending",
                                                 "--idle-timeout", "--allow-uid", "--allow-gid"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; ++k) known |= !strcmp(a, with_value[k]);
        if (!known)
            return kjit_cli_unknown("serve", a);
        /* The id lists add up over repeats; other options are given once. */
        char *v = !strcmp(a, "--allow-uid") || !strcmp(a, "--allow-gid") ? kjit_cli_value_again("serve", argc, argv, &i)
                                                                          : kjit_cli_value("serve", argc, argv, &i);
        if (!v) return KJIT_EXIT_USAGE;
        long n;
        int rc = 0;
        if (!strcmp(a, "--socket")) {
            if (!*v) return kjit_cli_usage_error("serve", "--socket '': expected a path");
            const size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
            if (strlen(v) > max) /* as kjit call refuses it */
                return kjit_cli_usage_error("serve", "--socket: the path is %zu bytes: Unix sockets take at most %zu",
                                            strlen(v), max);
            cfg.socket_path = v;
        }
        else if (!strcmp(a, "--cache-dir")) cfg.cache_dir = v;
        else if (!strcmp(a, "--max-clients")) {
            if (kjit_cli_int(v, 1, 65536, &n)) return kjit_cli_usage_error("serve", "--max-clients '%s': expected 1..65536", v);
            cfg.max_clients = (int)n;
        } else if (!strcmp(a, "--max-pending")) {
            if (kjit_cli_int(v, 1, 4096, &n)) return kjit_cli_usage_error("serve", "--max-pending '%s': expected 1..4096", v);
            cfg.max_pending = (int)n;
        } else if (!strcmp(a, "--idle-timeout")) {
            /* Plain decimal seconds only: strtod would also take 0x10 and 1e3. */
            const char *dot = strchr(v, '.');
            const int plain = v[strspn(v, "0123456789.")] == '\0' && strpbrk(v, "0123456789") &&
                              (!dot || !strchr(dot + 1, '.'));
            char *end;
            double s = strtod(v, &end);
            if (!plain || *end || !(s >= 0 && s <= 86400))
                return kjit_cli_usage_error("serve", "--idle-timeout '%s': expected seconds in 0..86400", v);
            if (s > 0 && s < 0.001) /* the timers count whole milliseconds */
                return kjit_cli_usage_error("serve", "--idle-timeout '%s': below the 1 ms resolution (0 turns it off)", v);
            cfg.idle_timeout_s = s;
        } else if (!strcmp(a, "--allow-uid")) {
            rc = id_list(a, v, uids, &cfg.n_allow_uid);
        } else if (!strcmp(a, "--allow-gid")) {
            rc = id_list(a, v, gids, &cfg.n_allow_gid);
        } else {
            return kjit_cli_unknown("serve", a);
        }
        if (rc) return rc;
    }
    for (int i = 0; i < cfg.n_allow_uid; ++i) cfg.allow_uid[i] = (uid_t)uids[i];
    for (int i = 0; i < cfg.n_allow_gid; ++i) cfg.allow_gid[i] = (gid_t)gids[i];
    if (kjit__server_run(&cfg)) {
        fprintf(stderr, "kjit serve: %s\n", kjit_last_error());
        return KJIT_EXIT_FAIL;
    }
    return 0;
}
