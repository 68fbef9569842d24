/* The server's parts and what they share. Everything here runs on the loop
 * thread except the work callbacks of jobs.c and kernel.c (on libuv's thread
 * pool), which touch only their own job, the library context and the
 * counter snapshot, and the work of the GPU lane (gpu.c: run and tune, one
 * at a time on a thread of its own), which touches only its item, the
 * library context and the connections' IPC caches (ipc.c, the lane's alone).
 *
 * Lifetimes: a connection is freed when its handle has closed and no job
 * waiter or prewarm still refers to it (refs), so a worker finishing after
 * its client left finds the connection marked closing, skips the reply and
 * drops its reference (a compile not yet started that no other client
 * waits on is cancelled: jobs.c, kernel.c). */
#ifndef KJIT_SERVER_INTERNAL_H
#define KJIT_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <uv.h>

#include "core/spin.h"
#include "gpu/cuda_api.h"
#include "kjit.h"
#include "server/request.h"
#include "server/server.h"

typedef struct kjit_server kjit_server;
typedef struct kjit_tuple_entry kjit_tuple_entry;
typedef struct kjit_gpu kjit_gpu;
typedef struct kjit_ipc_cache kjit_ipc_cache;
typedef struct kjit_run_graph kjit_run_graph;
typedef struct kjit_tune_job kjit_tune_job;

/* Work for the GPU lane: work() runs on the lane's thread, then done() (if
 * not NULL) on the loop thread. An item without done() may free itself in
 * work(). */
typedef struct kjit_gpu_item {
    struct kjit_gpu_item *next;
    void (*work)(struct kjit_gpu_item *it);
    void (*done)(struct kjit_gpu_item *it);
} kjit_gpu_item;

typedef struct kjit_conn {
    uv_pipe_t pipe;
    kjit_server *srv;
    struct kjit_conn *prev, *next;
    uid_t uid;
    gid_t gid;
    int refs;               /* 1 for the open handle + 1 per waiter/prewarm */
    int closing;            /* uv_close called: no more frames in or out (read by the GPU lane: atomic) */
    int close_after_write;  /* a fatal error was sent, or the server is stopping: close once written */
    int drain_answer;       /* the server is stopping: still answer the frames already read (shutting_down) */
    int in_process;         /* inside process(): its frame loop is running */
    int reading;
    int eof;                /* the client shut its writing side: answer what it sent, then close */
    int helloed;
    int counted;            /* counts against max_clients */
    uint32_t pending;       /* accepted requests whose final reply is not written */
    uint32_t writes;        /* uv_write requests in flight */
    uint32_t n_parked;      /* requests waiting on a worker job */
    uint64_t last_activity; /* uv_now of the last byte moved (or reply queued) */
    size_t last_wq;         /* write queue bytes at the last sweep: progress of a long write */
    uint64_t partial_since; /* uv_now when an incomplete frame began; 0: none */
    struct kjit_pool_item *pool_head, *pool_tail; /* its pool work not yet in libuv's queue (pool.c) */
    int pool_sent;          /* its pool work in libuv's queue or running */
    kjit_ipc_cache *ipc;    /* the handles its runs opened (created by its first run) */
    struct kjit_run_memo *run_memo; /* its last run request, parsed (run_memo.c) */
    char *rbuf;
    size_t rlen, rcap;
    uint64_t parked[];      /* the parked requests' ids (max_pending of them) */
} kjit_conn;

typedef struct kjit_tuple_map {
    kjit_tuple_entry **slots;
    size_t n_slots, n_entries;
    /* The entries whose job is done, least recently used first: past
     * max_done the oldest is dropped (its kernels stay in the library's
     * cache; a later request fetches them again from there). */
    kjit_tuple_entry *lru_old, *lru_new;
    size_t n_done, max_done;
    uint64_t evictions;
} kjit_tuple_map;

