// AdaLN row ops: one template family, three ops (MODE), forward and backward.
//   MODE 1 norm_modulate:  y = x * rstd * w * (1 + scale[i]) + shift[i],
//                          rstd = 1 / sqrt(mean(x^2) + eps), w optional (NULL = ones)
//   MODE 2 gated_residual: out = res + gate[i] * y
//   MODE 3 gated_residual_norm_modulate: h = res + gate[i] * y (rounded to TA once),
//                          out = norm_modulate(h) computed from the ROUNDED h
// i = index[row]; table chunks in kjit_table_set: 0 shift, 1 scale, 2 gate, each
// with its own base and row stride. Activations have their own row strides.
//
// Template parameters
//   MODE  1 | 2 | 3                                     arithmetic-fixing
//   TA    activation dtype kjit::f32 | kjit::bf16 | kjit::f16   arithmetic-fixing
//   TP    table / weight / dtable dtype kjit::f32 | kjit::bf16  arithmetic-fixing
//   TI    index dtype int | long long                    no effect on numbers
//   H     hidden size for the fast path, 0 = generic path with runtime p.h
//   TPR   threads per row                               arithmetic-fixing
//   RPC   (fwd) rows per CTA                            launch-only
//   PF    rows whose loads are issued ahead of the one being reduced,
//           0..3 (fwd: of the CTA's grid-stride rows)     launch-only
//   ACCS  (bwd) where per-column state lives            launch-only
//           0: segment constants and accumulators in registers
//           1: segment constants in shared memory, accumulators in registers
//           2: both in shared memory
// The fast path (H > 0) and the generic path (H = 0) of the same TPR execute
// the same floating-point operations in the same order, so the host may pick
// either one (by alignment) without changing a bit.
//
// TPR, a function of the hidden size h and sizeof(TA) only (the host must use
// exactly this; forward and backward use the same):
//     v = 16 / sizeof(TA);  g = ceil(h / v)          // 16-byte granules per row
//     for cap in 256, 512, 1024:
//         for items = ceil(g / cap) .. 8:
//             if g % items == 0 && (g / items) % 32 == 0: return g / items
//     items = ceil(g / 256); return 32 * ceil(g / (32 * items))   // ragged
//   e.g. h = 5376: bf16/f16 -> 224 (3 granules = 24 columns per thread),
//   f32 -> 224 (6 granules); h = 4096 bf16 -> 256; h = 16384 bf16 -> 256.
// Thread t of a row owns granules t, t + TPR, t + 2 TPR, ... (v columns each).
// Row reductions: each thread accumulates v lane sums over its granules in
// order, folds them pairwise (lane 0+1, 2+3, ..., then pairs of pairs), the
// warp folds with an xor butterfly (16, 8, 4, 2, 1), and the warps' totals
// are added in warp order 0, 1, ... TPR/32-1 (up to 8 warps; beyond, lane j
// takes warp j's total and the butterfly folds them: row_reduce). This order
// depends on h, TA and TPR alone, never on RPC, PF, the grid, N or the row's
// position; the backward recomputes the forward's rstd bit for bit.
// Rounding: every multiply and add is an explicit __f*_rn intrinsic (no FMA
// contraction freedom); rstd = __frsqrt_rn(sumsq / h + eps).
//
// kjit_adaln_fwd<MODE, TA, TP, TI, H, TPR, RPC, PF>
//   e.g. "kjit_adaln_fwd<1, kjit::bf16, kjit::bf16, int, 5376, 224, 1, 1>"
//   block = TPR * RPC (<= 1024; RPC <= 15),
//   dynamic smem = PF == 0 ? 0 : RPC * (PF + 1) * NTF * IT * TPR * 16 bytes,
//     NTF = 1 (MODE 1) or 2, IT = ceil(g / TPR) (the cp.async stages; above
//     48 KiB the host sets CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
//   grid  = any value in [1, ceil(n / RPC)] (and <= 2^31-1): the row groups
//           grid-stride, so a persistent grid (a few CTAs per SM) and a full
//           grid give the same bits. n = 0: do not launch. H = 0: PF = 0.
//   Measured on the H200 (h = 5376 bf16, N = 32768, bench_ops --sweep,
//   2026-11-30): MODE 1 RPC 4 PF 1 grid 1 * SMs (180 us, 72 registers, no
//   spills); MODE 2 RPC 1 PF 0 full grid (258 us); MODE 3 within 1% for
//   every config (about 385 us). Every RPC / PF / grid gives the same bits.
//   Launch bounds: kjit::adaln::fwd_min_ctas below.
//   Reads p.x (MODE 1) or p.res, p.y (MODE 2, 3); writes p.out, and p.h_out
//   (MODE 3). p.rstd (optional, [n] fp32) receives rstd (MODE 1, 3).
//   In place is allowed: out may alias x (MODE 1) or res (MODE 2), h_out may
//   alias res (MODE 3).
//
// kjit_adaln_fwd_train<MODE, TA, TP, TI, H, TPR, RPC, PF>: the same rows
//   and bits, plus the backward's partition p.part (partition.cuh) built by
//   block 0; the rows go to blocks 1.. as they would to a kjit_adaln_fwd
//   grid one block smaller (a row's result does not depend on its block).
//   grid = 1 + a kjit_adaln_fwd grid, or a full persistent grid with one
//   row block fewer (the host's choice); dynamic smem =
//   max(kjit_adaln_fwd's, p.part.tiles * p.part.r * 4); block as above (any
//   multiple of 32 threads builds the same partition). A kernel of its own:
//   the plain forward's code does not change.
//
// kjit_adaln_bwd<MODE, TA, TP, TI, H, TPR, PF, ACCS>
//   e.g. "kjit_adaln_bwd<1, kjit::bf16, kjit::bf16, int, 5376, 224, 1, 0>"
//   grid = p.part.chunks (one CTA per chunk of the sorted-row partition),
//   block = TPR (launch bounds: 2 CTAs per SM when TPR <= 512),
//   dynamic smem = (PF + 1) * NT * IT * TPR * 16                (cp.async stages)
//                  + ((ACCS >= 1 ? NTAB : 0) + (ACCS == 2 ? NACC : 0))
//                    * IT * v * TPR * 4 bytes               (H > 0)
//                = 0                                       (H == 0; PF = ACCS = 0)
//     IT = ceil(g / TPR); NT = 2, 2, 4, NTAB = 1, 1, 2 and NACC = 2, 1, 3 for
//     MODE 1, 2, 3. Above 48 KiB the host sets
//     CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
//   Measured on the H200 (h = 5376 bf16, N = 32768, the whole backward op,
//   kjit tune, 2026-11-30; 2 CTAs per SM cap registers at 128): MODE 1 PF 1
//   ACCS 1 (323 us); MODE 2 PF 1 ACCS 0 (292 us); MODE 3 PF 1 ACCS 2 (698 us,
//   the only one without spills). Large h: fewer stages fit (the host's
//   kjit__adaln_config_fit); where one stage does not fit, the host runs the
//   generic path.
//   Inputs by MODE: 1: x, dout; 2: y, dout (grad of out); 3: x (the saved h),
//   y, dout (grad of out), dh (grad of h, NULL = zeros).
//   Row gradients: MODE 1 dx -> p.dx; MODE 2 dres -> p.dx (skipped if NULL),
//   dy -> p.dy; MODE 3 dres -> p.dx, dy -> p.dy.
//   The CTA of chunk c walks sorted positions [c*chunk, min(start[R],
//   (c+1)*chunk)) (partition.cuh; empty chunks return at once), row =
//   perm[pos], table row = index[row], strictly in order; per owned column it accumulates, in
//   fp32, the segment sums of the op's table gradients, numbered g:
//     MODE 1: g0 dshift = sum dout, g1 dscale = w * sum dout*xhat
//     MODE 2: g0 dgate = sum dout*y
//     MODE 3: g0 dshift, g1 dscale (as MODE 1), g2 dgate = sum g*y
//   (NG = 1, 2 or 3 gradients; dtable.ptr[] is indexed by table chunk: 0 shift,
//   1 scale, 2 gate). A segment (rows of one table row r, sorted positions
//   [start[r], start[r+1])) that lies inside the chunk is rounded to TP and
//   written to dtable row r; otherwise its part is written in fp32 to
//   partial[((c*2 + slot)*NG + g)*h + col], slot 1 when the segment starts in
//   this chunk ("tail"), slot 0 when it started earlier ("head"). dw (MODE 1,
//   3, when p.partial_w != NULL): partial_w[c*h + col] = sum over the chunk's
//   segment parts, in order, of (1 + scale[r]) * sum dout*xhat (written by
//   every chunk that holds rows). kjit_part_finish adds the partials in a fixed
//   order (partition.cuh). Rows with an out-of-range index are not in
//   perm (kjit_part_count leaves them out and raises *err), so the backward
//   neither reads through nor writes for them.
//   rstd is recomputed exactly as the forward computes it; p.rstd is not read.
//   The generic path (H == 0) keeps its accumulators in the partial slots of
//   its own chunk (slot 0 for a head, slot 1 otherwise) instead of registers.
//
// Fast path (H > 0) requirements, checked by the host: H % 8 == 0, H <= 16384,
// p.h == H; every activation base pointer, w, every table / dtable base
// pointer, partial and partial_w 16-byte aligned; every row stride times the
// element size a multiple of 16 bytes. Otherwise use H = 0 (same bits).
#pragma once
#include "common/kjit_types.cuh"
#include "common/kjit_params.h"
#include "common/kjit_l2.cuh"
#include "partition.cuh"

