/* Connections: accept with a peer check, frames in (bounded buffer, pending
 * cap as backpressure), frames out (zero-copy for cubins), close, sweep. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "client/frame.h"
#include "core/error.h"
#include "server/server_internal.h"

#define READ_CHUNK 4096
#define READ_MAX (KJIT_FRAME_HEADER + KJIT_MAX_REQUEST_JSON + KJIT_MAX_REQUEST_PAYLOAD)
/* How long a frame may take to arrive once begun, and how long a closing
 * connection may take to drain its last reply (slow or stalled readers). */
#define FRAME_TIMEOUT_MS 10000
#define CLOSE_WAIT_MS 5000

typedef struct wreq {
    uv_write_t req;
    kjit_conn *c;
    int final;
    unsigned nbufs;
    uv_buf_t bufs[];
} wreq;

static kjit_conn *of(uv_handle_t *h) { return (kjit_conn *)h->data; }

void kjit__conn_ref(kjit_conn *c) { c->refs++; }

void kjit__conn_unref(kjit_conn *c)
{
    if (--c->refs) return;
    kjit__run_memo_free(c);
    free(c->rbuf);
    free(c);
}

static void on_close(uv_handle_t *h)
{
    of(h)->srv->n_pipes--;
    kjit__conn_unref(of(h));
}

void kjit__conn_close(kjit_conn *c)
{
    if (c->closing) return;
    kjit_server *s = c->srv;
    __atomic_store_n(&c->closing, 1, __ATOMIC_RELEASE); /* the lane drops its queued runs */
    s->in_flight -= c->pending;
    c->pending = 0;
    if (c->counted) s->n_clients--;
    /* The lane closes its IPC handles after the runs it has queued. */
    kjit__ipc_release(s, c->ipc);
    c->ipc = NULL;
    kjit__kernel_cancel(s, c); /* its kernel requests not started: compiled for nobody */
    kjit__jobs_abandon(s);     /* and its compiles and prewarms no one else waits on */
    *(c->prev ? &c->prev->next : &s->conns) = c->next;
    if (c->next) c->next->prev = c->prev;
    uv_close((uv_handle_t *)&c->pipe, on_close);
    kjit__server_drain_check(s);
}

static void process(kjit_conn *c);
static int peer_gone(kjit_conn *c);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    kjit_conn *c = of(h);
    if (c->rcap - c->rlen < READ_CHUNK && c->rcap < READ_MAX) {
        size_t cap = c->rcap ? c->rcap * 2 : READ_CHUNK;
        if (cap > READ_MAX) cap = READ_MAX;
        char *nb = realloc(c->rbuf, cap);
        if (nb) {
            c->rbuf = nb;
            c->rcap = cap;
        }
    }
    /* A zero-length buffer makes libuv report UV_ENOBUFS: the connection closes. */
    *buf = uv_buf_init(c->rbuf ? c->rbuf + c->rlen : NULL, (unsigned)(c->rcap - c->rlen));
}

/* A client that shut its writing side is closed once every reply owed to
 * it is written. Bytes left then are a frame it began and never finished:
 * that is said (bad_frame, with how much came), then the connection closes. */
static void eof_check(kjit_conn *c)
{
    if (!c->eof || c->closing || c->pending || c->writes) return;
    if (c->rlen && !c->close_after_write) {
        size_t want = KJIT_FRAME_HEADER;
        kjit_frame_header h;
        char why[256];
        if (c->rlen >= KJIT_FRAME_HEADER &&
            !kjit__frame_decode((const uint8_t *)c->rbuf, KJIT_MAX_REQUEST_JSON, KJIT_MAX_REQUEST_PAYLOAD, &h, why,
                                sizeof why))
            want += (size_t)h.json_len + h.payload_len;
        c->srv->n.bad_frames++;
        kjit__conn_fatal(c, "bad_frame", "the client shut its writing side inside a frame (%zu of its %zu bytes%s); "
                         "closing the connection", c->rlen, want, want == KJIT_FRAME_HEADER ? " of header" : "");
        return;
    }
    kjit__conn_close(c);
}