struct kjit_server {
    uv_loop_t loop;
    uv_pipe_t listener;
    /* SIGTERM and SIGINT, blocked in every thread of the server and read
     * from a signalfd (server.c says why). */
    uv_poll_t sig_poll;
    int sig_fd, signals;
    uv_timer_t sweep;
    uv_pipe_t spare; /* drops a connection there is no memory for */
    int listener_open, sig_open, sweep_open, spare_busy, in_drain_check;
    /* Out of descriptors, the listener closes for a moment (listen.c); a
     * duplicate of its socket keeps it listening, and reopens it. */
    uv_timer_t relisten;
    int relisten_open, listen_paused, listen_fd;
    int n_pipes; /* connections' sockets open, refused ones until closed */
    int max_pipes; /* the listener pauses at this many: max_clients + BUSY_SLOTS, or the descriptors left */
    kjit_server_config cfg;
    kjit_ctx *ctx;
    int default_sm;
    char socket_path[108];
    dev_t sock_dev;
    ino_t sock_ino;
    int lock_fd;
    int draining;
    uint64_t drain_deadline;
    kjit_conn *conns;
    int n_clients;
    uint64_t start_ms;
    struct {
        uint64_t requests, errors, hits, misses, compile_requests, kernel_requests, prewarm_requests;
        uint64_t run_requests, tune_requests, run_memo_hits, run_graph_replays, runs_dropped;
        uint64_t clients_total, refused, bad_frames, idle_closed, accept_pauses;
    } n;
    uint64_t in_flight;  /* sum of the connections' pending */
    uint32_t jobs;       /* worker jobs queued or running */
    /* The loop polls (uv_run NOWAIT) instead of sleeping in epoll until
     * spin_until: 20 ms after a run is queued (its reply, usually far
     * sooner, then costs no wake-up), spin_us after a run's reply (the
     * client's next run). spin_us: KJIT_SPIN_US, 0 (never) on hosts with
     * fewer than 4 CPUs. */
    int spin_us;
    double spin_until; /* kjit__now_us() */
    int run_graph;     /* replay repeated runs as CUDA graphs (KJIT_RUN_GRAPH=0: off) */
    pthread_mutex_t snap_mu;
    kjit_cache_counters snap; /* the library's counters as of the last job */
    kjit_tuple_map map;
    struct kjit_kernel_job *kernel_jobs; /* kernel requests queued or running (kernel.c) */
    kjit_gpu *gpu;         /* the GPU lane; NULL without a device */
    kjit_tune_job *tunes;  /* tunes queued or running */
};

/* pool.c: work for libuv's thread pool, at most a window of it (the
 * pool's size) per owner in libuv's queue at once, the rest in the owner's
 * FIFO. _submit takes a reference on owner until after_cb has run; set
 * work.data before. _cancel: 0 when the item will not run (after_cb then
 * gets UV_ECANCELED, later on the loop), else UV_EBUSY (running or back). */
typedef struct kjit_pool_item {
    uv_work_t work;
    struct kjit_pool_item *next;
    struct kjit_conn *owner;
    uv_work_cb work_cb;
    uv_after_work_cb after_cb;
    int state;
} kjit_pool_item;
int kjit__pool_window(void);
void kjit__pool_submit(struct kjit_conn *owner, kjit_pool_item *it, uv_work_cb work_cb, uv_after_work_cb after_cb);
int kjit__pool_cancel(kjit_pool_item *it);
/* An item still in its owner's FIFO to the FIFO's front (another client
 * waits on it too). */
void kjit__pool_expedite(kjit_pool_item *it);

/* listen.c: the socket file, its directory, the lock, peer credentials. */
int kjit__listen_open(kjit_server *s);
void kjit__listen_close(kjit_server *s);
void kjit__listen_release(kjit_server *s);
/* 1 when the peer may talk to this server; else 0 and why[]. */
int kjit__peer_allowed(const kjit_server *s, uid_t uid, gid_t gid, char *why, size_t why_len);

/* run_memo.c: a connection's latest run request that parsed. _find: 1 and *out
 * (with this text's id) when json is that request again with a new id;
 * _keep remembers a parsed run; _free at the connection's end. */
typedef struct kjit_run_memo kjit_run_memo;
int kjit__run_memo_find(kjit_conn *c, const char *json, uint32_t len, uint32_t payload_len, kjit_req *out);
void kjit__run_memo_keep(kjit_conn *c, const char *json, uint32_t len, uint32_t payload_len, const kjit_req *r);
void kjit__run_memo_free(kjit_conn *c);

