// adaln_row_gather: K (1..8) row-strided tables of (R, H), index[N].
//   forward   out_k[n] = table_k[index[n]]
//   backward  dtable_k[r] = sum_{index[n] = r} dout_k[n], fp32 in sorted-row
//             order over the partition of partition.cuh, rounded once.
//
// Template parameters: TP = kjit::bf16 | kjit::f32 (tables, out, dout,
// dtable: the table dtypes the host accepts; kjit::f16 instantiates too,
// unused), TI = int | long long (index), VEC = true when H % (16 /
// sizeof(TP)) == 0 and every base pointer and row stride (tables, out, dout,
// dtable, and partial) is 16-byte aligned; VEC = false works for any H and
// alignment. VEC changes no bit (forward is a copy; backward sums each column
// over the same rows in the same order either way): all three are chosen by
// dtype and the data's shape/alignment, none by tuning. HV = VEC ? H / (16 /
// sizeof(TP)) : H is the number of column cells (one 16-byte vector or one
// element) a thread owns one of.
//
// kjit_gather_fwd<TP, TI, VEC>   e.g. kjit_gather_fwd<kjit::bf16, int, true>
//   params kjit_gather_fwd_params
//   grid   (ceil(HV / B), k, G), block B (multiple of 32, <= 1024), smem 0
//   B and G (1..65535; rows go 32 at a time, row group z, z + G, ...) are
//   launch-only. Suggested: B = 256 (or HV rounded up to 32 if smaller),
//   G = min(ceil(N / 32), 65535).
//   An index outside [0, R) leaves its output rows untouched and, when
//   index.err != NULL, sets *index.err = 1.
//
// kjit_gather_bwd<TP, TI, VEC>   e.g. kjit_gather_bwd<kjit::bf16, long long, true>
//   params kjit_gather_bwd_params (part built by partition.cuh for this index)
//   grid   (ceil(HV / B), part.chunks, k), block B (multiple of 32), smem 0
//   B is launch-only. Suggested: B = 224 for H = 5376 bf16 (HV = 672), else
//   256. Writes dtable rows whose segment lies in one chunk; the others leave
//   fp32 partials in p.partial ([chunks][2][k][h], 16-byte aligned for VEC),
//   then launch kjit_part_finish<TP> (partition.cuh) with out = dtable,
//   out_stride = dtable_stride, ng = k, partial = p.partial, same part and h:
//   grid (ceil(h / 256), min(R, 32), k), block 256.
//   Rows with out-of-range indices are not in the partition: excluded. TI is
//   not used by the arithmetic (the partition holds row ids); it is a
//   template parameter so both index types name the same family.
// This file includes partition.cuh (offered as a header like every template),
// so one module holds the gather kernels and the partition/finish kernels.
#pragma once

#include "common/kjit_types.cuh"
#include "common/kjit_params.h"
#include "common/kjit_l2.cuh"
#include "partition.cuh"

namespace kjit {

// Streaming 16-byte store: written once, do not keep it in L2 ahead of the
// tables.
__device__ __forceinline__ void st_vec_stream(void *p, const vec16 &v)
{
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};"
                 :: "l"(p), "r"(v.w[0]), "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3]) : "memory");
}

// Read-only 16-byte load (tables: small, reused, kept in L1).
__device__ __forceinline__ vec16 ldg_vec(const void *p)
{
    const uint4 q = __ldg((const uint4 *)p);
    vec16 v;
    v.w[0] = q.x, v.w[1] = q.y, v.w[2] = q.z, v.w[3] = q.w;
    return v;
}

// One column cell a thread owns: a 16-byte vector (VEC) or one element.
template <class T, bool VEC> struct gcell;

template <class T> struct gcell<T, true> {
    typedef vec16 raw;
    static const int width = vec_width<T>::value;
    static __device__ __forceinline__ raw ld_table(const T *p) { return ldg_vec(p); }
    static __device__ __forceinline__ raw ld_stream(const T *p) { return ld_vec_stream(p); }
    static __device__ __forceinline__ void st_out(T *p, const raw &v) { st_vec_stream(p, v); }
    static __device__ __forceinline__ void add(float *acc, const raw &v)
    {
        float f[width];
        vec_to_f32<T>(v, f);
#pragma unroll
        for (int i = 0; i < width; ++i) acc[i] += f[i];
    }
    static __device__ __forceinline__ void st_round(T *p, const float *acc) { st_vec(p, f32_to_vec<T>(acc)); }
    static __device__ __forceinline__ void st_partial(float *p, const float *acc)
    {
        st_partial16(p, acc, width); // kept in the L2 for the finisher
    }
};

