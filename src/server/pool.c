/* Work for libuv's thread pool (compiles: jobs.c, kernel.c), handed out
 * fairly among clients.
 *
 * libuv's pool takes work first in, first out, so a client that pipelines
 * compiles of new tuples (64 requests of ~10 kernels each) would queue
 * hundreds of kernels ahead of every other client's. Here each owner (the
 * connection whose request started the work) has at most `window` items in
 * libuv's queue, the pool's size (UV_THREADPOOL_SIZE, libuv's default 4);
 * the rest wait in the owner's own FIFO and go in as its earlier ones come
 * back. A lone client still fills the pool; a newcomer's kernels wait
 * behind at most a window of each other client's, not behind all of them.
 *
 * Work another client waits on too (a compile job it joined) moves to the
 * front of its owner's FIFO, so the joiner does not wait for the owner's
 * whole queue.
 *
 * Cancelling an item still in its owner's FIFO always succeeds: it leaves
 * the FIFO and passes through libuv as a cancelled request, so its callback
 * gets UV_ECANCELED later on the loop, as from uv_cancel (never from inside
 * kjit__pool_cancel, whose caller may be walking the jobs). */
#include <stddef.h>
#include <stdlib.h>

#include "server/server_internal.h"

enum { WAITING = 1, SENT, CANCELLED, BACK };

static kjit_pool_item *of(uv_work_t *w) { return (kjit_pool_item *)((char *)w - offsetof(kjit_pool_item, work)); }

int kjit__pool_window(void)
{
    static int window;
    if (!window) {
        const char *v = getenv("UV_THREADPOOL_SIZE"); /* as libuv reads it */
        const long n = v ? strtol(v, NULL, 10) : 0;
        window = n < 1 ? 4 : n > 1024 ? 1024 : (int)n;
    }
    return window;
}

static void work(uv_work_t *w)
{
    kjit_pool_item *it = of(w);
    if (it->state == SENT) it->work_cb(w); /* CANCELLED: passed through, not run */
}

static void pump(kjit_conn *o);

static void after(uv_work_t *w, int status)
{
    kjit_pool_item *it = of(w);
    kjit_conn *o = it->owner;
    if (it->state == CANCELLED) status = UV_ECANCELED;
    else o->pool_sent--;
    it->state = BACK;
    it->after_cb(w, status); /* may free it */
    pump(o);
    kjit__conn_unref(o);
}

static void send_item(kjit_conn *o, kjit_pool_item *it)
{
    /* uv_queue_work fails only on a NULL callback. */
    uv_queue_work(&o->srv->loop, &it->work, work, after);
}

/* The owner's waiting items into libuv's queue, up to its window. */
static void pump(kjit_conn *o)
{
    while (o->pool_head && o->pool_sent < kjit__pool_window()) {
        kjit_pool_item *it = o->pool_head;
        if (!(o->pool_head = it->next)) o->pool_tail = NULL;
        it->next = NULL;
        it->state = SENT;
        o->pool_sent++;
        send_item(o, it);
    }
}

void kjit__pool_submit(kjit_conn *owner, kjit_pool_item *it, uv_work_cb work_cb, uv_after_work_cb after_cb)
{
    kjit__conn_ref(owner);
    it->owner = owner;
    it->work_cb = work_cb;
    it->after_cb = after_cb;
    it->next = NULL;
    it->state = WAITING;
    *(owner->pool_tail ? &owner->pool_tail->next : &owner->pool_head) = it;
    owner->pool_tail = it;
    pump(owner);
}

/* Takes a waiting item out of its owner's FIFO. */
static void fifo_unlink(kjit_pool_item *it)
{
    kjit_conn *o = it->owner;
    kjit_pool_item **p = &o->pool_head, *prev = NULL;
    while (*p != it) prev = *p, p = &(*p)->next;
    *p = it->next;
    if (o->pool_tail == it) o->pool_tail = prev;
    it->next = NULL;
}

void kjit__pool_expedite(kjit_pool_item *it)
{
    kjit_conn *o = it->owner;
    if (it->state != WAITING || o->pool_head == it) return;
    fifo_unlink(it);
    it->next = o->pool_head;
    o->pool_head = it;
}

int kjit__pool_cancel(kjit_pool_item *it)
{
    if (it->state == SENT) return uv_cancel((uv_req_t *)&it->work); /* UV_EBUSY once it runs */
    if (it->state != WAITING) return UV_EBUSY;
    fifo_unlink(it);
    it->state = CANCELLED;
    send_item(it->owner, it);
    (void)uv_cancel((uv_req_t *)&it->work); /* else a pool thread passes it through at once */
    return 0;
}
