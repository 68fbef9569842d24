/* The row gradients alone: each AdaLN op's backward with every table and
 * weight gradient NULL (kjit_adaln_bwd_dx; gated_residual: no dgate), and
 * no y, against the full backward, bit for bit. Shapes on the fast path and the generic one
 * (hidden 13, and 1000 with rows not 16-byte aligned), bf16, fp16 (fp32
 * tables) and fp32, int32 and int64 indices, 32 to 512 threads a row (1 to
 * 16 warps), tables as chunk(6) views, strided activations, with and
 * without a weight and (fused) dh; the plain and the training backward
 * (gated_residual's training backward without dx: dx left untouched).
 * Outputs are poisoned before each call, so a row left unwritten differs.
 * Also: a captured CUDA graph replays it bitwise, and with asynchronous
 * index checking a row with a bad index is skipped (its dx keeps the
 * poison) and the flag is raised. The full backward is checked against
 * fp64 by test_adaln; equal bits here make the row-only path as accurate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "ref.h"
#include "test_util.h"

static const kjit_cu_api *cu;

typedef struct shape {
    int64_t n, r;
    int h;
    kjit_dtype act, par, idx;
    int weight, dh, xpad; /* xpad: extra elements per activation row */
} shape;

/* Bytes [0, bytes) of a and b equal; counts the rows of `rowb` bytes that
 * differ. */
static int64_t rows_differ(const unsigned char *a, const unsigned char *b, int64_t rows, size_t rowb)
{
    int64_t d = 0;
    for (int64_t i = 0; i < rows; ++i) d += memcmp(a + i * rowb, b + i * rowb, rowb) != 0;
    return d;
}

static void run_shape(kjit_ctx *ctx, kjit_ctx *actx, CUstream stream, ref_rng *g, const shape *s, int mode)
{
    const int64_t n = s->n, r = s->r, hs = s->h + s->xpad, W = 6LL * s->h;
    const size_t ab = kjit_dtype_size(s->act), rowb = (size_t)hs * ab, act_bytes = (size_t)n * rowb;
    const CUdeviceptr x = gpu_upload_normal(g, s->act, (size_t)(n * hs), 0.0, 1.0);
    const CUdeviceptr y = gpu_upload_normal(g, s->act, (size_t)(n * hs), 0.0, 1.0);
    const CUdeviceptr dout = gpu_upload_normal(g, s->act, (size_t)(n * hs), 0.0, 1.0);
    const CUdeviceptr dh = gpu_upload_normal(g, s->act, (size_t)(n * hs), 0.0, 0.5);
    const CUdeviceptr table = gpu_upload_normal(g, s->par, (size_t)(r * W), 0.0, 0.3);
    const CUdeviceptr weight = gpu_upload_normal(g, s->par, (size_t)s->h, 0.0, 1.0);
    const size_t pb = kjit_dtype_size(s->par), ib = kjit_dtype_size(s->idx);
    unsigned char *ih = malloc((size_t)n * ib);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t v = (int64_t)ref_rng_below(g, (uint64_t)r);
        if (ib == 4) ((int32_t *)ih)[i] = (int32_t)v;
        else ((int64_t *)ih)[i] = v;
    }
    const CUdeviceptr idx = gpu_alloc((size_t)n * ib);
    gpu_upload(idx, ih, (size_t)n * ib);
    CUdeviceptr dx_full = gpu_alloc(act_bytes), dy_full = gpu_alloc(act_bytes), dx = gpu_alloc(act_bytes),
                dy = gpu_alloc(act_bytes), dtab = gpu_alloc((size_t)(r * W) * pb), dw = gpu_alloc((size_t)s->h * pb),
                outb = gpu_alloc(act_bytes), hb = gpu_alloc(act_bytes);
    gpu_poison(dx_full, act_bytes), gpu_poison(dy_full, act_bytes);
    gpu_sync();

