/* The C client: blocking frames over a Unix socket (include/kjit_client.h). */
#include "kjit_client.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "client/frame.h"
#include "client/request.h"
#include "core/spin.h"
#include "core/error.h"

struct kjit_client {
    int fd;
    int broken; /* a frame was cut or timed out: the stream can't be trusted */
    uint64_t next_id;
    int spin_us; /* poll this long for a reply before sleeping in recv */
    /* The last request text that took the splice below, and what its parse
     * found: the same text again (a run on the same buffers every step)
     * skips the parse (5 us for a 1 KB run request). */
    char *last;
    size_t last_len;
    int last_run, last_members;
    char *hello;
    char path[108];
    int timeout_ms;     /* the bound on a whole reply (0: none) */
    double deadline_us; /* this request's reply is due by (0: none) */
    int rcv_ms;         /* SO_RCVTIMEO as set now */
};

/* Client-side polling for a run's reply (KJIT_SPIN_US, default
 * CLIENT_SPIN_US on hosts with 4 or more CPUs, else 0): a reply that comes
 * within it costs no wake-up of this thread. Other requests do not poll (64
 * polling clients would take the CPUs the server needs). */
#define CLIENT_SPIN_US 2000

/* JSON's whitespace (what the splice below may pass over). */
static int json_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; }

/* Returns once the socket has something to read, or spin_us have passed. */
static void spin_for_reply(const kjit_client *c)
{
    if (c->spin_us <= 0) return;
    const double end = kjit__now_us() + c->spin_us;
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    while (poll(&p, 1, 0) == 0 && kjit__now_us() < end) {
    }
}

int kjit_client_default_socket(char *buf, size_t len)
{
    kjit__clear_error();
    if (!buf) return kjit__fail(KJIT_EINVAL, "kjit_client_default_socket: buf is NULL");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    /* A relative one is ignored, as the XDG spec says (and as the cache does
     * with XDG_CACHE_HOME): a server and a client started in two different
     * working directories would otherwise miss each other. */
    if (xdg && xdg[0] != '/') xdg = NULL;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
    int n = xdg ? snprintf(path, sizeof path, "%s/kjit/kjit.sock", xdg)
                        : snprintf(path, sizeof path, "/tmp/kjit-%u/kjit.sock", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= sizeof path - 1)
        return kjit__fail(KJIT_EINVAL, "the default socket path is too long for a Unix socket (XDG_RUNTIME_DIR=%s)",
                          xdg ? xdg : "");
    /* A call that fails on its arguments writes nothing. */
    if ((size_t)n >= len)
        return kjit__fail(KJIT_EINVAL, "kjit_client_default_socket: len %zu: the path %s needs %d bytes", len, path,
                          n + 1);
    memcpy(buf, path, (size_t)n + 1);
    return KJIT_OK;
}

/* What follows a parsed JSON object past JSON's whitespace (the only
 * bytes up to 0x20 kjit__json_text_problem lets through): NULL when
 * nothing does (anything else is a second request or garbage, which must
 * be refused, not dropped). */
static const char *after_object(const char *end)
{
    while (end && json_space(*end)) ++end;
    return end && *end ? end : NULL;
}

int kjit__request_parse(const char *json, size_t len, cJSON **out, const char **end_out)
{
    if (out) *out = NULL;
    if (end_out) *end_out = NULL;
    size_t at = 0;
    const char *problem = kjit__json_text_problem(json, len, &at);
    if (problem) return kjit__fail(KJIT_EINVAL, "the request %s (at byte %zu)", problem, at);
    if (kjit__json_depth(json, len, KJIT_MAX_JSON_DEPTH) > KJIT_MAX_JSON_DEPTH)
        return kjit__fail(KJIT_EINVAL, "the request nests deeper than %d levels", KJIT_MAX_JSON_DEPTH);
    const char *end = NULL;
    cJSON *o = kjit__json_parse(json, len, &end); /* a shortage of memory is not the caller's error */
    if (!cJSON_IsObject(o)) {
        const int parsed = o != NULL;
        cJSON_Delete(o);
        return kjit__fail(KJIT_EINVAL, "the request is %s: %.80s",
                          parsed ? "not a JSON object" : "not valid JSON", json);
    }
    /* cJSON stops after the object: the first object alone went out
     * ('{...} {"type":"shutdown"}' sent a ping). */
    const char *tail = after_object(end);
    if (tail) {
        cJSON_Delete(o);
        return kjit__fail(KJIT_EINVAL, "the request has text after its JSON object: %.40s", tail);
    }
    if (end_out) *end_out = end;
    if (out) *out = o;
    else cJSON_Delete(o);
    return KJIT_OK;
}

/* SO_RCVTIMEO to ms (0: none), when it is not that already. */
static int set_rcv(kjit_client *c, int ms)
{
    if (c->rcv_ms == ms) return 0;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv)) return -1;
    c->rcv_ms = ms;
    return 0;
}

/* Starts the bound on a reply: due timeout_ms from now, the socket's
 * timeout the whole bound again. */
static int arm_deadline(kjit_client *c)
{
    c->deadline_us = c->timeout_ms > 0 ? kjit__now_us() + 1000.0 * c->timeout_ms : 0;
    return set_rcv(c, c->timeout_ms);
}

