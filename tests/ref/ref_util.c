/* Shared helpers of the fp64 references: allocation, index checks, indexed
 * row sums, dtype conversions, error metrics and a seedable RNG. */
#include "ref.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *ref_alloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "kjit_ref: cannot allocate %zu x %zu bytes\n", count, size);
        abort();
    }
    return p;
}

int64_t ref_checked_index(const int64_t *idx, int64_t i, int64_t r)
{
    if (idx[i] < 0 || idx[i] >= r) {
        fprintf(stderr, "kjit_ref: idx[%" PRId64 "] = %" PRId64 " outside [0, %" PRId64 ")\n",
                i, idx[i], r);
        abort();
    }
    return idx[i];
}

/* Rows are bucketed by index (counting sort, stable), then each bucket is
 * summed column by column in increasing row order. */
void ref_index_sum(int64_t n, int hdim, int64_t r, const double *in, int64_t ldin,
                   const int64_t *idx, double *out, int64_t ldout)
{
    int64_t *start = ref_alloc((size_t)r + 1, sizeof *start);
    int64_t *rows = ref_alloc((size_t)n, sizeof *rows);
    ref_acc *acc = ref_alloc((size_t)hdim, sizeof *acc);
    for (int64_t i = 0; i < n; i++)
        start[(idx ? ref_checked_index(idx, i, r) : 0) + 1]++;
    for (int64_t q = 0; q < r; q++)
        start[q + 1] += start[q];
    for (int64_t i = 0; i < n; i++)
        rows[start[idx ? idx[i] : 0]++] = i;
    for (int64_t q = 0, b = 0; q < r; q++) {
        memset(acc, 0, (size_t)hdim * sizeof *acc);
        for (; b < start[q]; b++)
            for (int j = 0; j < hdim; j++)
                ref_acc_add(&acc[j], in[rows[b] * ldin + j]);
        for (int j = 0; j < hdim; j++)
            out[q * ldout + j] = ref_acc_value(&acc[j]);
    }
    free(acc);
    free(rows);
    free(start);
}

static uint32_t float_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float bits_float(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

uint16_t ref_float_to_bf16(float f)
{
    uint32_t x = float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x0040u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float ref_bf16_to_float(uint16_t b)
{
    return bits_float((uint32_t)b << 16);
}

/* Normal results rebias the exponent (127 -> 15) and round the 13 dropped
 * bits; subnormal results round the 24-bit significand shifted to units of
 * 2^-24. A carry out of either lands on the next binade, as it should. */
uint16_t ref_float_to_fp16(float f)
{
    uint32_t x = float_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* 65520 = 65504 + half an ulp: the tie goes to even, 2^16 = inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* 2^-14, smallest normal fp16 */
        uint32_t v = ax - (112u << 23);
        return (uint16_t)(sign | ((v + 0xfffu + ((v >> 13) & 1u)) >> 13));
    }
    if (ax < 0x33000000u) /* below 2^-25 = half the smallest subnormal */
        return sign;
    uint32_t shift = 126u - (ax >> 23); /* 14..24 */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    q += rem > half || (rem == half && (q & 1u));
    return (uint16_t)(sign | q);
}

float ref_fp16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu)
        return bits_float(sign | 0x7f800000u | (m << 13));
    if (e)
        return bits_float(sign | ((e + 112u) << 23) | (m << 13));
    if (!m)
        return bits_float(sign);
    e = 113u;
    while (!(m & 0x400u)) {
        m <<= 1;
        e--;
    }
    return bits_float(sign | (e << 23) | ((m & 0x3ffu) << 13));
}

double ref_rel_err(const double *out, const double *ref, size_t n)
{
    ref_acc num = {0, 0}, den = {0, 0};
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(out[i]) || !isfinite(ref[i])) /* a broken reference fails too */
            return INFINITY;
        ref_acc_add(&num, (out[i] - ref[i]) * (out[i] - ref[i]));
        ref_acc_add(&den, ref[i] * ref[i]);
    }
    double d = sqrt(ref_acc_value(&num)), r = sqrt(ref_acc_value(&den));
    return r == 0 ? d : d / r;
}

double ref_max_abs_err(const double *out, const double *ref, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(out[i]) || !isfinite(ref[i]))
            return INFINITY;
        m = fmax(m, fabs(out[i] - ref[i]));
    }
    return m;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

void ref_rng_seed(ref_rng *g, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        g->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t ref_rng_u64(ref_rng *g)
{
    uint64_t *s = g->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

uint64_t ref_rng_below(ref_rng *g, uint64_t bound)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound, x;
    do
        x = ref_rng_u64(g);
    while (x >= limit);
    return x % bound;
}

double ref_rng_uniform(ref_rng *g)
{
    return (double)(ref_rng_u64(g) >> 11) * 0x1p-53;
}

double ref_rng_normal(ref_rng *g)
{
    double u1 = 1.0 - ref_rng_uniform(g), u2 = ref_rng_uniform(g);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

void ref_fill_normal(ref_rng *g, double *a, size_t n, double mean, double stddev)
{
    for (size_t i = 0; i < n; i++)
        a[i] = mean + stddev * ref_rng_normal(g);
}