/* conn.c: connections, frames in and out. */
void kjit__conn_accept(uv_stream_t *listener, int status);
/* Out of descriptors, or about to be (why): stop accepting for RELISTEN_MS
 * (listen.c). */
void kjit__listen_pause(kjit_server *s, const char *why);
/* Connections answered "busy" that may wait for their reply at once; the
 * open-file limit leaves room for them where it can be raised (server.c,
 * fit_fd_limit; where not, max_pipes is lower). */
#define BUSY_SLOTS 32
/* Adds "id": the request's id as an exact integer (cJSON's own number
 * printing keeps 15 significant digits: ids past 10^15 came back rounded). */
struct cJSON;
void kjit__json_add_id(struct cJSON *o, uint64_t id);
/* Prints a reply tree and deletes it. A tree that lost "id" or "ok" (or,
 * not ok, its error's "code") to a failed allocation (cJSON drops the node
 * and goes on) would leave its client waiting for an answer it cannot
 * match, or holding one it cannot read: such a tree, or a failed print,
 * gives the out-of-memory error reply instead, written on the stack.
 * has_id 0: the reply of no request ("id": null). The text is
 * cJSON_free'd by the caller; NULL only where not even that could be
 * allocated. */
char *kjit__reply_print(struct cJSON *o, int has_id, uint64_t id);
/* Prints a reply tree and deletes it when it holds "ok" (a bool), "id"
 * (has_id 1: a number; 0: null; -1: none, the sender splices it in) and,
 * not ok, an error code; NULL otherwise or when the print fails (out of
 * memory: the compile, kernel and tune replies answer that error). */
char *kjit__reply_text(struct cJSON *o, int has_id);
/* Queues one frame. The JSON header is head followed by tail (both copied:
 * a reply can wait in the queue for as long as its client does not read);
 * the payload buffers are referenced (cubins owned by the library context).
 * final: the request's last frame, which ends its `pending` when written.
 * A closing connection drops it. */
void kjit__conn_send(kjit_conn *c, const char *head, size_t head_len, const char *tail, size_t tail_len,
                     const uv_buf_t *payload, int n_payload, int final);
/* Bytes a connection's unwritten frames hold: their bytes as libuv counts
 * them plus each write request's own allocation. */