static int broken(kjit_client *c, const char *fmt, const char *detail)
{
    c->broken = 1;
    return kjit__fail(KJIT_EIO, fmt, c->path, detail);
}

static int send_all(kjit_client *c, struct iovec *iov, int n)
{
    while (n > 0) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return broken(c, "sending to the kjit server at %s: %s", strerror(errno));
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            ++iov;
            --n;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return KJIT_OK;
}

static int recv_all(kjit_client *c, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        /* The timeout bounds the whole reply: a server trickling bytes, or
         * sending frames of other requests, is cut off at the deadline too.
         * The socket's own timeout is shortened to what is left whenever
         * that is less (a prompt reply, within the first millisecond, makes
         * no system call for it); a read that starts just before the
         * deadline waits no longer than the deadline (+1 ms). */
        if (c->deadline_us > 0) {
            const double left_us = c->deadline_us - kjit__now_us();
            if (left_us <= 0) return broken(c, "the kjit server at %s did not answer in time%s", "");
            const int left_ms = (int)(left_us / 1000) + 1;
            if (left_ms < c->rcv_ms && set_rcv(c, left_ms))
                return broken(c, "setting a timeout on the socket to %s: %s", strerror(errno));
        }
        ssize_t r = recv(c->fd, p, len, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) return broken(c, "the kjit server at %s closed the connection%s", "");
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return broken(c, "the kjit server at %s did not answer in time%s", "");
        if (r < 0) return broken(c, "reading from the kjit server at %s: %s", strerror(errno));
        p += r;
        len -= (size_t)r;
    }
    return KJIT_OK;
}

/* len bytes into a buffer of its own (extra bytes more, zeroed), grown as
 * they arrive: a header announcing a gigabyte and sending ten bytes costs
 * no gigabyte. */
static int recv_new(kjit_client *c, size_t len, size_t extra, char **out)
{
    size_t cap = len < ((size_t)64 << 10) ? len : (size_t)64 << 10, got = 0;
    char *b = malloc(cap + extra);
    for (;;) {
        if (!b) {
            c->broken = 1;
            return kjit__fail(KJIT_ENOMEM, "no memory for a %zu byte reply", len);
        }
        const size_t want = (cap < len ? cap : len) - got;
        int rc = recv_all(c, b + got, want);
        if (rc) {
            free(b);
            return rc;
        }
        got += want;
        if (got == len) break;
        cap = cap > len / 2 ? len : 2 * cap;
        char *nb = realloc(b, cap + extra);
        if (!nb) free(b);
        b = nb;
    }
    memset(b + len, 0, extra);
    *out = b;
    return KJIT_OK;
}

/* One frame from the server; *json is NUL-terminated, *json_len bytes. */
static int read_frame(kjit_client *c, char **json, size_t *json_len, void **payload, size_t *payload_len)
{
    uint8_t hdr[KJIT_FRAME_HEADER];
    kjit_frame_header h;
    char why[256];
    int rc = recv_all(c, hdr, sizeof hdr);
    if (rc) return rc;
    if (kjit__frame_decode(hdr, KJIT_MAX_REPLY_JSON, KJIT_MAX_REPLY_PAYLOAD, &h, why, sizeof why))
        return broken(c, "bad frame from the kjit server at %s: %s", why);
    char *j = NULL, *p = NULL;
    if ((rc = recv_new(c, h.json_len, 1, &j))) return rc;
    if (h.payload_len && (rc = recv_new(c, h.payload_len, 0, &p))) {
        free(j);
        return rc;
    }
    *json = j, *json_len = h.json_len;
    *payload = p, *payload_len = h.payload_len;
    return KJIT_OK;
}

/* A reply's JSON header: one object, nothing after it but white space,
 * no NUL byte (docs/PROTOCOL.md). NULL (nothing parsed) otherwise. (Not
 * held to a request's UTF-8 and depth rules: a reply may quote a path or a
 * compiler's log byte for byte, and cJSON bounds its own nesting.) */
static cJSON *reply_parse(const char *json, size_t len)
{
    if (memchr(json, '\0', len)) return NULL;
    const char *end = NULL;
    cJSON *r = kjit__json_parse(json, len, &end);
    if (r && end)
        while (end < json + len && json_space(*end)) ++end;
    if (r && (!cJSON_IsObject(r) || end != json + len)) {
        cJSON_Delete(r);
        r = NULL;
    }
    return r;
}

/* Whether json (len bytes) is the text the client kept last. */
static int sent_last(const kjit_client *c, const char *json, size_t len)
{
    return c->last && c->last_len == len && !memcmp(c->last, json, len);
}

/* Keeps a request text the splice took (best effort: without memory, the
 * next one is parsed again). */
static void remember(kjit_client *c, const char *json, size_t len, int spin, int members)
{
    char *copy = len <= KJIT_MAX_REQUEST_JSON ? malloc(len + 1) : NULL;
    free(c->last);
    c->last = copy;
    if (!copy) return;
    memcpy(copy, json, len + 1);
    c->last_len = len;
    c->last_run = spin;
    c->last_members = members;
}

