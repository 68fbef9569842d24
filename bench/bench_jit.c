/* The JIT path's costs: cold NVRTC compile per specialization, disk hit
 * (read + verify + copy), memory hit; on a GPU, timestep_sinusoid wall time
 * per call including a stream sync. Prints one line per number. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/cache.h"
#include "core/ctx.h"
#include "gpu_util.h"
#include "jit/compile.h"
#include "jit/nvrtc_api.h"
#include "jit/templates.h"
#include "test_util.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

typedef struct build_arg {
    const char *expr;
    int sm;
} build_arg;

static int build(void *arg, char **lowered, void **image, size_t *len)
{
    build_arg *b = arg;
    return kjit__jit_compile("timestep_sinusoid.cuh", b->expr, b->sm, lowered, image, len);
}

static kjit_cache_key key_for(const char *expr, int sm)
{
    const char *bundle;
    size_t blen;
    kjit__templates_bundle(&bundle, &blen);
    const kjit_nvrtc_api *nv = kjit__nvrtc();
    char buf[64], arch[16];
    const char *opts[KJIT_MAX_OPTIONS];
    int n = kjit__jit_options(sm, buf, opts);
    snprintf(arch, sizeof arch, "sm_%d", sm);
    kjit_cache_fields f = {bundle, blen, expr, opts, n, arch, nv->major, nv->minor, KJIT_CACHE_FORMAT};
    return kjit__cache_key(&f);
}

static void bench_host(void)
{
    if (!kjit__nvrtc()) {
        printf("NVRTC missing: %s\n", kjit_last_error());
        return;
    }
    const int sms[] = {90, 100};
    for (int a = 0; a < 2; ++a) {
        double t[7];
        for (int i = 0; i < 7; ++i) {
            char *low;
            void *img;
            size_t len;
            double t0 = now_s();
            if (kjit__jit_compile("timestep_sinusoid.cuh", "kjit_sinusoid<kjit::bf16>", sms[a], &low, &img, &len)) {
                printf("compile failed: %s\n", kjit_last_error());
                return;
            }
            t[i] = now_s() - t0;
            free(low);
            free(img);
        }
        const double first = t[0];
        printf("cold compile   sm_%-3d  %8.1f ms  (median of 7, kjit_sinusoid<bf16>; the first %.1f ms%s)\n", sms[a],
               median(t, 7) * 1e3, first * 1e3, a == 0 ? ", with NVRTC's own start-up in the process" : "");
    }

    char *dir = kjit_test_tmpdir();
    build_arg b = {"kjit_sinusoid<kjit::bf16>", 90};
    kjit_cache_key key = key_for(b.expr, 90);
    kjit_cache *c;
    kjit_cache_blob blob;
    kjit_cache_origin origin;
    /* Every cache call checked: a failed one would time an error path. */