static void resume(kjit_conn *c)
{
    if (c->closing || c->close_after_write) return;
    if (c->eof) { /* the frames it sent before, as the cap lets them in */
        process(c);
        eof_check(c);
        return;
    }
    if (c->reading || c->pending >= (uint32_t)c->srv->cfg.max_pending) return;
    if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read)) {
        kjit__conn_close(c);
        return;
    }
    c->reading = 1;
    process(c);
}

static void pause_reading(kjit_conn *c)
{
    if (c->reading) uv_read_stop((uv_stream_t *)&c->pipe);
    c->reading = 0;
}

static void on_write(uv_write_t *req, int status)
{
    wreq *w = (wreq *)req;
    kjit_conn *c = w->c;
    int final = w->final;
    free(w);
    c->writes--;
    if (c->closing) return;
    if (status) {
        kjit__conn_close(c);
        return;
    }
    c->last_activity = uv_now(&c->srv->loop);
    if (final) {
        c->pending--;
        c->srv->in_flight--;
    }
    if (c->close_after_write) {
        /* Stopping: the frames the pending cap held back are answered as
         * replies are written; process() closes once none is left. */
        process(c);
        return;
    }
    resume(c);
    kjit__server_drain_check(c->srv);
}

void kjit__conn_send(kjit_conn *c, const char *head, size_t head_len, const char *tail, size_t tail_len,
                     const uv_buf_t *payload, int n_payload, int final)
{
    if (c->closing) return;
    unsigned nbufs = 1 + (unsigned)n_payload;
    wreq *w = malloc(sizeof *w + nbufs * sizeof(uv_buf_t) + KJIT_FRAME_HEADER + head_len + tail_len);
    if (!w) {
        kjit__conn_close(c); /* an unanswered request would hang the client */
        return;
    }
    char *bytes = (char *)&w->bufs[nbufs];
    size_t payload_len = 0;
    for (int i = 0; i < n_payload; ++i) payload_len += payload[i].len;
    kjit__frame_encode((uint8_t *)bytes, (uint32_t)(head_len + tail_len), (uint32_t)payload_len);
    memcpy(bytes + KJIT_FRAME_HEADER, head, head_len);
    if (tail_len) memcpy(bytes + KJIT_FRAME_HEADER + head_len, tail, tail_len);
    w->c = c;
    w->final = final;
    w->nbufs = nbufs;
    unsigned k = 0;
    w->bufs[k++] = uv_buf_init(bytes, (unsigned)(KJIT_FRAME_HEADER + head_len + tail_len));
    for (int i = 0; i < n_payload; ++i) w->bufs[k++] = payload[i];
    if (uv_write(&w->req, (uv_stream_t *)&c->pipe, w->bufs, nbufs, on_write)) {
        free(w);
        kjit__conn_close(c);
        return;
    }
    c->writes++;
    /* A reply on its way is activity: the idle and close-wait clocks start
     * here, not at the request a long job answers. */
    c->last_activity = uv_now(&c->srv->loop);
}

size_t kjit__conn_backlog(kjit_conn *c)
{
    return uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) + (size_t)c->writes * (sizeof(wreq) + 64);
}

void kjit__json_add_id(cJSON *o, uint64_t id)
{
    char t[24];
    snprintf(t, sizeof t, "%llu", (unsigned long long)id);
    cJSON_AddRawToObject(o, "id", t);
}

char *kjit__reply_text(cJSON *o, int has_id)
{
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(o, "ok"), *rid = cJSON_GetObjectItemCaseSensitive(o, "id");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    const int id_ok = has_id < 0 ? !rid : has_id ? rid && !cJSON_IsNull(rid) : cJSON_IsNull(rid);
    const int whole = cJSON_IsBool(ok) && id_ok &&
                      (cJSON_IsTrue(ok) || cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "code")));
    char *text = whole ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return text;
}

char *kjit__reply_print(cJSON *o, int has_id, uint64_t id)
{
    char *text = kjit__reply_text(o, has_id);
    if (text) return text;
    char id_text[24] = "null", fallback[160];
    if (has_id) snprintf(id_text, sizeof id_text, "%llu", (unsigned long long)id);
    const int n = snprintf(fallback, sizeof fallback,
                           "{\"id\":%s,\"ok\":false,\"error\":{\"code\":\"internal\",\"message\":"
                           "\"the server is out of memory for this reply\"}}",
                           id_text);
    if ((text = cJSON_malloc((size_t)n + 1))) memcpy(text, fallback, (size_t)n + 1);
    return text;
}