static int request_frames(kjit_client *c, char *text, size_t len, const void *payload, size_t payload_len,
                          uint64_t id, int spin, kjit_client_event_fn on_event, void *arg, kjit_client_reply *reply);
static const char *error_field(const cJSON *root, const char *name);

/* Whether an error of this code ends the connection (docs/PROTOCOL.md):
 * the others (bad_json about a frame the server could not read an id
 * from, ...) leave it open. */
static int closes(const char *code)
{
    return !strcmp(code, "bad_frame") || !strcmp(code, "busy") || !strcmp(code, "timeout") ||
           !strcmp(code, "not_allowed") || !code[0];
}

int kjit_client_request(kjit_client *c, const char *json, const void *payload, size_t payload_len,
                        kjit_client_event_fn on_event, void *arg, kjit_client_reply *reply)
{
    kjit__clear_error();
    if (reply) memset(reply, 0, sizeof *reply);  /* zeroed on every return, as documented */
    if (!c || !json || !reply || (payload_len && !payload))
        return kjit__fail(KJIT_EINVAL, "kjit_client_request: %s", !c ? "client is NULL" : !json ? "json is NULL"
                                                                  : !reply ? "reply is NULL" : "payload is NULL");
    if (c->broken) return kjit__fail(KJIT_EIO, "this connection to %s failed earlier: reconnect", c->path);
    if (payload_len > KJIT_MAX_REQUEST_PAYLOAD)
        return kjit__fail(KJIT_EINVAL, "payload of %zu bytes: requests carry at most %u", payload_len,
                          KJIT_MAX_REQUEST_PAYLOAD);
    const size_t json_len = strlen(json);
    const int again = sent_last(c, json, json_len);
    /* What the server would refuse as bad_json is refused here, naming it,
     * before anything is sent. */
    cJSON *o = NULL;
    const char *end = NULL;
    if (!again) {
        const int prc = kjit__request_parse(json, json_len, &o, &end);
        if (prc != KJIT_OK) return prc;
    }
    uint64_t id = c->next_id++;
    /* Only a run waits on purpose for the device: others do not poll. */
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    const int spin = again ? c->last_run : cJSON_IsString(type) && !strcmp(type->valuestring, "run");
    char *text = NULL;
    /* The splice below copies the caller's bytes: only for a text that is
     * the object alone between JSON whitespace (the only bytes the parse
     * lets through around it). */
    const char *p = json;
    while (json_space(*p)) ++p;
    int plain = *p == '{';
    for (const char *q = end; !again && plain && q && *q; ++q) plain = json_space(*q);
    /* The id written in front of the caller's fields, the rest of the text
     * as it is: printing the tree again (cJSON formats every number twice to
     * round-trip it) took 13 us for a 900-byte run request. */
    const int splice = again || (plain && end && !cJSON_GetObjectItemCaseSensitive(o, "id"));
    if (!splice) {
        /* Every id the caller wrote: the reply comes under ours. */
        while (cJSON_GetObjectItemCaseSensitive(o, "id")) cJSON_DeleteItemFromObjectCaseSensitive(o, "id");
        cJSON_AddNumberToObject(o, "id", (double)id);
        text = cJSON_PrintUnformatted(o);
    } else {
        /* Members after the id need a comma (as the parse found them). */
        const int members = again ? c->last_members : o->child != NULL;
        if (!again) remember(c, json, json_len, spin, members);
        char head[48];
        const int hn = snprintf(head, sizeof head, members ? "{\"id\":%llu," : "{\"id\":%llu", (unsigned long long)id);
        const size_t rest = json_len - (size_t)(p + 1 - json);
        if ((text = cJSON_malloc((size_t)hn + rest + 1))) {
            memcpy(text, head, (size_t)hn);
            memcpy(text + hn, p + 1, rest + 1);
        }
    }
    if (text && strlen(text) > KJIT_MAX_REQUEST_JSON && splice) {
        /* The caller's whitespace made it too long: compact it instead. */
        cJSON_free(text);
        if (!o) o = cJSON_Parse(json);
        cJSON_AddNumberToObject(o, "id", (double)id);
        text = cJSON_PrintUnformatted(o);
    }
    cJSON_Delete(o);
    if (!text) return kjit__fail(KJIT_ENOMEM, "no memory for the request");
    size_t len = strlen(text);
    if (len > KJIT_MAX_REQUEST_JSON) {
        cJSON_free(text);
        return kjit__fail(KJIT_EINVAL, "request of %zu bytes: at most %u", len, KJIT_MAX_REQUEST_JSON);
    }
    /* The socket's timeout is the whole bound already (reset after each
     * request): no system call here. */
    int rc = arm_deadline(c) ? broken(c, "setting a timeout on the socket to %s: %s", strerror(errno))
                             : request_frames(c, text, len, payload, payload_len, id, spin, on_event, arg, reply);
    cJSON_free(text);
    c->deadline_us = 0;
    /* The socket's timeout back to the whole bound for the next request. */
    if (!c->broken && set_rcv(c, c->timeout_ms))
        rc = broken(c, "setting a timeout on the socket to %s: %s", strerror(errno));
    return rc;
}