#define V(p, off) ((void *)(uintptr_t)((p) + (off)))
    kjit_adaln_args a;
    memset(&a, 0, sizeof a);
    a.n = n, a.hidden = s->h, a.eps = 1e-6f, a.act_dtype = s->act, a.param_dtype = s->par;
    a.index.ptr = V(idx, 0), a.index.dtype = s->idx, a.index.rows = r;
    a.x = V(x, 0), a.y = V(y, 0), a.dout = V(dout, 0);
    a.x_stride = a.y_stride = a.dout_stride = a.dh_stride = a.dx_stride = a.dy_stride = hs;
    a.dh = mode == 3 && s->dh ? V(dh, 0) : NULL;
    a.weight = s->weight ? V(weight, 0) : NULL;
    a.shift = V(table, 0), a.scale = V(table, (size_t)s->h * pb), a.gate = V(table, (size_t)2 * s->h * pb);
    a.shift_stride = a.scale_stride = a.gate_stride = W;
    a.dx = V(dx_full, 0), a.dy = V(dy_full, 0);
    a.dshift = V(dtab, 0), a.dscale = V(dtab, (size_t)s->h * pb), a.dgate = V(dtab, (size_t)2 * s->h * pb);
    a.dshift_stride = a.dscale_stride = a.dgate_stride = W;
    a.dweight = s->weight ? V(dw, 0) : NULL;
    const kjit_adaln_op op = (kjit_adaln_op)mode;
    size_t wsb = 0, partb = 0;
    CHECK_STATUS(kjit_adaln_workspace(op, n, s->h, r, &wsb), KJIT_OK);
    CHECK_STATUS(kjit_adaln_partition_bytes(op, n, s->h, r, &partb), KJIT_OK);
    const CUdeviceptr ws = gpu_alloc(wsb), part = gpu_alloc(partb);
    typedef int (*bwd_fn)(kjit_ctx *, const kjit_adaln_args *, void *, size_t, CUstream);
    const bwd_fn bwd = mode == 1 ? kjit_norm_modulate_bwd
                     : mode == 2 ? kjit_gated_residual_bwd
                                 : kjit_gated_residual_norm_modulate_bwd;
    CHECK_STATUS(bwd(ctx, &a, V(ws, 0), wsb, stream), KJIT_OK);
    CU_CHECK(cu->StreamSynchronize(stream));
    unsigned char *want_dx = gpu_download_new(dx_full, act_bytes), *want_dy = gpu_download_new(dy_full, act_bytes);

    /* The row gradients alone: plain, training, and replayed from a graph. */
    kjit_adaln_args o = a;
    o.dshift = o.dscale = o.dgate = o.dweight = NULL;
    o.dx = V(dx, 0), o.dy = V(dy, 0);
    if (mode != 1) o.y = NULL; /* y only feeds dgate */
    for (int way = 0; way < 3; ++way) {
        /* gated_residual's dx (= dres) is optional: left out once. */
        const int nodx = mode == 2 && way == 1;
        o.dx = nodx ? NULL : V(dx, 0);
        gpu_poison(dx, act_bytes), gpu_poison(dy, act_bytes);
        gpu_sync();
        if (way == 0) {
            CHECK_STATUS(bwd(ctx, &o, NULL, 0, stream), KJIT_OK);
        } else if (way == 1) {
            kjit_adaln_args f = a; /* the forward's own operands (its outputs unused) */
            f.res = V(dh, 0), f.out = V(outb, 0), f.h = V(hb, 0), f.out_stride = f.h_stride = f.res_stride = hs;
            CHECK_STATUS(kjit_adaln_train_fwd(ctx, op, &f, V(part, 0), partb, stream), KJIT_OK);
            CHECK_STATUS(kjit_adaln_train_bwd(ctx, op, &o, V(part, 0), partb, NULL, 0, stream), KJIT_OK);
        } else {
            CUgraph graph = NULL;
            CUgraphExec exec = NULL;
            CU_CHECK(cu->StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
            const int rc = bwd(ctx, &o, NULL, 0, stream);
            CU_CHECK(cu->StreamEndCapture(stream, &graph));
            CHECK_STATUS(rc, KJIT_OK);
            CU_CHECK(cu->GraphInstantiate(&exec, graph, 0));
            for (int rep = 0; rep < 2; ++rep) {
                /* cuMemsetD8 runs on the legacy stream, which a
                 * non-blocking stream does not wait for: order by hand. */
                CU_CHECK(cu->StreamSynchronize(stream));
                gpu_poison(dx, act_bytes), gpu_poison(dy, act_bytes);
                gpu_sync();
                CU_CHECK(cu->GraphLaunch(exec, stream));
            }
            CU_CHECK(cu->GraphExecDestroy(exec));
            CU_CHECK(cu->GraphDestroy(graph));
        }
        CU_CHECK(cu->StreamSynchronize(stream));
        unsigned char *got_dx = gpu_download_new(dx, act_bytes), *got_dy = gpu_download_new(dy, act_bytes);
        /* Whole rows, padding included: the padding keeps its poison in both. */
        const int64_t ddx = nodx ? 0 : rows_differ(got_dx, want_dx, n, rowb);
        const int64_t ddy = mode != 1 ? rows_differ(got_dy, want_dy, n, rowb) : 0;
        if (ddx || ddy) {
            fprintf(stderr, "mode %d n %lld h %d %s/%s way %d: %lld dx rows, %lld dy rows differ\n", mode,
                    (long long)n, s->h, kjit_dtype_name(s->act), kjit_dtype_name(s->par), way, (long long)ddx,
                    (long long)ddy);
            kjit_test_failures++;
        }
        /* Not a comparison of two untouched buffers: the rows hold values. */
        int64_t poisoned = 0;
        for (int64_t i = 0; i < n; ++i) poisoned += got_dx[i * rowb] == 0xFF && got_dx[i * rowb + 1] == 0xFF;
        if (nodx) {
            unsigned char *poison = malloc(act_bytes);
            memset(poison, 0xFF, act_bytes);
            CHECK(memcmp(got_dx, poison, act_bytes) == 0); /* not written */
            free(poison);
        } else {
            CHECK(poisoned < n / 100 + 1);
        }
        free(got_dx), free(got_dy);
    }

    /* Asynchronous index checking: row n/2 out of range is skipped. */
    o.dx = V(dx, 0);
    const int64_t bad = n / 2, badv = r + 3;
    if (ib == 4) ((int32_t *)ih)[bad] = (int32_t)badv;
    else ((int64_t *)ih)[bad] = badv;
    gpu_upload(idx, ih, (size_t)n * ib);
    gpu_poison(dx, act_bytes), gpu_poison(dy, act_bytes);
    gpu_sync();
    int flag = -1;
    CHECK_STATUS(kjit_ctx_index_error(actx, stream, &flag), KJIT_OK);
    CHECK_EQ_INT(flag, 0);
    CHECK_STATUS(bwd(actx, &o, NULL, 0, stream), KJIT_OK);
    CHECK_STATUS(kjit_ctx_index_error(actx, stream, &flag), KJIT_OK);
    CHECK_EQ_INT(flag, 1);
    unsigned char *got = gpu_download_new(dx, act_bytes), *poison = malloc(rowb);
    memset(poison, 0xFF, rowb);
    CHECK(memcmp(got + bad * rowb, poison, rowb) == 0);
    const int64_t others = rows_differ(got, want_dx, n, rowb);
    CHECK_EQ_INT((int)others, 1); /* only the skipped row */
    free(got), free(poison);

    printf("rows only, mode %d, n %lld, h %d, %s/%s, %s%s%s: bitwise the full backward's (plain, training, graph)\n",
           mode, (long long)n, s->h, kjit_dtype_name(s->act), kjit_dtype_name(s->par), kjit_dtype_name(s->idx),
           s->weight ? ", weight" : "", mode == 3 && s->dh ? ", dh" : "");
    free(want_dx), free(want_dy), free(ih);
    const CUdeviceptr all[] = {x, y, dout, dh, table, weight, idx, dx_full, dy_full, dx, dy, dtab, dw, ws, part, outb, hb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) gpu_free(all[i]);
#undef V
}

