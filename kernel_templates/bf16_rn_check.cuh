// A self-check of kjit_bf16_bits_rn (common/kjit_bf16_rn.h), the integer
// float -> bf16 rounding the kernels use before sm_80, against the
// hardware's cvt.rn.bf16.f32 (sm_80+), for the float bit patterns
// [base, base + n) (tests/gpu/test_bf16_rn_hw.c runs all 2^32).
//   kjit_bf16_rn_check<MODE>  MODE 0: the integer rounding; MODE 1:
//       truncation instead (wrong: the test's proof that a difference is
//       seen). *bad counts the patterns that differ, *first keeps one.
#pragma once

#include "common/kjit_bf16_rn.h"

template <int MODE>
__global__ void kjit_bf16_rn_check(unsigned long long base, unsigned long long n, unsigned long long *bad,
                                   unsigned int *first)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const unsigned int f = (unsigned int)(base + i);
        unsigned short hw;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(hw) : "f"(__int_as_float((int)f)));
        const unsigned short sw = MODE == 0 ? kjit_bf16_bits_rn(f) : (unsigned short)(f >> 16);
        if (hw != sw && atomicAdd(bad, 1ull) == 0ull) *first = f;
    }
#endif
}