/* Sends one request's frame and reads until its reply. */
static int request_frames(kjit_client *c, char *text, size_t len, const void *payload, size_t payload_len,
                          uint64_t id, int spin, kjit_client_event_fn on_event, void *arg, kjit_client_reply *reply)
{
    uint8_t hdr[KJIT_FRAME_HEADER];
    kjit__frame_encode(hdr, (uint32_t)len, (uint32_t)payload_len);
    struct iovec iov[3] = {{hdr, sizeof hdr}, {text, len}, {(void *)payload, payload_len}};
    int rc = send_all(c, iov, payload_len ? 3 : 2);
    /* A server that refuses a connection says why and closes; our send may
     * lose that race, but the reason is still there to read. */
    char sent_error[KJIT__ERROR_MAX];
    snprintf(sent_error, sizeof sent_error, "%s", kjit_last_error());
    int send_rc = rc;
    while (rc == KJIT_OK || send_rc) {
        if (spin) spin_for_reply(c);
        char *rj = NULL;
        void *rp = NULL;
        size_t rjl = 0, rpl = 0;
        if ((rc = read_frame(c, &rj, &rjl, &rp, &rpl))) {
            if (send_rc) rc = kjit__fail(send_rc, "%s", sent_error);
            break;
        }
        cJSON *r = reply_parse(rj, rjl);
        if (!r) {
            /* Not a reply at all: reading on would wait for one that the
             * server cannot be relied on to send. */
            free(rj);
            free(rp);
            return broken(c, "the kjit server at %s sent a frame that is not one JSON object (not JSON, bytes after "
                          "it, or a NUL)%s", "");
        }
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(r, "id");
        int mine = cJSON_IsNumber(rid) && rid->valuedouble == (double)id;
        /* id null: an error about a frame whose id could not be read (a
         * request that is not JSON) or about the connection itself. */
        int conn_error = cJSON_IsNull(rid);
        const int closing = conn_error && closes(error_field(r, "code"));
        if (mine && !send_rc && cJSON_GetObjectItemCaseSensitive(r, "event")) {
            /* Progress of this request (a prewarm): the bound starts anew,
             * as it would for a reply (frames of other requests do not). */
            if (arm_deadline(c)) {
                cJSON_Delete(r);
                free(rj);
                free(rp);
                return broken(c, "setting a timeout on the socket to %s: %s", strerror(errno));
            }
            if (on_event) on_event(arg, rj);
        } else if ((mine && !send_rc) || conn_error) {
            const int ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok"));
            cJSON_Delete(r);
            if (conn_error && ok) {
                /* id null is only ever an error about the connection. */
                free(rj);
                free(rp);
                return broken(c, "the kjit server at %s sent a reply without an id%s", " that is not an error");
            }
            reply->json = rj;
            reply->payload = rp;
            reply->payload_len = rpl;
            reply->ok = ok;
            if (closing) {
                /* The server closes the connection after it: the reply is
                 * the answer (KJIT_OK, ok 0), and no message of a send that
                 * lost the race to it is left behind. */
                c->broken = 1;
                kjit__clear_error();
            }
            return KJIT_OK;
        }
        cJSON_Delete(r);
        free(rj);
        free(rp);
    }
    return rc;
}

void kjit_client_reply_free(kjit_client_reply *r)
{
    if (!r) return;
    free(r->json);
    free(r->payload);
    memset(r, 0, sizeof *r);
}

/* The server's error code and message of a failed reply. */
static const char *error_field(const cJSON *root, const char *name)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, name);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* The server must run as this user or as root. Another user's server (at
 * the default path, which anyone can create first under /tmp, or named by
 * KJIT_SERVER) could hand back any cubin, under a key that matches. */
static int peer_check(int fd, const char *path)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len))
        return kjit__fail(KJIT_EIO, "cannot read the credentials of the kjit server at %s: %s", path, strerror(errno));
    if (cr.uid != geteuid() && cr.uid != 0)
        return kjit__fail(KJIT_EPERM,
                          "the kjit server at %s runs as uid %u, neither this user (uid %u) nor root: not used "
                          "(another user's server could hand back any kernel)",
                          path, (unsigned)cr.uid, (unsigned)geteuid());
    return KJIT_OK;
}