#define CACHE_TRY(call)                                                                       \
    do {                                                                                      \
        if (call) {                                                                           \
            fprintf(stderr, "bench_jit: %s failed: %s\n", #call, kjit_last_error());          \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)
    CACHE_TRY(kjit__cache_open(&c, dir, 0));
    CACHE_TRY(kjit__cache_get(c, key, "timestep_sinusoid", "sm_90", build, &b, &blob, &origin));
    kjit__cache_close(c);
    double disk[51];
    int ok = 1;
    for (int i = 0; i < 51; ++i) {
        CACHE_TRY(kjit__cache_open(&c, dir, 0));
        double t0 = now_s();
        CACHE_TRY(kjit__cache_get(c, key, "timestep_sinusoid", "sm_90", build, &b, &blob, &origin));
        disk[i] = now_s() - t0;
        ok &= origin == KJIT_FROM_DISK;
        kjit__cache_close(c);
    }
    printf("disk hit                %8.3f ms  (median of 51: open, read, verify checksum; %s)\n",
           median(disk, 51) * 1e3, ok ? "all from disk" : "NOT all from disk");

    CACHE_TRY(kjit__cache_open(&c, dir, 0));
    CACHE_TRY(kjit__cache_get(c, key, "timestep_sinusoid", "sm_90", build, &b, &blob, &origin));
    const int iters = 1000000;
    int bad = 0;
    double t0 = now_s();
    for (int i = 0; i < iters; ++i) {
        bad |= kjit__cache_get(c, key, "timestep_sinusoid", "sm_90", build, &b, &blob, &origin);
        bad |= origin != KJIT_FROM_MEMORY;
    }
    double mem = (now_s() - t0) / iters;
    printf("memory hit              %8.1f ns  (mean of %d, precomputed key; %s)\n", mem * 1e9, iters,
           bad ? "NOT all from memory" : "all from memory");
#undef CACHE_TRY
    kjit__cache_close(c);
    kjit_test_rmtree(dir);
    free(dir);
}

static void bench_gpu(void)
{
    kjit_ctx_options o;
    kjit_ctx_options_init(&o);
    kjit_ctx *ctx = NULL;
    if (kjit_ctx_create(&ctx, &o) || !kjit_ctx_has_device(ctx)) {
        printf("GPU: none (%s)\n", "sinusoid timing skipped");
        kjit_ctx_destroy(ctx);
        return;
    }
    const kjit_cu_api *cu = kjit__cu();
    CU_CHECK(cu->CtxSetCurrent(ctx->cuctx));
    CUstream s;
    CU_CHECK(cu->StreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const int ns[] = {64, 2048, 65536};
    kjit_sinusoid_opts so;
    kjit_sinusoid_opts_init(&so);
    so.flip_sin_to_cos = 1;
    so.downscale_freq_shift = 0;
    for (int k = 0; k < 3; ++k) {
        int n = ns[k], d = 256;
        CUdeviceptr t = gpu_alloc(sizeof(float) * (size_t)n), out = gpu_alloc(sizeof(float) * (size_t)n * d);
        float *ht = malloc(sizeof(float) * (size_t)n);
        for (int i = 0; i < n; ++i) ht[i] = (float)(i % 1000) + 0.5f;
        gpu_upload(t, ht, sizeof(float) * (size_t)n);
        int rc = 0;
        for (int i = 0; i < 20; ++i)
            rc |= kjit_timestep_sinusoid(ctx, (const float *)t, n, d, (void *)out, d, KJIT_F32, &so, s);
        CU_CHECK(cu->StreamSynchronize(s));
        double v[301];
        for (int i = 0; i < 301; ++i) {
            double t0 = now_s();
            rc |= kjit_timestep_sinusoid(ctx, (const float *)t, n, d, (void *)out, d, KJIT_F32, &so, s);
            CU_CHECK(cu->StreamSynchronize(s));
            v[i] = now_s() - t0;
        }
        if (rc) {
            fprintf(stderr, "bench_jit: kjit_timestep_sinusoid failed: %s\n", kjit_last_error());
            exit(1);
        }
        printf("sinusoid n=%-6d d=256 fp32  %7.2f us per call incl. stream sync (median of 301)\n", n,
               median(v, 301) * 1e6);
        gpu_free(t);
        gpu_free(out);
        free(ht);
    }
    /* The launch + sync floor on this machine, for comparison. */
    double v[301];
    CUdeviceptr one = gpu_alloc(4);
    for (int i = 0; i < 301; ++i) {
        double t0 = now_s();
        cu->MemsetD32Async(one, 0, 1, s);
        cu->StreamSynchronize(s);
        v[i] = now_s() - t0;
    }
    printf("4-byte memset + sync floor        %7.2f us\n", median(v, 301) * 1e6);
    gpu_free(one);
    cu->StreamDestroy(s);
    kjit_ctx_destroy(ctx);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    bench_host();
    bench_gpu();
    return 0;
}