int main(void)
{
    kjit_ctx *ctx = kjit_gpu_ctx_or_skip("test_rows_only", KJIT_INDEX_CHECK_OFF);
    kjit_ctx *actx = kjit_gpu_ctx_or_skip("test_rows_only", KJIT_INDEX_CHECK_ASYNC);
    cu = kjit__cu();
    ref_rng g;
    ref_rng_seed(&g, kjit_test_seed("test_rows_only"));
    CUstream stream;
    CU_CHECK(cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    const shape shapes[] = {
        {4097, 9, 5376, KJIT_BF16, KJIT_BF16, KJIT_I32, 1, 1, 0},
        {777, 9, 5376, KJIT_F16, KJIT_F32, KJIT_I64, 0, 0, 8},
        {1000, 300, 1000, KJIT_F32, KJIT_F32, KJIT_I32, 1, 1, 3},
        {300, 1, 13, KJIT_BF16, KJIT_BF16, KJIT_I64, 1, 0, 3},
        {1, 5, 4096, KJIT_BF16, KJIT_F32, KJIT_I32, 0, 1, 0},
        {64, 3, 16384, KJIT_F32, KJIT_F32, KJIT_I32, 1, 1, 0}, /* 512 threads a row: 16 warps */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
        for (int mode = 1; mode <= 3; ++mode) run_shape(ctx, actx, stream, &g, &shapes[i], mode);
    CU_CHECK(cu->StreamDestroy(stream));
    kjit_ctx_destroy(actx);
    kjit_ctx_destroy(ctx);
    return kjit_test_result("test_rows_only");
}