int kjit_client_connect(kjit_client **out, const char *path, int timeout_ms)
{
    kjit__clear_error();
    if (!out || timeout_ms < 0)
        return kjit__fail(KJIT_EINVAL, "kjit_client_connect: %s", !out ? "out is NULL" : "timeout_ms < 0");
    *out = NULL;
    if (path && !*path)
        return kjit__fail(KJIT_EINVAL, "kjit_client_connect: path is \"\" (NULL: $KJIT_SERVER or the default socket)");
    char def[108];
    const char *env = getenv("KJIT_SERVER");
    if (!path) path = env && *env ? env : NULL;
    if (!path) {
        int rc = kjit_client_default_socket(def, sizeof def);
        if (rc) return rc;
        path = def;
    }
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path)
        return kjit__fail(KJIT_EINVAL, "socket path %s is longer than %zu bytes", path, sizeof a.sun_path - 1);
    memcpy(a.sun_path, path, strlen(path) + 1);
    kjit_client *c = calloc(1, sizeof *c);
    if (!c) return kjit__fail(KJIT_ENOMEM, "no memory for a client");
    snprintf(c->path, sizeof c->path, "%s", path);
    c->next_id = 1;
    c->spin_us = kjit__spin_us(CLIENT_SPIN_US);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = KJIT_OK;
    /* Before connecting: a Unix socket's connect waits (on a listener's full
     * backlog) up to its send timeout. */
    if (c->fd < 0) rc = kjit__fail(KJIT_EIO, "socket: %s", strerror(errno));
    else rc = kjit_client_timeout_set(c, timeout_ms);
    /* A signal during the wait (a full backlog) interrupts it even under
     * SA_RESTART: tried again for what is left of the timeout. */
    const double due_us = kjit__now_us() + 1000.0 * timeout_ms;
    int cr = rc ? 0 : connect(c->fd, (struct sockaddr *)&a, sizeof a), retried = 0;
    while (!rc && cr && errno == EINTR) {
        retried = 1;
        const double left_us = due_us - kjit__now_us();
        if (timeout_ms > 0 && left_us <= 0) {
            errno = EAGAIN;
            break;
        }
        if (timeout_ms > 0) {
            const int left_ms = (int)(left_us / 1000) + 1;
            struct timeval tv = {left_ms / 1000, (left_ms % 1000) * 1000};
            setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        }
        cr = connect(c->fd, (struct sockaddr *)&a, sizeof a);
        if (cr && errno == EISCONN) cr = 0;
    }
    const int e = errno;
    if (!rc && !cr && retried) rc = kjit_client_timeout_set(c, timeout_ms); /* the whole bound again */
    if (!rc && cr) {
        rc = e == ENOENT || e == ECONNREFUSED ? kjit__fail(KJIT_ENOTFOUND, "no kjit server at %s (%s)", path, strerror(e))
           : e == EACCES || e == EPERM      ? kjit__fail(KJIT_EPERM, "not allowed to connect to %s (%s)", path, strerror(e))
           : e == EAGAIN                    ? kjit__fail(KJIT_EIO, "the kjit server at %s did not accept in time", path)
                                            : kjit__fail(KJIT_EIO, "cannot connect to %s: %s", path, strerror(e));
    }
    if (!rc) rc = peer_check(c->fd, path);
    kjit_client_reply r = {0};
    if (!rc) {
        char hello[96];
        snprintf(hello, sizeof hello, "{\"type\":\"hello\",\"versions\":[%d],\"client\":\"kjit-c\"}", KJIT_PROTO_VERSION);
        rc = kjit_client_request(c, hello, NULL, 0, NULL, NULL, &r);
    }
    if (!rc && !r.ok) {
        cJSON *root = cJSON_Parse(r.json);
        const char *code = error_field(root, "code");
        rc = kjit__fail(!strcmp(code, "not_allowed") ? KJIT_EPERM : KJIT_EIO, "the kjit server at %s refused us: %s",
                        path, error_field(root, "message"));
        cJSON_Delete(root);
        kjit_client_reply_free(&r);
    }
    if (rc) {
        kjit_client_close(c);
        return rc;
    }
    free(r.payload);
    c->hello = r.json;
    *out = c;
    return KJIT_OK;
}

const char *kjit_client_hello(const kjit_client *c) { return c ? c->hello : NULL; }

int kjit_client_timeout_set(kjit_client *c, int timeout_ms)
{
    kjit__clear_error();
    if (!c || timeout_ms < 0)
        return kjit__fail(KJIT_EINVAL, "kjit_client_timeout_set: %s", !c ? "client is NULL" : "timeout_ms < 0");
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    c->rcv_ms = -1; /* set below */
    if (set_rcv(c, timeout_ms) || setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv))
        return kjit__fail(KJIT_EIO, "setting a %d ms timeout on the socket to %s: %s", timeout_ms, c->path,
                          strerror(errno));
    c->timeout_ms = timeout_ms;
    return KJIT_OK;
}

void kjit_client_close(kjit_client *c)
{
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    free(c->hello);
    free(c->last);
    free(c);
}

typedef struct compiled_priv {
    cJSON *root;
    void *payload;
} compiled_priv;

static int status_of(const char *code)
{
    if (!strcmp(code, "compile_failed")) return KJIT_ECOMPILE;
    if (!strcmp(code, "unsupported")) return KJIT_EUNSUPPORTED;
    if (!strcmp(code, "not_allowed")) return KJIT_EPERM;
    if (!strcmp(code, "bad_request") || !strcmp(code, "unknown_op") || !strcmp(code, "bad_json")) return KJIT_EINVAL;
    return KJIT_EIO;
}

