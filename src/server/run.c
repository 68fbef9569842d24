/* run: an op on buffers a client shares through CUDA IPC (docs/PROTOCOL.md).
 *
 * The loop thread copies the validated request and its handles into a job
 * and queues it on the GPU lane (gpu.c). There the job opens the handles
 * (kept per connection, ipc.c), checks that every buffer lies inside the
 * allocation its handle shares, makes the lane's stream wait for the
 * client's event, calls the op (a backward with the context's own
 * workspace), and waits for it and for the context's asynchronous index
 * flag. The reply comes once the op is done on the device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/server_internal.h"

enum { RUN_SPIN_MAX_US = 20000 };

typedef struct run_job {
    kjit_gpu_item item; /* first: the lane hands this back */
    kjit_server *srv;
    kjit_conn *c;       /* holds a reference */
    uint64_t id;
    kjit_ipc_cache *ipc;
    kjit_run_req req;
    int status;
    double us;
    /* Queued by the loop; started on the lane; then handles + event, the
     * op's host call, the wait for the device. */
    double t_queued, t0, us_queue, us_prep, us_call, us_wait;
    /* The loop's share: frame complete -> queued (parse, checks), and the
     * lane's hand-back -> reply queued on the socket. */
    double t_frame, t_done;
    int graph; /* KJIT_RUN_DIRECT, _CAPTURED or _REPLAYED */
    int skipped; /* its client had gone when the lane came to it */
    char message[KJIT__ERROR_MAX + 64]; /* a status name, ": ", the library's message */
    uint8_t payload[];  /* the request's handles */
} run_job;

/* kjit__fail with a prefix in front of the thread's current message. */
static int fail_in(int status, const char *what, int handle)
{
    char why[KJIT__ERROR_MAX];
    snprintf(why, sizeof why, "%s", kjit_last_error());
    return kjit__fail(status, "%s (payload record %d): %s", what, handle, why);
}

/* On the lane. */
static int execute(run_job *j)
{
    kjit_server *s = j->srv;
    const kjit_run_req *r = &j->req;
    CUstream stream = kjit__gpu_stream(s);
    uint64_t ptr[KJIT_RUN_MAX_BUFFERS];
    char what[64];
    kjit__ipc_begin(j->ipc);
    for (int i = 0; i < r->n_buffers; ++i) {
        const kjit_run_buffer *b = &r->buf[i];
        const char *name = kjit__run_slot_name(r->op, b->slot);
        CUdeviceptr base;
        size_t size;
        uint64_t bytes = 0;
        int rc = kjit__ipc_mem(j->ipc, j->payload + (size_t)b->handle * KJIT_RUN_HANDLE_BYTES, &base, &size);
        snprintf(what, sizeof what, "buffer '%s'", name);
        if (rc) return fail_in(rc, what, b->handle);
        if (kjit__run_extent(r, i, &bytes))
            return kjit__fail(KJIT_EINVAL, "buffer '%s': its rows span more than 2^64 bytes", name);
        if (b->offset > size || bytes > size - b->offset)
            return kjit__fail(KJIT_EINVAL, "buffer '%s': %llu bytes at offset %llu do not fit in the %zu bytes of the "
                                           "allocation its handle shares", name, (unsigned long long)bytes,
                              (unsigned long long)b->offset, size);
        ptr[i] = base + b->offset;
    }
    if (r->event >= 0) {
        CUevent ev;
        int rc = kjit__ipc_event(j->ipc, j->payload + (size_t)r->event * KJIT_RUN_HANDLE_BYTES, &ev);
        if (rc) return fail_in(rc, "event", r->event);
        /* Always a device-side wait: cuEventQuery on the opened handle
         * reported the client's event complete with ~1 ms of the client's
         * work still queued before it (H200, 2026-11-30), so the host's
         * view of another process's event is not trusted for ordering. */
        KJIT_CU_TRY(kjit__cu(), StreamWaitEvent(stream, ev, 0), "cuStreamWaitEvent on the client's event");
    }
    kjit_run_call call;
    kjit__run_call_make(r, ptr, &call);
    const double t1 = kjit__now_us();
    int flag = 0, rc = kjit__run_graph_call(kjit__ipc_graph(j->ipc), s->run_graph, s->ctx, &call, stream, &j->graph);
    const double t2 = kjit__now_us();
    /* Waits for the op: the reply means done on the device. */
    if (!rc) rc = kjit_ctx_index_error(s->ctx, stream, &flag);
    j->us_prep = t1 - j->t0, j->us_call = t2 - t1, j->us_wait = kjit__now_us() - t2;
    if (!rc && flag)
        rc = kjit__fail(KJIT_EINDEX, "%s: an index was outside [0, %lld): its rows were skipped, the others written",
                        kjit__run_op_name(r->op), (long long)r->rows);
    return rc;
}

