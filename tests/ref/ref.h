/* fp64 reference implementations of every kjit op and gradient (SPEC.md),
 * written independently of the kernels, for the GPU tests to check against.
 *
 * Sources (built as the static library kjit_ref from tests/ref/ref_*.c):
 *   ref_util.c ref_sinusoid.c ref_gather.c ref_norm_modulate.c
 *   ref_gated_residual.c ref_fused.c
 * Self-test (not in the library): test_ref.c, run with
 *   gcc -std=c11 -O2 -Wall -Wextra -Werror ref_*.c test_ref.c -lm -o /tmp/test_ref && /tmp/test_ref
 *
 * Conventions. Every array is double (the caller converts kernel inputs),
 * row-major; every 2-D argument is a pair (ptr, ld) where ld is its row
 * stride in elements, so strided views such as the chunk(6) slices of one
 * (R, 6*H) table are passed without a copy. n = rows, hdim = hidden size,
 * r = table rows, idx[n] = table row of each row. Every idx[i] must lie in
 * [0, r): the reference aborts with a message otherwise. A weight w may be
 * NULL (all ones); the output dw may be NULL (not computed). Only the
 * (rows, hdim) region of an output is written. Parameter gradients
 * (dtable, dshift, dscale, dgate, dw) cover all r rows: rows that no idx
 * selects are 0. Sums use compensated (Neumaier) summation in a fixed order,
 * so the results are close to correctly rounded fp64. A failed allocation
 * aborts. */
#ifndef KJIT_REF_H
#define KJIT_REF_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Neumaier compensated sum: start from {0, 0}, add with ref_acc_add, read
 * with ref_acc_value. Inputs must be finite. */
typedef struct
{
    double sum, comp;
} ref_acc;

static inline void ref_acc_add(ref_acc *a, double v)
{
    double t = a->sum + v;
    a->comp += fabs(a->sum) >= fabs(v) ? (a->sum - t) + v : (v - t) + a->sum;
    a->sum = t;
}

static inline double ref_acc_value(const ref_acc *a)
{
    return a->sum + a->comp;
}

/* Zeroed array of count elements of size bytes; aborts on overflow or
 * failure, never returns NULL (count 0 gives a valid pointer). */
void *ref_alloc(size_t count, size_t size);

/* idx[i] after checking 0 <= idx[i] < r; aborts with a message otherwise. */
int64_t ref_checked_index(const int64_t *idx, int64_t i, int64_t r);

/* out[q] = sum of in[i] over the rows i with idx[i] == q, for q in [0, r),
 * summed in increasing i; rows q that no i selects get 0. idx NULL sends
 * every row to q = 0 (a column sum over all n rows; needs r >= 1). */
void ref_index_sum(int64_t n, int hdim, int64_t r, const double *in, int64_t ldin,
                   const int64_t *idx, double *out, int64_t ldout);

/* timestep_sinusoid: out[n, d] (dense, row stride d). half = d / 2,
 * f_j = exp(-log(max_period) * j / (half - shift)), a = scale * t[i] * f_j
 * in fp64; columns [sin(a) | cos(a)], or [cos(a) | sin(a)] when flip;
 * an odd d gets a zero last column (d == 1: the only column is 0).
 * Requires half - shift != 0 when half > 0. */
void ref_sinusoid(const float *t, int64_t n, int d, int flip, double shift, double scale,
                  double max_period, double *out);

/* adaln_row_gather forward, k tables (1..8) of (r, hdim):
 * out[q][i] = table[q][idx[i]] for q < k, i < n. */
void ref_adaln_row_gather_fwd(int64_t n, int hdim, int64_t r, int k,
                              const double *const table[], const int64_t ldtable[],
                              const int64_t *idx, double *const out[], const int64_t ldout[]);

/* adaln_row_gather backward: dtable[q][s] = sum over i with idx[i] == s of
 * dout[q][i], for every s < r (0 where none). */
void ref_adaln_row_gather_bwd(int64_t n, int hdim, int64_t r, int k,
                              const double *const dout[], const int64_t lddout[],
                              const int64_t *idx, double *const dtable[],
                              const int64_t lddtable[]);

/* norm_modulate forward: rstd = 1 / sqrt(mean_j(x^2) + eps),
 * y = x * rstd * w * (1 + scale[idx]) + shift[idx]. */
void ref_norm_modulate_fwd(int64_t n, int hdim, int64_t r, const double *x, int64_t ldx,
                           const double *w, const double *shift, int64_t ldshift,
                           const double *scale, int64_t ldscale, const int64_t *idx, double eps,
                           double *y, int64_t ldy);

/* norm_modulate backward from dy, with xhat = x * rstd, m = w * (1 + scale[idx]):
 * dshift[s] = sum_{idx=s} dy, dscale[s] = sum_{idx=s} dy * xhat * w,
 * dw = sum_i dy * xhat * (1 + scale[idx]) (also when w is NULL), g = dy * m,
 * dx = rstd * (g - xhat * mean_j(g * xhat)). */
