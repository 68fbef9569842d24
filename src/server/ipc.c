/* A connection's opened CUDA IPC handles. Opening one maps the client's
 * allocation (or event) into this process, which costs far more than a run,
 * so a connection keeps what its runs opened, keyed by the handle's 64
 * bytes, until it closes: the client must keep those allocations and its
 * event alive while the connection is open (docs/PROTOCOL.md). At most
 * MAX_OPEN are kept; beyond, the least recently used is closed (never one
 * the current run uses). Only the GPU lane's thread touches a cache once
 * made; kjit__ipc_release hands it back to the lane to close. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/server_internal.h"

#define MAX_OPEN 128

typedef struct ipc_entry {
    uint8_t key[KJIT_RUN_HANDLE_BYTES];
    int is_event;
    CUdeviceptr base;
    size_t size;
    CUevent ev;
    uint64_t used; /* the run that used it last */
} ipc_entry;

struct kjit_ipc_cache {
    kjit_gpu_item release; /* queued on the lane by kjit__ipc_release */
    uint64_t clock;        /* the current run */
    kjit_run_graph *graph; /* the connection's repeated run (run_graph.c) */
    int n;
    ipc_entry e[MAX_OPEN];
};

kjit_ipc_cache *kjit__ipc_cache_new(void) { return calloc(1, sizeof(kjit_ipc_cache)); }

void kjit__ipc_begin(kjit_ipc_cache *m) { m->clock++; }

kjit_run_graph **kjit__ipc_graph(kjit_ipc_cache *m) { return &m->graph; }

static void entry_close(ipc_entry *e)
{
    const kjit_cu_api *cu = kjit__cu();
    if (e->is_event) cu->EventDestroy(e->ev);
    else cu->IpcCloseMemHandle(e->base);
}

/* The entry for a handle; *fresh when it is a free one to open into. NULL
 * when every entry is in use by the current run (cannot happen: a run has
 * at most 33 handles). */
static ipc_entry *lookup(kjit_ipc_cache *m, const uint8_t *key, int is_event, int *fresh)
{
    ipc_entry *lru = NULL;
    for (int i = 0; i < m->n; ++i) {
        ipc_entry *e = &m->e[i];
        if (e->is_event == is_event && !memcmp(e->key, key, sizeof e->key)) {
            e->used = m->clock;
            *fresh = 0;
            return e;
        }
        if (e->used != m->clock && (!lru || e->used < lru->used)) lru = e;
    }
    *fresh = 1;
    if (m->n < MAX_OPEN) return &m->e[m->n++];
    if (lru) entry_close(lru);
    return lru;
}

int kjit__ipc_mem(kjit_ipc_cache *m, const uint8_t handle[64], CUdeviceptr *base, size_t *size)
{
    int fresh;
    ipc_entry *e = lookup(m, handle, 0, &fresh);
    if (!e) return kjit__fail(KJIT_EINVAL, "more than %d IPC handles in one run", MAX_OPEN);
    if (fresh) {
        const kjit_cu_api *cu = kjit__cu();
        CUipcMemHandle h;
        memcpy(&h, handle, sizeof h);
        CUdeviceptr p = 0, start = 0;
        /* The handle shares a whole allocation: p is its base, and the size
         * bounds every buffer the run places in it. */
        const char *what = "cuIpcOpenMemHandle";
        CUresult r = cu->IpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (r == CUDA_SUCCESS && (r = cu->MemGetAddressRange(&start, &e->size, p)) != CUDA_SUCCESS) {
            what = "cuMemGetAddressRange of the opened handle";
            cu->IpcCloseMemHandle(p);
        }
        if (r != CUDA_SUCCESS) {
            /* The slot becomes free again: move the last entry into it. */
            *e = m->e[--m->n];
            return kjit__cu_fail(r, what);
        }
        if (p > start) e->size -= (size_t)(p - start);
        memcpy(e->key, handle, sizeof e->key);
        e->is_event = 0;
        e->base = p;
        e->used = m->clock;
    }
    *base = e->base;
    *size = e->size;
    return KJIT_OK;
}

int kjit__ipc_event(kjit_ipc_cache *m, const uint8_t handle[64], CUevent *ev)
{
    int fresh;
    ipc_entry *e = lookup(m, handle, 1, &fresh);
    if (!e) return kjit__fail(KJIT_EINVAL, "more than %d IPC handles in one run", MAX_OPEN);
    if (fresh) {
        CUipcEventHandle h;
        memcpy(&h, handle, sizeof h);
        CUresult r = kjit__cu()->IpcOpenEventHandle(&e->ev, h);
        if (r != CUDA_SUCCESS) {
            *e = m->e[--m->n];
            return kjit__cu_fail(r, "cuIpcOpenEventHandle");
        }
        memcpy(e->key, handle, sizeof e->key);
        e->is_event = 1;
        e->used = m->clock;
    }
    *ev = e->ev;
    return KJIT_OK;
}

/* On the lane, after every run the connection queued before. */
static void release_work(kjit_gpu_item *it)
{
    kjit_ipc_cache *m = (kjit_ipc_cache *)it;
    kjit__run_graph_free(m->graph); /* before the mappings its kernels use */
    for (int i = 0; i < m->n; ++i) entry_close(&m->e[i]);
    free(m);
}

void kjit__ipc_release(kjit_server *s, kjit_ipc_cache *m)
{
    if (!m) return;
    m->release.work = release_work;
    m->release.done = NULL;
    kjit__gpu_submit(s, &m->release);
}
