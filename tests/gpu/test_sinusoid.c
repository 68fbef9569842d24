/* timestep_sinusoid on the GPU: fp64 reference, every flag, bitwise batch
 * invariance, outputs poisoned before every call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "ref.h"
#include "test_util.h"

static const kjit_dtype dtypes[] = {KJIT_F32, KJIT_BF16, KJIT_F16};
static const double tol[] = {2e-7, 4e-3, 1e-3};

static void run(kjit_ctx *ctx, CUdeviceptr t, int64_t n, int d, kjit_dtype dt, const kjit_sinusoid_opts *o,
                CUdeviceptr out, void *host)
{
    size_t bytes = (size_t)n * (size_t)d * kjit_dtype_size(dt);
    gpu_poison(out, bytes);
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, (const float *)t, n, d, (void *)out, d, dt, o, NULL), KJIT_OK);
    gpu_sync();
    gpu_download(host, out, bytes);
}

int main(void)
{
    kjit_ctx *ctx = kjit_gpu_ctx_or_skip("test_sinusoid", KJIT_INDEX_CHECK_OFF);
    ref_rng g;
    ref_rng_seed(&g, kjit_test_seed("test_sinusoid"));
    const int64_t ns[] = {1, 7, 2048, 65537};
    const int ds[] = {1, 255, 256, 320};
    const int64_t max_n = 65537, max_d = 320;
    float *t = malloc(sizeof(float) * max_n);
    double *ref = malloc(sizeof(double) * max_n * max_d), *got = malloc(sizeof(double) * max_n * max_d);
    unsigned char *host = malloc(sizeof(float) * max_n * max_d), *alone = malloc(sizeof(float) * max_d);
    CUdeviceptr dt_ = gpu_alloc(sizeof(float) * max_n), dout = gpu_alloc(sizeof(float) * max_n * max_d),
                dalone = gpu_alloc(sizeof(float) * max_d), done_t = gpu_alloc(sizeof(float));
    double worst[3] = {0, 0, 0};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ++ni) {
        const int64_t n = ns[ni];
        /* Half the draws in [0, 1000] (t), half in [0, 1] (used with scale 1000). */
        for (int64_t i = 0; i < n; ++i) t[i] = (float)(ref_rng_uniform(&g) * 1000.0);
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; ++di)
            for (int flags = 0; flags < 8; ++flags) {
                const int d = ds[di];
                kjit_sinusoid_opts o;
                kjit_sinusoid_opts_init(&o);
                o.flip_sin_to_cos = flags & 1;
                o.downscale_freq_shift = (flags & 2) ? 0.0 : 1.0;
                if (d / 2 - o.downscale_freq_shift == 0) continue;
                float *tt = t;
                float small[1];
                if (flags & 4) { /* t in [0, 1], scale 1000, max_period 1e4 -> same angles */
                    o.scale = 1000.0;
                    for (int64_t i = 0; i < n; ++i) t[i] /= 1000.0f;
                }
                gpu_upload(dt_, tt, sizeof(float) * (size_t)n);
                ref_sinusoid(t, n, d, o.flip_sin_to_cos, o.downscale_freq_shift, o.scale, o.max_period, ref);
                for (int k = 0; k < 3; ++k) {
                    run(ctx, dt_, n, d, dtypes[k], &o, dout, host);
                    host_to_double(dtypes[k], host, got, (size_t)(n * d));
                    double e = ref_rel_err(got, ref, (size_t)(n * d));
                    if (e > worst[k]) worst[k] = e;
                    if (!(e <= tol[k])) {
                        fprintf(stderr, "n=%lld d=%d flags=%d %s: rel err %g > %g\n", (long long)n, d, flags,
                                kjit_dtype_name(dtypes[k]), e, tol[k]);
                        kjit_test_failures++;
                    }
                    /* Batch invariance: some rows alone vs in the batch, bitwise. */
                    const size_t row = (size_t)d * kjit_dtype_size(dtypes[k]);
                    for (int probe = 0; probe < 4; ++probe) {
                        int64_t i = probe == 0 ? 0 : probe == 1 ? n - 1 : (int64_t)ref_rng_below(&g, (uint64_t)n);
                        small[0] = t[i];
                        gpu_upload(done_t, small, sizeof(float));
                        gpu_poison(dalone, row);
                        CHECK_STATUS(kjit_timestep_sinusoid(ctx, (const float *)done_t,
                                                            1, d, (void *)dalone, d, dtypes[k], &o, NULL), KJIT_OK);
                        gpu_sync();
                        gpu_download(alone, dalone, row);
                        if (memcmp(alone, host + (size_t)i * row, row)) {
                            fprintf(stderr, "n=%lld d=%d row %lld differs alone vs in batch\n", (long long)n, d, (long long)i);
                            kjit_test_failures++;
                        }
                    }
                }
                if (flags & 4)
                    for (int64_t i = 0; i < n; ++i) t[i] *= 1000.0f;
            }
    }
    printf("worst rel err: fp32 %.3g, bf16 %.3g, fp16 %.3g\n", worst[0], worst[1], worst[2]);
    gpu_free(dt_), gpu_free(dout), gpu_free(dalone), gpu_free(done_t);
    free(t), free(ref), free(got), free(host), free(alone);
    kjit_ctx_destroy(ctx);
    return kjit_test_result("test_sinusoid");
}