static void send_error(kjit_conn *c, int has_id, uint64_t id, const char *code, const char *msg, int final)
{
    cJSON *o = cJSON_CreateObject(), *e;
    if (has_id) kjit__json_add_id(o, id);
    else cJSON_AddNullToObject(o, "id");
    cJSON_AddFalseToObject(o, "ok");
    cJSON_AddItemToObject(o, "error", e = cJSON_CreateObject());
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", msg);
    char *text = kjit__reply_print(o, has_id, id);
    c->srv->n.errors++;
    if (!text) {
        kjit__conn_close(c);
        return;
    }
    kjit__conn_send(c, text, strlen(text), NULL, 0, NULL, 0, final);
    cJSON_free(text);
}

void kjit__conn_error(kjit_conn *c, int has_id, uint64_t id, const char *code, const char *fmt, ...)
{
    char msg[KJIT__ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    kjit__vformat_ends(msg, sizeof msg, fmt, ap); /* valid UTF-8: the reply is JSON text */
    va_end(ap);
    send_error(c, has_id, id, code, msg, 1);
}

void kjit__conn_fatal(kjit_conn *c, const char *code, const char *fmt, ...)
{
    char msg[KJIT__ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    kjit__vformat_ends(msg, sizeof msg, fmt, ap);
    va_end(ap);
    send_error(c, 0, 0, code, msg, 0);
    if (c->closing) return;
    pause_reading(c);
    c->close_after_write = 1;
    c->drain_answer = 0; /* nothing more is answered after a fatal error */
    c->last_activity = uv_now(&c->srv->loop);
}

int kjit__conn_refuse_parked(kjit_conn *c, uint64_t id)
{
    for (uint32_t i = 0; i < c->n_parked; ++i)
        if (c->parked[i] == id) {
            kjit__conn_error(c, 1, id, "out_of_order", "request id %llu is already waiting for its reply",
                             (unsigned long long)id);
            return -1;
        }
    return 0;
}

void kjit__conn_park(kjit_conn *c, uint64_t id)
{
    c->parked[c->n_parked++] = id;
}

void kjit__conn_unpark(kjit_conn *c, uint64_t id)
{
    for (uint32_t i = 0; i < c->n_parked; ++i)
        if (c->parked[i] == id) {
            c->parked[i] = c->parked[--c->n_parked];
            return;
        }
}

/* Runs every complete frame in the buffer, up to the pending cap; what is
 * left (a partial frame, or frames beyond the cap) waits in the buffer. */
static void process_frames(kjit_conn *c);

/* Not reentered: the server's stop, run from a request dispatched here,
 * leaves this loop to answer the frames after it. A connection to close
 * once written (a fatal error, or the server stopping) closes here when
 * nothing is left to write. */
static void process(kjit_conn *c)
{
    if (c->in_process) return;
    c->in_process = 1;
    process_frames(c);
    c->in_process = 0;
    if (c->close_after_write && !c->closing && !c->writes) kjit__conn_close(c);
}

void kjit__conn_drain(kjit_conn *c, int force)
{
    if (c->closing) return;
    if (force) {
        kjit__conn_close(c);
        return;
    }
    if (!c->close_after_write) c->drain_answer = 1; /* a fatal error's close stays as it was */
    c->close_after_write = 1;
    pause_reading(c);
    process(c); /* returns at once inside c's own loop, which then goes on */
}

static void process_frames(kjit_conn *c)
{
    kjit_server *s = c->srv;
    size_t off = 0;
    int partial = 0;
    while (!c->closing && (!c->close_after_write || c->drain_answer) && c->pending < (uint32_t)s->cfg.max_pending) {
        size_t have = c->rlen - off;
        if (have < KJIT_FRAME_HEADER) {
            partial = have > 0;
            break;
        }
        kjit_frame_header h;
        char why[256];
        if (kjit__frame_decode((const uint8_t *)c->rbuf + off, KJIT_MAX_REQUEST_JSON, KJIT_MAX_REQUEST_PAYLOAD, &h,
                               why, sizeof why)) {
            s->n.bad_frames++;
            kjit__conn_fatal(c, "bad_frame", "%s; closing the connection", why);
            return;
        }
        size_t total = KJIT_FRAME_HEADER + (size_t)h.json_len + h.payload_len;
        if (have < total) {
            partial = 1;
            break;
        }
        c->pending++;
        s->in_flight++;
        s->n.requests++;
        kjit__dispatch(c, c->rbuf + off + KJIT_FRAME_HEADER, h.json_len, h.payload_len);
        off += total;
    }
    if (c->closing) return;
    if (off) {
        memmove(c->rbuf, c->rbuf + off, c->rlen - off);
        c->rlen -= off;
    }
    /* The frame clock runs from when the frame now incomplete began: this
     * read, when it completed a frame (off) or began the first. */
    if (!partial) c->partial_since = 0;
    else if (!c->partial_since || off) c->partial_since = uv_now(&s->loop);
    if (c->pending >= (uint32_t)s->cfg.max_pending) pause_reading(c);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    kjit_conn *c = of((uv_handle_t *)st);
    if (nread == UV_EOF) {
        /* The client shut its writing side: it may still read. Its
         * requests already sent are answered, then the connection closes.
         * A client that closed outright (both sides) is gone at once. */
        pause_reading(c);
        if (peer_gone(c)) {
            kjit__conn_close(c);
            return;
        }
        c->eof = 1;
        resume(c);
        return;
    }
    if (nread < 0) {
        /* An error: the client is gone. Its jobs keep running for others. */
        kjit__conn_close(c);
        return;
    }
    if (!nread) return;
    c->rlen += (size_t)nread;
    c->last_activity = uv_now(&c->srv->loop);
    process(c);
}

static void on_spare_close(uv_handle_t *h) { ((kjit_server *)h->data)->spare_busy = 0; }

/* Out of memory for a connection: take it off the backlog with the spare
 * handle and drop it. Not accepting would stop libuv polling the listener
 * for good; with the spare still closing (a second failure in one turn of
 * the loop), the listener pauses instead: its close drops the connection
 * libuv holds, and it reopens RELISTEN_MS later. */
static void drop(kjit_server *s, uv_stream_t *listener)
{
    if (s->spare_busy || uv_pipe_init(&s->loop, &s->spare, 0)) {
        kjit__listen_pause(s, "out of memory for a connection");
        return;
    }
    s->spare_busy = 1;
    s->spare.data = s;
    uv_accept(listener, (uv_stream_t *)&s->spare);
    uv_close((uv_handle_t *)&s->spare, on_spare_close);
}

static void accept_one(kjit_server *s, uv_stream_t *listener);

void kjit__conn_accept(uv_stream_t *listener, int status)
{
    kjit_server *s = listener->data;
    if (status) {
        /* libuv retries the accept at once, in a loop this callback alone
         * can end: out of descriptors (or kernel memory: ENOBUFS, ENOMEM),
         * nothing would ever be freed (no read, close or signal runs), so
         * the listener pauses, whatever the error. */
        if (status == UV_EMFILE || status == UV_ENFILE) kjit__listen_pause(s, "out of file descriptors");
        else kjit__listen_pause(s, uv_strerror(status));
        return;
    }
    accept_one(s, listener); /* libuv has accepted it: answered, even "busy" */
    /* A burst past max_clients: each refused connection holds a descriptor
     * until its "busy" reply is out. At max_pipes (BUSY_SLOTS of them, or
     * fewer where the open-file limit leaves fewer descriptors: server.c's
     * fit_fd_limit) the listener pauses before the process runs out. Out
     * of descriptors, libuv would not call back: it accepts and closes the
     * backlog's connections unanswered to free its listener. */
    if (s->n_pipes >= s->max_pipes) kjit__listen_pause(s, "too many connections open at once");
}

static void accept_one(kjit_server *s, uv_stream_t *listener)
{
    kjit_conn *c = calloc(1, sizeof *c + (size_t)s->cfg.max_pending * sizeof c->parked[0]);
    if (!c || uv_pipe_init(&s->loop, &c->pipe, 0)) {
        free(c);
        drop(s, listener);
        return;
    }
    c->srv = s;
    c->refs = 1;
    c->pipe.data = c;
    s->n_pipes++;
    c->last_activity = uv_now(&s->loop);
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    if (uv_accept(listener, (uv_stream_t *)&c->pipe)) {
        kjit__conn_close(c);
        return;
    }
    struct ucred cred;
    socklen_t len = sizeof cred;
    uv_os_fd_t fd;
    char why[256];
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len)) {
        s->n.refused++;
        kjit__conn_fatal(c, "not_allowed", "cannot read the peer's credentials");
        return;
    }
    c->uid = cred.uid;
    c->gid = cred.gid;
    if (!kjit__peer_allowed(s, cred.uid, cred.gid, why, sizeof why)) {
        s->n.refused++;
        kjit__conn_fatal(c, "not_allowed", "%s", why);
        return;
    }
    if (s->n_clients >= s->cfg.max_clients) {
        s->n.refused++;
        kjit__conn_fatal(c, "busy", "too many clients (the limit is %d); try again later", s->cfg.max_clients);
        return;
    }
    c->counted = 1;
    s->n_clients++;
    s->n.clients_total++;
    resume(c);
}

