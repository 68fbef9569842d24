/* The GPU lane: `run` and `tune` execute on one thread of their own, one
 * item at a time in arrival order, on one stream of the server's device.
 *
 * Not on libuv's pool: a run waits for the device and a tune holds it for
 * seconds, and neither may keep compiles from the pool's threads. One at a
 * time: the backward ops' context-owned workspace serves one stream at a
 * time, the asynchronous index flag read after a run is the context's, and
 * a tune times the device with nothing else on it. Finished items go back
 * to the loop through a uv_async handle.
 *
 * After an item the lane polls for the next one for LANE_SPIN_US before it
 * sleeps: a client that sends its next run right after a reply finds the
 * lane awake, without a futex wake-up (tens of us) on its path. On a host
 * with fewer than 4 CPUs it does not poll: there the loop thread that
 * queues the next run would compete with it. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/ctx.h"
#include "core/error.h"
#include "server/server_internal.h"

struct kjit_gpu {
    kjit_server *srv;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kjit_gpu_item *head, *tail;           /* queued for the lane */
    kjit_gpu_item *done_head, *done_tail; /* back to the loop */
    unsigned queued;                      /* items ever submitted (atomic) */
    int spin_us;                          /* LANE_SPIN_US, or 0 on small hosts */
    int stop;                             /* written under mu, read atomically */
    uv_async_t async;
    int async_open;
    CUstream stream;
};

static void push(kjit_gpu_item **head, kjit_gpu_item **tail, kjit_gpu_item *it)
{
    it->next = NULL;
    *(*tail ? &(*tail)->next : head) = it;
    *tail = it;
}

enum { LANE_SPIN_US = 250 };

/* Polls (without the lock) until an item arrives after `seen`, the lane is
 * told to stop, or LANE_SPIN_US pass. */
static void spin(kjit_gpu *g, unsigned seen)
{
    if (g->spin_us <= 0) return;
    const double end = kjit__now_us() + g->spin_us;
    while (__atomic_load_n(&g->queued, __ATOMIC_ACQUIRE) == seen && !__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE))
        if (kjit__now_us() > end) return;
}

static void *lane(void *arg)
{
    kjit_gpu *g = arg;
    /* The context stays current on this thread: every op call finds it so. */
    kjit__cu()->CtxSetCurrent(g->srv->ctx->cuctx);
    pthread_mutex_lock(&g->mu);
    for (;;) {
        if (!g->head && !g->stop) {
            const unsigned seen = __atomic_load_n(&g->queued, __ATOMIC_ACQUIRE);
            pthread_mutex_unlock(&g->mu);
            spin(g, seen);
            pthread_mutex_lock(&g->mu);
        }
        while (!g->head && !g->stop) pthread_cond_wait(&g->cv, &g->mu);
        kjit_gpu_item *it = g->head;
        if (!it) break;
        if (!(g->head = it->next)) g->tail = NULL;
        pthread_mutex_unlock(&g->mu);
        void (*done)(kjit_gpu_item *) = it->done;
        it->work(it); /* without done(), it may be gone now */
        pthread_mutex_lock(&g->mu);
        if (done) {
            push(&g->done_head, &g->done_tail, it);
            uv_async_send(&g->async);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static void on_async(uv_async_t *h)
{
    kjit_gpu *g = h->data;
    pthread_mutex_lock(&g->mu);
    kjit_gpu_item *it = g->done_head;
    g->done_head = g->done_tail = NULL;
    pthread_mutex_unlock(&g->mu);
    while (it) {
        kjit_gpu_item *next = it->next;
        it->done(it);
        it = next;
    }
}

int kjit__gpu_start(kjit_server *s)
{
    kjit_gpu *g = calloc(1, sizeof *g);
    if (!g) return kjit__fail(KJIT_ENOMEM, "out of memory for the GPU lane");
    g->srv = s;
    g->spin_us = kjit__spin_us(LANE_SPIN_US);
    int pushed, rc = kjit__ctx_enter(s->ctx, &pushed);
    if (rc) {
        free(g);
        return rc;
    }
    CUresult cr = kjit__cu()->StreamCreate(&g->stream, CU_STREAM_NON_BLOCKING);
    kjit__ctx_leave(s->ctx, pushed);
    if (cr != CUDA_SUCCESS) {
        free(g);
        return kjit__cu_fail(cr, "cuStreamCreate for the server's runs");
    }
    int r = uv_async_init(&s->loop, &g->async, on_async);
    if (r) {
        kjit__cu()->StreamDestroy(g->stream);
        free(g);
        return kjit__fail(KJIT_EIO, "uv_async_init: %s", uv_strerror(r));
    }
    g->async.data = g;
    g->async_open = 1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    s->gpu = g;
    if ((r = pthread_create(&g->thread, NULL, lane, g))) {
        /* The handle closes with the loop; stop() then frees the rest. */
        g->stop = -1;
        kjit__gpu_close(s);
        return kjit__fail(KJIT_EIO, "starting the GPU lane's thread failed (error %d)", r);
    }
    return KJIT_OK;
}

void kjit__gpu_submit(kjit_server *s, kjit_gpu_item *it)
{
    kjit_gpu *g = s->gpu;
    pthread_mutex_lock(&g->mu);
    push(&g->head, &g->tail, it);
    __atomic_add_fetch(&g->queued, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

CUstream kjit__gpu_stream(const kjit_server *s) { return s->gpu->stream; }

void kjit__gpu_close(kjit_server *s)
{
    kjit_gpu *g = s->gpu;
    if (!g || !g->async_open) return;
    g->async_open = 0;
    uv_close((uv_handle_t *)&g->async, NULL);
}

void kjit__gpu_stop(kjit_server *s)
{
    kjit_gpu *g = s->gpu;
    if (!g) return;
    s->gpu = NULL;
    if (g->stop != -1) { /* -1: the thread never started */
        pthread_mutex_lock(&g->mu);
        __atomic_store_n(&g->stop, 1, __ATOMIC_RELEASE);
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->thread, NULL);
    }
    int pushed;
    if (kjit__ctx_enter(s->ctx, &pushed) == KJIT_OK) {
        kjit__cu()->StreamDestroy(g->stream);
        kjit__ctx_leave(s->ctx, pushed);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}
