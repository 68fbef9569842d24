// A self-check of kjit_bf16_bits_rn (common/kjit_bf16_rn.h), the integer
// float -> bf16 rounding the kernels use before sm_80, against the
// hardware's cvt.rn.bf16.f32 (sm_80+), for the float bit patterns
// [p.base, p.base + p.n) (tests/gpu/test_bf16_rn_hw.c runs all 2^32).
//   kjit_bf16_rn_check<MODE>  MODE 0: the integer rounding; MODE 1:
//       truncation instead (wrong: the test's proof that a difference is
//       seen). *p.bad counts the patterns that differ, *p.first keeps one.
//       Any grid and block (the patterns are grid-strided); smem 0.
#pragma once

#include "common/kjit_types.cuh"
#include "common/kjit_params.h"

template <int MODE>
__global__ void kjit_bf16_rn_check(const __grid_constant__ kjit_bf16_check_params p)
{
    kjit::grid_dep_sync();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += step) {
        const unsigned int f = (unsigned int)(p.base + i);
        unsigned short hw;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(hw) : "f"(__int_as_float((int)f)));
        const unsigned short sw = MODE == 0 ? kjit_bf16_bits_rn(f) : (unsigned short)(f >> 16);
        if (hw != sw && atomicAdd(p.bad, 1ull) == 0ull) *p.first = f;
    }
#endif
}
