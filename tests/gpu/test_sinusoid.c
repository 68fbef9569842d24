/* timestep_sinusoid on the GPU: fp64 reference (every output within half a
 * unit in its last place: rounded once), every flag, bitwise batch
 * invariance (probe rows of every case; every row, a batch-size sweep and a
 * 131072-row split at the model's settings), outputs poisoned before every
 * call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "ref.h"
#include "test_util.h"

static const kjit_dtype dtypes[] = {KJIT_F32, KJIT_BF16, KJIT_F16};
static const double tol[] = {2e-7, 4e-3, 1e-3};

/* Significant bits and least exponent of each output dtype's grid. */
static const int prec[] = {24, 8, 11}, emin[] = {-126, -126, -14};

/* Outputs farther than half a unit in the last place (at the smaller of
 * the two magnitudes' spacing) from the fp64 reference: a single rounding
 * never is (the 1e-12 of slack covers libm's and CUDA's fp64 exp and
 * sin/cos differing in their last bits: outputs of an angle up to 1000
 * move by up to ~5e-13);
 * an fp32 rounding before a bf16 or fp16 one can be, by up to half an fp32
 * unit (~3e-8 at 0.5). */
static int64_t over_half_ulp(const double *got, const double *ref, size_t n, int k)
{
    int64_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
        const double m = fmin(fabs(got[i]), fabs(ref[i]));
        int e = emin[k];
        if (m > 0) {
            frexp(m, &e);
            e = e - 1 < emin[k] ? emin[k] : e - 1;
        }
        const double half_ulp = ldexp(1.0, e - prec[k]);
        bad += fabs(got[i] - ref[i]) > half_ulp + 1e-12;
    }
    return bad;
}

static void run(kjit_ctx *ctx, CUdeviceptr t, int64_t n, int d, kjit_dtype dt, const kjit_sinusoid_opts *o,
                CUdeviceptr out, void *host)
{
    size_t bytes = (size_t)n * (size_t)d * kjit_dtype_size(dt);
    gpu_poison(out, bytes);
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, (const float *)t, n, d, (void *)out, d, dt, o, NULL), KJIT_OK);
    gpu_sync();
    gpu_download(host, out, bytes);
}

/* Bitwise batch invariance at MiniMax-H3's settings (D = 256, flip, shift
 * 0), each output dtype: every row alone vs in its batch for batches of 64,
 * 257 and 2048; fixed probe rows over a sweep of batch sizes; a 131072-row
 * batch vs its split into sub-batches of 1, 7, 4097, 32768 and 65536 rows
 * written in place. Outputs poisoned before every call. */
static void check_invariance(kjit_ctx *ctx, ref_rng *g)
{
    const int64_t n = 131072;
    const int d = 256;
    kjit_sinusoid_opts o;
    kjit_sinusoid_opts_init(&o);
    o.flip_sin_to_cos = 1;
    o.downscale_freq_shift = 0.0;
    float *t = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; ++i) t[i] = (float)(ref_rng_uniform(g) * 1000.0);
    CUdeviceptr dt_ = gpu_alloc(sizeof(float) * (size_t)n);
    gpu_upload(dt_, t, sizeof(float) * (size_t)n);
    int compared = 0, differ = 0;
    for (int k = 0; k < 3; ++k) {
        const size_t row = (size_t)d * kjit_dtype_size(dtypes[k]), bytes = row * (size_t)n;
        unsigned char *full = malloc(bytes), *part = malloc(bytes), *one = malloc(row);
        CUdeviceptr dfull = gpu_alloc(bytes), dpart = gpu_alloc(bytes), done = gpu_alloc(row);
#define SIN(tp, rows, outp) kjit_timestep_sinusoid(ctx, (const float *)(uintptr_t)(tp), rows, d, (void *)(uintptr_t)(outp), \
                                                   d, dtypes[k], &o, NULL)
        gpu_poison(dfull, bytes);
        CHECK_STATUS(SIN(dt_, n, dfull), KJIT_OK);
        gpu_sync();
        gpu_download(full, dfull, bytes);
        /* The split, each piece written where it sits in the full batch. */
        static const int64_t pieces[] = {1, 7, 4097, 32768, 65536};
        gpu_poison(dpart, bytes);
        for (int64_t at = 0, i = 0; at < n; i = (i + 1) % 5) {
            const int64_t len = pieces[i] < n - at ? pieces[i] : n - at;
            CHECK_STATUS(SIN(dt_ + sizeof(float) * (size_t)at, len, dpart + row * (size_t)at), KJIT_OK);
            at += len;
        }
        gpu_sync();
        gpu_download(part, dpart, bytes);
        compared++;
        if (memcmp(full, part, bytes)) {
            fprintf(stderr, "%s: 131072 rows vs its sub-batches differ\n", kjit_dtype_name(dtypes[k]));
            differ++;
        }
        /* Every row alone vs in batches of 64, 257, 2048 (prefixes). */
        static const int64_t batches[] = {64, 257, 2048};
        for (int bi = 0; bi < 3; ++bi) {
            gpu_poison(dpart, row * (size_t)batches[bi]);
            CHECK_STATUS(SIN(dt_, batches[bi], dpart), KJIT_OK);
            gpu_sync();
            gpu_download(part, dpart, row * (size_t)batches[bi]);
            for (int64_t i = 0; i < batches[bi]; ++i) {
                gpu_poison(done, row);
                CHECK_STATUS(SIN(dt_ + sizeof(float) * (size_t)i, 1, done), KJIT_OK);
                gpu_sync();
                gpu_download(one, done, row);
                compared++;
                if (memcmp(one, part + (size_t)i * row, row) && differ++ < 5)
                    fprintf(stderr, "%s: row %lld alone differs from batch %lld\n", kjit_dtype_name(dtypes[k]),
                            (long long)i, (long long)batches[bi]);
            }
        }
        /* Probe rows over a sweep of batch sizes, against the full batch. */
        static const int64_t sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129,
                                        255, 256, 257, 511, 512, 513, 1023, 1024, 1025, 2047, 2048};
        static const int64_t probes[] = {0, 259, 515, 771, 1027, 1283, 1539, 2047};
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; ++si) {
            gpu_poison(dpart, row * 2048);
            CHECK_STATUS(SIN(dt_, sizes[si], dpart), KJIT_OK);
            gpu_sync();
            gpu_download(part, dpart, row * 2048);
            for (size_t pi = 0; pi < sizeof probes / sizeof probes[0]; ++pi) {
                if (probes[pi] >= sizes[si]) continue;
                compared++;
                if (memcmp(part + (size_t)probes[pi] * row, full + (size_t)probes[pi] * row, row) && differ++ < 5)
                    fprintf(stderr, "%s: probe row %lld differs at batch size %lld\n", kjit_dtype_name(dtypes[k]),
                            (long long)probes[pi], (long long)sizes[si]);
            }
        }
