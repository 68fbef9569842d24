/* CUDA graph capture of every op (bf16, H = 5376, N = 4097, R = 9,
 * caller-provided workspace; norm_modulate also with the context's own;
 * timestep_sinusoid at D = 256): a direct forward + backward call (which
 * loads the kernels and grows the context's workspace), then the same calls
 * captured on a non-default stream, the graph replayed 3 times with every
 * output (and the workspace) poisoned before each replay, each replay
 * bitwise equal to the direct call. Also: asynchronous index checking
 * inside a graph raises the flag on each replay. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "ref.h"
#include "test_util.h"

#define N 4097
/* norm_modulate once more at N2 rows: there its training forward's persistent
 * grid has the partition built beside it (kjit_part_beside), a kernel that
 * waits for the forward only at its end; at N it builds inside it. */
#define N2 8192
#define H 5376
#define R 9
#define K 6
#define W ((int64_t)K * H)

static const kjit_cu_api *cu;

/* An output: `rows` rows of row stride `stride` elements (bf16), of which
 * columns [col0, col0 + cols) are written by the op; the rest must keep its
 * poison (it is compared bitwise like the rest of the buffer). */
typedef struct outbuf {
    const char *name;
    CUdeviceptr p;
    int64_t rows, stride, col0, cols;
} outbuf;

static size_t ob_bytes(const outbuf *o) { return (size_t)(o->rows * o->stride) * 2; }

#define MAX_OUTS 8
typedef struct opcase {
    const char *name;
    int op; /* 0 gather, 1 norm_modulate, 2 gated_residual, 3 fused, 4 timestep_sinusoid */
    int slot; /* its arguments: adaln_args[slot] (AdaLN ops) */
    int ctx_ws; /* backward through the context's workspace (NULL) */
    outbuf outs[MAX_OUTS];
    int nout;
} opcase;

static kjit_row_gather_args gather_args;
static kjit_adaln_args adaln_args[6];
static CUdeviceptr ws, part;
static size_t wsb, partb;
#define SIN_D 256
static CUdeviceptr sin_t, sin_out; /* timestep_sinusoid: t[N] fp32, out (N, SIN_D) bf16 */

/* The op's forward then its backward, on `stream`; train (AdaLN ops): the
 * training pair (the forward builds the backward's partition in `part`). */
static int call_op(kjit_ctx *ctx, const opcase *c, int train, CUstream stream)
{
    void *w = c->ctx_ws ? NULL : (void *)(uintptr_t)ws;
    const size_t wb = c->ctx_ws ? 0 : wsb;
    const int op = c->op;
    const kjit_adaln_args *a = &adaln_args[c->slot];
    int rc;
    if (train && op >= 1 && op <= 3) {
        void *pp = (void *)(uintptr_t)part;
        if ((rc = kjit_adaln_train_fwd(ctx, (kjit_adaln_op)op, a, pp, partb, stream))) return rc;
        return kjit_adaln_train_bwd(ctx, (kjit_adaln_op)op, a, pp, partb, w, wb, stream);
    }
    switch (op) {
    case 4: {
        kjit_sinusoid_opts o;
        kjit_sinusoid_opts_init(&o);
        o.flip_sin_to_cos = 1, o.downscale_freq_shift = 0.0; /* MiniMax-H3's */
        return kjit_timestep_sinusoid(ctx, (const float *)(uintptr_t)sin_t, N, SIN_D, (void *)(uintptr_t)sin_out,
                                      SIN_D, KJIT_BF16, &o, stream);
    }
    case 0:
        if ((rc = kjit_adaln_row_gather_fwd(ctx, &gather_args, stream))) return rc;
        return kjit_adaln_row_gather_bwd(ctx, &gather_args, w, wb, stream);
    case 1:
        if ((rc = kjit_norm_modulate_fwd(ctx, a, stream))) return rc;
        return kjit_norm_modulate_bwd(ctx, a, w, wb, stream);
    case 2:
        if ((rc = kjit_gated_residual_fwd(ctx, a, stream))) return rc;
        return kjit_gated_residual_bwd(ctx, a, w, wb, stream);
    default:
        if ((rc = kjit_gated_residual_norm_modulate_fwd(ctx, a, stream))) return rc;
        return kjit_gated_residual_norm_modulate_bwd(ctx, a, w, wb, stream);
    }
}

