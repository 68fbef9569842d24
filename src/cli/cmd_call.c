/* kjit call: one request to a running server, the reply on stdout. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/file_write.h"
#include "client/request.h"
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
    "  --timeout MS        give up when the reply (or each event) has not come whole\n"
    "                      within this long, 0: wait forever (default 600000)\n"
    "  --payload-out FILE  write the reply's binary payload (cubins) there: a file of\n"
    "                      yours with one name is replaced whole (through a temporary\n"
    "                      file beside it), others written in place; left as it was\n"
    "                      when the reply is an error or has no payload\n"
    "  --events            also print progress events, one line each, before the reply\n"
    "\n"
    "Exit status: 0 when the reply says ok, 1 when it is an error or no server\n"
    "answers, 2 on bad usage.\n";

/* The payload into the --payload-out file, open as pfd (closed here): 0, or
 * an errno. A file of this user's, named directly (no link) and with no
 * other name (one link), is replaced whole: the bytes go to a temporary
 * file beside it, renamed over it once written and closed, so a failed
 * write (a full disk, a file-size limit) or a killed call leaves it as it
 * was, or no file where this call made it. Every other file is written in
 * place (truncated first if regular), as the user would see it written:
 * through a link (/dev/stdout among them), to a file with other names or of
 * another owner (a rename would part the names, or change the owner), and
 * where no temporary file can be made or renamed there. */
static int write_payload(int pfd, const char *path, int created, const char *p, size_t n)
{
    struct stat st, named;
    int e = fstat(pfd, &st) != 0 ? errno : 0;
    const int whole = !e && S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid == geteuid() &&
                      lstat(path, &named) == 0 && S_ISREG(named.st_mode) && named.st_dev == st.st_dev &&
                      named.st_ino == st.st_ino;
    char *tmp = whole ? malloc(strlen(path) + 8) : NULL;
    int tfd = -1;
    if (tmp) {
        sprintf(tmp, "%s.XXXXXX", path);
        tfd = mkostemp(tmp, O_CLOEXEC);
    }
    int done = 0;
    if (tfd >= 0) {
        e = fchmod(tfd, st.st_mode & 07777) != 0 ? errno : 0;
        if (!e) e = kjit__write_full(tfd, p, n) ? errno : 0;
        if (close(tfd) != 0 && !e) e = errno;
        done = !e && rename(tmp, path) == 0;
        if (!done) unlink(tmp);
        if (!done && e) { /* the bytes themselves could not be written */
            close(pfd);
            if (created) unlink(path);
            free(tmp);
            return e;
        }
    }
    free(tmp);
    if (!done) {
        e = !e && S_ISREG(st.st_mode) && ftruncate(pfd, 0) != 0 ? errno : e;
        if (!e) e = kjit__write_full(pfd, p, n) ? errno : 0;
    }
    if (close(pfd) != 0 && !e) e = errno;
    if (e && created) unlink(path);
    return e;
}

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
                return kjit_cli_usage_error("call", "--timeout '%s': expected milliseconds in 0..86400000 (0: none)", v);
        } else if (a[0] == '-') { /* a request is a JSON object: never a '-' */
            return kjit_cli_unknown("call", a);
        } else if (json) {
            return kjit_cli_usage_error("call", "one JSON request only");
        } else {
            json = a;
        }
    }
    if (!json) return kjit_cli_usage_error("call", "the JSON request is missing");
    /* A request no server would take is a usage error before any connect. */
    if (kjit__request_parse(json, strlen(json), NULL, NULL) != KJIT_OK)
        return kjit_cli_usage_error("call", "%s", kjit_last_error());
    /* The payload file must be writable before anything is asked of the
     * server. It stays open; an existing one is replaced only once a
     * payload comes (write_payload; /dev/null or a pipe is written as it
     * is), and one this call made (O_EXCL says so, also for a
     * dangling link, which is then refused, not followed) is removed when
     * none does. O_NONBLOCK: a FIFO without a reader is refused instead of
     * blocking the open; the writes then block as usual. */
    int pfd = -1, created = 0;
    if (payload_out) {
        if (!*payload_out) return kjit_cli_usage_error("call", "--payload-out '': expected a file path");
        pfd = open(payload_out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (pfd >= 0)
            created = 1;
        else if (errno == EEXIST && (pfd = open(payload_out, O_WRONLY | O_CLOEXEC | O_NONBLOCK)) < 0 &&
                 errno == ENOENT) /* there, yet not there: a link to nothing */
            return kjit_cli_usage_error("call", "--payload-out '%s': a symbolic link to a missing file: refused, "
                                        "not followed", payload_out);
        if (pfd < 0 && errno == ENXIO)
            return kjit_cli_usage_error("call", "--payload-out '%s': a FIFO with no reader", payload_out);
        if (pfd < 0)
            return kjit_cli_usage_error("call", "--payload-out '%s': cannot write it: %s", payload_out, strerror(errno));
        const int fl = fcntl(pfd, F_GETFL);
        if (fl < 0 || fcntl(pfd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
            const int e = errno;
            if (created) unlink(payload_out);
            close(pfd);
            return kjit_cli_usage_error("call", "--payload-out '%s': cannot write it: %s", payload_out, strerror(e));
        }
    }
    kjit_client *c = NULL;
    int rc = kjit_client_connect(&c, socket, (int)timeout);
    const int connected = rc == KJIT_OK;
    kjit_client_reply r = {0};
    if (!rc) {
        rc = kjit_client_request(c, json, NULL, 0, events ? print_event : NULL, NULL, &r);
        kjit_client_close(c);
    }
    if (pfd >= 0 && (rc || !r.ok || r.payload_len == 0)) { /* no payload to keep */
        if (created) unlink(payload_out);
        close(pfd);
        pfd = -1;
    }
    /* A bad JSON argument or --socket is bad usage; a bad socket from the
     * environment (KJIT_SERVER, XDG_RUNTIME_DIR) is not the command line's. */
    if (rc == KJIT_EINVAL && (connected || socket)) return kjit_cli_usage_error("call", "%s", kjit_last_error());
    if (rc) {
        fprintf(stderr, "kjit call: %s\n", kjit_last_error());
        return KJIT_EXIT_FAIL;
    }
    puts(r.json);
    if (pfd >= 0) {
        const int e = write_payload(pfd, payload_out, created, (const char *)r.payload, r.payload_len);
        if (e) {
            fprintf(stderr, "kjit call: --payload-out: cannot write %s: %s\n", payload_out, strerror(e));
            rc = -1;
        }
    }
    int ok = r.ok && !rc;
    kjit_client_reply_free(&r);
    return ok ? 0 : KJIT_EXIT_FAIL;
}
