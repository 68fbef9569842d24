/* float -> bf16, rounded to nearest with ties to even, in integer
 * arithmetic: what cvt.rn.bf16.f32 computes on sm_80+, for targets without
 * it. Finite values and infinities round exactly; every NaN becomes the
 * canonical 0x7fff. Plain C as well as device code, so a host test
 * (tests/test_bf16_rn.c) checks it against an independent rounding. */
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KJIT_BF16_RN_FN __device__ __forceinline__
#else
#define KJIT_BF16_RN_FN static inline
#endif

KJIT_BF16_RN_FN unsigned short kjit_bf16_bits_rn(unsigned int f)
{
    if ((f & 0x7fffffffu) > 0x7f800000u) return (unsigned short)0x7fffu;
    return (unsigned short)((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}