#undef SIN
        gpu_free(dfull), gpu_free(dpart), gpu_free(done);
        free(full), free(part), free(one);
    }
    printf("batch invariance (D = 256, flip, shift 0): %d comparisons, %d differ\n", compared, differ);
    if (differ) kjit_test_failures++;
    gpu_free(dt_);
    free(t);
}

/* Other max_period values (the kernel must not assume diffusers' 10000)
 * and a padded output row: fp64 reference within half a unit in the last
 * place, and the pad between rows never written. */
static void check_period_stride(kjit_ctx *ctx, ref_rng *g)
{
    const int64_t n = 1000;
    const int d = 320, ld = d + 13;
    static const double periods[] = {100.0, 1e5, 3.5};
    float *t = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; ++i) t[i] = (float)(ref_rng_uniform(g) * 1000.0);
    double *ref = malloc(sizeof(double) * (size_t)(n * d)), *got = malloc(sizeof(double) * (size_t)(n * d));
    unsigned char *host = malloc(sizeof(float) * (size_t)(n * ld));
    CUdeviceptr dt_ = gpu_alloc(sizeof(float) * (size_t)n), dout = gpu_alloc(sizeof(float) * (size_t)(n * ld));
    gpu_upload(dt_, t, sizeof(float) * (size_t)n);
    int cases = 0;
    for (size_t pi = 0; pi < sizeof periods / sizeof periods[0]; ++pi)
        for (int k = 0; k < 3; ++k) {
            kjit_sinusoid_opts o;
            kjit_sinusoid_opts_init(&o);
            o.max_period = periods[pi];
            o.flip_sin_to_cos = (int)(pi & 1);
            const size_t es = kjit_dtype_size(dtypes[k]), bytes = es * (size_t)(n * ld);
            gpu_poison(dout, bytes);
            CHECK_STATUS(kjit_timestep_sinusoid(ctx, (const float *)(uintptr_t)dt_, n, d, (void *)(uintptr_t)dout, ld,
                                                dtypes[k], &o, NULL),
                         KJIT_OK);
            gpu_sync();
            gpu_download(host, dout, bytes);
            int pad_ok = 1;
            unsigned char *dense = malloc(es * (size_t)(n * d));
            for (int64_t i = 0; i < n; ++i) {
                memcpy(dense + es * (size_t)(i * d), host + es * (size_t)(i * ld), es * (size_t)d);
                for (size_t b = es * (size_t)d; b < es * (size_t)ld; ++b) pad_ok &= host[es * (size_t)(i * ld) + b] == 0xFF;
            }
            host_to_double(dtypes[k], dense, got, (size_t)(n * d));
            free(dense);
            ref_sinusoid(t, n, d, o.flip_sin_to_cos, o.downscale_freq_shift, o.scale, o.max_period, ref);
            const double e = ref_rel_err(got, ref, (size_t)(n * d));
            const int64_t far = over_half_ulp(got, ref, (size_t)(n * d), k);
            if (!(e <= tol[k]) || far || !pad_ok) {
                fprintf(stderr, "max_period %g %s, out_stride %d: rel err %g, %lld over half an ulp, pad %s\n",
                        periods[pi], kjit_dtype_name(dtypes[k]), ld, e, (long long)far, pad_ok ? "kept" : "WRITTEN");
                kjit_test_failures++;
            }
            cases++;
        }
    printf("max_period 100, 1e5 and 3.5 with a padded output row: %d cases against fp64\n", cases);
    gpu_free(dt_), gpu_free(dout);
    free(t), free(ref), free(got), free(host);
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
                    const int64_t far = over_half_ulp(got, ref, (size_t)(n * d), k);
                    if (far) {
                        fprintf(stderr, "n=%lld d=%d flags=%d %s: %lld outputs over half a unit in the last place "
                                "from the fp64 value (rounded twice?)\n", (long long)n, d, flags,
                                kjit_dtype_name(dtypes[k]), (long long)far);
                        kjit_test_failures++;
                    }
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
    check_invariance(ctx, &g);
    check_period_stride(ctx, &g);
    gpu_free(dt_), gpu_free(dout), gpu_free(dalone), gpu_free(done_t);
    free(t), free(ref), free(got), free(host), free(alone);
    kjit_ctx_destroy(ctx);
    return kjit_test_result("test_sinusoid");
}