static const char *str_of(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Sends a compile or kernel request (q, deleted here) and splits its reply
 * into kernels. */
static int fetch_compiled(kjit_client *c, cJSON *q, kjit_client_compiled *out)
{
    char *text = cJSON_PrintUnformatted(q);
    cJSON_Delete(q);
    if (!text) return kjit__fail(KJIT_ENOMEM, "no memory for the request");
    kjit_client_reply r;
    int rc = kjit_client_request(c, text, NULL, 0, NULL, NULL, &r);
    cJSON_free(text);
    if (rc) return rc;
    compiled_priv *p = calloc(1, sizeof *p);
    cJSON *root = cJSON_Parse(r.json);
    const cJSON *ks = cJSON_GetObjectItemCaseSensitive(root, "kernels");
    if (!r.ok) {
        rc = kjit__fail(status_of(error_field(root, "code")), "kjit server: %s", error_field(root, "message"));
    } else if (!p) {
        rc = kjit__fail(KJIT_ENOMEM, "no memory for the compile reply");
    } else if (!cJSON_IsArray(ks) || cJSON_GetArraySize(ks) < 1) {
        rc = kjit__fail(KJIT_EIO, "kjit server: a compile reply without kernels");
    } else if (!(out->kernels = calloc((size_t)cJSON_GetArraySize(ks), sizeof *out->kernels))) {
        rc = kjit__fail(KJIT_ENOMEM, "no memory for the compile reply's %d kernels", cJSON_GetArraySize(ks));
    }
    for (const cJSON *k = cJSON_IsArray(ks) ? ks->child : NULL; !rc && k; k = k->next) {
        kjit_client_kernel *o = &out->kernels[out->n];
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(k, "offset");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(k, "size");
        o->name_expr = str_of(k, "name_expr");
        o->lowered = str_of(k, "lowered");
        o->key = str_of(k, "key");
        o->cached = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(k, "cached"));
        if (!o->name_expr || !o->lowered || !o->key || !cJSON_IsNumber(off) || !cJSON_IsNumber(size) ||
            off->valuedouble < 0 || size->valuedouble < 1 || off->valuedouble != floor(off->valuedouble) ||
            size->valuedouble != floor(size->valuedouble) ||
            off->valuedouble + size->valuedouble > (double)r.payload_len)
            rc = kjit__fail(KJIT_EIO, "kjit server: kernel %d of the reply is malformed or outside the payload", out->n);
        else {
            o->cubin = (const char *)r.payload + (size_t)off->valuedouble;
            o->cubin_len = (size_t)size->valuedouble;
            out->n++;
        }
    }
    free(r.json);
    if (rc) {
        free(out->kernels);
        free(p);
        free(r.payload);
        cJSON_Delete(root);
        memset(out, 0, sizeof *out);
        return rc;
    }
    out->cached = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "cached"));
    p->root = root;
    p->payload = r.payload;
    out->priv_ = p;
    return KJIT_OK;
}

int kjit_client_compile(kjit_client *c, const char *op, int hidden, kjit_dtype dtype, const char *arch,
                        kjit_client_compiled *out)
{
    kjit__clear_error();
    if (out) memset(out, 0, sizeof *out);  /* so kjit_client_compiled_free is safe after any return */
    if (!c || !op || !out) return kjit__fail(KJIT_EINVAL, "kjit_client_compile: %s is NULL", !c ? "client" : !op ? "op" : "out");
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "type", "compile");
    cJSON_AddStringToObject(q, "op", op);
    cJSON_AddNumberToObject(q, "hidden", hidden);
    cJSON_AddStringToObject(q, "dtype", kjit_dtype_name(dtype));
    if (arch) cJSON_AddStringToObject(q, "arch", arch);
    return fetch_compiled(c, q, out);
}

int kjit_client_kernel_fetch(kjit_client *c, const char *op, const char *template_file, const char *expr,
                             const char *arch, kjit_client_compiled *out)
{
    kjit__clear_error();
    if (out) memset(out, 0, sizeof *out);
    if (!c || !op || !template_file || !expr || !out)
        return kjit__fail(KJIT_EINVAL, "kjit_client_kernel_fetch: %s is NULL", !c ? "client" : !op ? "op"
                                       : !template_file ? "template_file" : !expr ? "expr" : "out");
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "type", "kernel");
    cJSON_AddStringToObject(q, "op", op);
    cJSON_AddStringToObject(q, "template", template_file);
    cJSON_AddStringToObject(q, "expr", expr);
    if (arch) cJSON_AddStringToObject(q, "arch", arch);
    int rc = fetch_compiled(c, q, out);
    if (rc == KJIT_OK && out->n != 1) {
        int n = out->n;
        kjit_client_compiled_free(out);
        rc = kjit__fail(KJIT_EIO, "kjit server: a kernel reply with %d kernels", n);
    }
    return rc;
}

void kjit_client_compiled_free(kjit_client_compiled *r)
{
    if (!r) return;
    compiled_priv *p = r->priv_;
    if (p) {
        cJSON_Delete(p->root);
        free(p->payload);
        free(p);
    }
    free(r->kernels);
    memset(r, 0, sizeof *r);
}

/* The status of an error reply: the one its message starts with (run and
 * tune name the library's), else the code's. */