static void work_cb(kjit_gpu_item *it)
{
    run_job *j = (run_job *)it;
    j->t0 = kjit__now_us();
    j->us_queue = j->t0 - j->t_queued;
    /* A client that has closed its connection may have freed the buffers
     * its queued runs name (its allocations are promised only while it is
     * connected): those runs are dropped, not run. One the lane has begun
     * runs to its end. */
    if (__atomic_load_n(&j->c->closing, __ATOMIC_ACQUIRE)) {
        j->skipped = 1;
        j->t_done = kjit__now_us();
        return;
    }
    j->status = execute(j);
    j->us = kjit__now_us() - j->t0;
    if (j->status) snprintf(j->message, sizeof j->message, "%s: %s", kjit_status_name(j->status), kjit_last_error());
    kjit__jobs_snapshot(j->srv); /* a first run may have compiled */
    j->t_done = kjit__now_us();
}

static void done_cb(kjit_gpu_item *it)
{
    run_job *j = (run_job *)it;
    kjit_server *s = j->srv;
    kjit_conn *c = j->c;
    s->jobs--;
    s->n.runs_dropped += j->skipped;
    if (!j->skipped && !j->status && j->graph == KJIT_RUN_REPLAYED) s->n.run_graph_replays++;
    const double until = kjit__now_us() + s->spin_us; /* never shortens a later run's window */
    if (until > s->spin_until) s->spin_until = until;
    if (!c->closing) {
        kjit__conn_unpark(c, j->id);
        if (j->status) {
            kjit__conn_error(c, 1, j->id, kjit__status_code(j->status, "run_failed"), "%s", j->message);
        } else {
            static const char *const how[] = {"direct", "captured", "replayed"};
            char text[320];
            const double now = kjit__now_us();
            int n = snprintf(text, sizeof text,
                             "{\"id\":%llu,\"ok\":true,\"us\":%.1f,\"us_queue\":%.1f,\"us_prep\":%.1f,"
                             "\"us_call\":%.1f,\"us_wait\":%.1f,\"us_in\":%.1f,\"us_out\":%.1f,\"graph\":\"%s\"}",
                             (unsigned long long)j->id, j->us, j->us_queue, j->us_prep, j->us_call, j->us_wait,
                             j->t_queued - j->t_frame, now - j->t_done, how[j->graph]);
            kjit__conn_send(c, text, (size_t)n, NULL, 0, NULL, 0, 1);
        }
    }
    kjit__conn_unref(c);
    free(j);
    kjit__server_drain_check(s);
}

void kjit__run_request(kjit_conn *c, uint64_t id, const kjit_run_req *r, const uint8_t *payload, double t_frame)
{
    kjit_server *s = c->srv;
    const size_t plen = (size_t)r->n_records * KJIT_RUN_HANDLE_BYTES;
    run_job *j = malloc(sizeof *j + plen);
    if (!j || (!c->ipc && !(c->ipc = kjit__ipc_cache_new()))) {
        free(j);
        kjit__conn_error(c, 1, id, "internal", "out of memory for a run");
        return;
    }
    kjit__conn_park(c, id);
    kjit__conn_ref(c);
    memset(j, 0, sizeof *j);
    j->item.work = work_cb;
    j->item.done = done_cb;
    j->srv = s;
    j->c = c;
    j->id = id;
    j->ipc = c->ipc;
    j->req = *r;
    memcpy(j->payload, payload, plen);
    s->jobs++;
    /* Poll while it runs, up to RUN_SPIN_MAX_US: a run that waits on a
     * first compile or a long op does not hold a CPU for all of it. */
    s->spin_until = kjit__now_us() + RUN_SPIN_MAX_US;
    j->t_frame = t_frame;
    j->t_queued = kjit__now_us();
    kjit__gpu_submit(s, &j->item);
}
