/* A connection's repeated runs, replayed as CUDA graphs.
 *
 * A client that runs its ops on the same buffers every step makes the same
 * library calls each time. Their host side (argument checks, kernel
 * lookups, two to four launches with their parameter blocks) cost 4-18 us
 * per run on the lane (H200, 2026-11-30), most of it in the launches. The
 * lane keeps a connection's last few calls: the first time one repeats, it
 * is captured into a graph on the lane's stream; later repeats launch that
 * graph (one launch). A graph holds what the call would pass: the buffers'
 * device addresses and the argument block (compared byte for byte; the
 * block is built on zeroed memory) and, for a backward, the context's
 * workspace; a call that differs in any of these is another call. A call
 * whose capture or graph launch fails runs directly from then on. The bits
 * are the call's own: the kernels and launch configs of the direct call (a
 * tune through the server between two repeats does not change a graph
 * already made; the tuned configs give the same bits).
 *
 * Lane-only, like the IPC cache that holds it (ipc.c). KJIT_RUN_GRAPH=0 at
 * the server's start turns it off. */
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "core/error.h"
#include "server/server_internal.h"

/* Calls kept per connection: a training step's forward and backward of
 * two or three ops. */
#define KEPT 8

typedef struct kept_call {
    kjit_run_call call;
    CUdeviceptr ws;  /* a backward's workspace when it ran or was captured */
    uint64_t used;   /* the run that used it last (0: free) */
    int repeats;     /* direct runs of it so far */
    int failed;      /* its capture or graph launch failed: run it directly */
    CUgraphExec exec;
} kept_call;

struct kjit_run_graph {
    uint64_t clock;
    kept_call k[KEPT];
};

static CUdeviceptr workspace(kjit_ctx *ctx, const kjit_run_call *c)
{
    if (!c->bwd) return 0; /* forwards use none */
    pthread_mutex_lock(&ctx->ws_lock);
    const CUdeviceptr ws = ctx->ws;
    pthread_mutex_unlock(&ctx->ws_lock);
    return ws;
}

static void drop(kept_call *k)
{
    if (k->exec) kjit__cu()->GraphExecDestroy(k->exec);
    k->exec = NULL;
}

/* The entry of call c (with workspace ws): its own, else the least
 * recently used one, emptied. */
static kept_call *find(kjit_run_graph *g, const kjit_run_call *c, CUdeviceptr ws)
{
    kept_call *lru = &g->k[0];
    for (int i = 0; i < KEPT; ++i) {
        kept_call *k = &g->k[i];
        if (k->used && !memcmp(&k->call, c, sizeof *c)) {
            if (k->ws == ws) return k;
            lru = k; /* the same call on another workspace: replace it */
            break;
        }
        if (k->used < lru->used) lru = k;
    }
    drop(lru);
    memset(lru, 0, sizeof *lru);
    lru->call = *c;
    lru->ws = ws;
    return lru;
}

/* Captures c on stream into k->exec; 0 when it worked. Any failure leaves
 * the stream as it was (capture ended, its graph destroyed). */
static int capture(kept_call *k, kjit_ctx *ctx, CUstream stream)
{
    const kjit_cu_api *cu = kjit__cu();
    /* Thread-local: the compile threads' driver calls stay legal meanwhile. */
    if (cu->StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) return -1;
    const int rc = kjit__run_call_invoke(ctx, &k->call, stream);
    CUgraph graph = NULL;
    const CUresult er = cu->StreamEndCapture(stream, &graph);
    int bad = rc || er != CUDA_SUCCESS || !graph;
    if (!bad) bad = cu->GraphInstantiate(&k->exec, graph, 0) != CUDA_SUCCESS;
    if (graph) cu->GraphDestroy(graph);
    if (bad) k->exec = NULL;
    return bad;
}

/* Launches k's graph; on failure it is dropped and the call runs directly
 * from then on. */
static int launch(kept_call *k, CUstream stream)
{
    const CUresult r = kjit__cu()->GraphLaunch(k->exec, stream);
    if (r == CUDA_SUCCESS) return KJIT_OK;
    drop(k);
    k->failed = 1;
    return kjit__cu_fail(r, "cuGraphLaunch of a repeated run");
}

int kjit__run_graph_call(kjit_run_graph **gp, int enabled, kjit_ctx *ctx, const kjit_run_call *c, CUstream stream,
                         int *how)
{
    *how = KJIT_RUN_DIRECT;
    if (!enabled) return kjit__run_call_invoke(ctx, c, stream);
    if (!*gp && !(*gp = calloc(1, sizeof **gp))) return kjit__run_call_invoke(ctx, c, stream);
    kjit_run_graph *g = *gp;
    kept_call *k = find(g, c, workspace(ctx, c));
    k->used = ++g->clock;
    if (k->exec) {
        *how = KJIT_RUN_REPLAYED;
        return launch(k, stream);
    }
    if (k->repeats > 0 && !k->failed) {
        if (!capture(k, ctx, stream)) {
            *how = KJIT_RUN_CAPTURED;
            return launch(k, stream);
        }
        k->failed = 1;
    }
    const int rc = kjit__run_call_invoke(ctx, c, stream);
    /* The call may have grown the workspace: a graph would hold this one. */
    k->ws = workspace(ctx, c);
    if (!rc) k->repeats++;
    else k->repeats = 0;
    return rc;
}

void kjit__run_graph_free(kjit_run_graph *g)
{
    if (!g) return;
    for (int i = 0; i < KEPT; ++i) drop(&g->k[i]);
    free(g);
}