namespace kjit {
namespace adaln {

extern __shared__ __align__(16) unsigned char dyn_smem[];

struct __align__(16) f4 { float x, y, z, w; };
struct __align__(8) u2 { unsigned int a, b; };

// V consecutive elements of T: 8, 16 or 32 bytes, loaded and stored whole.
template <class T, int V> struct gran {
    static constexpr int NW = V * (int)sizeof(T) / 4;
    unsigned int w[NW];
};

// Read-only data (tables, w, activations): non-coherent path.
template <class T, int V>
__device__ __forceinline__ void ld_nc(gran<T, V> &g, const T *p)
{
    // __ldg, not inline asm: the compiler knows it for a load and never
    // moves it out of the branch that guards it (it may do that to an asm).
    if constexpr (gran<T, V>::NW == 2) {
        const uint2 v = __ldg((const uint2 *)p);
        g.w[0] = v.x, g.w[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < gran<T, V>::NW / 4; ++i) {
            const uint4 v = __ldg((const uint4 *)p + i);
            g.w[4 * i] = v.x, g.w[4 * i + 1] = v.y, g.w[4 * i + 2] = v.z, g.w[4 * i + 3] = v.w;
        }
    }
}

// Activations are read once: keep them out of L1 so the tables stay there.
// No intrinsic has the L1::no_allocate hint; volatile keeps the asm inside
// its guard.
template <class T, int V>
__device__ __forceinline__ void ld_stream(gran<T, V> &g, const T *p)
{
    static_assert(gran<T, V>::NW == 4, "activation granules are 16 bytes");
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(g.w[0]), "=r"(g.w[1]), "=r"(g.w[2]), "=r"(g.w[3]) : "l"(p));
}

template <class T, int V>
__device__ __forceinline__ void st_gran(T *p, const gran<T, V> &g)
{
    if constexpr (gran<T, V>::NW == 2) {
        u2 v;
        v.a = g.w[0];
        v.b = g.w[1];
        *(u2 *)p = v;
    } else {
#pragma unroll
        for (int i = 0; i < gran<T, V>::NW / 4; ++i) {
            vec16 v;
            v.w[0] = g.w[4 * i];
            v.w[1] = g.w[4 * i + 1];
            v.w[2] = g.w[4 * i + 2];
            v.w[3] = g.w[4 * i + 3];
            st_vec((char *)p + 16 * i, v);
        }
    }
}

// Rows loaded ahead go to shared memory with cp.async (16 bytes, L2 only),
// not to registers: each thread copies the granules it will read itself, so
// a wait on its own groups is all the ordering needed (no barrier).
// Layout: granule k of tensor j of stage s of thread t at
// ((s * NT + j) * IT + k) * TPR * 16 + t * 16 (a warp's accesses contiguous).
// cp.async needs sm_80: before that the copy is an ordinary load (from the
// L2, as cp.async.cg, keeping activations out of L1) and store; the data is
// in shared memory before any wait, so the same values are read.
__device__ __forceinline__ void cp_async16(unsigned char *smem, const void *gmem)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(gmem));
    *(uint4 *)smem = v;
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(gmem) : "memory");
#endif
}
__device__ __forceinline__ void cp_commit()
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// Wait until at most N of this thread's most recent groups are pending.
template <int N> __device__ __forceinline__ void cp_wait()
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

template <class T, int V>
__device__ __forceinline__ void ld_smem(gran<T, V> &g, const unsigned char *p)
{
    static_assert(gran<T, V>::NW == 4, "staged granules are 16 bytes");
    const uint4 v = *(const uint4 *)p;
    g.w[0] = v.x, g.w[1] = v.y, g.w[2] = v.z, g.w[3] = v.w;
}

template <class T, int V>
__device__ __forceinline__ void unpack(const gran<T, V> &g, float *f)
{
    if constexpr (sizeof(T) == 4) {
#pragma unroll
        for (int i = 0; i < V; ++i) f[i] = __uint_as_float(g.w[i]);
    } else {
#pragma unroll
        for (int i = 0; i < V / 2; ++i) {
            T lo, hi;
            lo.x = (unsigned short)(g.w[i] & 0xffffu);
            hi.x = (unsigned short)(g.w[i] >> 16);
            f[2 * i] = to_f32(lo);
            f[2 * i + 1] = to_f32(hi);
        }
    }
}

template <class T, int V>
__device__ __forceinline__ void pack(gran<T, V> &g, const float *f)
{
    if constexpr (sizeof(T) == 4) {
#pragma unroll
        for (int i = 0; i < V; ++i) g.w[i] = __float_as_uint(f[i]);
    } else {
#pragma unroll
        for (int i = 0; i < V / 2; ++i)
            g.w[i] = (unsigned int)from_f32<T>(f[2 * i]).x |
                     ((unsigned int)from_f32<T>(f[2 * i + 1]).x << 16);
    }
}

template <class T, int V>
__device__ __forceinline__ void ld_nc_f32(const T *p, float *f)
{
    gran<T, V> g;
    ld_nc(g, p);
    unpack(g, f);
}

template <class T, int V>
__device__ __forceinline__ void st_f32v(T *p, const float *f)
{
    gran<T, V> g;
    pack(g, f);
    st_gran(p, g);
}

__device__ __forceinline__ void bar_sync(int id, int n)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}

// The one place rstd is formed (forward, backward, fast and generic paths).
__device__ __forceinline__ float rstd_of(float sumsq, float h, float eps)
{
    return __frsqrt_rn(__fadd_rn(__fdiv_rn(sumsq, h), eps));
}

// w * (1 + scale): the per-column multiplier of the normalised row (bwd).
__device__ __forceinline__ float mod_of(bool has_w, float w, float sc)
{
    const float m = __fadd_rn(1.0f, sc);
    return has_w ? __fmul_rn(w, m) : m;
}

// Forward output of norm_modulate for one element.
__device__ __forceinline__ float nm_out(float x, float rs, bool has_w, float w, float sc, float sh)
{
    float t = __fmul_rn(x, rs);
    if (has_w) t = __fmul_rn(t, w);
    return __fmaf_rn(t, __fadd_rn(1.0f, sc), sh);
}

// Pairwise fold of a thread's V lane sums.
template <int V> __device__ __forceinline__ float lane_fold(float (&a)[V])
{
#pragma unroll
    for (int s = 1; s < V; s *= 2)
#pragma unroll
        for (int i = 0; i < V; i += 2 * s) a[i] = __fadd_rn(a[i], a[i + s]);
    return a[0];
}

// Sum NQ values over the TPR threads of one row (threads of warps tw = 0 ..
// WPR-1 of the group). Each warp folds with an xor butterfly (16, 8, 4, 2,
// 1); then, up to 8 warps, the warps' totals are added in warp order 0, 1,
// ...; beyond 8, lane j takes warp j's total (0 past the last warp) and the
// xor butterfly folds those (a short dependency chain for wide rows). The
// order is a function of WPR alone (the same in forward and backward).
// red holds 2 * 32 * NQ floats (double-buffered by par, so one barrier per
// reduction suffices); bar is the group's named barrier. Every thread of the
// row gets the same bits.
template <int NQ, int WPR>
__device__ __forceinline__ void row_reduce(float (&q)[NQ], float *red, int &par, int tw, int bar)
{
#pragma unroll
    for (int i = 0; i < NQ; ++i)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) q[i] = __fadd_rn(q[i], __shfl_xor_sync(0xffffffffu, q[i], o));
    if constexpr (WPR > 1) {
        float *r = red + par * (32 * NQ);
        const int lane = threadIdx.x & 31;
        if (lane == 0) {
#pragma unroll
            for (int i = 0; i < NQ; ++i) r[i * 32 + tw] = q[i];
        }
        bar_sync(bar, WPR * 32);
#pragma unroll
        for (int i = 0; i < NQ; ++i) {
            if constexpr (WPR <= 8) {
                float s = r[i * 32];
#pragma unroll
                for (int j = 1; j < WPR; ++j) s = __fadd_rn(s, r[i * 32 + j]);
                q[i] = s;
            } else {
                q[i] = lane < WPR ? r[i * 32 + lane] : 0.0f;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) q[i] = __fadd_rn(q[i], __shfl_xor_sync(0xffffffffu, q[i], o));
            }
        }
        par ^= 1;
    }
}

template <class TI>
__device__ __forceinline__ bool index_bad(const kjit_index_arg &ix, long long r)
{
    return ix.err != 0 && (r < 0 || r >= ix.r);
}

// ---------------------------------------------------------------- forward

// One row's streamed inputs: x (MODE 1) or res, y (MODE 2, 3).
template <int MODE, class TA, int V, int IT> struct fwd_stage {
    long long r;
    gran<TA, V> a[IT], b[MODE == 1 ? 1 : IT];
};

// One row's table rows: shift, scale (MODE 1, 3) and gate (MODE 2, 3).
template <int MODE, class TP, int V, int IT> struct fwd_tabs {
    gran<TP, V> s[MODE == 2 ? 1 : IT], c[MODE == 2 ? 1 : IT], g[MODE == 1 ? 1 : IT];
};

// KJIT_FWD_TAB_EARLY, with staged rows (PF > 0): 1, a row's index is read
// and its table rows' loads issued into registers before the wait for its
// staged activations, so that their latency overlaps that wait instead of
// following it; 2, the same rows prefetched to the L1 there instead (one
// prefetch a 128-byte line, no registers held across the wait), the loads
// staying where 0 has them. The same loads and arithmetic in every case
// (the same bits); measured with run_device.sh ab
// (KJIT_AB_MACRO=KJIT_FWD_TAB_EARLY).
#ifndef KJIT_FWD_TAB_EARLY
#define KJIT_FWD_TAB_EARLY 0
#endif