static int reply_status(const cJSON *root)
{
    const char *msg = error_field(root, "message");
    size_t n = strcspn(msg, ":");
#define KJIT_STATUS_OF(name, code, text)                                                    \
    if (n == strlen("KJIT_" #name) && !strncmp(msg, "KJIT_" #name, n) && (code) != KJIT_OK) \
        return code;
    KJIT_ERROR_MAP(KJIT_STATUS_OF)
#undef KJIT_STATUS_OF
    return status_of(error_field(root, "code"));
}

/* Sends q (deleted here) with a payload; *root is the parsed reply of a
 * request the server answered ok. */
/* Sends text; *root is the parsed reply when it says ok. */
static int call_text_ok(kjit_client *c, const char *text, const void *payload, size_t payload_len, cJSON **root)
{
    kjit_client_reply r;
    int rc = kjit_client_request(c, text, payload, payload_len, NULL, NULL, &r);
    if (rc) return rc;
    *root = cJSON_Parse(r.json);
    if (!*root) rc = kjit__fail(KJIT_EIO, "kjit server: a reply that is not JSON");
    else if (!r.ok) rc = kjit__fail(reply_status(*root), "kjit server: %s", error_field(*root, "message"));
    kjit_client_reply_free(&r);
    if (rc) {
        cJSON_Delete(*root);
        *root = NULL;
    }
    return rc;
}

static int call_ok(kjit_client *c, cJSON *q, const void *payload, size_t payload_len, cJSON **root)
{
    char *text = cJSON_PrintUnformatted(q);
    cJSON_Delete(q);
    if (!text) return kjit__fail(KJIT_ENOMEM, "no memory for the request");
    int rc = call_text_ok(c, text, payload, payload_len, root);
    cJSON_free(text);
    return rc;
}

int kjit_client_run(kjit_client *c, const char *json, const void *handles, int n_handles, double *us)
{
    kjit__clear_error();
    if (!c || !json || n_handles < 0 || (n_handles && !handles))
        return kjit__fail(KJIT_EINVAL, "kjit_client_run: %s", !c ? "client is NULL" : !json ? "json is NULL"
                                       : n_handles < 0 ? "n_handles < 0" : "handles is NULL");
    if ((size_t)n_handles * 64 > KJIT_MAX_REQUEST_PAYLOAD)
        return kjit__fail(KJIT_EINVAL, "kjit_client_run: %d handles: a request carries at most %u", n_handles,
                          KJIT_MAX_REQUEST_PAYLOAD / 64);
    /* The run text this client sent last (kept by kjit_client_request) is
     * a run already: no parse here either. */
    const size_t json_len = strlen(json);
    const int again = c->last_run && sent_last(c, json, json_len);
    const char *end = NULL;
    cJSON *q = again ? NULL : kjit__json_parse(json, json_len, &end);
    if (!again && !cJSON_IsObject(q)) {
        cJSON_Delete(q);
        return kjit__fail(KJIT_EINVAL, "kjit_client_run: the request is not a JSON object: %.80s", json);
    }
    const char *tail = again ? NULL : after_object(end);
    if (tail) {
        cJSON_Delete(q);
        return kjit__fail(KJIT_EINVAL, "kjit_client_run: the request has text after its JSON object: %.40s", tail);
    }
    cJSON *root;
    int rc;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(q, "type");
    if (again || (cJSON_IsString(type) && !strcmp(type->valuestring, "run"))) {
        /* Already a run: the caller's text as it is (no second print). */
        cJSON_Delete(q);
        rc = call_text_ok(c, json, handles, (size_t)n_handles * 64, &root);
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(q, "type");
        cJSON_AddStringToObject(q, "type", "run");
        rc = call_ok(c, q, handles, (size_t)n_handles * 64, &root);
    }
    if (rc) return rc;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "us");
    if (us) *us = cJSON_IsNumber(t) ? t->valuedouble : 0;
    cJSON_Delete(root);
    return KJIT_OK;
}

static double num_of(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* v, the reply's field name, as a whole number in [0, hi], or -1 after a
 * message naming it: a cast of anything else would be undefined. */
static int whole(kjit_client *c, double v, const char *name, double hi, double *out)
{
    if (!(v >= 0 && v <= hi && v == floor(v))) {
        c->broken = 1; /* a server that sends this is not to be trusted further */
        kjit__fail(KJIT_EIO, "the kjit server at %s sent a tune reply with %s = %g: expected a whole number in 0..%.0f",
                   c->path, name, v, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* whole() of field name of o, which must be there and a number. */
static int whole_of(kjit_client *c, const cJSON *o, const char *name, double hi, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v)) {
        c->broken = 1;
        kjit__fail(KJIT_EIO, "the kjit server at %s sent a tune reply whose %s is %s", c->path, name,
                   v ? "not a number" : "missing");
        return -1;
    }
    return whole(c, v->valuedouble, name, hi, out);
}

/* A config from the reply's fwd and bwd objects (kjit tune --json's); -1
 * after a message when a field is out of range. */
static int config_of(kjit_client *c, const cJSON *root, const char *fwd, const char *bwd, kjit_config_source src,
                     kjit_op_config *cfg)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, fwd), *b = cJSON_GetObjectItemCaseSensitive(root, bwd);
    double v[5];
    if (whole_of(c, f, "rpc", 1024, &v[0]) || whole_of(c, f, "pf", 1024, &v[1]) ||
        whole_of(c, f, "grid_per_sm", 1024, &v[2]) || whole_of(c, b, "bwd_pf", 1024, &v[3]) ||
        whole_of(c, b, "accs", 1024, &v[4]))
        return -1;
    cfg->rpc = (int)v[0], cfg->pf = (int)v[1], cfg->grid_per_sm = (int)v[2], cfg->bwd_pf = (int)v[3];
    cfg->accs = (int)v[4];
    cfg->source = src;
    return 0;
}

/* The numbers of array field name (absent: none), at most
 * KJIT_TUNE_MAX_ROW_COUNTS; -1 after a message naming it when it is not an
 * array of numbers or is longer. */
static int doubles_of(kjit_client *c, const cJSON *root, const char *name, double *out)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, name);
    int n = 0;
    if (a && !cJSON_IsArray(a)) n = -1;
    for (const cJSON *v = cJSON_IsArray(a) ? a->child : NULL; v && n >= 0; v = v->next)
        if (n == KJIT_TUNE_MAX_ROW_COUNTS || !cJSON_IsNumber(v)) n = -1;
        else out[n++] = v->valuedouble;
    if (n < 0) {
        c->broken = 1;
        kjit__fail(KJIT_EIO, "the kjit server at %s sent a tune reply whose %s is not an array of at most %d numbers",
                   c->path, name, KJIT_TUNE_MAX_ROW_COUNTS);
    }
    return n;
}