size_t kjit__conn_backlog(kjit_conn *c);
/* The final reply of a refused request ({"ok":false,"error":{code,message}}). */
void kjit__conn_error(kjit_conn *c, int has_id, uint64_t id, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* An error no request owns (a bad frame), then close once it is written. */
void kjit__conn_fatal(kjit_conn *c, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void kjit__conn_close(kjit_conn *c);
/* The server is stopping and no job is left: the complete frames c has
 * already read are answered (dispatch refuses each with shutting_down),
 * nothing more is read, and c closes once its replies are written: at
 * once when it has none, or when force (the drain's deadline passed). */
void kjit__conn_drain(kjit_conn *c, int force);
void kjit__conn_ref(kjit_conn *c);
void kjit__conn_unref(kjit_conn *c);
/* -1 (and the out_of_order reply) when id waits for a worker, else 0. */
int kjit__conn_refuse_parked(kjit_conn *c, uint64_t id);
/* id waits for a worker (kjit__dispatch has refused an id already waiting). */
void kjit__conn_park(kjit_conn *c, uint64_t id);
void kjit__conn_unpark(kjit_conn *c, uint64_t id);
/* Idle, stuck and slow connections (the sweep timer). */
void kjit__conn_sweep(kjit_server *s);

/* dispatch.c: one complete frame of a connection. */
void kjit__dispatch(kjit_conn *c, const char *json, uint32_t json_len, uint32_t payload_len);

/* jobs.c: compile and prewarm through the memo and single-flight jobs. */
void kjit__jobs_compile(kjit_conn *c, uint64_t id, const kjit_req_tuple *t);
void kjit__jobs_prewarm(kjit_conn *c, uint64_t id, const kjit_req *r);
size_t kjit__jobs_memo_count(const kjit_server *s);
uint64_t kjit__jobs_memo_evictions(const kjit_server *s);
/* Stopping: cancels every compile part not yet started. */
void kjit__jobs_cancel(kjit_server *s);
/* Cancels the queued parts of every compile job whose waiters have all
 * left (compiled for nobody otherwise): called when a client leaves. */
void kjit__jobs_abandon(kjit_server *s);
/* On a worker or the lane after a fetch, run or tune: folds the library's
 * counters into s->snap. */
void kjit__jobs_snapshot(kjit_server *s);
void kjit__jobs_free(kjit_server *s);

/* kernel.c: one kernel by template-id (the `kernel` request) on a worker. */
void kjit__kernel_request(kjit_conn *c, uint64_t id, const kjit_kernel_spec *spec, int sm);
/* Cancels the kernel requests not yet started: c's (its client left), or
 * every connection's (c NULL: stopping). */
void kjit__kernel_cancel(kjit_server *s, const kjit_conn *c);

/* gpu.c: the GPU lane, a thread that runs its items one at a time, in
 * order, on one stream of the context's device (the ops' own workspace
 * serves one stream at a time; a tune wants the device to itself). */
int kjit__gpu_start(kjit_server *s);
void kjit__gpu_submit(kjit_server *s, kjit_gpu_item *it);
CUstream kjit__gpu_stream(const kjit_server *s);
/* Closes the lane's loop handle (once no item with done() is left). */
void kjit__gpu_close(kjit_server *s);
/* After the loop: runs what is queued, ends the thread, frees the lane. */
void kjit__gpu_stop(kjit_server *s);

/* ipc.c: a connection's opened CUDA IPC handles, keyed by their 64 bytes
 * (the lane's thread only, but for kjit__ipc_cache_new). */
kjit_ipc_cache *kjit__ipc_cache_new(void);
/* Starts a run's use of the cache: what it opens from now on is kept open
 * until the run ends (the next begin). */
void kjit__ipc_begin(kjit_ipc_cache *m);
/* The base and size of the allocation a CUipcMemHandle shares. */
int kjit__ipc_mem(kjit_ipc_cache *m, const uint8_t handle[64], CUdeviceptr *base, size_t *size);
int kjit__ipc_event(kjit_ipc_cache *m, const uint8_t handle[64], CUevent *ev);
/* The connection's repeated-run graph (run_graph.c), freed with the cache. */
kjit_run_graph **kjit__ipc_graph(kjit_ipc_cache *m);
/* Hands the cache to the lane, which closes its handles and frees it after
 * every run queued before (the connection is closing). */
void kjit__ipc_release(kjit_server *s, kjit_ipc_cache *m);

/* run_graph.c: a connection's repeated run as a CUDA graph (lane only).
 * Makes call c on stream: directly, or (the same call again, with the same
 * workspace) captured into a graph and launched, or that graph replayed;
 * *how says which. enabled 0: always directly. */
enum { KJIT_RUN_DIRECT, KJIT_RUN_CAPTURED, KJIT_RUN_REPLAYED };
int kjit__run_graph_call(kjit_run_graph **g, int enabled, kjit_ctx *ctx, const kjit_run_call *c, CUstream stream,
                         int *how);
void kjit__run_graph_free(kjit_run_graph *g);

/* run.c: an op on a client's buffers, on the lane; t_frame: when dispatch
 * took the request (the reply's us_in counts from it). */
void kjit__run_request(kjit_conn *c, uint64_t id, const kjit_run_req *r, const uint8_t *payload, double t_frame);

/* tune.c: kjit_tune on the lane; one job per (op, hidden, dtype) at a time. */
void kjit__tune_request(kjit_conn *c, uint64_t id, const kjit_req_tuple *t);

/* The error code of a failed run or tune's status (bad_request, unsupported, ...). */
const char *kjit__status_code(int status, const char *otherwise);

/* server.c */
void kjit__server_stop(kjit_server *s, const char *why);
/* Called when work or writes finish: ends the drain once nothing is left. */
void kjit__server_drain_check(kjit_server *s);

#endif
