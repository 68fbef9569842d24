/* The documented in-place forwards: norm_modulate with out given as x,
 * gated_residual with out as res, the fused op with h as res; plain and
 * training forwards, fast path (hidden 5376 bf16, its staged persistent
 * default) and scalar path (hidden 1000 fp32, rows padded to 1003), against
 * the same call with separate outputs, bit for bit. A copy of the input is
 * overwritten, so a row read after another row's write would differ. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "ref.h"
#include "test_util.h"

static const kjit_cu_api *cu;

typedef struct shape {
    int64_t n, r, ld;
    int h;
    kjit_dtype act;
} shape;

/* Rows of h elements (stride ld) that differ between a and b. */
static int64_t rows_differ(const unsigned char *a, const unsigned char *b, const shape *s)
{
    const size_t es = kjit_dtype_size(s->act);
    int64_t d = 0;
    for (int64_t i = 0; i < s->n; ++i) d += memcmp(a + (size_t)(i * s->ld) * es, b + (size_t)(i * s->ld) * es, (size_t)s->h * es) != 0;
    return d;
}

static void run(kjit_ctx *ctx, CUstream stream, ref_rng *g, const shape *s, int mode, int train)
{
    const kjit_dtype P = s->act == KJIT_F16 ? KJIT_F32 : s->act;
    const size_t es = kjit_dtype_size(s->act), bytes = (size_t)(s->n * s->ld) * es;
    const int64_t W = 6LL * s->h;
    const CUdeviceptr in = gpu_upload_normal(g, s->act, (size_t)(s->n * s->ld), 0.0, 1.0); /* x or res */
    const CUdeviceptr y = gpu_upload_normal(g, s->act, (size_t)(s->n * s->ld), 0.0, 1.0);
    const CUdeviceptr table = gpu_upload_normal(g, P, (size_t)(s->r * W), 0.0, 0.3);
    const CUdeviceptr w = gpu_upload_normal(g, P, (size_t)s->h, 1.0, 0.2);
    int32_t *ih = malloc((size_t)s->n * 4);
    for (int64_t i = 0; i < s->n; ++i) ih[i] = (int32_t)ref_rng_below(g, (uint64_t)s->r);
    const CUdeviceptr idx = gpu_alloc((size_t)s->n * 4);
    gpu_upload(idx, ih, (size_t)s->n * 4);
    const CUdeviceptr out = gpu_alloc(bytes), hb = gpu_alloc(bytes), work = gpu_alloc(bytes), out2 = gpu_alloc(bytes);
    const CUdeviceptr part[2] = {gpu_alloc(1 << 20), gpu_alloc(1 << 20)};
    /* The partitions too: a build leaves parts of its buffer unwritten. */
    gpu_poison(out, bytes), gpu_poison(hb, bytes), gpu_poison(out2, bytes);
    gpu_poison(part[0], 1 << 20), gpu_poison(part[1], 1 << 20);
    gpu_sync(); /* the uploads and poisons, before the stream's copy */
    CU_CHECK(cu->MemcpyDtoDAsync(work, in, bytes, stream));
    CU_CHECK(cu->StreamSynchronize(stream));

#define V(p) ((void *)(uintptr_t)(p))
    kjit_adaln_args a;
    memset(&a, 0, sizeof a);
    a.n = s->n, a.hidden = s->h, a.eps = 1e-6f, a.act_dtype = s->act, a.param_dtype = P;
    a.index.ptr = V(idx), a.index.dtype = KJIT_I32, a.index.rows = s->r;
    a.shift = V(table), a.scale = V(table + (size_t)s->h * kjit_dtype_size(P)),
    a.gate = V(table + (size_t)2 * s->h * kjit_dtype_size(P));
    a.shift_stride = a.scale_stride = a.gate_stride = W;
    a.weight = mode != 2 ? V(w) : NULL;
    a.x = V(in), a.res = V(in), a.y = V(y);
    a.out = V(out), a.h = V(hb);
    a.x_stride = a.res_stride = a.y_stride = a.out_stride = a.h_stride = s->ld;
    const kjit_adaln_op op = (kjit_adaln_op)mode;
    size_t pb = 0;
    CHECK_STATUS(kjit_adaln_partition_bytes(op, s->n, s->h, s->r, &pb), KJIT_OK);
    if (pb > (1 << 20)) { /* the partition buffers above are 1 MiB: nothing would keep the kernels inside them */
        fprintf(stderr, "mode %d: partition of %zu bytes past the test's 1 MiB buffers\n", mode, pb);
        kjit_test_failures++;
        pb = 1 << 20;
    }
    typedef int (*fwd_fn)(kjit_ctx *, const kjit_adaln_args *, CUstream);
    const fwd_fn fwd = mode == 1 ? kjit_norm_modulate_fwd : mode == 2 ? kjit_gated_residual_fwd
                                                                       : kjit_gated_residual_norm_modulate_fwd;
#define CALL(args, k) (train ? kjit_adaln_train_fwd(ctx, op, (args), V(part[k]), pb, stream) : fwd(ctx, (args), stream))
    CHECK_STATUS(CALL(&a, 0), KJIT_OK);
    /* In place: the copy of x (res) is the output (h for the fused op). */
    kjit_adaln_args b = a;
    b.x = b.res = V(work);
    if (mode == 3) b.h = V(work), b.out = V(out2);
    else b.out = V(work);
    CHECK_STATUS(CALL(&b, 1), KJIT_OK);
#undef CALL
    CU_CHECK(cu->StreamSynchronize(stream));
    unsigned char *want = gpu_download_new(mode == 3 ? hb : out, bytes), *got = gpu_download_new(work, bytes);
    int64_t d = rows_differ(want, got, s);
    if (mode == 3) {
        unsigned char *wo = gpu_download_new(out, bytes), *go = gpu_download_new(out2, bytes);
        d += rows_differ(wo, go, s);
        free(wo), free(go);
    }
    /* Not two copies of the poison or of the input. */
    unsigned char *orig = gpu_download_new(in, bytes);
    const int64_t same_as_input = rows_differ(orig, got, s);
    if (d || same_as_input < s->n - 1) {
        fprintf(stderr, "%s%s in place, h %d %s: %lld rows differ from the out-of-place call, %lld of %lld rows "
                        "changed\n", train ? "training " : "", mode == 1 ? "norm_modulate" : mode == 2 ? "gated_residual" : "fused",
                s->h, kjit_dtype_name(s->act), (long long)d, (long long)same_as_input, (long long)s->n);
        kjit_test_failures++;
    }
    if (train) {
        /* Both partitions are the same: the in-place forward built its own. */
        unsigned char *p0 = gpu_download_new(part[0], pb), *p1 = gpu_download_new(part[1], pb);
        CHECK(memcmp(p0, p1, pb) == 0);
        free(p0), free(p1);
    }
    printf("in place: %s%s, h %d %s, n %lld: the out-of-place bits\n", train ? "training " : "",
           mode == 1 ? "norm_modulate (out = x)" : mode == 2 ? "gated_residual (out = res)" : "fused (h = res)", s->h,
           kjit_dtype_name(s->act), (long long)s->n);
    free(want), free(got), free(orig), free(ih);
    const CUdeviceptr all[] = {in, y, table, w, idx, out, hb, work, out2, part[0], part[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) gpu_free(all[i]);
#undef V
}

int main(void)
{
    kjit_ctx *ctx = kjit_gpu_ctx_or_skip("test_inplace", KJIT_INDEX_CHECK_OFF);
    cu = kjit__cu();
    ref_rng g;
    ref_rng_seed(&g, kjit_test_seed("test_inplace"));
    CUstream stream;
    CU_CHECK(cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    const shape shapes[] = {
        {4097, 9, 5376, 5376, KJIT_BF16},
        {777, 5, 1003, 1000, KJIT_F32},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
        for (int mode = 1; mode <= 3; ++mode)
            for (int train = 0; train < 2; ++train) run(ctx, stream, &g, &shapes[i], mode, train);
    CU_CHECK(cu->StreamDestroy(stream));
    kjit_ctx_destroy(ctx);
    return kjit_test_result("test_inplace");
}
