#include "gpu_util.h"

#include "core/ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

/* The driver table; kjit_gpu_ctx_or_skip or the first helper call loads it. */
static const kjit_cu_api *cu;

static void need_cu(void)
{
    if (!cu && !(cu = kjit__cu())) {
        fprintf(stderr, "no CUDA driver: %s\n", kjit_last_error());
        exit(1);
    }
}

void kjit_gpu_skip(const char *test, const char *why)
{
    const char *req = getenv("KJIT_REQUIRE_GPU");
    if (req && *req && strcmp(req, "0") != 0) {
        fprintf(stderr, "%s: %s, and KJIT_REQUIRE_GPU is set: failed\n", test, why);
        exit(1);
    }
    printf("%s: %s: skipped\n", test, why);
    exit(77);
}

kjit_ctx *kjit_gpu_ctx_or_skip(const char *test, kjit_index_check check)
{
    kjit_ctx_options o;
    kjit_ctx_options_init(&o);
    o.index_check = check;
    kjit_ctx *ctx = NULL;
    if (kjit_ctx_create(&ctx, &o)) {
        fprintf(stderr, "%s: kjit_ctx_create: %s\n", test, kjit_last_error());
        exit(1);
    }
    if (!kjit_ctx_has_device(ctx)) {
        kjit_ctx_destroy(ctx);
        kjit_gpu_skip(test, "no CUDA driver or GPU");
    }
    cu = kjit__cu();
    CU_CHECK(cu->CtxSetCurrent(ctx->cuctx));
    return ctx;
}

CUdeviceptr gpu_alloc(size_t bytes)
{
    need_cu();
    CUdeviceptr p = 0;
    CU_CHECK(cu->MemAlloc(&p, bytes ? bytes : 16));
    return p;
}
void gpu_free(CUdeviceptr p)
{
    need_cu();
    if (p) cu->MemFree(p);
}
void gpu_upload(CUdeviceptr dst, const void *src, size_t bytes)
{
    need_cu();
    CU_CHECK(cu->MemcpyHtoD(dst, src, bytes));
}
void gpu_download(void *dst, CUdeviceptr src, size_t bytes)
{
    need_cu();
    CU_CHECK(cu->MemcpyDtoH(dst, src, bytes));
}
void gpu_poison(CUdeviceptr p, size_t bytes)
{
    need_cu();
    CU_CHECK(cu->MemsetD8(p, 0xFF, bytes));
}
void gpu_sync(void)
{
    need_cu();
    CU_CHECK(cu->CtxSynchronize());
}

void host_from_double(kjit_dtype dt, const double *in, void *out, size_t n)
{
    for (size_t i = 0; i < n; ++i) switch (dt) {
        case KJIT_F32: ((float *)out)[i] = (float)in[i]; break;
        case KJIT_BF16: ((uint16_t *)out)[i] = ref_float_to_bf16((float)in[i]); break;
        case KJIT_F16: ((uint16_t *)out)[i] = ref_float_to_fp16((float)in[i]); break;
        case KJIT_I32: ((int32_t *)out)[i] = (int32_t)in[i]; break;
        case KJIT_I64: ((int64_t *)out)[i] = (int64_t)in[i]; break;
        }
}

void host_to_double(kjit_dtype dt, const void *in, double *out, size_t n)
{
    for (size_t i = 0; i < n; ++i) switch (dt) {
        case KJIT_F32: out[i] = ((const float *)in)[i]; break;
        case KJIT_BF16: out[i] = ref_bf16_to_float(((const uint16_t *)in)[i]); break;
        case KJIT_F16: out[i] = ref_fp16_to_float(((const uint16_t *)in)[i]); break;
        case KJIT_I32: out[i] = ((const int32_t *)in)[i]; break;
        case KJIT_I64: out[i] = (double)((const int64_t *)in)[i]; break;
        }
}

CUdeviceptr gpu_upload_normal(ref_rng *g, kjit_dtype dt, size_t n, double mean, double sd)
{
    double *d = malloc(n * sizeof *d);
    void *h = malloc(n * kjit_dtype_size(dt));
    if (!d || !h) {
        fprintf(stderr, "gpu_upload_normal: out of host memory\n");
        exit(1);
    }
    ref_fill_normal(g, d, n, mean, sd);
    host_from_double(dt, d, h, n);
    const CUdeviceptr p = gpu_alloc(n * kjit_dtype_size(dt));
    gpu_upload(p, h, n * kjit_dtype_size(dt));
    free(d), free(h);
    return p;
}

void *gpu_download_new(CUdeviceptr src, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    if (!h) {
        fprintf(stderr, "gpu_download_new: out of host memory\n");
        exit(1);
    }
    gpu_download(h, src, bytes);
    return h;
}