template <class T> struct gcell<T, false> {
    typedef T raw;
    static const int width = 1;
    static __device__ __forceinline__ raw ld_table(const T *p) { return *p; }
    static __device__ __forceinline__ raw ld_stream(const T *p) { return *p; }
    static __device__ __forceinline__ void st_out(T *p, const raw &v) { *p = v; }
    static __device__ __forceinline__ void add(float *acc, const raw &v) { acc[0] += to_f32(v); }
    static __device__ __forceinline__ void st_round(T *p, const float *acc) { st_f32(p, acc[0]); }
    static __device__ __forceinline__ void st_partial(float *p, const float *acc) { p[0] = acc[0]; }
};

} // namespace kjit

// Rows per batch of loads in flight; launch-only (no effect on any bit).
#define KJIT_GATHER_FWD_UNROLL 8
#define KJIT_GATHER_BWD_UNROLL 8

template <class TP, class TI, bool VEC>
__global__ void kjit_gather_fwd(const __grid_constant__ kjit_gather_fwd_params p)
{
    kjit::grid_dep_sync();
    static_assert(kjit::same_type<TI, int>::value || kjit::same_type<TI, long long>::value, "index is int or long long");
    typedef kjit::gcell<TP, VEC> C;
    const int U = KJIT_GATHER_FWD_UNROLL;
    const int hv = p.h / C::width;
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    const int k = blockIdx.y;
    const bool active = v < hv && k < p.k; // inactive lanes still join the shuffles
    const int lane = threadIdx.x & 31;
    const TI *ix = (const TI *)p.index.ptr;
    const long long n_rows = p.n, r_rows = p.index.r;
    const TP *tab = (const TP *)p.table.ptr[k] + (long long)v * C::width;
    const long long ts = p.table.stride[k];
    TP *out = (TP *)p.out[k] + (long long)v * C::width;
    const long long os = p.out_stride[k];
    // One CTA column sees every row: it alone raises the flag.
    int *err = (blockIdx.x == 0 && blockIdx.y == 0) ? p.index.err : 0;

    for (long long g = (long long)blockIdx.z * 32; g < n_rows; g += (long long)gridDim.z * 32) {
        int key = -1;
        if (g + lane < n_rows) {
            const long long x = (long long)ix[g + lane];
            if (x >= 0 && x < r_rows) key = (int)x;
            else if (err) *err = 1;
        }
#pragma unroll 1
        for (int j = 0; j < 32; j += U) {
            int kr[U];
#pragma unroll
            for (int u = 0; u < U; ++u) kr[u] = __shfl_sync(0xffffffffu, key, j + u);
            if (active) {
                typename C::raw d[U];
#pragma unroll
                for (int u = 0; u < U; ++u)
                    if (kr[u] >= 0) d[u] = C::ld_table(tab + kr[u] * ts);
#pragma unroll
                for (int u = 0; u < U; ++u)
                    if (kr[u] >= 0) C::st_out(out + (g + j + u) * os, d[u]);
            }
        }
    }
}

template <class TP, class TI, bool VEC>
__global__ void kjit_gather_bwd(const __grid_constant__ kjit_gather_bwd_params p)
{
    kjit::grid_dep_sync();
    static_assert(kjit::same_type<TI, int>::value || kjit::same_type<TI, long long>::value, "index is int or long long");
    typedef kjit::gcell<TP, VEC> C;
    const int U = KJIT_GATHER_BWD_UNROLL;
    const int hv = p.h / C::width;
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    const long long c = blockIdx.y;
    const int k = blockIdx.z;
    if (v >= hv || k >= p.k) return;
    kjit::seg s;
    if (!kjit::seg_first(p.part, c, s)) return;
    const TP *dout = (const TP *)p.dout[k] + (long long)v * C::width;
    const long long ds = p.dout_stride[k];
    const int *perm = p.part.perm;
    do {
        float acc[C::width];
#pragma unroll
        for (int i = 0; i < C::width; ++i) acc[i] = 0.f;
        for (long long q = s.lo; q < s.hi; q += U) {
            typename C::raw d[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (q + u < s.hi) d[u] = C::ld_stream(dout + (long long)kjit::ldg_i32(perm + q + u) * ds);
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (q + u < s.hi) C::add(acc, d[u]);
        }
        if (s.slot == KJIT_SEG_FINAL)
            C::st_round((TP *)p.dtable[k] + (long long)s.r * p.dtable_stride[k] + (long long)v * C::width, acc);
        else
            C::st_partial(kjit::part_slot(p.partial, c, s.slot, p.k, k, p.h) + (long long)v * C::width, acc);
    } while (kjit::seg_next(p.part, s));
}
