// L2 residency hints for data with a known lifetime (sm_80+; plain accesses
// before). A hint moves bytes between the L2 and DRAM, never a value: every
// kernel computes the same bits with or without it.
//
// A backward's fp32 partials are written by its main kernel and read once by
// the finisher launched right after it, while the main kernel's other CTAs
// still stream their rows through the L2. KJIT_L2_HINT, a bit mask:
//   1  the partials are stored with the evict_last policy, so that they are
//      still in the L2 when the finisher reads them;
//   2  where h % 32 == 0 (a warp's 32 columns are whole 128-byte lines),
//      the finisher drops each partial line after its one read (discard: no
//      write-back of bytes nobody reads again, and no evict_last line left
//      behind in the caller's L2); other hidden sizes keep their lines.
//      The partials are then indeterminate after kjit_part_finish;
//   8  the finisher reads the partials with the evict_first policy (meant
//      to demote their lines as they are read, without the discard's
//      instructions; measured: it does not, the lines stay). (Bit 4, the rows' own loads and stores
//      evict_first, was measured and removed: 20-40 us slower at 32768 rows.)
// Default 3 (1 | 2). On the H200 (2026-12-05, `run_device.sh ab`, values
// 0 1 3 9, two rounds) it took 1.2-2.2 us off the 4097-row training pairs
// of norm_modulate and gated_residual, 0.4-1 off the fused op's and 17 us
// off the gather's at 32768 rows, with the same bits; 1 alone and 1 | 8
// left the lines pinned (the gather's forward timed after them in a graph
// lost 2 us), 1 | 2 did not (63.1-63.2 against 62.9). docs/PERF_NOTES.md
// ("partials kept in the L2"). A/B: `run_device.sh ab` with
// KJIT_AB_MACRO=KJIT_L2_HINT; bench/cubin_text_diff.py shows which kernels a
// setting changes.
#pragma once

#include "common/kjit_types.cuh"

#ifndef KJIT_L2_HINT
#define KJIT_L2_HINT 3
#endif

namespace kjit {

typedef unsigned long long l2_policy;

// A policy is a value: not volatile, so the compiler makes it once per
// kernel however many stores use it.
__device__ __forceinline__ l2_policy l2_evict_last()
{
    l2_policy p = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
#endif
    return p;
}
__device__ __forceinline__ l2_policy l2_evict_first()
{
    l2_policy p = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
#endif
    return p;
}

// Read-only fp32 load with an L2 policy (volatile: it stays behind the
// guard that keeps it in bounds).
__device__ __forceinline__ float ldg_f32_hint(const float *p, l2_policy pol)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float v;
    asm volatile("ld.global.nc.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(p), "l"(pol));
    return v;
#else
    (void)pol;
    return __ldg(p);
#endif
}

// 16-byte store with an L2 policy.
__device__ __forceinline__ void st_vec_hint(void *p, const vec16 &v, l2_policy pol)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1,%2,%3,%4}, %5;" ::"l"(p), "r"(v.w[0]), "r"(v.w[1]),
                 "r"(v.w[2]), "r"(v.w[3]), "l"(pol)
                 : "memory");
#else
    (void)pol;
    st_vec(p, v);
#endif
}

// The 128-byte L2 line at p (128-byte aligned) holds nothing anyone reads
// again: drop it without a write-back. Every read of it must be complete
// (its value used) in every thread that read it.
__device__ __forceinline__ void l2_discard_line(const void *p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("discard.global.L2 [%0], 128;" ::"l"(p) : "memory");
#else
    (void)p;
#endif
}

// n fp32 partials (n % 4 == 0, 16-byte aligned): kept in the L2 under
// KJIT_L2_HINT, plain stores otherwise.
__device__ __forceinline__ void st_partial16(float *p, const float *f, int n)
{
    const l2_policy pol = (KJIT_L2_HINT & 1) ? l2_evict_last() : 0;
    for (int i = 0; i < n; i += 4) {
        const vec16 v = f32_to_vec<float>(f + i);
        if (KJIT_L2_HINT & 1) st_vec_hint(p + i, v, pol);
        else st_vec(p + i, v);
    }
}

} // namespace kjit