void ref_norm_modulate_bwd(int64_t n, int hdim, int64_t r, const double *dy, int64_t lddy,
                           const double *x, int64_t ldx, const double *w, const double *scale,
                           int64_t ldscale, const int64_t *idx, double eps, double *dx,
                           int64_t lddx, double *dw, double *dshift, int64_t lddshift,
                           double *dscale, int64_t lddscale);

/* gated_residual forward: out = res + gate[idx] * y. */
void ref_gated_residual_fwd(int64_t n, int hdim, int64_t r, const double *res, int64_t ldres,
                            const double *y, int64_t ldy, const double *gate, int64_t ldgate,
                            const int64_t *idx, double *out, int64_t ldout);

/* gated_residual backward: dres = dout, dy = dout * gate[idx],
 * dgate[s] = sum_{idx=s} dout * y. */
void ref_gated_residual_bwd(int64_t n, int hdim, int64_t r, const double *dout, int64_t lddout,
                            const double *y, int64_t ldy, const double *gate, int64_t ldgate,
                            const int64_t *idx, double *dres, int64_t lddres, double *dy,
                            int64_t lddy, double *dgate, int64_t lddgate);

/* gated_residual_norm_modulate forward: h = res + gate[idx] * y, then
 * out = norm_modulate(h) with w, shift, scale, eps; writes both h and out. */
void ref_gated_residual_norm_modulate_fwd(
    int64_t n, int hdim, int64_t r, const double *res, int64_t ldres, const double *y,
    int64_t ldy, const double *gate, int64_t ldgate, const double *w, const double *shift,
    int64_t ldshift, const double *scale, int64_t ldscale, const int64_t *idx, double eps,
    double *h, int64_t ldh, double *out, int64_t ldout);

/* gated_residual_norm_modulate backward from dh (the residual stream's own
 * gradient) and dout: g = dh + (norm_modulate dx of h with dout),
 * dres = g, dy = g * gate[idx], dgate[s] = sum_{idx=s} g * y, and dw,
 * dshift, dscale as norm_modulate's backward on h with dout. h is
 * recomputed in fp64 from res, y and gate. */
void ref_gated_residual_norm_modulate_bwd(
    int64_t n, int hdim, int64_t r, const double *dh, int64_t lddh, const double *dout,
    int64_t lddout, const double *res, int64_t ldres, const double *y, int64_t ldy,
    const double *gate, int64_t ldgate, const double *w, const double *scale, int64_t ldscale,
    const int64_t *idx, double eps, double *dres, int64_t lddres, double *dy, int64_t lddy,
    double *dgate, int64_t lddgate, double *dw, double *dshift, int64_t lddshift,
    double *dscale, int64_t lddscale);

/* bf16 <-> fp32 on bit patterns. To bf16: round to nearest even, overflow
 * to +-inf, NaN stays NaN (quieted, sign kept). To fp32: exact. */
uint16_t ref_float_to_bf16(float f);
float ref_bf16_to_float(uint16_t b);

/* fp16 <-> fp32 on bit patterns. To fp16: round to nearest even, including
 * into and out of the subnormal range; |f| >= 65520 gives +-inf; NaN stays
 * NaN (quieted, sign and top payload bits kept). To fp32: exact, subnormals
 * included. */
uint16_t ref_float_to_fp16(float f);
float ref_fp16_to_float(uint16_t h);

/* ||out - ref||_2 / ||ref||_2 over n elements; INFINITY if any out is NaN or
 * infinite; ||out||_2 when ||ref||_2 == 0. ref must be finite. */
double ref_rel_err(const double *out, const double *ref, size_t n);

/* max_i |out[i] - ref[i]|; INFINITY if any out is NaN or infinite. */
double ref_max_abs_err(const double *out, const double *ref, size_t n);

/* Deterministic RNG: xoshiro256** seeded through splitmix64. The same seed
 * gives the same stream on every platform. */
typedef struct
{
    uint64_t s[4];
} ref_rng;

/* Seeds g from any 64-bit value (0 included). */
void ref_rng_seed(ref_rng *g, uint64_t seed);
/* Next raw 64-bit draw. */
uint64_t ref_rng_u64(ref_rng *g);
/* Uniform in [0, bound), without modulo bias; bound > 0. */
uint64_t ref_rng_below(ref_rng *g, uint64_t bound);
/* Uniform double in [0, 1) with 53 random bits. */
double ref_rng_uniform(ref_rng *g);
/* Standard normal draw (Box-Muller, one draw per two uniforms). */
double ref_rng_normal(ref_rng *g);
/* a[i] = mean + stddev * normal draw, for i < n. */
void ref_fill_normal(ref_rng *g, double *a, size_t n, double mean, double stddev);

#endif