static void poison_outputs(const opcase *c)
{
    for (int i = 0; i < c->nout; ++i) gpu_poison(c->outs[i].p, ob_bytes(&c->outs[i]));
    gpu_poison(ws, wsb);
    gpu_sync();
}

static void download_outputs(const opcase *c, unsigned char **host)
{
    for (int i = 0; i < c->nout; ++i) gpu_download(host[i], c->outs[i].p, ob_bytes(&c->outs[i]));
}

static int bf16_nan(uint16_t b) { return (b & 0x7FFF) > 0x7F80; }

/* Elements of the written region still NaN (unwritten), and bytes outside it
 * that lost their poison. */
static void coverage(const outbuf *o, const unsigned char *host, int64_t *unwritten, int64_t *outside)
{
    const uint16_t *v = (const uint16_t *)host;
    *unwritten = *outside = 0;
    for (int64_t i = 0; i < o->rows; ++i)
        for (int64_t j = 0; j < o->stride; ++j) {
            const uint16_t b = v[i * o->stride + j];
            if (j >= o->col0 && j < o->col0 + o->cols) *unwritten += bf16_nan(b);
            else *outside += b != 0xFFFF;
        }
}

/* Uniform bf16 values in [-amp, amp) + bias. */
static void fill_bf16(ref_rng *g, uint16_t *dst, size_t n, float amp, float bias)
{
    for (size_t i = 0; i < n; ++i) {
        float f = (float)((double)(ref_rng_u64(g) >> 40) * 0x1p-23 - 1.0) * amp + bias;
        dst[i] = ref_float_to_bf16(f);
    }
}

static CUdeviceptr alloc_random(ref_rng *g, size_t elems, float amp, float bias)
{
    uint16_t *h = malloc(elems * 2);
    fill_bf16(g, h, elems, amp, bias);
    CUdeviceptr d = gpu_alloc(elems * 2);
    gpu_upload(d, h, elems * 2);
    free(h);
    return d;
}

