/* kernel_templates/common/kjit_bf16_rn.h: the integer float -> bf16 rounding
 * the kernels use on targets without cvt.rn.bf16.f32 (sm_75), against an
 * independent rounding: the two bf16 neighbours of x compared by their
 * distance to x in double (exact), ties to the even one, overflow to
 * infinity past the largest bf16 plus half its spacing. Every upper half of
 * the float's bits with eight lower halves (the tie, either side of it, both
 * ends, two random), and the special values. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../kernel_templates/common/kjit_bf16_rn.h"

static int failures;

static double bits_value(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return (double)f;
}

/* The independent rounding of a finite or infinite x (bits f). */
static uint16_t ref_rn(uint32_t f)
{
    const uint32_t sign = f & 0x80000000u, mag = f & 0x7fffffffu;
    if (mag == 0x7f800000u) return (uint16_t)(f >> 16); /* infinities */
    const uint32_t lo = mag & 0xffff0000u;               /* toward zero */
    if (lo == mag) return (uint16_t)((sign | lo) >> 16);
    const uint32_t hi = lo + 0x10000u;                    /* away from zero */
    const double x = bits_value(mag), vlo = bits_value(lo);
    const double vhi = hi == 0x7f800000u ? ldexp(1.0, 128) : bits_value(hi);
    const double dlo = x - vlo, dhi = vhi - x;
    uint32_t r;
    if (dlo < dhi) r = lo;
    else if (dhi < dlo) r = hi;
    else r = ((lo >> 16) & 1u) ? hi : lo;
    return (uint16_t)((sign | r) >> 16);
}

static void check(uint32_t f)
{
    const uint16_t got = kjit_bf16_bits_rn(f);
    uint16_t want;
    if ((f & 0x7fffffffu) > 0x7f800000u) want = 0x7fffu; /* NaN: canonical */
    else want = ref_rn(f);
    if (got != want) {
        if (failures < 10) fprintf(stderr, "bits %08x: got %04x, want %04x\n", f, got, want);
        failures++;
    }
}

int main(void)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    long n = 0;
    for (uint32_t u = 0; u < 0x10000u; ++u) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        const uint32_t lows[8] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, (uint32_t)(s & 0xffffu),
                                  (uint32_t)((s >> 16) & 0xffffu)};
        for (int k = 0; k < 8; ++k, ++n) check((u << 16) | lows[k]);
    }
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu, 0xff7fffffu,
                                0x7f7f8000u, 0x7f7f7fffu, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x00000001u,
                                0x00008000u, 0x00018000u, 0x3f808000u, 0x3f818000u};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; ++i, ++n) check(special[i]);
    /* Ties go to the even neighbour, both ways. */
    if (kjit_bf16_bits_rn(0x3f808000u) != 0x3f80u || kjit_bf16_bits_rn(0x3f818000u) != 0x3f82u) failures++;
    /* Past the largest bf16 plus half its spacing: infinity. */
    if (kjit_bf16_bits_rn(0x7f7f8000u) != 0x7f80u || kjit_bf16_bits_rn(0x7f7f7fffu) != 0x7f7fu) failures++;
    printf("test_bf16_rn: %ld values, %d differ\n", n, failures);
    return failures ? 1 : 0;
}