int kjit_client_tune(kjit_client *c, const char *op, int hidden, kjit_dtype dtype, kjit_tune_result *out)
{
    kjit__clear_error();
    /* Zeroed first: any error leaves it so, as kjit_tune's failure before
     * the tuning ended does (config.source tells the cases apart). */
    if (out) memset(out, 0, sizeof *out);
    if (!c || !op) return kjit__fail(KJIT_EINVAL, "kjit_client_tune: %s is NULL", !c ? "client" : "op");
    cJSON *q = cJSON_CreateObject(), *root;
    cJSON_AddStringToObject(q, "type", "tune");
    cJSON_AddStringToObject(q, "op", op);
    cJSON_AddNumberToObject(q, "hidden", hidden);
    cJSON_AddStringToObject(q, "dtype", kjit_dtype_name(dtype));
    int rc = call_ok(c, q, NULL, 0, &root);
    if (rc) return rc;
    if (out) {
        memset(out, 0, sizeof *out);
        double cand[2], rows[KJIT_TUNE_MAX_ROW_COUNTS];
        int bad = config_of(c, root, "fwd", "bwd", KJIT_CONFIG_TUNED, &out->config) ||
                  config_of(c, root, "default_fwd", "default_bwd", KJIT_CONFIG_DEFAULT, &out->default_config) ||
                  whole_of(c, root, "fwd_candidates", 1e6, &cand[0]) || whole_of(c, root, "bwd_candidates", 1e6, &cand[1]);
        if (!bad && (out->n_rows = doubles_of(c, root, "rows", rows)) < 0) bad = 1;
        static const char *const per_row[4] = {"fwd_us_rows", "bwd_us_rows", "default_fwd_us_rows",
                                               "default_bwd_us_rows"};
        double *const per_row_out[4] = {out->fwd_us_rows, out->bwd_us_rows, out->default_fwd_us_rows,
                                        out->default_bwd_us_rows};
        for (int k = 0; !bad && k < 4; ++k) {
            const int m = doubles_of(c, root, per_row[k], per_row_out[k]);
            if (m >= 0 && m != out->n_rows) {
                c->broken = 1;
                kjit__fail(KJIT_EIO, "the kjit server at %s sent a tune reply with %d %s for %d row counts", c->path,
                           m, per_row[k], out->n_rows);
            }
            if (m != out->n_rows) bad = 1;
        }
        for (int i = 0; !bad && i < out->n_rows; ++i) {
            char name[24];
            snprintf(name, sizeof name, "rows[%d]", i);
            double v = 0;
            if (!(bad = whole(c, rows[i], name, 9.0e15, &v))) out->rows[i] = (int64_t)v;
        }
        if (bad) {
            cJSON_Delete(root);
            memset(out, 0, sizeof *out);
            return KJIT_EIO;
        }
        out->fwd_us = num_of(root, "fwd_us");
        out->bwd_us = num_of(root, "bwd_us");
        out->default_fwd_us = num_of(root, "default_fwd_us");
        out->default_bwd_us = num_of(root, "default_bwd_us");
        out->fwd_candidates = (int)cand[0];
        out->bwd_candidates = (int)cand[1];
        out->seconds = num_of(root, "seconds");
        out->compile_seconds = num_of(root, "compile_seconds");
        out->saved = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "saved"));
    }
    /* Tuned, and used by the server's context, but not saved to its tuning
     * file: KJIT_EIO with out filled, as kjit_tune returns it. */
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(root, "message");
    rc = cJSON_IsString(msg) ? kjit__fail(KJIT_EIO, "the kjit server at %s tuned %s %d %s and uses the result, but: %s",
                                          c->path, op, hidden, kjit_dtype_name(dtype), msg->valuestring)
                             : KJIT_OK;
    cJSON_Delete(root);
    return rc;
}