/* Bytes of replies not yet read by the client: libuv's write queue and
 * what the socket holds (SIOCOUTQ of a Unix stream socket counts what the
 * peer has not consumed). */
static size_t unsent_bytes(kjit_conn *c)
{
    size_t n = c->writes ? uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) : 0;
    uv_os_fd_t fd;
    int out = 0;
    if (!uv_fileno((uv_handle_t *)&c->pipe, &fd) && ioctl(fd, SIOCOUTQ, &out) == 0 && out > 0) n += (size_t)out;
    return n;
}

/* A client whose requests filled max_pending is not read from, so its
 * leaving would be seen only once a reply lets reading resume, which can
 * be long behind other clients' compiles: ask the socket instead, so that
 * its slot is given back and its abandoned jobs cancelled at once. */
static int peer_gone(kjit_conn *c)
{
    uv_os_fd_t fd;
    if (c->reading || c->close_after_write || uv_fileno((uv_handle_t *)&c->pipe, &fd)) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    /* POLLHUP: both sides shut (the client closed). POLLRDHUP alone is a
     * client that shut only its writing side and still reads its replies. */
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}

void kjit__conn_sweep(kjit_server *s)
{
    uint64_t now = uv_now(&s->loop);
    uint64_t idle = (uint64_t)(s->cfg.idle_timeout_s * 1000.0);
    uint64_t frame = idle && idle < FRAME_TIMEOUT_MS ? idle : FRAME_TIMEOUT_MS;
    for (kjit_conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        /* A reply the client is still reading: bytes leaving libuv's queue
         * or the socket's send buffer are activity too (uv_write reports
         * only a whole write's end, and a slow reader can take longer than
         * the idle time to drain the socket's buffer alone). */
        const size_t wq = unsent_bytes(c);
        if (wq != c->last_wq) c->last_activity = now;
        c->last_wq = wq;
        if (peer_gone(c)) {
            kjit__conn_close(c);
            continue;
        }
        uint64_t quiet = now - c->last_activity;
        if (c->close_after_write) {
            if (quiet > CLOSE_WAIT_MS) kjit__conn_close(c);
        } else if (c->partial_since && !c->eof && now - c->partial_since > frame) {
            /* A frame trickling in byte by byte holds a buffer: not forever.
             * After the client's half-close no byte can come: eof_check
             * answers the rest (bad_frame) once every reply owed is sent,
             * a slow compile's or prewarm's included. */
            s->n.idle_closed++;
            kjit__conn_fatal(c, "timeout", "a frame took more than %.1f s to arrive", (double)frame / 1000.0);
        } else if (idle && quiet > idle && !c->n_parked) {
            s->n.idle_closed++;
            kjit__conn_fatal(c, "timeout", "idle for more than %g s", s->cfg.idle_timeout_s);
        }
    }
}
