/* The C client (include/kjit_client.h) against scripted fake servers, no
 * kjit serve and no GPU: its timeout bounds a whole reply (a server that
 * trickles bytes or sends other requests' frames is cut off), a reply
 * without an id is only ever an error about the connection, a run request
 * with text after its object is refused before anything is sent, a reply
 * that is not a JSON object or a tune reply with numbers out of range is an
 * error (not a wait, not a cast of 1e300), a timeout of INT_MAX ms works,
 * an empty socket path is refused, and kjit_client_default_socket checks
 * its buffer and writes nothing when it fails. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client/frame.h"
#include "core/spin.h"
#include "kjit_client.h"
#include "test_util.h"

enum mode { TRICKLE, OTHER_IDS, NULL_OK, IDLE_CLOSE, COUNT, NOT_JSON, TUNE_GARBAGE, TRAILING, BAD_JSON_NULL,
            TUNE_MISSING, SLOW_HALF, TUNE_ROWS, TUNE_UNSAVED, TUNE_ERROR };

typedef struct fake {
    enum mode mode;
    int lfd;
    char path[108];
    int requests; /* frames read after the hello */
    pthread_t th;
} fake;

static int read_n(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r <= 0) return -1;
        p += r, n -= (size_t)r;
    }
    return 0;
}

/* One request frame; returns its id (the client writes it first), -1 at EOF. */
static long long read_request(int fd)
{
    uint8_t h[KJIT_FRAME_HEADER];
    if (read_n(fd, h, sizeof h)) return -1;
    const uint32_t jlen = (uint32_t)h[8] | (uint32_t)h[9] << 8 | (uint32_t)h[10] << 16 | (uint32_t)h[11] << 24;
    const uint32_t plen = (uint32_t)h[12] | (uint32_t)h[13] << 8 | (uint32_t)h[14] << 16 | (uint32_t)h[15] << 24;
    char *body = malloc((size_t)jlen + plen + 1);
    if (!body || read_n(fd, body, (size_t)jlen + plen)) return free(body), -1;
    body[jlen] = '\0';
    long long id = -1;
    if (sscanf(body, "{\"id\":%lld", &id) != 1) id = -1;
    free(body);
    return id;
}