template <int MODE, class TA, class TP, class TI, int H, int TPR, int RPC, int PF>
__device__ __forceinline__ void fwd_fast(const kjit_adaln_fwd_params &p, long long blk, long long nblk)
{
    constexpr int V = 16 / (int)sizeof(TA);
    constexpr int G = H / V;
    constexpr int IT = (G + TPR - 1) / TPR;
    constexpr bool FULL = G % TPR == 0;
    constexpr int WPR = TPR / 32;
    __shared__ float red[RPC][2 * 32];

    const int slot = threadIdx.x / TPR;
    const int t = threadIdx.x - slot * TPR;
    const int tw = t >> 5;
    int par = 0;
    const TI *index = (const TI *)p.index.ptr;
    const TP *wp = (const TP *)p.w;
    const bool hw = wp != 0;
    // w is the same for every row: loaded once.
    gran<TP, V> wv[IT];
    if (MODE != 2 && hw) {
#pragma unroll
        for (int k = 0; k < IT; ++k)
            if (FULL || k * TPR + t < G) ld_nc(wv[k], wp + (k * TPR + t) * V);
    }

    auto load = [&](fwd_stage<MODE, TA, V, IT> &st, long long row) {
        const TA *ar = MODE == 1 ? (const TA *)p.x + row * p.x_stride : (const TA *)p.res + row * p.res_stride;
        const TA *br = (const TA *)p.y + row * p.y_stride;
#pragma unroll
        for (int k = 0; k < IT; ++k)
            if (FULL || k * TPR + t < G) {
                const int col = (k * TPR + t) * V;
                ld_stream(st.a[k], ar + col);
                if constexpr (MODE != 1) ld_stream(st.b[k], br + col);
            }
    };

    constexpr bool EARLY = KJIT_FWD_TAB_EARLY == 1 && PF > 0;
    // The table rows of table row r: the gate (which = 2), shift and scale (1).
    auto load_tabs = [&](fwd_tabs<MODE, TP, V, IT> &tb, long long r, int which) {
        if (MODE != 1 && which != 1) {
            const TP *gt = (const TP *)p.table.ptr[2] + r * p.table.stride[2];
#pragma unroll
            for (int k = 0; k < IT; ++k)
                if (FULL || k * TPR + t < G) ld_nc(tb.g[k], gt + (k * TPR + t) * V);
        }
        if (MODE != 2 && which != 2) {
            const TP *sh = (const TP *)p.table.ptr[0] + r * p.table.stride[0];
            const TP *sc = (const TP *)p.table.ptr[1] + r * p.table.stride[1];
#pragma unroll
            for (int k = 0; k < IT; ++k)
                if (FULL || k * TPR + t < G) {
                    const int col = (k * TPR + t) * V;
                    ld_nc(tb.s[k], sh + col);
                    ld_nc(tb.c[k], sc + col);
                }
        }
    };

    // Table row r's lines to the L1, one thread a 128-byte line.
    auto prefetch_tabs = [&](long long r) {
        constexpr int GL = 128 / 16; // granules a line
#pragma unroll
        for (int k = 0; k < IT; ++k)
            if ((FULL || k * TPR + t < G) && (k * TPR + t) % GL == 0) {
                const int col = (k * TPR + t) * V;
                if (MODE != 1)
                    asm volatile("prefetch.global.L1 [%0];" ::"l"((const TP *)p.table.ptr[2] + r * p.table.stride[2] + col));
                if (MODE != 2) {
                    asm volatile("prefetch.global.L1 [%0];" ::"l"((const TP *)p.table.ptr[0] + r * p.table.stride[0] + col));
                    asm volatile("prefetch.global.L1 [%0];" ::"l"((const TP *)p.table.ptr[1] + r * p.table.stride[1] + col));
                }
            }
    };

    // tb: the row's table rows when EARLY (loaded by the caller), else
    // loaded here.
    auto process = [&](const fwd_stage<MODE, TA, V, IT> &st, long long row, fwd_tabs<MODE, TP, V, IT> &tb) {
        const long long r = st.r;
        if (index_bad<TI>(p.index, r)) {
            if (t == 0) *p.index.err = 1;
            return;
        }
        TA *o = (TA *)p.out + row * p.out_stride;
        if constexpr (MODE == 2) {
            if (!EARLY) load_tabs(tb, r, 2);
            const gran<TP, V> *gv = tb.g;
#pragma unroll
            for (int k = 0; k < IT; ++k)
                if (FULL || k * TPR + t < G) {
                    float a[V], b[V], g[V];
                    unpack(st.a[k], a);
                    unpack(st.b[k], b);
                    unpack(gv[k], g);
#pragma unroll
                    for (int e = 0; e < V; ++e) a[e] = __fmaf_rn(g[e], b[e], a[e]);
                    st_f32v<TA, V>(o + (k * TPR + t) * V, a);
                }
        } else {
            // Norm input: x (MODE 1) or h = res + gate * y rounded (MODE 3).
            gran<TA, V> xv[IT];
            if constexpr (MODE == 1) {
#pragma unroll
                for (int k = 0; k < IT; ++k) xv[k] = st.a[k];
            } else {
                TA *ho = (TA *)p.h_out + row * p.h_stride;
                if (!EARLY) load_tabs(tb, r, 2);
                const gran<TP, V> *gv = tb.g;
#pragma unroll
                for (int k = 0; k < IT; ++k)
                    if (FULL || k * TPR + t < G) {
                        float a[V], b[V], g[V];
                        unpack(st.a[k], a);
                        unpack(st.b[k], b);
                        unpack(gv[k], g);
#pragma unroll
                        for (int e = 0; e < V; ++e) a[e] = __fmaf_rn(g[e], b[e], a[e]);
                        pack(xv[k], a);
                        st_gran(ho + (k * TPR + t) * V, xv[k]);
                    }
            }
            if (!EARLY) load_tabs(tb, r, 1);
            const gran<TP, V> *shv = tb.s, *scv = tb.c;
            float acc[V];
#pragma unroll
            for (int e = 0; e < V; ++e) acc[e] = 0.0f;
#pragma unroll
            for (int k = 0; k < IT; ++k)
                if (FULL || k * TPR + t < G) {
                    float f[V];
                    unpack(xv[k], f);
#pragma unroll
                    for (int e = 0; e < V; ++e) acc[e] = __fmaf_rn(f[e], f[e], acc[e]);
                }
            float q[1] = {lane_fold<V>(acc)};
            row_reduce<1, WPR>(q, red[slot], par, tw, 1 + slot);
            const float rs = rstd_of(q[0], (float)H, p.eps);
            if (p.rstd != 0 && t == 0) p.rstd[row] = rs;
#pragma unroll
            for (int k = 0; k < IT; ++k)
                if (FULL || k * TPR + t < G) {
                    float f[V], s0[V], s1[V], wf[V];
                    unpack(xv[k], f);
                    unpack(shv[k], s0);
                    unpack(scv[k], s1);
                    if (hw) unpack(wv[k], wf);
#pragma unroll
                    for (int e = 0; e < V; ++e) f[e] = nm_out(f[e], rs, hw, hw ? wf[e] : 1.0f, s1[e], s0[e]);
                    st_f32v<TA, V>(o + (k * TPR + t) * V, f);
                }
        }
    };

    const long long step = nblk * RPC;
    const long long row0 = blk * RPC + slot;
    if constexpr (PF == 0) {
        for (long long row = row0; row < p.n; row += step) {
            fwd_stage<MODE, TA, V, IT> st;
            fwd_tabs<MODE, TP, V, IT> tb;
            st.r = (long long)index[row];
            load(st, row);
            process(st, row, tb);
        }
    } else {
        // A ring of PF + 1 stages in shared memory (cp.async): the next PF
        // rows of this slot are in flight while one is reduced and written.
        // The stage is a runtime index (one copy of the loop body, so the
        // registers stay those of PF 0); a row's index is prefetched to L1
        // when its loads are issued and read again when it is processed.
        constexpr int RING = PF + 1, NTF = MODE == 1 ? 1 : 2;
        constexpr int STAGE = NTF * IT * TPR * 16; // bytes of one stage
        unsigned char *sm = dyn_smem + (size_t)slot * RING * STAGE + (size_t)t * 16;
        auto issue = [&](int s, long long row) {
            asm volatile("prefetch.global.L1 [%0];" ::"l"(index + row));
            const TA *ar = MODE == 1 ? (const TA *)p.x + row * p.x_stride : (const TA *)p.res + row * p.res_stride;
            const TA *br = (const TA *)p.y + row * p.y_stride;
            unsigned char *d = sm + s * STAGE;
#pragma unroll
            for (int k = 0; k < IT; ++k)
                if (FULL || k * TPR + t < G) {
                    const int col = (k * TPR + t) * V;
                    cp_async16(d + k * TPR * 16, ar + col);
                    if constexpr (MODE != 1) cp_async16(d + (IT + k) * TPR * 16, br + col);
                }
        };
#pragma unroll
        for (int s = 0; s < PF; ++s) {
            if (row0 + s * step < p.n) issue(s, row0 + s * step);
            cp_commit();
        }
        int s = 0;
#pragma unroll 1
        for (long long row = row0; row < p.n; row += step) {
            const long long ahead = row + PF * step;
            if (ahead < p.n) issue(s == 0 ? PF : s - 1, ahead);
            cp_commit();
            fwd_stage<MODE, TA, V, IT> st;
            fwd_tabs<MODE, TP, V, IT> tb;
            constexpr bool PRE = KJIT_FWD_TAB_EARLY == 2;
            if (EARLY || PRE) {
                st.r = (long long)index[row];
                if (!index_bad<TI>(p.index, st.r)) {
                    if (EARLY) load_tabs(tb, st.r, 0);
                    else prefetch_tabs(st.r);
                }
            }
            cp_wait<PF>();
            if (!EARLY && !PRE) st.r = (long long)index[row];
            const unsigned char *d = sm + s * STAGE;
#pragma unroll
            for (int k = 0; k < IT; ++k)
                if (FULL || k * TPR + t < G) {
                    ld_smem(st.a[k], d + k * TPR * 16);
                    if constexpr (MODE != 1) ld_smem(st.b[k], d + (IT + k) * TPR * 16);
                }
            process(st, row, tb);
            s = s == PF ? 0 : s + 1;
        }
    }
}

