/* kjit call: one request to a running server, the reply on stdout. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "kjit_client.h"

static const char help[] =
    "usage: kjit call [--socket PATH] [--timeout MS] [--payload-out FILE] [--events] JSON\n"
    "\n"
    "Sends one request to a running `kjit serve` and prints its reply header\n"
    "(one line of JSON). The client sets the request's id; e.g.\n"
    "  kjit call '{\"type\":\"stats\"}'\n"
    "  kjit call '{\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\"}'\n"
    "\n"
    "  --socket PATH       (default: $KJIT_SERVER, else the server's default socket)\n"
    "  --timeout MS        give up when the server is silent this long, 0: wait forever\n"
    "                      (default 600000)\n"
    "  --payload-out FILE  write the reply's binary payload (cubins) there\n"
    "  --events            also print progress events, one line each, before the reply\n"
    "\n"
    "Exit status: 0 when the reply says ok, 1 when it is an error or no server\n"
    "answers, 2 on bad usage.\n";

static void print_event(void *arg, const char *json)
{
    (void)arg;
    puts(json);
    fflush(stdout);
}

int kjit_cli_call(int argc, char **argv)
{
    const char *socket = NULL, *payload_out = NULL, *json = NULL;
    long timeout = 600000;
    int events = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(a, "--events")) {
            events = 1;
        } else if (!strcmp(a, "--socket") || !strcmp(a, "--payload-out") || !strcmp(a, "--timeout")) {
            const char *v = kjit_cli_value("call", argc, argv, &i);
            if (!v) return KJIT_EXIT_USAGE;
            if (!strcmp(a, "--socket") && !*v) return kjit_cli_usage_error("call", "--socket '': expected a path");
            if (!strcmp(a, "--socket")) socket = v;
            else if (!strcmp(a, "--payload-out")) payload_out = v;
            else if (kjit_cli_int(v, 0, 86400000, &timeout))
                return kjit_cli_usage_error("call", "--timeout '%s': expected milliseconds", v);
        } else if (a[0] == '-') { /* a request is a JSON object: never a '-' */
            return kjit_cli_usage_error("call", "unknown option '%s'", a);
        } else if (json) {
            return kjit_cli_usage_error("call", "one JSON request only");
        } else {
            json = a;
        }
    }
    if (!json) return kjit_cli_usage_error("call", "the JSON request is missing");
    /* The payload file must be writable before anything is asked of the
     * server: opened for appending (nothing truncated yet), and a file this
     * call created is removed again if no payload comes to be written. */
    int created = 0;
    if (payload_out) {
        if (!*payload_out) return kjit_cli_usage_error("call", "--payload-out '': expected a file path");
        created = access(payload_out, F_OK) != 0;
        FILE *f = fopen(payload_out, "ab");
        if (!f || fclose(f) != 0)
            return kjit_cli_usage_error("call", "--payload-out '%s': cannot write it: %s", payload_out, strerror(errno));
    }
    kjit_client *c;
    if (kjit_client_connect(&c, socket, (int)timeout)) {
        fprintf(stderr, "kjit call: %s\n", kjit_last_error());
        if (created) unlink(payload_out);
        return KJIT_EXIT_FAIL;
    }
    kjit_client_reply r;
    int rc = kjit_client_request(c, json, NULL, 0, events ? print_event : NULL, NULL, &r);
    kjit_client_close(c);
    if (rc && created) unlink(payload_out);
    if (rc == KJIT_EINVAL) return kjit_cli_usage_error("call", "%s", kjit_last_error());
    if (rc) {
        fprintf(stderr, "kjit call: %s\n", kjit_last_error());
        return KJIT_EXIT_FAIL;
    }
    puts(r.json);
    if (payload_out) {
        FILE *f = fopen(payload_out, "wb");
        int bad = !f;
        if (f) {
            bad = r.payload_len && fwrite(r.payload, 1, r.payload_len, f) != r.payload_len;
            bad |= fclose(f) != 0;
        }
        if (bad) {
            fprintf(stderr, "kjit call: --payload-out: cannot write %s: %s\n", payload_out, strerror(errno));
            rc = -1;
        }
    }
    int ok = r.ok && !rc;
    kjit_client_reply_free(&r);
    return ok ? 0 : KJIT_EXIT_FAIL;
}
