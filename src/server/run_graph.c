/* A connection's repeated run, replayed as a CUDA graph.
 *
 * A client that runs one op on the same buffers every step makes the same
 * library call each time. Its host side (argument checks, kernel lookups,
 * two to four launches with their parameter blocks) cost 4-15 us per run on
 * the lane (H200, 2026-11-30), most of it in the launches. The first time a
 * call repeats, the lane captures it into a graph on its stream; later
 * repeats launch that graph (one launch). The graph holds what the call
 * would pass: the buffers' device addresses, the argument block and the
 * context's backward workspace, so it is replayed only while all three are
 * the same; anything else is a new call (run directly, then captured if it
 * repeats). A call whose capture fails runs directly from then on. The bits
 * are the call's own: the kernels and their launch configs are the ones the
 * direct call launches (a tune through the server between two repeats does
 * not change a graph already made; the tuned configs give the same bits).
 *
 * Lane-only, like the IPC cache that holds it (ipc.c). KJIT_RUN_GRAPH=0 at
 * the server's start turns it off. */
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "core/error.h"
#include "server/server_internal.h"

struct kjit_run_graph {
    kjit_run_call call; /* the connection's last call */
    CUdeviceptr ws;     /* the context's workspace when it was made */
    int repeats;        /* direct runs of it so far */
    int failed;         /* its capture failed: run it directly */
    CUgraphExec exec;
};

static CUdeviceptr workspace(kjit_ctx *ctx)
{
    pthread_mutex_lock(&ctx->ws_lock);
    const CUdeviceptr ws = ctx->ws;
    pthread_mutex_unlock(&ctx->ws_lock);
    return ws;
}

static void drop(kjit_run_graph *g)
{
    if (g->exec) kjit__cu()->GraphExecDestroy(g->exec);
    g->exec = NULL;
}

/* Captures c on stream into g->exec; 0 when it worked. Any failure leaves
 * the stream as it was (capture ended, its graph destroyed). */
static int capture(kjit_run_graph *g, kjit_ctx *ctx, const kjit_run_call *c, CUstream stream)
{
    const kjit_cu_api *cu = kjit__cu();
    /* Thread-local: the compile threads' driver calls stay legal meanwhile. */
    if (cu->StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) return -1;
    const int rc = kjit__run_call_invoke(ctx, c, stream);
    CUgraph graph = NULL;
    const CUresult er = cu->StreamEndCapture(stream, &graph);
    int bad = rc || er != CUDA_SUCCESS || !graph;
    if (!bad) bad = cu->GraphInstantiate(&g->exec, graph, 0) != CUDA_SUCCESS;
    if (graph) cu->GraphDestroy(graph);
    if (bad) g->exec = NULL;
    return bad;
}

int kjit__run_graph_call(kjit_run_graph **gp, int enabled, kjit_ctx *ctx, const kjit_run_call *c, CUstream stream,
                         int *how)
{
    *how = KJIT_RUN_DIRECT;
    if (!enabled) return kjit__run_call_invoke(ctx, c, stream);
    if (!*gp && !(*gp = calloc(1, sizeof **gp))) return kjit__run_call_invoke(ctx, c, stream);
    kjit_run_graph *g = *gp;
    if (memcmp(&g->call, c, sizeof *c) || g->ws != workspace(ctx)) {
        drop(g);
        g->call = *c;
        g->repeats = 0;
        g->failed = 0;
    }
    if (g->exec) {
        *how = KJIT_RUN_REPLAYED;
        KJIT_CU_TRY(kjit__cu(), GraphLaunch(g->exec, stream), "cuGraphLaunch of a repeated run");
        return KJIT_OK;
    }
    if (g->repeats > 0 && !g->failed) {
        if (!capture(g, ctx, c, stream)) {
            *how = KJIT_RUN_CAPTURED;
            KJIT_CU_TRY(kjit__cu(), GraphLaunch(g->exec, stream), "cuGraphLaunch of a captured run");
            return KJIT_OK;
        }
        g->failed = 1;
    }
    const int rc = kjit__run_call_invoke(ctx, c, stream);
    /* The call may have grown the workspace: the graph's would be this one. */
    g->ws = workspace(ctx);
    if (!rc) g->repeats++;
    else g->repeats = 0;
    return rc;
}

void kjit__run_graph_free(kjit_run_graph *g)
{
    if (!g) return;
    drop(g);
    free(g);
}