// Same arithmetic as fwd_fast, one element at a time, runtime h.
template <int MODE, class TA, class TP, class TI, int TPR, int RPC>
__device__ __forceinline__ void fwd_generic(const kjit_adaln_fwd_params &p, long long blk, long long nblk)
{
    constexpr int V = 16 / (int)sizeof(TA);
    constexpr int WPR = TPR / 32;
    __shared__ float red[RPC][2 * 32];

    const int slot = threadIdx.x / TPR;
    const int t = threadIdx.x - slot * TPR;
    const int tw = t >> 5;
    int par = 0;
    const int h = p.h;
    const int G = (h + V - 1) / V;
    const int IT = (G + TPR - 1) / TPR;
    const TI *index = (const TI *)p.index.ptr;
    const TP *wp = (const TP *)p.w;
    const bool hw = wp != 0;

    for (long long row = blk * RPC + slot; row < p.n; row += nblk * RPC) {
        const long long r = (long long)index[row];
        if (index_bad<TI>(p.index, r)) {
            if (t == 0) *p.index.err = 1;
            continue;
        }
        TA *o = (TA *)p.out + row * p.out_stride;
        if constexpr (MODE == 2) {
            const TA *rr = (const TA *)p.res + row * p.res_stride;
            const TA *yr = (const TA *)p.y + row * p.y_stride;
            const TP *gt = (const TP *)p.table.ptr[2] + r * p.table.stride[2];
            for (int col = t; col < h; col += TPR)
                st_f32(o + col, __fmaf_rn(ld_f32(gt + col), ld_f32(yr + col), ld_f32(rr + col)));
        } else {
            const TP *sh = (const TP *)p.table.ptr[0] + r * p.table.stride[0];
            const TP *sc = (const TP *)p.table.ptr[1] + r * p.table.stride[1];
            const TA *xr;
            float acc[V];
#pragma unroll
            for (int e = 0; e < V; ++e) acc[e] = 0.0f;
            if constexpr (MODE == 1) {
                xr = (const TA *)p.x + row * p.x_stride;
                for (int k = 0; k < IT; ++k) {
                    const int gi = k * TPR + t;
                    if (gi < G) {
#pragma unroll
                        for (int e = 0; e < V; ++e) {
                            const int col = gi * V + e;
                            if (col < h) {
                                const float f = ld_f32(xr + col);
                                acc[e] = __fmaf_rn(f, f, acc[e]);
                            }
                        }
                    }
                }
            } else {
                const TA *rr = (const TA *)p.res + row * p.res_stride;
                const TA *yr = (const TA *)p.y + row * p.y_stride;
                const TP *gt = (const TP *)p.table.ptr[2] + r * p.table.stride[2];
                TA *ho = (TA *)p.h_out + row * p.h_stride;
                for (int k = 0; k < IT; ++k) {
                    const int gi = k * TPR + t;
                    if (gi < G) {
#pragma unroll
                        for (int e = 0; e < V; ++e) {
                            const int col = gi * V + e;
                            if (col < h) {
                                const TA hv = from_f32<TA>(
                                    __fmaf_rn(ld_f32(gt + col), ld_f32(yr + col), ld_f32(rr + col)));
                                ho[col] = hv;
                                const float f = to_f32(hv);
                                acc[e] = __fmaf_rn(f, f, acc[e]);
                            }
                        }
                    }
                }
                xr = ho; // re-read what this thread wrote (h_out may alias res)
            }
            float q[1] = {lane_fold<V>(acc)};
            row_reduce<1, WPR>(q, red[slot], par, tw, 1 + slot);
            const float rs = rstd_of(q[0], (float)h, p.eps);
            if (p.rstd != 0 && t == 0) p.rstd[row] = rs;
            for (int k = 0; k < IT; ++k) {
                const int gi = k * TPR + t;
                if (gi < G) {
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        const int col = gi * V + e;
                        if (col < h)
                            st_f32(o + col, nm_out(ld_f32(xr + col), rs, hw, hw ? ld_f32(wp + col) : 1.0f,
                                                   ld_f32(sc + col), ld_f32(sh + col)));
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------- backward

// Per-column fp32 state of a thread: N arrays of IT granules of V floats, in
// registers (SM = false) or in shared memory (SM = true, thread-private, laid
// out so that a warp's 16-byte accesses are contiguous).
template <int N, int IT, int V, int TPR, bool SM> struct cols {
    float v[N][IT][V];
    __device__ __forceinline__ void init(f4 *) {}
    __device__ __forceinline__ void get(int a, int k, float *o) const
    {
#pragma unroll
        for (int e = 0; e < V; ++e) o[e] = v[a][k][e];
    }
    __device__ __forceinline__ void put(int a, int k, const float *i)
    {
#pragma unroll
        for (int e = 0; e < V; ++e) v[a][k][e] = i[e];
    }
};
template <int N, int IT, int V, int TPR> struct cols<N, IT, V, TPR, true> {
    f4 *s;
    __device__ __forceinline__ void init(f4 *base) { s = base + threadIdx.x; }
    __device__ __forceinline__ void get(int a, int k, float *o) const
    {
#pragma unroll
        for (int j = 0; j < V / 4; ++j) {
            const f4 q = s[((a * IT + k) * (V / 4) + j) * TPR];
            o[4 * j] = q.x;
            o[4 * j + 1] = q.y;
            o[4 * j + 2] = q.z;
            o[4 * j + 3] = q.w;
        }
    }
    __device__ __forceinline__ void put(int a, int k, const float *i)
    {
#pragma unroll
        for (int j = 0; j < V / 4; ++j) {
            f4 q;
            q.x = i[4 * j];
            q.y = i[4 * j + 1];
            q.z = i[4 * j + 2];
            q.w = i[4 * j + 3];
            s[((a * IT + k) * (V / 4) + j) * TPR] = q;
        }
    }
};

template <int MODE> struct bwd_shape {
    static constexpr int NT = MODE == 3 ? 4 : 2;                 // row tensors read
    static constexpr int NACC = MODE == 1 ? 2 : MODE == 2 ? 1 : 3; // = NG
    static constexpr int NTAB = MODE == 3 ? 2 : 1;               // segment constants
    // dtable chunk of gradient g
    static __device__ __forceinline__ int tab(int g) { return MODE == 2 ? 2 : g; }
};

// The norm's backward, per element and per row: one definition shared by
// the full backward (bwd_fast, bwd_generic) and the row-gradients-only one
// (bwd_dx_fast, bwd_dx_generic), so both compute the same bits.
//   sums:  sxx += x * x, sgx += (dout * m) * x      (m = w * (1 + scale))
//   stats: rs = rstd, c2 = mean(dout * m * xhat)    (the row's reduction)
//   dx:    rs * (dout * m - xhat * c2), xhat = x * rs (returned in xh)
__device__ __forceinline__ void dnorm_sums(float xf, float df, float m, float &sxx, float &sgx)
{
    sxx = __fmaf_rn(xf, xf, sxx);
    sgx = __fmaf_rn(__fmul_rn(df, m), xf, sgx);
}
template <int V, int WPR>
__device__ __forceinline__ void dnorm_stats(float (&sxx)[V], float (&sgx)[V], float *red, int &par, int tw, float h,
                                            float eps, float &rs, float &c2)
{
    float q[2] = {lane_fold<V>(sxx), lane_fold<V>(sgx)};
    row_reduce<2, WPR>(q, red, par, tw, 1);
    rs = rstd_of(q[0], h, eps);
    c2 = __fmul_rn(__fdiv_rn(q[1], h), rs);
}
__device__ __forceinline__ float dnorm_dx(float xf, float df, float m, float rs, float c2, float &xh)
{
    xh = __fmul_rn(xf, rs);
    const float gn = __fmul_rn(df, m);
    return __fmul_rn(rs, __fmaf_rn(-xh, c2, gn));
}
// The generic path's row sums: thread t's elements in granule order.
template <class TA, class TP, int V, int TPR>
__device__ __forceinline__ void dnorm_sums_generic(const TA *xr, const TA *dor, const TP *wp, const TP *sc, bool hw,
                                                   int h, float (&sxx)[V], float (&sgx)[V])
{
    const int G = (h + V - 1) / V, IT = (G + TPR - 1) / TPR;
    for (int i = 0; i < V; ++i) sxx[i] = sgx[i] = 0.0f;
    for (int k = 0; k < IT; ++k) {
        const int gi = k * TPR + (int)threadIdx.x;
        if (gi < G) {
#pragma unroll
            for (int i = 0; i < V; ++i) {
                const int col = gi * V + i;
                if (col < h)
                    dnorm_sums(ld_f32(xr + col), ld_f32(dor + col),
                               mod_of(hw, hw ? ld_f32(wp + col) : 1.0f, ld_f32(sc + col)), sxx[i], sgx[i]);
            }
        }
    }
}

// Segment flags of table row r within chunk [b, e).
struct seg_state {
    long long r;
    bool first, last;
};

// KJIT_BWD_BEGIN_EARLY 1 (default): bwd_fast starts its first table row's
// segment (the index, start[], the scale/weight/gate rows) right after the
// prologue issues its first rows' loads, so those loads' latency overlaps
// the wait for the first staged row instead of following it; process()
// then finds the segment begun. 0: the segment begins in process(), after
// that wait. The same operations on the same CTA (the same bits: bench/
// bits_hash.py's 14 cases equal); H100, 4097 rows, bf16 H = 5376, three
// rounds (run_device.sh ab, KJIT_AB_MACRO=KJIT_BWD_BEGIN_EARLY, 2026-12-06):
// forward + backward inside a graph 94.1 -> 93.5 us (norm_modulate), 166.3
// -> 164.9 (the fused op), gated_residual and 32768 rows unchanged
// (docs/PERF_NOTES.md).
#ifndef KJIT_BWD_BEGIN_EARLY
#define KJIT_BWD_BEGIN_EARLY 1
#endif

template <int MODE, class TA, class TP, class TI, int H, int TPR, int PF, int ACCS>
__device__ __forceinline__ void bwd_fast(const kjit_adaln_bwd_params &p)
{
    using S = bwd_shape<MODE>;
    constexpr int V = 16 / (int)sizeof(TA);
    constexpr int G = H / V;
    constexpr int IT = (G + TPR - 1) / TPR;
    constexpr bool FULL = G % TPR == 0;
    constexpr int WPR = TPR / 32;
    constexpr int NT = S::NT, NACC = S::NACC, NTAB = S::NTAB, NG = S::NACC;
    constexpr int RING = PF + 1;
    __shared__ float red[2 * 2 * 32];

    const int t = threadIdx.x;
    const int tw = t >> 5;
    int par = 0;
    const long long c = blockIdx.x;
    const long long b = c * p.part.chunk;
    const long long total = ldg_i32(p.part.start + p.part.r); // valid rows
    const long long e = b + p.part.chunk < total ? b + p.part.chunk : total;
    if (b >= e) return;
    const int *perm = p.part.perm;
    const int *start = p.part.start;
    const TI *index = (const TI *)p.index.ptr;
    const bool hw = p.w != 0;
    // Without a weight, w is read from the scale table (H valid columns) and
    // ignored: the loads of w need no branch, which keeps the compiler's
    // schedule of a segment's constants the same with and without a weight.
    const TP *wp = hw ? (const TP *)p.w : (const TP *)p.table.ptr[1];
    const bool hdh = MODE == 3 && p.dh != 0;

    // Shared memory: the ring of row stages (cp.async), then the per-column
    // state that ACCS places there.
    constexpr int STAGE_F4 = RING * NT * IT * TPR; // 16-byte units
    unsigned char *sm = dyn_smem + (size_t)t * 16;
    cols<NTAB, IT, V, TPR, (ACCS >= 1)> tab;
    cols<NACC, IT, V, TPR, (ACCS == 2)> acc;
    tab.init((f4 *)dyn_smem + STAGE_F4);
    acc.init((f4 *)dyn_smem + STAGE_F4 + (ACCS >= 1 ? NTAB * IT * (V / 4) * TPR : 0));

    // Ring of rows loaded ahead: row id, table row (registers), granules
    // (shared memory).
    long long rid[RING], rix[RING];
    auto stage = [&](int s, int j, int k) { return sm + (size_t)((s * NT + j) * IT + k) * TPR * 16; };

    // perm of the next position to issue is loaded one issue ahead, so the
    // data loads of a row never wait on perm.
    long long nxt = ldg_i32(perm + b);
    auto issue = [&](int s, long long pos) {
        const long long row = nxt;
        if (pos + 1 < e) nxt = ldg_i32(perm + pos + 1);
        rid[s] = row;
        rix[s] = (long long)index[row];
        const TA *src[NT];
        if constexpr (MODE == 1) {
            src[0] = (const TA *)p.x + row * p.x_stride;
            src[1] = (const TA *)p.dout + row * p.dout_stride;
        } else if constexpr (MODE == 2) {
            src[0] = (const TA *)p.y + row * p.y_stride;
            src[1] = (const TA *)p.dout + row * p.dout_stride;
        } else {
            src[0] = (const TA *)p.x + row * p.x_stride;
            src[1] = (const TA *)p.dout + row * p.dout_stride;
            src[2] = (const TA *)p.dh + row * p.dh_stride;
            src[3] = (const TA *)p.y + row * p.y_stride;
        }
#pragma unroll
        for (int k = 0; k < IT; ++k)
            if (FULL || k * TPR + t < G) {
                const int col = (k * TPR + t) * V;
#pragma unroll
                for (int j = 0; j < NT; ++j)
                    if (j != 2 || MODE != 3 || hdh) cp_async16(stage(s, j, k), src[j] + col);
            }
    };

    seg_state sg;
    sg.r = -1;
    sg.first = sg.last = false;
    bool wfirst = true;

    auto begin = [&](long long r) {
        sg.r = r;
        sg.first = ldg_i32(start + r) >= b;
        sg.last = ldg_i32(start + r + 1) <= e;
        const TP *sc = (const TP *)p.table.ptr[1] + r * p.table.stride[1];
        const TP *gt = (const TP *)p.table.ptr[2] + r * p.table.stride[2];
#pragma unroll
        for (int k = 0; k < IT; ++k)
            if (FULL || k * TPR + t < G) {
                const int col = (k * TPR + t) * V;
                float z[V];
#pragma unroll
                for (int i = 0; i < V; ++i) z[i] = 0.0f;
#pragma unroll
                for (int a = 0; a < NACC; ++a) acc.put(a, k, z);
                if constexpr (MODE != 2) {
                    float s1[V], wf[V], m[V];
                    ld_nc_f32<TP, V>(sc + col, s1);
                    ld_nc_f32<TP, V>(wp + col, wf);
#pragma unroll
                    for (int i = 0; i < V; ++i) m[i] = mod_of(hw, hw ? wf[i] : 1.0f, s1[i]);
                    tab.put(0, k, m);
                }
                if constexpr (MODE != 1) {
                    float gf[V];
                    ld_nc_f32<TP, V>(gt + col, gf);
                    tab.put(NTAB - 1, k, gf);
                }
            }
    };

    auto flush = [&]() {
        const long long r = sg.r;
        const TP *sc = (const TP *)p.table.ptr[1] + r * p.table.stride[1];
        const int slot = sg.first ? KJIT_SEG_TAIL : KJIT_SEG_HEAD;
#pragma unroll
        for (int k = 0; k < IT; ++k)
            if (FULL || k * TPR + t < G) {
                const int col = (k * TPR + t) * V;
                float out[NG][V];
#pragma unroll
                for (int a = 0; a < NACC; ++a) acc.get(a, k, out[a]);
                if constexpr (MODE != 2) {
                    // out[1] holds sum dout*xhat: dw part first, then dscale.
                    float s1[V], wf[V];
                    ld_nc_f32<TP, V>(sc + col, s1);
                    ld_nc_f32<TP, V>(wp + col, wf);
                    if (p.partial_w != 0) {
                        float dw[V];
                        float *pw = p.partial_w + c * H + col;
#pragma unroll
                        for (int i = 0; i < V; ++i) dw[i] = __fmul_rn(out[1][i], __fadd_rn(1.0f, s1[i]));
                        if (!wfirst) {
                            float old[V];
#pragma unroll
                            for (int j = 0; j < V / 4; ++j) {
                                const f4 q = *(const f4 *)(pw + 4 * j);
                                old[4 * j] = q.x;
                                old[4 * j + 1] = q.y;
                                old[4 * j + 2] = q.z;
                                old[4 * j + 3] = q.w;
                            }
#pragma unroll
                            for (int i = 0; i < V; ++i) dw[i] = __fadd_rn(old[i], dw[i]);
                        }
                        st_partial16(pw, dw, V); // kept in the L2 for the finisher
                    }
                    if (hw) {
#pragma unroll
                        for (int i = 0; i < V; ++i) out[1][i] = __fmul_rn(out[1][i], wf[i]);
                    }
                }
                if (sg.first && sg.last) {
#pragma unroll
                    for (int g = 0; g < NG; ++g)
                        st_f32v<TP, V>((TP *)p.dtable.ptr[S::tab(g)] + r * p.dtable.stride[S::tab(g)] + col,
                                       out[g]);
                } else {
#pragma unroll
                    for (int g = 0; g < NG; ++g)
                        st_partial16(part_slot(p.partial, c, slot, NG, g, H) + col, out[g], V);
                }
            }
        if (MODE != 2) wfirst = false;
    };

    auto process = [&](int s) {
        gran<TA, V> buf[NT][IT];
#pragma unroll
        for (int k = 0; k < IT; ++k)
            if (FULL || k * TPR + t < G)
#pragma unroll
                for (int j = 0; j < NT; ++j)
                    if (j != 2 || MODE != 3 || hdh) ld_smem(buf[j][k], stage(s, j, k));
        const long long r = rix[s];
        if (r != sg.r) {
            if (sg.r >= 0) flush();
            begin(r);
        }
        const long long row = rid[s];
        TA *dx = (TA *)p.dx + row * p.dx_stride;
        TA *dy = (TA *)p.dy + row * p.dy_stride;
        if constexpr (MODE == 2) {
            const bool hdx = p.dx != 0;
#pragma unroll
            for (int k = 0; k < IT; ++k)
                if (FULL || k * TPR + t < G) {
                    const int col = (k * TPR + t) * V;
                    float yf[V], df[V], gt[V], a[V];
                    unpack(buf[0][k], yf);
                    unpack(buf[1][k], df);
                    tab.get(0, k, gt);
                    acc.get(0, k, a);
                    if (hdx) st_gran(dx + col, buf[1][k]);
#pragma unroll
                    for (int i = 0; i < V; ++i) {
                        a[i] = __fmaf_rn(df[i], yf[i], a[i]);
                        gt[i] = __fmul_rn(df[i], gt[i]);
                    }
                    acc.put(0, k, a);
                    st_f32v<TA, V>(dy + col, gt);
                }
        } else {
            float sxx[V], sgx[V];
#pragma unroll
            for (int i = 0; i < V; ++i) sxx[i] = sgx[i] = 0.0f;
#pragma unroll
            for (int k = 0; k < IT; ++k)
                if (FULL || k * TPR + t < G) {
                    float xf[V], df[V], m[V];
                    unpack(buf[0][k], xf);
                    unpack(buf[1][k], df);
                    tab.get(0, k, m);
#pragma unroll
                    for (int i = 0; i < V; ++i) dnorm_sums(xf[i], df[i], m[i], sxx[i], sgx[i]);
                }
            float rs, c2;
            dnorm_stats<V, WPR>(sxx, sgx, red, par, tw, (float)H, p.eps, rs, c2);
#pragma unroll
            for (int k = 0; k < IT; ++k)
                if (FULL || k * TPR + t < G) {
                    const int col = (k * TPR + t) * V;
                    float xf[V], df[V], m[V], a[NACC][V];
                    // The row again from its stage (not refilled before
                    // the row is done), instead of held in registers across
                    // the reduction: the same bits, and no candidate of the
                    // tuning space spills (docs/PERF_NOTES.md).
#pragma unroll
                    for (int j = 0; j < NT; ++j)
                        if (j != 2 || MODE != 3 || hdh) ld_smem(buf[j][k], stage(s, j, k));
                    unpack(buf[0][k], xf);
                    unpack(buf[1][k], df);
                    tab.get(0, k, m);
#pragma unroll
                    for (int j = 0; j < NACC; ++j) acc.get(j, k, a[j]);
#pragma unroll
                    for (int i = 0; i < V; ++i) {
                        float xh;
                        a[0][i] = __fadd_rn(a[0][i], df[i]);
                        xf[i] = dnorm_dx(xf[i], df[i], m[i], rs, c2, xh); // dx of the norm
                        a[1][i] = __fmaf_rn(df[i], xh, a[1][i]);
                    }
                    if constexpr (MODE == 3) {
                        float dh[V], yf[V], gt[V];
                        if (hdh) {
                            unpack(buf[2][k], dh);
#pragma unroll
                            for (int i = 0; i < V; ++i) xf[i] = __fadd_rn(dh[i], xf[i]);
                        }
                        unpack(buf[3][k], yf);
                        tab.get(1, k, gt);
#pragma unroll
                        for (int i = 0; i < V; ++i) {
                            a[2][i] = __fmaf_rn(xf[i], yf[i], a[2][i]);
                            gt[i] = __fmul_rn(xf[i], gt[i]);
                        }
                        st_f32v<TA, V>(dy + col, gt);
                    }
#pragma unroll
                    for (int j = 0; j < NACC; ++j) acc.put(j, k, a[j]);
                    st_f32v<TA, V>(dx + col, xf);
                }
        }
    };

#pragma unroll
    for (int s = 0; s < PF; ++s) {
        if (b + s < e) issue(s, b + s);
        cp_commit();
    }
    if constexpr (KJIT_BWD_BEGIN_EARLY != 0 && PF >= 1)
        begin(rix[0]); // b < e: issue(0, b) has run
    for (long long base = b; base < e; base += RING) {
#pragma unroll
        for (int s = 0; s < RING; ++s) {
            const long long pos = base + s;
            if (pos < e) {
                if (pos + PF < e) issue((s + PF) % RING, pos + PF);
                cp_commit();
                cp_wait<PF>();
                process(s);
            }
        }
    }
    flush();
}

// Same arithmetic as bwd_fast, one element at a time, runtime h. The
// accumulators live in this chunk's own partial slots (slot 0 while walking
// a head segment, slot 1 otherwise: a tail is the chunk's last segment, so
// slot 1 ends up holding it); w * (1 + scale) and gate are re-read per row.
template <int MODE, class TA, class TP, class TI, int TPR>
__device__ __forceinline__ void bwd_generic(const kjit_adaln_bwd_params &p)
{
    using S = bwd_shape<MODE>;
    constexpr int V = 16 / (int)sizeof(TA);
    constexpr int WPR = TPR / 32;
    constexpr int NG = S::NACC;
    __shared__ float red[2 * 2 * 32];

    const int t = threadIdx.x;
    const int tw = t >> 5;
    int par = 0;
    const int h = p.h;
    const long long c = blockIdx.x;
    const long long b = c * p.part.chunk;
    const long long total = ldg_i32(p.part.start + p.part.r);
    const long long e = b + p.part.chunk < total ? b + p.part.chunk : total;
    if (b >= e) return;
    const TI *index = (const TI *)p.index.ptr;
    const TP *wp = (const TP *)p.w;
    const bool hw = wp != 0;
    const bool hdh = MODE == 3 && p.dh != 0;
    const bool hdx = p.dx != 0;

    long long cur = -1;
    bool first = false, last = false, wfirst = true;
    float *accp = 0; // partial + ((c*2 + slot)*NG)*h

    for (long long pos = b; pos <= e; ++pos) {
        long long row = 0, r = -1;
        if (pos < e) {
            row = p.part.perm[pos];
            r = (long long)index[row];
        }
        if (r != cur && cur >= 0) {
            // flush segment cur
            const TP *sc = (const TP *)p.table.ptr[1] + cur * p.table.stride[1];
            for (int col = t; col < h; col += TPR) {
                float v[NG];
                for (int g = 0; g < NG; ++g) v[g] = accp[(long long)g * h + col];
                if constexpr (MODE != 2) {
                    const float s1 = ld_f32(sc + col);
                    if (p.partial_w != 0) {
                        float dw = __fmul_rn(v[1], __fadd_rn(1.0f, s1));
                        float *pw = p.partial_w + c * h + col;
                        if (!wfirst) dw = __fadd_rn(*pw, dw);
                        *pw = dw;
                    }
                    if (hw) v[1] = __fmul_rn(v[1], ld_f32(wp + col));
                }
                for (int g = 0; g < NG; ++g) {
                    if (first && last)
                        st_f32((TP *)p.dtable.ptr[S::tab(g)] + cur * p.dtable.stride[S::tab(g)] + col, v[g]);
                    else
                        accp[(long long)g * h + col] = v[g];
                }
            }
            if (MODE != 2) wfirst = false;
        }
        if (pos == e) break;
        if (r != cur) {
            cur = r;
            first = ldg_i32(p.part.start + r) >= b;
            last = ldg_i32(p.part.start + r + 1) <= e;
            accp = part_slot(p.partial, c, first ? KJIT_SEG_TAIL : KJIT_SEG_HEAD, NG, 0, h);
            for (int col = t; col < h; col += TPR)
                for (int g = 0; g < NG; ++g) accp[(long long)g * h + col] = 0.0f;
        }
        const TP *sc = (const TP *)p.table.ptr[1] + r * p.table.stride[1];
        const TP *gt = (const TP *)p.table.ptr[2] + r * p.table.stride[2];
        TA *dx = (TA *)p.dx + row * p.dx_stride;
        TA *dy = (TA *)p.dy + row * p.dy_stride;
        const TA *dor = (const TA *)p.dout + row * p.dout_stride;
        if constexpr (MODE == 2) {
            const TA *yr = (const TA *)p.y + row * p.y_stride;
            for (int col = t; col < h; col += TPR) {
                const float df = ld_f32(dor + col);
                float *a = accp + col;
                *a = __fmaf_rn(df, ld_f32(yr + col), *a);
                if (hdx) dx[col] = dor[col];
                st_f32(dy + col, __fmul_rn(df, ld_f32(gt + col)));
            }
        } else {
            const TA *xr = (const TA *)p.x + row * p.x_stride;
            float sxx[V], sgx[V], rs, c2;
            dnorm_sums_generic<TA, TP, V, TPR>(xr, dor, wp, sc, hw, h, sxx, sgx);
            dnorm_stats<V, WPR>(sxx, sgx, red, par, tw, (float)h, p.eps, rs, c2);
            const TA *dhr = (const TA *)p.dh + row * p.dh_stride;
            const TA *yr = (const TA *)p.y + row * p.y_stride;
            for (int col = t; col < h; col += TPR) {
                const float xf = ld_f32(xr + col);
                const float df = ld_f32(dor + col);
                const float m = mod_of(hw, hw ? ld_f32(wp + col) : 1.0f, ld_f32(sc + col));
                float xh;
                float g = dnorm_dx(xf, df, m, rs, c2, xh);
                accp[col] = __fadd_rn(accp[col], df);
                accp[(long long)h + col] = __fmaf_rn(df, xh, accp[(long long)h + col]);
                if constexpr (MODE == 3) {
                    if (hdh) g = __fadd_rn(ld_f32(dhr + col), g);
                    float *a = accp + 2 * (long long)h + col;
                    *a = __fmaf_rn(g, ld_f32(yr + col), *a);
                    st_f32(dy + col, __fmul_rn(g, ld_f32(gt + col)));
                }
                st_f32(dx + col, g);
            }
        }
    }
}

// Forward CTAs per SM the register allocation must allow (the launch
// bounds' second argument; 0 leaves it to the compiler, as without it).
// Only for the norm ops (MODE 1, 3) with 2-byte activations and tables, and
// only where it is a tight cap: up to 4 rows per SM, as many as an estimate
// of the registers a thread needs (2 per element + 4 per granule + 12, + 32
// for the fused op) leaves room for, when that cap is at most 100 registers
// and the estimate within 85% of it. At 5376 bf16 (the measured case) it
// keeps the look-ahead variants (PF > 0) at PF 0's 72 registers instead of
// one CTA per SM fewer, and the fused forward at 80 (352 vs 383 us at 32768
// rows, H200, 2026-11-30). A loose minimum lets the compiler take more
// registers than its own choice (fewer CTAs per SM), a wrong one spills:
// elsewhere 0.
template <int MODE, class TA, class TP, int H, int TPR, int RPC> __host__ __device__ constexpr int fwd_min_ctas()
{
    constexpr int V = 16 / (int)sizeof(TA);
    constexpr int IT = H > 0 ? (H / V + TPR - 1) / TPR : 1;
    constexpr int need = 2 * IT * V + 4 * IT + (MODE == 3 ? 32 : 12);
    constexpr int fit = 65536 / (TPR * RPC * need), most = 4 / RPC > 1 ? 4 / RPC : 1;
    constexpr int m = fit < most ? fit : most;
    constexpr int cap = m >= 1 ? 65536 / (m * TPR * RPC) : 0;
    return H > 0 && MODE != 2 && sizeof(TA) == 2 && sizeof(TP) == 2 && m >= 1 && cap <= 100 &&
                   100 * need >= 85 * cap
               ? m
               : 0;
}

// Shared memory per SM of the target (bytes), 0 where not known here.
__host__ __device__ constexpr int smem_per_sm()
{
#if defined(__CUDA_ARCH__)
    return __CUDA_ARCH__ == 900 || __CUDA_ARCH__ == 1000 || __CUDA_ARCH__ == 1030 ? 228 * 1024
           : __CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 870                         ? 164 * 1024
           : __CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ == 1200 ? 100 * 1024
                                                                                    : 0;
#else
    return 0;
#endif
}

// Minimum CTAs per SM of the backward's launch bounds: 2 (a 128-register
// cap at 256 threads) unless the config's shared memory (its dynamic bytes
// as src/tune/config.c counts them, the 512-byte reduction buffer and the
// 1 KiB the driver reserves per CTA) lets only one CTA on an SM anyway:
// then 1, so the per-column state that ACCS keeps in registers has the
// whole register file instead of spilling at a cap that buys nothing (the
// fused op's backward at 8192: 416-624 bytes of local memory per thread
// at the cap, 2026-12-01). Launch bounds move no arithmetic.
template <int MODE, class TA, int H, int TPR, int PF, int ACCS> __host__ __device__ constexpr int bwd_min_ctas()
{
    constexpr int V = 16 / (int)sizeof(TA);
    constexpr int IT = H > 0 ? (H / V + TPR - 1) / TPR : 1;
    constexpr int NT = MODE == 3 ? 4 : 2, NACC = MODE == 1 ? 2 : MODE == 2 ? 1 : 3, NTAB = MODE == 3 ? 2 : 1;
    constexpr long long k = (ACCS >= 1 ? NTAB : 0) + (ACCS == 2 ? NACC : 0);
    constexpr long long dyn = (long long)(PF + 1) * NT * IT * TPR * 16 + k * IT * V * TPR * 4;
    constexpr long long per_cta = dyn + 2 * 2 * 32 * 4 + 1024;
    return TPR > 512 ? 1 : H > 0 && smem_per_sm() > 0 && 2 * per_cta > smem_per_sm() ? 1 : 2;
}

} // namespace adaln
} // namespace kjit

namespace kjit {
namespace adaln {
template <int MODE, class TA, class TP, class TI, int H, int TPR, int RPC, int PF>
__device__ __forceinline__ void fwd_rows(const kjit_adaln_fwd_params &p, long long blk, long long nblk)
{
    static_assert(MODE >= 1 && MODE <= 3, "MODE: 1 norm_modulate, 2 gated_residual, 3 fused");
    static_assert(sizeof(TA) == 2 || sizeof(TA) == 4, "TA: kjit::f32, kjit::bf16 or kjit::f16");
    static_assert(sizeof(TP) == 2 || sizeof(TP) == 4, "TP: kjit::f32 or kjit::bf16");
    static_assert(sizeof(TI) == 4 || sizeof(TI) == 8, "TI: int or long long");
    static_assert(H >= 0 && H % 8 == 0 && H <= 16384, "fast path: H a multiple of 8 up to 16384 (0 = generic)");
    static_assert(TPR >= 32 && TPR % 32 == 0 && TPR <= 1024, "TPR: a multiple of 32 up to 1024");
    static_assert(RPC >= 1 && RPC <= 15 && TPR * RPC <= 1024, "RPC: 1..15 rows, TPR * RPC <= 1024");
    static_assert(PF >= 0 && PF <= 3, "PF: 0..3 rows ahead");
    static_assert(H > 0 || PF == 0, "generic path: PF = 0");
    if constexpr (H == 0)
        fwd_generic<MODE, TA, TP, TI, TPR, RPC>(p, blk, nblk);
    else
        fwd_fast<MODE, TA, TP, TI, H, TPR, RPC, PF>(p, blk, nblk);
}
} // namespace adaln
} // namespace kjit

namespace kjit {
namespace adaln {
// A row's table index, or -1 for a bad one: such a row is skipped whatever
// the checking (as the full backward's partition leaves it out); the flag
// is raised only when checking.
template <class TI>
__device__ __forceinline__ long long dx_row_index(const kjit_adaln_bwd_params &p, long long row, int t)
{
    const long long r = (long long)((const TI *)p.index.ptr)[row];
    if (r >= 0 && r < p.index.r) return r;
    if (t == 0 && p.index.err != 0) *p.index.err = 1;
    return -1;
}

// The row gradients alone (no table or weight gradient asked for): rows in
// any order, no partition, each row's dx (and the fused op's dy) computed
// with exactly the operations and order of bwd_fast / bwd_generic at the
// same TPR, so the bits equal the full backward's.
template <int MODE, class TA, class TP, class TI, int H, int TPR>
__device__ __forceinline__ void bwd_dx_fast(const kjit_adaln_bwd_params &p)
{
    constexpr int V = 16 / (int)sizeof(TA);
    constexpr int G = H / V;
    constexpr int IT = (G + TPR - 1) / TPR;
    constexpr bool FULL = G % TPR == 0;
    constexpr int WPR = TPR / 32;
    __shared__ float red[2 * 2 * 32];
    const int t = threadIdx.x;
    const int tw = t >> 5;
    int par = 0;
    const bool hw = p.w != 0;
    const TP *wp = hw ? (const TP *)p.w : (const TP *)p.table.ptr[1];
    const bool hdh = MODE == 3 && p.dh != 0;
    for (long long row = blockIdx.x; row < p.n; row += gridDim.x) {
        const long long r = dx_row_index<TI>(p, row, t);
        if (r < 0) continue;
        const TP *sc = (const TP *)p.table.ptr[1] + r * p.table.stride[1];
        const TA *xr = (const TA *)p.x + row * p.x_stride;
        const TA *dor = (const TA *)p.dout + row * p.dout_stride;
        gran<TA, V> xa[IT], da[IT];
        float m[IT][V];
#pragma unroll
        for (int k = 0; k < IT; ++k)
            if (FULL || k * TPR + t < G) {
                const int col = (k * TPR + t) * V;
                ld_stream(xa[k], xr + col);
                ld_stream(da[k], dor + col);
                float s1[V], wf[V];
                ld_nc_f32<TP, V>(sc + col, s1);
                ld_nc_f32<TP, V>(wp + col, wf);
#pragma unroll
                for (int i = 0; i < V; ++i) m[k][i] = mod_of(hw, hw ? wf[i] : 1.0f, s1[i]);
            }
        float sxx[V], sgx[V], rs, c2;
#pragma unroll
        for (int i = 0; i < V; ++i) sxx[i] = sgx[i] = 0.0f;
#pragma unroll
        for (int k = 0; k < IT; ++k)
            if (FULL || k * TPR + t < G) {
                float xf[V], df[V];
                unpack(xa[k], xf);
                unpack(da[k], df);
#pragma unroll
                for (int i = 0; i < V; ++i) dnorm_sums(xf[i], df[i], m[k][i], sxx[i], sgx[i]);
            }
        dnorm_stats<V, WPR>(sxx, sgx, red, par, tw, (float)H, p.eps, rs, c2);
        TA *dx = (TA *)p.dx + row * p.dx_stride;
#pragma unroll
        for (int k = 0; k < IT; ++k)
            if (FULL || k * TPR + t < G) {
                const int col = (k * TPR + t) * V;
                float xf[V], df[V];
                unpack(xa[k], xf);
                unpack(da[k], df);
#pragma unroll
                for (int i = 0; i < V; ++i) {
                    float xh;
                    xf[i] = dnorm_dx(xf[i], df[i], m[k][i], rs, c2, xh);
                }
                if constexpr (MODE == 3) {
                    if (hdh) {
                        gran<TA, V> dg;
                        float dh[V];
                        ld_stream(dg, (const TA *)p.dh + row * p.dh_stride + col);
                        unpack(dg, dh);
#pragma unroll
                        for (int i = 0; i < V; ++i) xf[i] = __fadd_rn(dh[i], xf[i]);
                    }
                    float gt[V];
                    ld_nc_f32<TP, V>((const TP *)p.table.ptr[2] + r * p.table.stride[2] + col, gt);
#pragma unroll
                    for (int i = 0; i < V; ++i) gt[i] = __fmul_rn(xf[i], gt[i]);
                    st_f32v<TA, V>((TA *)p.dy + row * p.dy_stride + col, gt);
                }
                st_f32v<TA, V>(dx + col, xf);
            }
    }
}

// gated_residual's row gradients alone (no dgate): dy = dout * gate[i] with
// the full backward's one rounding per element, dx (= dres) a copy of dout
// when asked for. H = 0: any hidden size, an element per thread at a time.
template <class TA, class TP, class TI, int H, int TPR>
__device__ __forceinline__ void bwd_dy_gated(const kjit_adaln_bwd_params &p)
{
    constexpr int V = 16 / (int)sizeof(TA);
    const int t = threadIdx.x;
    const bool hdx = p.dx != 0;
    for (long long row = blockIdx.x; row < p.n; row += gridDim.x) {
        const long long r = dx_row_index<TI>(p, row, t);
        if (r < 0) continue;
        const TP *gr = (const TP *)p.table.ptr[2] + r * p.table.stride[2];
        const TA *dor = (const TA *)p.dout + row * p.dout_stride;
        TA *dx = (TA *)p.dx + row * p.dx_stride;
        TA *dy = (TA *)p.dy + row * p.dy_stride;
        if constexpr (H > 0) {
            constexpr int G = H / V;
#pragma unroll
            for (int k = 0; k < (G + TPR - 1) / TPR; ++k)
                if (G % TPR == 0 || k * TPR + t < G) {
                    const int col = (k * TPR + t) * V;
                    gran<TA, V> dg;
                    float df[V], gt[V];
                    ld_stream(dg, dor + col);
                    ld_nc_f32<TP, V>(gr + col, gt);
                    unpack(dg, df);
                    if (hdx) st_gran(dx + col, dg);
#pragma unroll
                    for (int i = 0; i < V; ++i) gt[i] = __fmul_rn(df[i], gt[i]);
                    st_f32v<TA, V>(dy + col, gt);
                }
        } else {
            for (int col = t; col < p.h; col += TPR) {
                if (hdx) dx[col] = dor[col];
                st_f32(dy + col, __fmul_rn(ld_f32(dor + col), ld_f32(gr + col)));
            }
        }
    }
}

template <int MODE, class TA, class TP, class TI, int TPR>
__device__ __forceinline__ void bwd_dx_generic(const kjit_adaln_bwd_params &p)
{
    constexpr int V = 16 / (int)sizeof(TA);
    constexpr int WPR = TPR / 32;
    __shared__ float red[2 * 2 * 32];
    const int t = threadIdx.x;
    const int tw = t >> 5;
    int par = 0;
    const int h = p.h;
    const TP *wp = (const TP *)p.w;
    const bool hw = wp != 0;
    const bool hdh = MODE == 3 && p.dh != 0;
    for (long long row = blockIdx.x; row < p.n; row += gridDim.x) {
        const long long r = dx_row_index<TI>(p, row, t);
        if (r < 0) continue;
        const TP *sc = (const TP *)p.table.ptr[1] + r * p.table.stride[1];
        const TP *gt = (const TP *)p.table.ptr[2] + r * p.table.stride[2];
        const TA *xr = (const TA *)p.x + row * p.x_stride;
        const TA *dor = (const TA *)p.dout + row * p.dout_stride;
        float sxx[V], sgx[V], rs, c2;
        dnorm_sums_generic<TA, TP, V, TPR>(xr, dor, wp, sc, hw, h, sxx, sgx);
        dnorm_stats<V, WPR>(sxx, sgx, red, par, tw, (float)h, p.eps, rs, c2);
        const TA *dhr = (const TA *)p.dh + row * p.dh_stride;
        TA *dx = (TA *)p.dx + row * p.dx_stride;
        TA *dy = (TA *)p.dy + row * p.dy_stride;
        for (int col = t; col < h; col += TPR) {
            const float xf = ld_f32(xr + col);
            const float df = ld_f32(dor + col);
            const float m = mod_of(hw, hw ? ld_f32(wp + col) : 1.0f, ld_f32(sc + col));
            float xh;
            float g = dnorm_dx(xf, df, m, rs, c2, xh);
            if constexpr (MODE == 3) {
                if (hdh) g = __fadd_rn(ld_f32(dhr + col), g);
                st_f32(dy + col, __fmul_rn(g, ld_f32(gt + col)));
            }
            st_f32(dx + col, g);
        }
    }
}
} // namespace adaln
} // namespace kjit

template <int MODE, class TA, class TP, class TI, int H, int TPR, int RPC, int PF>
__global__ void __launch_bounds__(TPR *RPC, (kjit::adaln::fwd_min_ctas<MODE, TA, TP, H, TPR, RPC>())) kjit_adaln_fwd(const __grid_constant__ kjit_adaln_fwd_params p)
{
    kjit::grid_dep_sync();
    kjit::adaln::fwd_rows<MODE, TA, TP, TI, H, TPR, RPC, PF>(p, blockIdx.x, gridDim.x);
}

// The training forward (a kernel of its own, so the plain forward's code is
// not touched): block 0 builds the backward's row partition p.part while
// the others run the rows, as a kjit_adaln_fwd grid one block smaller would.
template <int MODE, class TA, class TP, class TI, int H, int TPR, int RPC, int PF>
__global__ void __launch_bounds__(TPR *RPC, (kjit::adaln::fwd_min_ctas<MODE, TA, TP, H, TPR, RPC>())) kjit_adaln_fwd_train(const __grid_constant__ kjit_adaln_fwd_params p)
{
    kjit::grid_dep_sync();
    if (blockIdx.x == 0) {
        // A call where the row code runs at a register cap (partition.cuh).
        if constexpr (kjit::adaln::fwd_min_ctas<MODE, TA, TP, H, TPR, RPC>() > 0)
            kjit::part_small_build_call<TI>(p.index, p.part, (int *)kjit::adaln::dyn_smem);
        else
            kjit::part_small_build<TI>(p.index, p.part, (int *)kjit::adaln::dyn_smem);
    } else
        kjit::adaln::fwd_rows<MODE, TA, TP, TI, H, TPR, RPC, PF>(p, blockIdx.x - 1, gridDim.x - 1);
}

template <int MODE, class TA, class TP, class TI, int H, int TPR, int PF, int ACCS>
__global__ void __launch_bounds__(TPR, (kjit::adaln::bwd_min_ctas<MODE, TA, H, TPR, PF, ACCS>())) kjit_adaln_bwd(const __grid_constant__ kjit_adaln_bwd_params p)
{
    kjit::grid_dep_sync();
    static_assert(MODE >= 1 && MODE <= 3, "MODE: 1 norm_modulate, 2 gated_residual, 3 fused");
    static_assert(sizeof(TA) == 2 || sizeof(TA) == 4, "TA: kjit::f32, kjit::bf16 or kjit::f16");
    static_assert(sizeof(TP) == 2 || sizeof(TP) == 4, "TP: kjit::f32 or kjit::bf16");
    static_assert(sizeof(TI) == 4 || sizeof(TI) == 8, "TI: int or long long");
    static_assert(H >= 0 && H % 8 == 0 && H <= 16384, "fast path: H a multiple of 8 up to 16384 (0 = generic)");
    static_assert(TPR >= 32 && TPR % 32 == 0 && TPR <= 1024, "TPR: a multiple of 32 up to 1024");
    static_assert(PF >= 0 && PF <= 3, "PF: 0..3 rows ahead");
    static_assert(ACCS >= 0 && ACCS <= 2, "ACCS: 0, 1 or 2");
    static_assert(H > 0 || (PF == 0 && ACCS == 0), "generic path: PF = ACCS = 0");
    if constexpr (H == 0)
        kjit::adaln::bwd_generic<MODE, TA, TP, TI, TPR>(p);
    else
        kjit::adaln::bwd_fast<MODE, TA, TP, TI, H, TPR, PF, ACCS>(p);
}

// kjit_adaln_bwd_dx<MODE, TA, TP, TI, H, TPR>: the backward's row gradients
// alone (norm_modulate's dx; gated_residual's dy and optionally dx = dres;
// the fused op's dx = dres and dy), bitwise those of kjit_adaln_bwd at the
// same TPR; no partition, no workspace.
//   grid = any value in [1, n] (rows grid-stride), block = TPR, no dynamic
//   shared memory. MODE 1 and 3 read x, dout (MODE 3: also dh, NULL =
//   zeros), w, the scale table (MODE 3: the gate table) and write dx (MODE
//   3: also dy); MODE 2 reads dout and the gate table and writes dy (and dx
//   when p.dx is set).
//   A row whose index is outside [0, p.index.r) is skipped (the full
//   backward's partition leaves it out too) and raises p.index.err when
//   that is set (asynchronous checking).
template <int MODE, class TA, class TP, class TI, int H, int TPR>
__global__ void __launch_bounds__(TPR) kjit_adaln_bwd_dx(const __grid_constant__ kjit_adaln_bwd_params p)
{
    kjit::grid_dep_sync();
    static_assert(MODE >= 1 && MODE <= 3, "MODE of the row gradients: 1 norm_modulate, 2 gated_residual, 3 fused");
    static_assert(H >= 0 && H % 8 == 0 && H <= 16384, "fast path: H a multiple of 8 up to 16384 (0 = generic)");
    static_assert(TPR >= 32 && TPR % 32 == 0 && TPR <= 1024, "TPR: a multiple of 32 up to 1024");
    if constexpr (MODE == 2)
        kjit::adaln::bwd_dy_gated<TA, TP, TI, H, TPR>(p);
    else if constexpr (H == 0)
        kjit::adaln::bwd_dx_generic<MODE, TA, TP, TI, TPR>(p);
    else
        kjit::adaln::bwd_dx_fast<MODE, TA, TP, TI, H, TPR>(p);
}