static void test_op(kjit_ctx *ctx, CUstream stream, const opcase *c)
{
    unsigned char *direct[MAX_OUTS], *got[MAX_OUTS];
    for (int i = 0; i < c->nout; ++i) {
        direct[i] = malloc(ob_bytes(&c->outs[i]));
        got[i] = malloc(ob_bytes(&c->outs[i]));
    }

    /* Direct call: loads the kernels; every written element set, nothing else. */
    poison_outputs(c);
    int rc = call_op(ctx, c, 0, stream);
    if (rc) {
        fprintf(stderr, "%s: direct call: %s (%s)\n", c->name, kjit_status_name(rc), kjit_last_error());
        kjit_test_failures++;
        goto done;
    }
    CU_CHECK(cu->StreamSynchronize(stream));
    download_outputs(c, direct);
    for (int i = 0; i < c->nout; ++i) {
        int64_t unwritten, outside;
        coverage(&c->outs[i], direct[i], &unwritten, &outside);
        if (unwritten || outside) {
            fprintf(stderr, "%s: direct call: %s has %lld unwritten elements, %lld changed outside its region\n",
                    c->name, c->outs[i].name, (long long)unwritten, (long long)outside);
            kjit_test_failures++;
        }
    }

    /* Capture on the non-default stream: the plain calls, and for the AdaLN
     * ops the training pair (compared with the plain direct call). */
    for (int train = 0; train <= (c->op >= 1 && c->op <= 3); ++train) {
        poison_outputs(c);
        CUgraph graph = NULL;
        CUgraphExec exec = NULL;
        CU_CHECK(cu->StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
        rc = call_op(ctx, c, train, stream);
        CUresult er = cu->StreamEndCapture(stream, &graph);
        if (rc || er != CUDA_SUCCESS || !graph) {
            const char *en = "?";
            cu->GetErrorName(er, &en);
            fprintf(stderr, "%s: capture: calls returned %s (%s), cuStreamEndCapture %s\n", c->name, kjit_status_name(rc),
                    kjit_last_error(), en);
            kjit_test_failures++;
            if (graph) cu->GraphDestroy(graph);
            goto done;
        }
        /* Capturing ran nothing. */
        gpu_sync();
        download_outputs(c, got);
        for (int i = 0; i < c->nout; ++i)
            for (size_t b = 0; b < ob_bytes(&c->outs[i]); ++b)
                if (got[i][b] != 0xFF) {
                    fprintf(stderr, "%s: %s was written while capturing\n", c->name, c->outs[i].name);
                    kjit_test_failures++;
                    break;
                }
        CU_CHECK(cu->GraphInstantiate(&exec, graph, 0));
        for (int rep = 0; rep < 3; ++rep) {
            poison_outputs(c);
            CU_CHECK(cu->GraphLaunch(exec, stream));
            CU_CHECK(cu->StreamSynchronize(stream));
            download_outputs(c, got);
            for (int i = 0; i < c->nout; ++i)
                if (memcmp(got[i], direct[i], ob_bytes(&c->outs[i]))) {
                    size_t first = 0;
                    while (got[i][first] == direct[i][first]) ++first;
                    fprintf(stderr, "%s%s: replay %d: %s differs from the direct call (first at byte %zu)\n", c->name,
                            train ? " (training pair)" : "", rep, c->outs[i].name, first);
                    kjit_test_failures++;
                }
        }
        printf("%s%s: captured, replayed 3 times, bitwise equal to the direct call\n", c->name,
               train ? " (training pair)" : "");
        CU_CHECK(cu->GraphExecDestroy(exec));
        CU_CHECK(cu->GraphDestroy(graph));
    }
done:
    for (int i = 0; i < c->nout; ++i) free(direct[i]), free(got[i]);
}

/* ASYNC index checking inside a graph: each replay with a bad index raises
 * the flag; a graph with good indices leaves it down. */
static void async_in_graph(CUstream stream, CUdeviceptr good_idx, CUdeviceptr bad_idx)
{
    kjit_ctx *actx = kjit_gpu_ctx_or_skip("test_graph", KJIT_INDEX_CHECK_ASYNC);
    int flag = -1;
    CHECK_STATUS(kjit_adaln_row_gather_fwd(actx, &gather_args, stream), KJIT_OK); /* loads the kernel */
    CHECK_STATUS(kjit_norm_modulate_fwd(actx, &adaln_args[1], stream), KJIT_OK);
    CHECK_STATUS(kjit_ctx_index_error(actx, stream, &flag), KJIT_OK);
    CHECK_EQ_INT(flag, 0);
    for (int bad = 0; bad < 2; ++bad) {
        kjit_row_gather_args ga = gather_args;
        kjit_adaln_args na = adaln_args[1];
        ga.index.ptr = na.index.ptr = (const void *)(uintptr_t)(bad ? bad_idx : good_idx);
        CUgraph graph = NULL;
        CUgraphExec exec = NULL;
        CU_CHECK(cu->StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
        int rc1 = kjit_adaln_row_gather_fwd(actx, &ga, stream);
        int rc2 = kjit_norm_modulate_fwd(actx, &na, stream);
        CUresult er = cu->StreamEndCapture(stream, &graph);
        if (rc1 || rc2 || er != CUDA_SUCCESS || !graph) {
            fprintf(stderr, "async capture (bad=%d): %s / %s (%s), end capture %d\n", bad, kjit_status_name(rc1),
                    kjit_status_name(rc2), kjit_last_error(), (int)er);
            kjit_test_failures++;
            if (graph) cu->GraphDestroy(graph);
            continue;
        }
        CU_CHECK(cu->GraphInstantiate(&exec, graph, 0));
        for (int rep = 0; rep < 2; ++rep) {
            CU_CHECK(cu->GraphLaunch(exec, stream));
            CHECK_STATUS(kjit_ctx_index_error(actx, stream, &flag), KJIT_OK);
            CHECK_EQ_INT(flag, bad);
            CHECK_STATUS(kjit_ctx_index_error(actx, stream, &flag), KJIT_OK);
            CHECK_EQ_INT(flag, 0);
        }
        CU_CHECK(cu->GraphExecDestroy(exec));
        CU_CHECK(cu->GraphDestroy(graph));
    }
    printf("async index checking inside a graph: flag raised on each replay with a bad index\n");
    kjit_ctx_destroy(actx);
}

/* A backward whose context workspace would have to grow while its stream
 * is captured: KJIT_EINVAL naming the capture, nothing launched, and the
 * capture still valid (cuMemAlloc inside it would have invalidated it). */
static void grow_under_capture(CUstream stream, const opcase *c)
{
    kjit_ctx *c2 = kjit_gpu_ctx_or_skip("test_graph", KJIT_INDEX_CHECK_OFF);
    const kjit_adaln_args *a = &adaln_args[1];
    /* Loads the kernels; the caller's workspace, so the context's stays empty. */
    CHECK_STATUS(kjit_norm_modulate_fwd(c2, a, stream), KJIT_OK);
    CHECK_STATUS(kjit_norm_modulate_bwd(c2, a, (void *)(uintptr_t)ws, wsb, stream), KJIT_OK);
    CU_CHECK(cu->StreamSynchronize(stream));
    poison_outputs(c);
    CUgraph graph = NULL;
    CU_CHECK(cu->StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    const int rc = kjit_norm_modulate_bwd(c2, a, NULL, 0, stream);
    const int named = strstr(kjit_last_error(), "captured") != NULL;
    const CUresult er = cu->StreamEndCapture(stream, &graph);
    CHECK_STATUS(rc, KJIT_EINVAL);
    CHECK(named);
    if (er != CUDA_SUCCESS || !graph) {
        fprintf(stderr, "grow_under_capture: the refused call invalidated the capture (%d)\n", (int)er);
        kjit_test_failures++;
    }
    if (graph) { /* nothing captured: replayed, it writes nothing */
        CUgraphExec exec = NULL;
        CU_CHECK(cu->GraphInstantiate(&exec, graph, 0));
        CU_CHECK(cu->GraphLaunch(exec, stream));
        CU_CHECK(cu->StreamSynchronize(stream));
        for (int i = 0; i < c->nout; ++i) {
            unsigned char *h = malloc(ob_bytes(&c->outs[i]));
            gpu_download(h, c->outs[i].p, ob_bytes(&c->outs[i]));
            for (size_t b = 0; b < ob_bytes(&c->outs[i]); ++b)
                if (h[b] != 0xFF) {
                    fprintf(stderr, "grow_under_capture: %s written by the refused call's graph\n", c->outs[i].name);
                    kjit_test_failures++;
                    break;
                }
            free(h);
        }
        CU_CHECK(cu->GraphExecDestroy(exec));
        CU_CHECK(cu->GraphDestroy(graph));
    }
    /* Outside a capture the same call grows the workspace and runs. */
    CHECK_STATUS(kjit_norm_modulate_bwd(c2, a, NULL, 0, stream), KJIT_OK);
    CU_CHECK(cu->StreamSynchronize(stream));
    printf("the context's workspace, to grow under capture: refused (%s), the capture kept\n",
           rc == KJIT_EINVAL ? "KJIT_EINVAL" : kjit_status_name(rc));
    kjit_ctx_destroy(c2);
}

/* SYNC index checking on a capturing stream: KJIT_EINVAL naming the
 * capture, before it records anything (the captured graph has no node),
 * and the capture still valid (the check's read-back and wait would have
 * invalidated it). Forwards and backwards, the backwards with the
 * context's workspace (grown before the capture). */
static void sync_under_capture(CUstream stream)
{
    kjit_ctx *sctx = kjit_gpu_ctx_or_skip("test_graph", KJIT_INDEX_CHECK_SYNC);
    const kjit_adaln_args *a = &adaln_args[1];
    /* Loads the kernels, grows the context's workspace, checks the indices. */
    CHECK_STATUS(kjit_norm_modulate_fwd(sctx, a, stream), KJIT_OK);
    CHECK_STATUS(kjit_norm_modulate_bwd(sctx, a, NULL, 0, stream), KJIT_OK);
    CHECK_STATUS(kjit_adaln_row_gather_bwd(sctx, &gather_args, NULL, 0, stream), KJIT_OK);
    CU_CHECK(cu->StreamSynchronize(stream));
    CUgraph graph = NULL;
    CU_CHECK(cu->StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    const int rc = kjit_norm_modulate_fwd(sctx, a, stream);
    const int named = strstr(kjit_last_error(), "index checking SYNC") && strstr(kjit_last_error(), "captured");
    const int rcg = kjit_adaln_row_gather_fwd(sctx, &gather_args, stream);
    const int rcb = kjit_norm_modulate_bwd(sctx, a, NULL, 0, stream);
    const int rcgb = kjit_adaln_row_gather_bwd(sctx, &gather_args, NULL, 0, stream);
    /* Reading the index-error flag waits for the stream: refused too. */
    int flag = -1;
    const int rcf = kjit_ctx_index_error(sctx, stream, &flag);
    const int named_f = strstr(kjit_last_error(), "kjit_ctx_index_error") && strstr(kjit_last_error(), "captured");
    const CUresult er = cu->StreamEndCapture(stream, &graph);
    CHECK_STATUS(rc, KJIT_EINVAL);
    CHECK_STATUS(rcg, KJIT_EINVAL);
    CHECK_STATUS(rcb, KJIT_EINVAL);
    CHECK_STATUS(rcgb, KJIT_EINVAL);
    CHECK_STATUS(rcf, KJIT_EINVAL);
    CHECK(named);
    CHECK(named_f && flag == -1);
    size_t nodes = 1;
    if (er != CUDA_SUCCESS || !graph) {
        fprintf(stderr, "sync_under_capture: the refused calls invalidated the capture (%d)\n", (int)er);
        kjit_test_failures++;
    } else {
        CU_CHECK(cu->GraphGetNodes(graph, NULL, &nodes));
        if (nodes) fprintf(stderr, "sync_under_capture: the refused calls recorded %zu node(s)\n", nodes);
        CHECK(nodes == 0);
    }
    if (graph) CU_CHECK(cu->GraphDestroy(graph));
    /* Outside a capture the same call checks and runs. */
    CHECK_STATUS(kjit_norm_modulate_fwd(sctx, a, stream), KJIT_OK);
    CU_CHECK(cu->StreamSynchronize(stream));
    printf("SYNC index checking on a capturing stream: forwards, backwards and the flag's read refused, nothing "
           "recorded, the capture kept\n");
    kjit_ctx_destroy(sctx);
}

int main(void)
{
    kjit_ctx *ctx = kjit_gpu_ctx_or_skip("test_graph", KJIT_INDEX_CHECK_OFF);
    cu = kjit__cu();
    ref_rng g;
    ref_rng_seed(&g, kjit_test_seed("test_graph"));
    CUstream stream;
    CU_CHECK(cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING));

    /* Inputs: one (R, 6H) table (its chunk(6) views), a weight, an int32
     * index, (N, H) activations, (N, 6H) gather gradients. */
    const CUdeviceptr table = alloc_random(&g, (size_t)(R * W), 0.5f, 0.0f);
    const CUdeviceptr weight = alloc_random(&g, H, 0.1f, 1.0f);
    const CUdeviceptr x = alloc_random(&g, (size_t)N * H, 1.0f, 0.0f), res = alloc_random(&g, (size_t)N * H, 1.0f, 0.0f),
                      y = alloc_random(&g, (size_t)N * H, 1.0f, 0.0f), dout = alloc_random(&g, (size_t)N * H, 1.0f, 0.0f),
                      dh = alloc_random(&g, (size_t)N * H, 1.0f, 0.0f), gdout = alloc_random(&g, (size_t)(N * W), 1.0f, 0.0f);
    int32_t *idx = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; ++i) idx[i] = (int32_t)ref_rng_below(&g, R);
    idx[0] = R - 1, idx[N - 1] = 0;
    const CUdeviceptr didx = gpu_alloc(sizeof(int32_t) * N), dbad = gpu_alloc(sizeof(int32_t) * N);
    gpu_upload(didx, idx, sizeof(int32_t) * N);
    idx[2000] = R; /* one bad row */
    gpu_upload(dbad, idx, sizeof(int32_t) * N);
    const kjit_index index = {(const void *)(uintptr_t)didx, KJIT_I32, R};
#define TV(base, k) ((const void *)(uintptr_t)((base) + (CUdeviceptr)(k) * H * 2)) /* chunk k of a (rows, 6H) buffer */
#define MV(base, k) ((void *)(uintptr_t)((base) + (CUdeviceptr)(k) * H * 2))

    /* The N2-row norm_modulate's inputs. */
    const CUdeviceptr x2 = alloc_random(&g, (size_t)N2 * H, 1.0f, 0.0f), dout2 = alloc_random(&g, (size_t)N2 * H, 1.0f, 0.0f);
    int32_t *idx2 = malloc(sizeof(int32_t) * N2);
    for (int i = 0; i < N2; ++i) idx2[i] = (int32_t)ref_rng_below(&g, R);
    const CUdeviceptr didx2 = gpu_alloc(sizeof(int32_t) * N2);
    gpu_upload(didx2, idx2, sizeof(int32_t) * N2);
    free(idx2);

    /* Workspace: the largest backward's. */
    size_t b;
    CHECK_STATUS(kjit_adaln_row_gather_workspace(N, H, K, R, &wsb), KJIT_OK);
    for (int op = KJIT_NORM_MODULATE; op <= KJIT_GATED_RESIDUAL_NORM_MODULATE; ++op) {
        CHECK_STATUS(kjit_adaln_workspace((kjit_adaln_op)op, N, H, R, &b), KJIT_OK);
        if (b > wsb) wsb = b;
    }
    CHECK_STATUS(kjit_adaln_workspace(KJIT_NORM_MODULATE, N2, H, R, &b), KJIT_OK);
    if (b > wsb) wsb = b;
    ws = gpu_alloc(wsb);
    for (int op = KJIT_NORM_MODULATE; op <= KJIT_GATED_RESIDUAL_NORM_MODULATE; ++op) {
        CHECK_STATUS(kjit_adaln_partition_bytes((kjit_adaln_op)op, N, H, R, &b), KJIT_OK);
        if (b > partb) partb = b;
    }
    CHECK_STATUS(kjit_adaln_partition_bytes(KJIT_NORM_MODULATE, N2, H, R, &b), KJIT_OK);
    if (b > partb) partb = b;
    part = gpu_alloc(partb);

    opcase cases[7];
    memset(cases, 0, sizeof cases);

    /* adaln_row_gather, K = 6 chunk views in, (N, 6H) out, (R, 6H) dtable. */
    {
        opcase *c = &cases[0];
        c->name = "adaln_row_gather", c->op = 0, c->slot = 0;
        c->outs[c->nout++] = (outbuf){"out", gpu_alloc((size_t)(N * W) * 2), N, W, 0, W};
        c->outs[c->nout++] = (outbuf){"dtable", gpu_alloc((size_t)(R * W) * 2), R, W, 0, W};
        kjit_row_gather_args *a = &gather_args;
        memset(a, 0, sizeof *a);
        a->n = N, a->hidden = H, a->num_tables = K, a->dtype = KJIT_BF16, a->index = index;
        for (int k = 0; k < K; ++k) {
            a->table[k] = TV(table, k), a->table_stride[k] = W;
            a->out[k] = MV(c->outs[0].p, k), a->out_stride[k] = W;
            a->dout[k] = TV(gdout, k), a->dout_stride[k] = W;
            a->dtable[k] = MV(c->outs[1].p, k), a->dtable_stride[k] = W;
        }
    }
    /* norm_modulate with weight: shift, scale = chunks 0, 1; dshift, dscale
     * the same chunks of an (R, 6H) gradient buffer. */
    {
        opcase *c = &cases[1];
        c->name = "norm_modulate", c->op = 1, c->slot = 1;
        c->outs[c->nout++] = (outbuf){"out", gpu_alloc((size_t)N * H * 2), N, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dx", gpu_alloc((size_t)N * H * 2), N, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dweight", gpu_alloc(H * 2), 1, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dtable (dshift, dscale)", gpu_alloc((size_t)(R * W) * 2), R, W, 0, 2 * H};
        kjit_adaln_args *a = &adaln_args[1];
        memset(a, 0, sizeof *a);
        a->n = N, a->hidden = H, a->eps = 1e-6f, a->act_dtype = KJIT_BF16, a->param_dtype = KJIT_BF16, a->index = index;
        a->x = (const void *)(uintptr_t)x, a->x_stride = H;
        a->weight = (const void *)(uintptr_t)weight;
        a->shift = TV(table, 0), a->shift_stride = W;
        a->scale = TV(table, 1), a->scale_stride = W;
        a->out = MV(c->outs[0].p, 0), a->out_stride = H;
        a->dout = (const void *)(uintptr_t)dout, a->dout_stride = H;
        a->dx = MV(c->outs[1].p, 0), a->dx_stride = H;
        a->dweight = MV(c->outs[2].p, 0);
        a->dshift = MV(c->outs[3].p, 0), a->dshift_stride = W;
        a->dscale = MV(c->outs[3].p, 1), a->dscale_stride = W;
    }
    /* gated_residual: gate = chunk 2; dres written (dx given), dgate chunk 2. */
    {
        opcase *c = &cases[2];
        c->name = "gated_residual", c->op = 2, c->slot = 2;
        c->outs[c->nout++] = (outbuf){"out", gpu_alloc((size_t)N * H * 2), N, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dx (dres)", gpu_alloc((size_t)N * H * 2), N, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dy", gpu_alloc((size_t)N * H * 2), N, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dtable (dgate)", gpu_alloc((size_t)(R * W) * 2), R, W, 2 * H, H};
        kjit_adaln_args *a = &adaln_args[2];
        memset(a, 0, sizeof *a);
        a->n = N, a->hidden = H, a->act_dtype = KJIT_BF16, a->param_dtype = KJIT_BF16, a->index = index;
        a->res = (const void *)(uintptr_t)res, a->res_stride = H;
        a->y = (const void *)(uintptr_t)y, a->y_stride = H;
        a->gate = TV(table, 2), a->gate_stride = W;
        a->out = MV(c->outs[0].p, 0), a->out_stride = H;
        a->dout = (const void *)(uintptr_t)dout, a->dout_stride = H;
        a->dx = MV(c->outs[1].p, 0), a->dx_stride = H;
        a->dy = MV(c->outs[2].p, 0), a->dy_stride = H;
        a->dgate = MV(c->outs[3].p, 2), a->dgate_stride = W;
    }
    /* gated_residual_norm_modulate: shift, scale, gate = chunks 3, 4, 5 (the
     * MLP half); the backward's x is the h its forward wrote (inside the
     * same graph); dh given. */
    {
        opcase *c = &cases[3];
        c->name = "gated_residual_norm_modulate", c->op = 3, c->slot = 3;
        c->outs[c->nout++] = (outbuf){"h", gpu_alloc((size_t)N * H * 2), N, H, 0, H};
        c->outs[c->nout++] = (outbuf){"out", gpu_alloc((size_t)N * H * 2), N, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dx (dres)", gpu_alloc((size_t)N * H * 2), N, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dy", gpu_alloc((size_t)N * H * 2), N, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dweight", gpu_alloc(H * 2), 1, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dtable (dshift, dscale, dgate)", gpu_alloc((size_t)(R * W) * 2), R, W, 3 * H, 3 * H};
        kjit_adaln_args *a = &adaln_args[3];
        memset(a, 0, sizeof *a);
        a->n = N, a->hidden = H, a->eps = 1e-6f, a->act_dtype = KJIT_BF16, a->param_dtype = KJIT_BF16, a->index = index;
        a->res = (const void *)(uintptr_t)res, a->res_stride = H;
        a->y = (const void *)(uintptr_t)y, a->y_stride = H;
        a->weight = (const void *)(uintptr_t)weight;
        a->shift = TV(table, 3), a->shift_stride = W;
        a->scale = TV(table, 4), a->scale_stride = W;
        a->gate = TV(table, 5), a->gate_stride = W;
        a->h = MV(c->outs[0].p, 0), a->h_stride = H;
        a->x = a->h, a->x_stride = H; /* backward: x = the forward's h */
        a->out = MV(c->outs[1].p, 0), a->out_stride = H;
        a->dh = (const void *)(uintptr_t)dh, a->dh_stride = H;
        a->dout = (const void *)(uintptr_t)dout, a->dout_stride = H;
        a->dx = MV(c->outs[2].p, 0), a->dx_stride = H;
        a->dy = MV(c->outs[3].p, 0), a->dy_stride = H;
        a->dweight = MV(c->outs[4].p, 0);
        a->dshift = MV(c->outs[5].p, 3), a->dshift_stride = W;
        a->dscale = MV(c->outs[5].p, 4), a->dscale_stride = W;
        a->dgate = MV(c->outs[5].p, 5), a->dgate_stride = W;
    }

    /* norm_modulate at N2 rows, its own (R, 6H) table gradient. */
    {
        opcase *c = &cases[4];
        c->name = "norm_modulate (8192 rows)", c->op = 1, c->slot = 4;
        c->outs[c->nout++] = (outbuf){"out", gpu_alloc((size_t)N2 * H * 2), N2, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dx", gpu_alloc((size_t)N2 * H * 2), N2, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dweight", gpu_alloc(H * 2), 1, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dtable (dshift, dscale)", gpu_alloc((size_t)(R * W) * 2), R, W, 0, 2 * H};
        kjit_adaln_args *a = &adaln_args[4];
        *a = adaln_args[1];
        a->n = N2, a->index.ptr = (const void *)(uintptr_t)didx2;
        a->x = (const void *)(uintptr_t)x2, a->dout = (const void *)(uintptr_t)dout2;
        a->out = MV(c->outs[0].p, 0), a->dx = MV(c->outs[1].p, 0), a->dweight = MV(c->outs[2].p, 0);
        a->dshift = MV(c->outs[3].p, 0), a->dscale = MV(c->outs[3].p, 1);
    }

    /* norm_modulate through the context's workspace (NULL): the direct call
     * grows it, the captured calls reuse it. Its own outputs. */
    {
        opcase *c = &cases[5];
        c->name = "norm_modulate (the context's workspace)", c->op = 1, c->slot = 5, c->ctx_ws = 1;
        c->outs[c->nout++] = (outbuf){"out", gpu_alloc((size_t)N * H * 2), N, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dx", gpu_alloc((size_t)N * H * 2), N, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dweight", gpu_alloc(H * 2), 1, H, 0, H};
        c->outs[c->nout++] = (outbuf){"dtable (dshift, dscale)", gpu_alloc((size_t)(R * W) * 2), R, W, 0, 2 * H};
        kjit_adaln_args *a = &adaln_args[5];
        *a = adaln_args[1];
        a->out = MV(c->outs[0].p, 0), a->dx = MV(c->outs[1].p, 0), a->dweight = MV(c->outs[2].p, 0);
        a->dshift = MV(c->outs[3].p, 0), a->dscale = MV(c->outs[3].p, 1);
    }
    /* timestep_sinusoid: N timesteps in [0, 1000), (N, 256) bf16. */
    {
        opcase *c = &cases[6];
        c->name = "timestep_sinusoid", c->op = 4;
        float *t = malloc(sizeof(float) * N);
        for (int i = 0; i < N; ++i) t[i] = (float)(ref_rng_uniform(&g) * 1000.0);
        sin_t = gpu_alloc(sizeof(float) * N);
        gpu_upload(sin_t, t, sizeof(float) * N);
        free(t);
        c->outs[c->nout++] = (outbuf){"out", sin_out = gpu_alloc((size_t)N * SIN_D * 2), N, SIN_D, 0, SIN_D};
    }

    for (int i = 0; i < 7; ++i) test_op(ctx, stream, &cases[i]);
    async_in_graph(stream, didx, dbad);
    grow_under_capture(stream, &cases[1]);
    sync_under_capture(stream);

    for (int i = 0; i < 7; ++i)
        for (int j = 0; j < cases[i].nout; ++j) gpu_free(cases[i].outs[j].p);
    gpu_free(sin_t);
    gpu_free(x2), gpu_free(dout2), gpu_free(didx2);
    gpu_free(ws), gpu_free(part), gpu_free(didx), gpu_free(dbad), gpu_free(table), gpu_free(weight);
    gpu_free(x), gpu_free(res), gpu_free(y), gpu_free(dout), gpu_free(dh), gpu_free(gdout);
    free(idx);
    CU_CHECK(cu->StreamDestroy(stream));
    kjit_ctx_destroy(ctx);
    return kjit_test_result("test_graph");
}
