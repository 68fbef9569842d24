/* timestep_sinusoid's fp64 -> bf16 / fp16 rounding (kjit::from_f64 in
 * kernel_templates/timestep_sinusoid.cuh): an fp32 rounded to odd
 * (truncated, last bit set when inexact), then rounded to nearest even,
 * must equal the double rounded once to nearest even. Checked against an
 * independent rounding (the double scaled by its target spacing, exact,
 * then nearbyint) on the doubles the op produces (sin and cos of random
 * angles), on doubles next to every tie of the targets' spacing in
 * [2^-30, 2], and on exact ties. A plain fp32 rounding first must fail
 * somewhere, or these draws could not tell the two apart. */
#include <fenv.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../kernel_templates/common/kjit_bf16_rn.h"

static int failures;

/* fp32 of d truncated toward zero, its last bit set when inexact (host: the
 * rounding mode; __double2float_rz on the device). */
static float odd_f32(double d)
{
    const int old = fegetround();
    fesetround(FE_TOWARDZERO);
    volatile double vd = d;
    volatile float f = (float)vd;
    fesetround(old);
    float r = f;
    if ((double)r != d) {
        uint32_t b;
        memcpy(&b, &r, 4);
        b |= 1u;
        memcpy(&r, &b, 4);
    }
    return r;
}

/* x rounded to nearest even on a grid of p significant bits whose
 * exponent is at least emin (fp16's subnormals: emin = -14), as a double.
 * Exact for the magnitudes here (no overflow). */
static double rn_grid(double x, int p, int emin)
{
    if (x == 0.0) return x;
    int e;
    frexp(x, &e); /* |x| in [2^(e-1), 2^e) */
    int ee = e - 1 < emin ? emin : e - 1;
    const double ulp = ldexp(1.0, ee - (p - 1));
    return nearbyint(x / ulp) * ulp; /* the default mode: ties to even */
}

static double bf16_of_f32(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    const uint32_t r = (uint32_t)kjit_bf16_bits_rn(b) << 16;
    float v;
    memcpy(&v, &r, 4);
    return v;
}

static double f16_of_f32(float f) { return rn_grid((double)f, 11, -14); }

static long checked, plain_wrong;

static void check(double d)
{
    const float o = odd_f32(d);
    const double want_b = rn_grid(d, 8, -126), want_h = rn_grid(d, 11, -14);
    const double got_b = bf16_of_f32(o), got_h = f16_of_f32(o);
    checked++;
    if (got_b != want_b || got_h != want_h) {
        if (failures++ < 5)
            fprintf(stderr, "d = %a: bf16 %a (want %a), fp16 %a (want %a)\n", d, got_b, want_b, got_h, want_h);
    }
    plain_wrong += bf16_of_f32((float)d) != want_b || f16_of_f32((float)d) != want_h;
}

int main(void)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 4000000; ++i) { /* the op's values */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double a = (double)(s >> 11) * 0x1p-53 * 2000.0;
        check(sin(a));
        check(cos(a));
    }
    /* Near and at the ties of both grids, in [2^-30, 2]. */
    for (int e = -30; e <= 0; ++e)
        for (int p = 8; p <= 11; p += 3)
            for (int k = 0; k < 2000; ++k) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                const double ulp = ldexp(1.0, e - (p - 1));
                const double tie = ldexp(1.0, e) + ((double)(s >> 40 & ((1u << (p - 1)) - 1)) + 0.5) * ulp;
                check(tie);
                check(-tie);
                check(nextafter(tie, 0.0));
                check(nextafter(tie, 4.0));
                check(tie + ldexp(ulp, -25)); /* within the fp32 rounding of a tie */
                check(tie - ldexp(ulp, -25));
            }
    check(0.0), check(-0.0), check(1.0), check(-1.0);
    printf("test_round_odd: %ld values, %d differ from a single rounding (a plain fp32 first: %ld)\n", checked,
           failures, plain_wrong);
    if (plain_wrong == 0) {
        fprintf(stderr, "test_round_odd: no draw tells double from single rounding\n");
        failures++;
    }
    return failures != 0;
}