static int send_frame(int fd, const char *json, int byte_by_byte)
{
    uint8_t h[KJIT_FRAME_HEADER];
    kjit__frame_encode(h, (uint32_t)strlen(json), 0);
    char buf[512];
    memcpy(buf, h, sizeof h);
    memcpy(buf + sizeof h, json, strlen(json));
    const size_t n = sizeof h + strlen(json);
    if (!byte_by_byte) return send(fd, buf, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
    for (size_t i = 0; i < n; ++i) {
        if (send(fd, buf + i, 1, MSG_NOSIGNAL) != 1) return -1;
        usleep(50000);
    }
    return 0;
}

/* Answers the next request with fmt (its %lld the request's id), then,
 * with drain, counts what else arrives until the client goes. */
static void answer_next(fake *f, int fd, const char *fmt, int drain)
{
    const long long q = read_request(fd);
    if (q < 0) return;
    f->requests++;
    char t[480];
    snprintf(t, sizeof t, fmt, q);
    send_frame(fd, t, 0);
    while (drain && read_request(fd) >= 0) f->requests++;
}

static void *serve(void *arg)
{
    fake *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    long long id = read_request(fd);
    char reply[256];
    snprintf(reply, sizeof reply, "{\"id\":%lld,\"ok\":true,\"version\":1}", id);
    if (f->mode >= TUNE_GARBAGE) send_frame(fd, reply, 0); /* the hello, for every mode from here on */
    switch (f->mode) {
    case TRICKLE: /* the hello reply at 20 bytes a second: ~3 s */
        send_frame(fd, reply, 1);
        break;
    case OTHER_IDS: /* frames of other requests, 10 a second, for 4 s */
        for (int i = 0; i < 40 && !send_frame(fd, "{\"id\":999999,\"ok\":true}", 0); ++i) usleep(100000);
        break;
    case NULL_OK:
        send_frame(fd, "{\"id\":null,\"ok\":true}", 0);
        break;
    case IDLE_CLOSE: /* hello, then a connection error for the next request */
        send_frame(fd, reply, 0);
        if (read_request(fd) >= 0) {
            f->requests++;
            send_frame(fd, "{\"id\":null,\"ok\":false,\"error\":{\"code\":\"timeout\",\"message\":\"idle\"}}", 0);
        }
        break;
    case COUNT: /* hello, then count what else arrives until EOF */
        send_frame(fd, reply, 0);
        while (read_request(fd) >= 0) f->requests++;
        break;
    case NOT_JSON: /* hello, then a frame that is no JSON object; stays open until the client goes */
        send_frame(fd, reply, 0);
        if (read_request(fd) >= 0) {
            f->requests++;
            send_frame(fd, "this is not json", 0);
            while (read_request(fd) >= 0) f->requests++;
        }
        break;
    case TRAILING: /* a reply with a second object after it */
        answer_next(f, fd, "{\"id\":%lld,\"ok\":true} {\"junk\":1}", 1);
        break;
    case BAD_JSON_NULL: /* bad_json with a null id (the connection stays); then a plain answer */
        if (read_request(fd) >= 0) {
            f->requests++;
            send_frame(fd, "{\"id\":null,\"ok\":false,\"error\":{\"code\":\"bad_json\",\"message\":\"x\"}}", 0);
            answer_next(f, fd, "{\"id\":%lld,\"ok\":true}", 0);
        }
        break;
    case TUNE_MISSING: /* a tune reply with no config at all */
        answer_next(f, fd, "{\"id\":%lld,\"ok\":true}", 0);
        break;
    case TUNE_ROWS: /* a tune reply whose per-row times do not match its row counts */
        answer_next(f, fd,
                    "{\"id\":%lld,\"ok\":true,\"fwd\":{\"rpc\":1,\"pf\":0,\"grid_per_sm\":0},\"bwd\":{\"bwd_pf\":1,"
                    "\"accs\":0},\"default_fwd\":{\"rpc\":1,\"pf\":0,\"grid_per_sm\":0},\"default_bwd\":{\"bwd_pf\":1,"
                    "\"accs\":0},\"fwd_candidates\":3,\"bwd_candidates\":2,\"rows\":[1024,2048],\"fwd_us_rows\":[1.5]}",
                    0);
        break;
    case SLOW_HALF: /* one byte of a frame just before half the client's 1 s timeout */
        if (read_request(fd) >= 0) {
            usleep(490000);
            (void)!send(fd, "K", 1, MSG_NOSIGNAL);
            while (read_request(fd) >= 0) {
            }
        }
        break;
    case TUNE_UNSAVED: /* tuned, but the server could not write its tuning file */
        answer_next(f, fd,
                    "{\"id\":%lld,\"ok\":true,\"fwd\":{\"rpc\":2,\"pf\":1,\"grid_per_sm\":0},\"bwd\":{\"bwd_pf\":1,"
                    "\"accs\":1},\"default_fwd\":{\"rpc\":4,\"pf\":1,\"grid_per_sm\":0},\"default_bwd\":{\"bwd_pf\":1,"
                    "\"accs\":1},\"fwd_candidates\":3,\"bwd_candidates\":2,\"rows\":[1024,2048],"
                    "\"fwd_us_rows\":[1.5,2.5],\"bwd_us_rows\":[3,4],\"default_fwd_us_rows\":[1.6,2.6],"
                    "\"default_bwd_us_rows\":[3.1,4.1],\"saved\":false,\"message\":\"KJIT_EIO: disk full\"}",
                    0);
        break;
    case TUNE_ERROR: /* an error reply */
        answer_next(f, fd,
                    "{\"id\":%lld,\"ok\":false,\"error\":{\"code\":\"unsupported\",\"message\":\"no GPU\"}}", 0);
        break;
    case TUNE_GARBAGE: /* a tune reply whose numbers no int holds */
        answer_next(f, fd,
                    "{\"id\":%lld,\"ok\":true,\"fwd\":{\"rpc\":1e300,\"pf\":1,\"grid_per_sm\":1},"
                    "\"bwd\":{\"bwd_pf\":1,\"accs\":0},\"fwd_candidates\":1e20,\"rows\":[1e300,-1e300,3]}",
                    0);
        break;
    }
    close(fd);
    return NULL;
}

static void fake_start(fake *f, const char *dir, enum mode m)
{
    memset(f, 0, sizeof *f);
    f->mode = m;
    snprintf(f->path, sizeof f->path, "%s/f%d.sock", dir, (int)m);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", f->path);
    f->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(f->lfd >= 0 && bind(f->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(f->lfd, 4) == 0);
    CHECK(pthread_create(&f->th, NULL, serve, f) == 0);
}

static void fake_stop(fake *f)
{
    pthread_join(f->th, NULL);
    close(f->lfd);
    unlink(f->path);
}

/* The timeout bounds the whole hello, not each read: 500 ms. */
static void test_deadline(const char *dir, enum mode m, const char *what)
{
    fake f;
    fake_start(&f, dir, m);
    kjit_client *c = NULL;
    const double t0 = kjit__now_us();
    const int rc = kjit_client_connect(&c, f.path, 500);
    const double took = (kjit__now_us() - t0) * 1e-6;
    CHECK_EQ_INT(rc, KJIT_EIO);
    CHECK(strstr(kjit_last_error(), "in time") != NULL);
    if (took > 1.5) {
        fprintf(stderr, "%s: connect with a 500 ms timeout took %.2f s\n", what, took);
        kjit_test_failures++;
    }
    kjit_client_close(c);
    fake_stop(&f);
}

/* A ping to the fake server of mode m fails with KJIT_EIO, its message
 * holding want, and hands back no reply. */
static void ping_refused(const char *dir, enum mode m, int timeout_ms, const char *want)
{
    fake f;
    fake_start(&f, dir, m);
    kjit_client *c = NULL;
    kjit_client_reply r;
    memset(&r, 0x5a, sizeof r);
    CHECK_STATUS(kjit_client_connect(&c, f.path, timeout_ms), KJIT_OK);
    CHECK_STATUS(kjit_client_request(c, "{\"type\":\"ping\"}", NULL, 0, NULL, NULL, &r), KJIT_EIO);
    CHECK(strstr(kjit_last_error(), want) != NULL);
    CHECK(r.json == NULL && r.payload == NULL); /* zeroed on entry, nothing handed back */
    kjit_client_close(c);
    fake_stop(&f);
}

/* The JSON check before a parse: JSON passes (every number form, the four
 * whitespace bytes, escapes, UTF-8 in strings); what cJSON would also take
 * is refused at its byte. */
static void test_json_text(void)
{
    static const char *const ok[] = {
        "{\"a\":0}", "{\"a\":-0}", "{\"a\":1.5e-5}", "{\"a\":1E+3}", "{\"a\":[1,-2,3.25,0.5]}",
        " {\t\"a\"\n:\r10 }", "{\"a\":\"x\\\"y\\\\\"}", "{\"a\":\"\xc3\xa9\\u00e9\"}",
        "{\"a\":true,\"b\":null}", "{\"id\":9007199254740991}", "{\"a\":\"05 1. \\t\"}",
    };
    static const struct { const char *text; size_t at; const char *why; } bad[] = {
        {"{\"a\":05}", 5, "leading zero"},
        {"{\"a\":1.}", 5, "number JSON does not allow"},
        {"{\"a\":1e}", 5, "number JSON does not allow"},
        {"{\"a\":1e+}", 5, "number JSON does not allow"},
        {"{\"a\":-}", 5, "number JSON does not allow"},
        {"{\"a\":--1}", 5, "number JSON does not allow"},
        {"{\"a\":-01}", 5, "number JSON does not allow"},
        {"\xef\xbb\xbf{}", 0, "byte-order mark"},
        {"{}\xc2\xa0", 2, "non-ASCII byte outside"},
        {"{\x0c}", 1, "control byte outside"},
        {"{\"a\":1\x7f}", 6, "control byte outside"},
        {"{\"a\":\"x\ty\"}", 7, "not escaped in a string"},
        {"{\"a\":\"\\u0000\"}", 6, "NUL"},
        {"{\"a\":\"\xff\"}", 6, "UTF-8"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; ++i) {
        size_t at = 0;
        const char *why = kjit__json_text_problem(ok[i], strlen(ok[i]), &at);
        if (why) {
            fprintf(stderr, "json text %zu (%s) refused: %s at %zu\n", i, ok[i], why, at);
            kjit_test_failures++;
        }
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        size_t at = 99;
        const char *why = kjit__json_text_problem(bad[i].text, strlen(bad[i].text), &at);
        if (!why || !strstr(why, bad[i].why) || at != bad[i].at) {
            fprintf(stderr, "json text %s: %s at %zu, want %s at %zu\n", bad[i].text, why ? why : "(passed)", at,
                    bad[i].why, bad[i].at);
            kjit_test_failures++;
        }
    }
}

int main(void)
{
    char *dir = kjit_test_tmpdir();
    test_json_text();

    /* kjit_client_default_socket: a NULL or short buffer is refused, and a
     * refused call writes nothing. */
    CHECK_STATUS(kjit_client_default_socket(NULL, 108), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "buf") != NULL);
    char small[8];
    memset(small, 'Z', sizeof small);
    CHECK_STATUS(kjit_client_default_socket(small, sizeof small), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "len 8") != NULL);
    int untouched = 1;
    for (size_t i = 0; i < sizeof small; ++i) untouched &= small[i] == 'Z';
    CHECK(untouched);
    char full[108];
    CHECK_STATUS(kjit_client_default_socket(full, sizeof full), KJIT_OK);
    CHECK(strstr(full, "kjit.sock") != NULL);
    /* XDG_RUNTIME_DIR: an absolute one is used, a relative one ignored (the
     * XDG spec; a server and a client in two working directories missed
     * each other). */
    const char *xdg_was = getenv("XDG_RUNTIME_DIR");
    char *xdg_keep = xdg_was ? strdup(xdg_was) : NULL;
    setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
    CHECK_STATUS(kjit_client_default_socket(full, sizeof full), KJIT_OK);
    CHECK(strcmp(full, "/run/user/4242/kjit/kjit.sock") == 0);
    setenv("XDG_RUNTIME_DIR", "rel", 1);
    CHECK_STATUS(kjit_client_default_socket(full, sizeof full), KJIT_OK);
    CHECK(strncmp(full, "/tmp/kjit-", 10) == 0);
    if (xdg_keep) setenv("XDG_RUNTIME_DIR", xdg_keep, 1);
    else unsetenv("XDG_RUNTIME_DIR");
    free(xdg_keep);

    test_deadline(dir, TRICKLE, "a hello reply trickled byte by byte");
    test_deadline(dir, OTHER_IDS, "frames of other requests only");

    /* A reply with a null id that says ok is not a hello. */
    fake f;
    fake_start(&f, dir, NULL_OK);
    kjit_client *c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, f.path, 5000), KJIT_EIO);
    CHECK(strstr(kjit_last_error(), "without an id") != NULL);
    fake_stop(&f);

    /* A connection-level error reply: KJIT_OK with ok 0 and no stale
     * message; the connection is then done. */
    fake_start(&f, dir, IDLE_CLOSE);
    c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, f.path, 5000), KJIT_OK);
    usleep(100000);
    kjit_client_reply r = {0};
    CHECK_STATUS(kjit_client_request(c, "{\"type\":\"ping\"}", NULL, 0, NULL, NULL, &r), KJIT_OK);
    CHECK(r.json && !r.ok && strstr(r.json, "\"timeout\""));
    CHECK(kjit_last_error()[0] == '\0');
    kjit_client_reply_free(&r);
    CHECK_STATUS(kjit_client_request(c, "{\"type\":\"ping\"}", NULL, 0, NULL, NULL, &r), KJIT_EIO);
    CHECK(strstr(kjit_last_error(), "reconnect") != NULL);
    kjit_client_close(c);
    fake_stop(&f);

    /* A run with text after its object is refused before sending (it sent
     * the first object and dropped the rest). */
    fake_start(&f, dir, COUNT);
    c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, f.path, 5000), KJIT_OK);
    double us = -1;
    CHECK_STATUS(kjit_client_run(c, "{\"op\":\"timestep_sinusoid\"} {\"type\":\"shutdown\"}", NULL, 0, &us), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "text after its JSON object") != NULL);
    kjit_client_close(c);
    fake_stop(&f);
    CHECK_EQ_INT(f.requests, 0);

    /* A frame that is not a JSON object: an error at once (it was skipped
     * as another request's, and the call waited for the deadline). */
    ping_refused(dir, NOT_JSON, 0 /* no timeout at all */, "not one JSON object");
    /* A reply with bytes after its object: an error, not the first object
     * taken for the reply. */
    ping_refused(dir, TRAILING, 5000, "not one JSON object");

    /* bad_json with a null id (a frame the server could not read an id
     * from) is the answer, and the connection stays usable; requests the
     * server would call bad_json are refused here, naming why, before
     * anything is sent. */
    fake_start(&f, dir, BAD_JSON_NULL);
    c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, f.path, 5000), KJIT_OK);
    CHECK_STATUS(kjit_client_request(c, "{\"type\":\"a\\u0000b\"}", NULL, 0, NULL, NULL, &r), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "u0000") != NULL);
    CHECK_STATUS(kjit_client_request(c, "{\"type\":\"ping\",\"a\":[[[[[[[[[1]]]]]]]]]}", NULL, 0, NULL, NULL, &r),
                 KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "deeper than 8") != NULL);
    /* Text cJSON reads but JSON does not allow: refused the same way, not sent. */
    CHECK_STATUS(kjit_client_request(c, "\xef\xbb\xbf{\"type\":\"ping\"}", NULL, 0, NULL, NULL, &r), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "byte-order mark") != NULL && r.json == NULL);
    CHECK_STATUS(kjit_client_request(c, "{\"type\":\"ping\",\"n\":05}", NULL, 0, NULL, NULL, &r), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "leading zero") != NULL && r.json == NULL);
    CHECK_STATUS(kjit_client_request(c, "{\"type\":\"ping\"}", NULL, 0, NULL, NULL, &r), KJIT_OK);
    CHECK(r.json && !r.ok && strstr(r.json, "bad_json"));
    kjit_client_reply_free(&r);
    CHECK_STATUS(kjit_client_request(c, "{\"type\":\"ping\"}", NULL, 0, NULL, NULL, &r), KJIT_OK);
    CHECK(r.json && r.ok);
    kjit_client_reply_free(&r);
    kjit_client_close(c);
    fake_stop(&f);
    CHECK_EQ_INT(f.requests, 2); /* the four refused requests never went out */

    /* A tune reply without its configs: KJIT_EIO naming the field, out zeroed. */
    fake_start(&f, dir, TUNE_MISSING);
    c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, f.path, 5000), KJIT_OK);
    {
        kjit_tune_result tm;
        memset(&tm, 0x5a, sizeof tm);
        CHECK_STATUS(kjit_client_tune(c, "norm_modulate", 5376, KJIT_BF16, &tm), KJIT_EIO);
        CHECK(strstr(kjit_last_error(), "rpc is missing") != NULL);
        CHECK(tm.config.rpc == 0 && tm.config.source == 0 && tm.n_rows == 0);
    }
    kjit_client_close(c);
    fake_stop(&f);

    /* A tune reply with one forward time for two row counts: KJIT_EIO naming it. */
    fake_start(&f, dir, TUNE_ROWS);
    c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, f.path, 5000), KJIT_OK);
    {
        kjit_tune_result tm;
        CHECK_STATUS(kjit_client_tune(c, "norm_modulate", 5376, KJIT_BF16, &tm), KJIT_EIO);
        CHECK(strstr(kjit_last_error(), "1 fwd_us_rows for 2 row counts") != NULL);
        CHECK(tm.config.rpc == 0 && tm.n_rows == 0);
    }
    kjit_client_close(c);
    fake_stop(&f);

    /* Tuned but not saved: KJIT_EIO with the result filled in, as kjit_tune. */
    fake_start(&f, dir, TUNE_UNSAVED);
    c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, f.path, 5000), KJIT_OK);
    {
        kjit_tune_result tm;
        memset(&tm, 0x5a, sizeof tm);
        CHECK_STATUS(kjit_client_tune(c, "norm_modulate", 5376, KJIT_BF16, &tm), KJIT_EIO);
        CHECK(strstr(kjit_last_error(), "disk full") != NULL);
        CHECK(tm.config.rpc == 2 && tm.config.source == KJIT_CONFIG_TUNED && tm.n_rows == 2 && !tm.saved);
        CHECK(tm.rows[1] == 2048 && tm.default_bwd_us_rows[1] == 4.1);
    }
    kjit_client_close(c);
    fake_stop(&f);

    /* A refused argument: out zeroed too. */
    {
        kjit_tune_result tm;
        memset(&tm, 0x5a, sizeof tm);
        CHECK_STATUS(kjit_client_tune(NULL, "norm_modulate", 5376, KJIT_BF16, &tm), KJIT_EINVAL);
        CHECK(tm.config.rpc == 0 && tm.n_rows == 0);
    }
    /* The other calls' refused arguments: reply and out zeroed as well (they
     * were left as they were, and kjit_client_compiled_free of one freed
     * garbage). */
    {
        kjit_client_reply rr;
        kjit_client_compiled cc;
        memset(&rr, 0x5a, sizeof rr);
        CHECK_STATUS(kjit_client_request(NULL, "{\"type\":\"ping\"}", NULL, 0, NULL, NULL, &rr), KJIT_EINVAL);
        CHECK(rr.json == NULL && rr.payload == NULL && rr.payload_len == 0 && rr.ok == 0);
        memset(&rr, 0x5a, sizeof rr);
        CHECK_STATUS(kjit_client_request(NULL, "{}", NULL, 3, NULL, NULL, &rr), KJIT_EINVAL);
        CHECK(rr.json == NULL && rr.payload_len == 0);
        memset(&cc, 0x5a, sizeof cc);
        CHECK_STATUS(kjit_client_compile(NULL, NULL, 256, KJIT_BF16, NULL, &cc), KJIT_EINVAL);
        CHECK(cc.n == 0 && cc.kernels == NULL && cc.priv_ == NULL);
        kjit_client_compiled_free(&cc);
        memset(&cc, 0x5a, sizeof cc);
        CHECK_STATUS(kjit_client_kernel_fetch(NULL, "norm_modulate", NULL, "x", NULL, &cc), KJIT_EINVAL);
        CHECK(cc.n == 0 && cc.kernels == NULL && cc.priv_ == NULL);
        kjit_client_compiled_free(&cc);
    }

    /* An error reply: its status, out zeroed (it was left as it was). */
    fake_start(&f, dir, TUNE_ERROR);
    c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, f.path, 5000), KJIT_OK);
    {
        kjit_tune_result tm;
        memset(&tm, 0x5a, sizeof tm);
        CHECK(kjit_client_tune(c, "norm_modulate", 5376, KJIT_BF16, &tm) != KJIT_OK);
        CHECK(strstr(kjit_last_error(), "no GPU") != NULL);
        CHECK(tm.config.rpc == 0 && tm.config.source == 0 && tm.n_rows == 0 && tm.fwd_us == 0);
    }
    kjit_client_close(c);
    fake_stop(&f);

    /* One byte just before half the timeout, then nothing: the call ends
     * at its deadline (1 s), not a whole timeout after that byte. */
    fake_start(&f, dir, SLOW_HALF);
    c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, f.path, 1000), KJIT_OK);
    {
        const double t0 = kjit__now_us();
        CHECK_STATUS(kjit_client_request(c, "{\"type\":\"ping\"}", NULL, 0, NULL, NULL, &r), KJIT_EIO);
        const double took = (kjit__now_us() - t0) * 1e-6;
        CHECK(strstr(kjit_last_error(), "in time") != NULL);
        if (took > 1.25) {
            fprintf(stderr, "a 1000 ms timeout with a byte at 490 ms ended after %.2f s\n", took);
            kjit_test_failures++;
        }
    }
    kjit_client_close(c);
    fake_stop(&f);

    /* A tune reply with 1e300 for rpc: KJIT_EIO naming it, out zeroed. */
    fake_start(&f, dir, TUNE_GARBAGE);
    c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, f.path, 5000), KJIT_OK);
    kjit_tune_result tr;
    memset(&tr, 0x5a, sizeof tr);
    CHECK_STATUS(kjit_client_tune(c, "norm_modulate", 5376, KJIT_BF16, &tr), KJIT_EIO);
    CHECK(strstr(kjit_last_error(), "rpc = 1e+300") != NULL);
    CHECK(tr.config.rpc == 0 && tr.fwd_candidates == 0 && tr.n_rows == 0);
    kjit_client_close(c);
    fake_stop(&f);

    /* The longest timeout (INT_MAX ms) and an empty path. */
    fake_start(&f, dir, COUNT);
    c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, f.path, 2147483647), KJIT_OK);
    kjit_client_close(c);
    fake_stop(&f);
    c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, "", 1000), KJIT_EINVAL);
    CHECK(c == NULL && strstr(kjit_last_error(), "path is \"\"") != NULL);

    kjit_test_rmtree(dir);
    free(dir);
    return kjit_test_result("test_client");
}
