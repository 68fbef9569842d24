// Row partition shared by every backward pass: the rows sorted stably by
// their table index, cut into fixed chunks of sorted positions, plus the
// kernels that finish parameter gradients from per-chunk fp32 partials.
// Everything here depends on (N, R, index) only: no launch parameter changes
// a bit of perm, start, chunk_row or of any finished gradient.
//
// Sizes (host, C, all long long; R >= 1, N >= 1):
//   cap    = 4194304 / R;  if (cap > 8192) cap = 8192;
//            if (cap > 16 * N / R) cap = 16 * N / R;  if (cap < 1) cap = 1;
//   tile   = ((N + cap - 1) / cap + 31) / 32 * 32;  if (tile < 256) tile = 256;
//   tiles  = (N + tile - 1) / tile                  (tiles * R <= 4194304)
//   target = 28 MiB / ((2 * NG + (dw ? 1 : 0)) * H * 4), clamped to 16..MAX
//            (MAX: 128 for the fused op, one wave of one CTA per SM on 132 or
//            148 SMs; 256 for the others)
//   chunk  = (N + target - 1) / target;  if (chunk < MIN) chunk = MIN;
//            (MIN: 32 for the fused op, whose backward fits one CTA per SM,
//            so more chunks than SMs run in two waves; 16 for the others)
//   chunks = (N + chunk - 1) / chunk                (<= 256)
//   (the host computes these: src/ops/partition.c; kernels read part.chunk)
//   sblk   = (tiles * R + 4095) / 4096              (scan blocks)
// Workspace: perm N ints, start R + 1 ints, tile_pos tiles * R ints (r-major,
// tile_pos[r * tiles + t]), chunk_row chunks ints, scan_state sblk + 1
// unsigned long long (8-byte aligned). None needs clearing beforehand.
// Partials of a backward pass with NG table gradients: chunks * 2 * NG * H
// floats, partial[((c * 2 + slot) * NG + g) * H + col]; nothing needs
// clearing: only slots that are written are read.
//
// Build: three launches, always these three in this order on one stream, no
// host readback (graph capturable), or for small problems the one launch of
// kjit_part_small (below the scatter), which writes the same bits. All take
// kjit_part_build_params with index.r == part.r.
//   kjit_part_count<TI>    TI = int | long long; e.g. kjit_part_count<int>
//       grid ceil(tiles / W), block 32 * W (W warps, 1..32), one warp per tile
//       smem W * R * 4 to keep the counters in shared memory, or 0 (counters
//            in tile_pos); the kernel uses shared memory iff the launch gave
//            at least W * R * 4 bytes.
//       tile_pos[r * tiles + t] = rows of tile t with index r; zeroes
//       scan_state. An index outside [0, R) is always left out (checking on
//       or off) and sets *index.err = 1 when index.err != NULL.
//   kjit_part_scan<B>      B = 128 | 256 | 512 | 1024; e.g. kjit_part_scan<256>
//       grid sblk (or more), block B, smem 0 (static 17 KB)
//       exclusive scan of tile_pos in place in r-major order (the order of the
//       sort), single pass with decoupled look-back (integer, exact);
//       start[r] = tile_pos[r * tiles], start[R] = number of valid rows.
//   kjit_part_scatter<TI>
//       grid, block, smem as kjit_part_count
//       perm[tile_pos[r * tiles + t] + rank] = n, rank = order of row n among
//       the rows of tile t with index r: stable. Consumes tile_pos. Also fills
//       chunk_row[c] (-1 for chunks past start[R]).
// W, B, grids and smem are launch-only. Rows are walked 32 at a time per warp
// (__match_any_sync + __popc give ranks), so the order is the row order.
//
// Chunks: chunk c covers sorted positions [c * chunk, min((c+1) * chunk,
// start[R])), possibly empty. The segment of table row r is [start[r],
// start[r+1]). In chunk c a segment is
//   FINAL  entirely inside the chunk: the chunk writes the rounded gradient;
//   TAIL   (slot 1) begins in the chunk and continues after it;
//   HEAD   (slot 0) began in an earlier chunk (it may continue after too).
// So a chunk writes slot 0 at most once (its first segment) and slot 1 at
// most once (its last). kjit_part_finish adds tail + heads in chunk order and
// writes 0 for empty rows; every gradient row is written exactly once.
//
// Device API for a backward kernel (include "partition.cuh"; every thread may
// run it, all threads of a chunk get the same answers; reads start[] and
// chunk_row[] through the read-only path):
//   kjit::seg s;
//   if (kjit::seg_first(p.part, c, s)) do {
//       // s.r: table row; [s.lo, s.hi): this chunk's sorted positions of r;
//       // s.seg_begin/s.seg_end: the whole segment; s.slot: KJIT_SEG_FINAL,
//       // KJIT_SEG_HEAD (0) or KJIT_SEG_TAIL (1). First row of the segment in
//       // the chunk: q == s.lo; last: q == s.hi - 1.
//       float acc = 0.f;
//       for (long long q = s.lo; q < s.hi; ++q) {
//           long long n = p.part.perm[q];          // original row id
//           acc += f(n);                           // strictly in q order
//       }
//       if (s.slot == KJIT_SEG_FINAL) out_g[s.r * stride_g + col] = round(acc);
//       else kjit::part_slot(p.partial, c, s.slot, NG, g, H)[col] = acc;
//   } while (kjit::seg_next(p.part, s));
// Launch such a kernel over c in [0, part.chunks); chunks past start[R] get
// seg_first() == false. A per-row quantity (dx) is computed for each q as the
// walk reaches it; a dw-style column sum writes partial_w[c][col] for every
// chunk with rows (fp32, sum over the chunk's rows in q order).
//
// Finishers (launch right after the backward kernel, same stream; the
// partition must be complete before that kernel's dependency wait returns,
// and that kernel must wait before it lets dependents launch, as every kjit
// kernel does on its first line: the finisher reads start[] before its own
// wait):
//   kjit_part_finish<TP>     TP = kjit::bf16 | kjit::f16 | kjit::f32
//       kjit_finish_params; grid (X, Y, ng + (partial_w ? 1 : 0)), block B
//       (multiple of 32, <= 1024), smem 0. X, Y >= 1 and B are launch-only
//       (columns and work items are grid-strided; a block takes rows y, y + Y,
//       ...). Suggested B = 256, X = ceil(h / 256), Y = min(R, 32).
//       z < ng: for each row whose segment crosses chunks (c0 = start[r] /
//       chunk != c1 = (start[r+1] - 1) / chunk): tail(c0) + head(c0+1) + ...
//       + head(c1), rounded once; for each empty row: 0; other rows untouched.
//       z == ng (column sums, e.g. dw): dw[col] = the sum of partial_w[c][col]
//       over the chunks that hold rows (c < ceil(start[R] / chunk)), 0 if
//       none, in a fixed order: groups of 32 consecutive chunks, each summed
//       in chunk order, then the group sums in group order. The X * Y blocks
//       of that plane take 32 columns each, their warps the groups.
//       With KJIT_L2_HINT bit 2 (common/kjit_l2.cuh; on by default) and
//       h % 32 == 0, each partial line read is discarded from the L2 after
//       its read: the partials are indeterminate after this kernel, so it
//       cannot be run twice on one backward's partials.
#pragma once

#include "common/kjit_types.cuh"
#include "common/kjit_params.h"
#include "common/kjit_l2.cuh"

#define KJIT_SEG_HEAD 0
#define KJIT_SEG_TAIL 1
#define KJIT_SEG_FINAL 2

namespace kjit {

template <class A, class B> struct same_type { static const bool value = false; };
template <class A> struct same_type<A, A> { static const bool value = true; };

__device__ __forceinline__ unsigned lanemask_lt()
{
    unsigned m;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
    return m;
}

__device__ __forceinline__ unsigned dynamic_smem_bytes()
{
    unsigned m;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(m));
    return m;
}

// Read-only loads (data not written during the kernel).
__device__ __forceinline__ int ldg_i32(const int *p)
{
    return __ldg(p);
}
// A backward's fp32 partial (written before this grid's wait; read once).
__device__ __forceinline__ float ld_partial(const float *p)
{
    if constexpr ((KJIT_L2_HINT & 8) != 0) return ldg_f32_hint(p, l2_evict_first());
    else return __ldg(p);
}
// From the L2 (the point of coherence), never a line an L1 kept: for reads
// made before a grid's dependency wait (volatile: it stays behind its guard).
__device__ __forceinline__ int ldcg_i32(const int *p)
{
    int v;
    asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

// Table row of row n, or -1 when n >= n1 or the index is outside [0, r).
template <class TI>
__device__ __forceinline__ int part_key(const TI *ix, long long n, long long n1, long long r, bool &bad)
{
    if (n >= n1) return -1;
    // Through the L2 (.cg): kjit_part_beside reads the index before its
    // griddepcontrol.wait, and a line another grid left in this SM's L1
    // must not answer it; the L2 holds what the index's writer completed.
    const long long v = (long long)__ldcg(ix + n);
    if (v < 0 || v >= r) {
        bad = true;
        return -1;
    }
    return (int)v;
}

// Where a warp keeps the counters of its tile: shared memory when the launch
// gave enough, else the tile's column of tile_pos (stride tiles).
struct part_ctr {
    int *base;
    long long stride;
    bool shared;
};

__device__ __forceinline__ part_ctr part_counters(const kjit_partition &pt, long long t, int *smem)
{
    const int warps = blockDim.x >> 5;
    part_ctr c;
    c.shared = (unsigned long long)dynamic_smem_bytes() >= (unsigned long long)warps * pt.r * 4ull;
    if (c.shared) {
        c.base = smem + (long long)(threadIdx.x >> 5) * pt.r;
        c.stride = 1;
    } else {
        c.base = pt.tile_pos + t;
        c.stride = pt.tiles;
    }
    return c;
}

// Pointer to the partial row of (chunk c, slot, gradient g) in a
// [chunks][2][ng][h] fp32 workspace.
__device__ __forceinline__ float *part_slot(float *partial, long long c, int slot, int ng, int g, int h)
{
    return partial + ((c * 2 + slot) * ng + g) * (long long)h;
}
__device__ __forceinline__ const float *part_slot(const float *partial, long long c, int slot, int ng, int g, int h)
{
    return partial + ((c * 2 + slot) * ng + g) * (long long)h;
}

// One segment of one chunk, see the head comment.
struct seg {
    long long lo, hi;               // this chunk's positions of row r
    long long seg_begin, seg_end;   // the whole segment of row r
    long long chunk_lo, chunk_hi;   // the chunk's positions
    int r;
    int slot;                       // KJIT_SEG_FINAL, _HEAD or _TAIL
};

__device__ __forceinline__ void seg_set(const kjit_partition &pt, seg &s, int r, long long b)
{
    s.r = r;
    s.seg_begin = b;
    s.seg_end = ldg_i32(pt.start + r + 1);
    s.lo = b > s.chunk_lo ? b : s.chunk_lo;
    s.hi = s.seg_end < s.chunk_hi ? s.seg_end : s.chunk_hi;
    s.slot = s.seg_begin < s.chunk_lo ? KJIT_SEG_HEAD : (s.seg_end > s.chunk_hi ? KJIT_SEG_TAIL : KJIT_SEG_FINAL);
}

// Largest r in [lo, R) with start[r] <= x, given start[lo] <= x < start[R].
__device__ __forceinline__ int seg_search(const int *start, int lo, int hi, long long x)
{
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if ((long long)ldg_i32(start + mid) <= x) lo = mid;
        else hi = mid;
    }
    return lo;
}

// First segment of chunk c; false when the chunk holds no rows.
__device__ __forceinline__ bool seg_first(const kjit_partition &pt, long long c, seg &s)
{
    const long long total = ldg_i32(pt.start + pt.r);
    s.chunk_lo = c * pt.chunk;
    s.chunk_hi = s.chunk_lo + pt.chunk < total ? s.chunk_lo + pt.chunk : total;
    if (s.chunk_lo >= s.chunk_hi) return false;
    const int r = ldg_i32(pt.chunk_row + c);
    seg_set(pt, s, r, ldg_i32(pt.start + r));
    return true;
}

// Next non-empty segment of the chunk; false at the chunk's end.
__device__ __forceinline__ bool seg_next(const kjit_partition &pt, seg &s)
{
    if (s.hi >= s.chunk_hi) return false;
    const long long x = s.seg_end; // == s.hi, the next position
    int r = s.r + 1;
    if ((long long)ldg_i32(pt.start + r + 1) <= x) // empty rows between: search
        r = seg_search(pt.start, r, (int)pt.r, x);
    seg_set(pt, s, r, x);
    return true;
}

} // namespace kjit

#define KJIT_PART_STEPS 8
#define KJIT_COLSUM_GROUP 32
#define KJIT_PART_SCAN_SPAN 4096
#define KJIT_PART_FLAG_AGG 1ull
#define KJIT_PART_FLAG_INCL 2ull

template <class TI>
__global__ void kjit_part_count(const __grid_constant__ kjit_part_build_params p)
{
    kjit::grid_dep_sync();
    static_assert(kjit::same_type<TI, int>::value || kjit::same_type<TI, long long>::value, "index is int or long long");
    extern __shared__ int kjit_part_smem[];
    const kjit_partition &pt = p.part;
    {
        const long long nst = (pt.tiles * pt.r + KJIT_PART_SCAN_SPAN - 1) / KJIT_PART_SCAN_SPAN + 1;
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < nst; i += (long long)gridDim.x * blockDim.x)
            pt.scan_state[i] = 0ull;
    }
    const long long t = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= pt.tiles) return;
    const int lane = threadIdx.x & 31;
    const unsigned lt = kjit::lanemask_lt();
    const kjit::part_ctr ctr = kjit::part_counters(pt, t, kjit_part_smem);
    for (long long r = lane; r < pt.r; r += 32) ctr.base[r * ctr.stride] = 0;
    __syncwarp();

    const TI *ix = (const TI *)p.index.ptr;
    const long long n0 = t * pt.tile;
    const long long n1 = n0 + pt.tile < pt.n ? n0 + pt.tile : pt.n;
    bool bad = false;
    for (long long b = n0; b < n1; b += 32 * KJIT_PART_STEPS) {
        int key[KJIT_PART_STEPS];
#pragma unroll
        for (int u = 0; u < KJIT_PART_STEPS; ++u) key[u] = kjit::part_key(ix, b + u * 32 + lane, n1, pt.r, bad);
#pragma unroll
        for (int u = 0; u < KJIT_PART_STEPS; ++u) {
            const unsigned m = __match_any_sync(0xffffffffu, key[u]);
            if (key[u] >= 0 && (m & lt) == 0) atomicAdd(ctr.base + key[u] * ctr.stride, __popc(m));
        }
    }
    if (bad && p.index.err) *p.index.err = 1;
    if (ctr.shared) {
        __syncwarp();
        for (long long r = lane; r < pt.r; r += 32) pt.tile_pos[r * pt.tiles + t] = ctr.base[r];
    }
}

namespace kjit {
__device__ __forceinline__ unsigned long long ld_volatile_u64(const unsigned long long *p)
{
    return *(const volatile unsigned long long *)p;
}
__device__ __forceinline__ void st_volatile_u64(unsigned long long *p, unsigned long long v)
{
    *(volatile unsigned long long *)p = v;
}
__device__ __forceinline__ int warp_incl_scan(int x)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    return x;
}
} // namespace kjit

template <int B>
__global__ void __launch_bounds__(B) kjit_part_scan(const __grid_constant__ kjit_part_build_params p)
{
    kjit::grid_dep_sync();
    static_assert(B == 128 || B == 256 || B == 512 || B == 1024, "block is 128, 256, 512 or 1024");
    const int SPAN = KJIT_PART_SCAN_SPAN, ITEMS = SPAN / B, WARPS = B / 32;
    __shared__ int buf[SPAN + SPAN / 32]; // padded: element i at i + i / 32
    __shared__ int warp_off[WARPS];
    __shared__ long long s_id;
    __shared__ int s_prefix, s_total;
    const kjit_partition &pt = p.part;
    const long long e_end = pt.tiles * pt.r;
    const long long nblk = (e_end + SPAN - 1) / SPAN;
    unsigned long long *state = pt.scan_state;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // Blocks take their span in the order they start, so every predecessor a
    // block waits on is already running (no dependence on the scheduler).
    if (tid == 0) s_id = (long long)atomicAdd(state + nblk, 1ull);
    __syncthreads();
    const long long id = s_id;
    if (id >= nblk) return;
    const long long base = id * SPAN;
    int *tp = pt.tile_pos;

#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
        const int i = j * B + tid;
        buf[i + (i >> 5)] = base + i < e_end ? tp[base + i] : 0;
    }
    __syncthreads();
    int v[ITEMS];
    int sum = 0;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
        const int i = tid * ITEMS + j;
        v[j] = sum;
        sum += buf[i + (i >> 5)];
    }
    const int incl = kjit::warp_incl_scan(sum);
    if (lane == 31) warp_off[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const int w = lane < WARPS ? warp_off[lane] : 0;
        const int wi = kjit::warp_incl_scan(w);
        if (lane < WARPS) warp_off[lane] = wi - w;
        const int agg = __shfl_sync(0xffffffffu, wi, 31);
        int excl = 0;
        if (id == 0) {
            if (lane == 0) kjit::st_volatile_u64(state, (KJIT_PART_FLAG_INCL << 32) | (unsigned)agg);
        } else {
            if (lane == 0) kjit::st_volatile_u64(state + id, (KJIT_PART_FLAG_AGG << 32) | (unsigned)agg);
            for (long long j = id - 1;;) {
                const long long k = j - lane; // lane 0 nearest
                const unsigned long long w64 = k >= 0 ? kjit::ld_volatile_u64(state + k) : (KJIT_PART_FLAG_INCL << 32);
                const unsigned flag = (unsigned)(w64 >> 32);
                if (__any_sync(0xffffffffu, flag == 0)) continue; // a predecessor has not published yet
                const unsigned m = __ballot_sync(0xffffffffu, flag == (unsigned)KJIT_PART_FLAG_INCL);
                const int stop = m ? __ffs(m) - 1 : 31;
                int x = lane <= stop ? (int)(unsigned)w64 : 0;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
                excl += x;
                if (m) break;
                j -= 32;
            }
            if (lane == 0) kjit::st_volatile_u64(state + id, (KJIT_PART_FLAG_INCL << 32) | (unsigned)(excl + agg));
        }
        if (lane == 0) {
            s_prefix = excl;
            s_total = excl + agg;
        }
    }
    __syncthreads();
    const int off = s_prefix + warp_off[warp] + incl - sum;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
        const int i = tid * ITEMS + j;
        buf[i + (i >> 5)] = off + v[j];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
        const int i = j * B + tid;
        const long long e = base + i;
        if (e < e_end) {
            const int x = buf[i + (i >> 5)];
            tp[e] = x;
            if (e % pt.tiles == 0) pt.start[e / pt.tiles] = x;
        }
    }
    if (id == nblk - 1 && tid == 0) pt.start[pt.r] = s_total;
}

template <class TI>
__global__ void kjit_part_scatter(const __grid_constant__ kjit_part_build_params p)
{
    kjit::grid_dep_sync();
    static_assert(kjit::same_type<TI, int>::value || kjit::same_type<TI, long long>::value, "index is int or long long");
    extern __shared__ int kjit_part_smem[];
    const kjit_partition &pt = p.part;
    {
        const long long total = kjit::ldg_i32(pt.start + pt.r);
        for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < pt.chunks; c += (long long)gridDim.x * blockDim.x) {
            const long long pos = c * pt.chunk;
            pt.chunk_row[c] = pos < total ? kjit::seg_search(pt.start, 0, (int)pt.r, pos) : -1;
        }
    }
    const long long t = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= pt.tiles) return;
    const int lane = threadIdx.x & 31;
    const unsigned lt = kjit::lanemask_lt();
    const kjit::part_ctr ctr = kjit::part_counters(pt, t, kjit_part_smem);
    if (ctr.shared)
        for (long long r = lane; r < pt.r; r += 32) ctr.base[r] = pt.tile_pos[r * pt.tiles + t];
    __syncwarp();

    const TI *ix = (const TI *)p.index.ptr;
    const long long n0 = t * pt.tile;
    const long long n1 = n0 + pt.tile < pt.n ? n0 + pt.tile : pt.n;
    bool bad = false;
    for (long long b = n0; b < n1; b += 32 * KJIT_PART_STEPS) {
        int key[KJIT_PART_STEPS];
#pragma unroll
        for (int u = 0; u < KJIT_PART_STEPS; ++u) key[u] = kjit::part_key(ix, b + u * 32 + lane, n1, pt.r, bad);
#pragma unroll
        for (int u = 0; u < KJIT_PART_STEPS; ++u) {
            const unsigned m = __match_any_sync(0xffffffffu, key[u]);
            int *c = ctr.base + (long long)(key[u] < 0 ? 0 : key[u]) * ctr.stride;
            int pos = 0;
            if (key[u] >= 0) {
                pos = *c;
                pt.perm[pos + __popc(m & lt)] = (int)(b + u * 32 + lane);
            }
            __syncwarp();
            if (key[u] >= 0 && (m & lt) == 0) *c = pos + __popc(m);
            __syncwarp();
        }
    }
}

// The same build in one CTA, for small problems: count, scan and scatter in
// shared memory, one launch instead of three (at 4097 rows the three took
// 4.2 + 4.0 + 4.8 us, mostly fixed cost). Writes exactly what the three
// write that a backward reads (perm, start, chunk_row; not tile_pos or
// scan_state), bit for bit: the same tiles, the same per-tile walk.
//   kjit_part_small<TI>   TI = int | long long
//       grid 1, block 32 * W (W warps, 1..32; warp w takes tiles w, w + W, ...;
//       the host launches 1024 threads: NVRTC 13.0 gives it 40 / 42
//       registers for int / long long on sm_90, under the 64 that allows),
//       smem tiles * R * 4 bytes (the host uses it when that is <= 48 KiB).
// The body is part_small_build, also run by one extra CTA of a training
// forward (kernel_templates/adaln.cuh) with that kernel's block size: any
// multiple of 32 threads up to 1024, counters in the launch's dynamic
// shared memory (at least tiles * R * 4 bytes). The walk is the same for
// every block size, so are the bits.
namespace kjit {
template <class TI>
__device__ __forceinline__ void part_small_build(const kjit_index_arg &ixa, const kjit_partition &pt, int *cnt)
{
    static_assert(kjit::same_type<TI, int>::value || kjit::same_type<TI, long long>::value, "index is int or long long");
    __shared__ int warp_off[32];
    __shared__ int s_total;
    // cnt[r * tiles + t], the order of the sort
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
    const unsigned lt = kjit::lanemask_lt();
    const long long E = pt.tiles * pt.r;
    const TI *ix = (const TI *)ixa.ptr;
    for (long long i = tid; i < E; i += blockDim.x) cnt[i] = 0;
    __syncthreads();

    // Count: per tile, exactly as kjit_part_count.
    bool bad = false;
    for (long long t = warp; t < pt.tiles; t += warps) {
        const long long n0 = t * pt.tile;
        const long long n1 = n0 + pt.tile < pt.n ? n0 + pt.tile : pt.n;
        for (long long b = n0; b < n1; b += 32 * KJIT_PART_STEPS) {
            int key[KJIT_PART_STEPS];
#pragma unroll
            for (int u = 0; u < KJIT_PART_STEPS; ++u) key[u] = kjit::part_key(ix, b + u * 32 + lane, n1, pt.r, bad);
#pragma unroll
            for (int u = 0; u < KJIT_PART_STEPS; ++u) {
                const unsigned m = __match_any_sync(0xffffffffu, key[u]);
                if (key[u] >= 0 && (m & lt) == 0) cnt[key[u] * pt.tiles + t] += __popc(m);
                __syncwarp();
            }
        }
    }
    if (bad && ixa.err) *ixa.err = 1;
    __syncthreads();

    // Exclusive scan in place: thread i takes a contiguous run of items.
    const long long per = (E + blockDim.x - 1) / blockDim.x;
    const long long lo = (long long)tid * per < E ? (long long)tid * per : E;
    const long long hi = lo + per < E ? lo + per : E;
    int sum = 0;
    for (long long i = lo; i < hi; ++i) sum += cnt[i];
    const int incl = kjit::warp_incl_scan(sum);
    if (lane == 31) warp_off[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const int w = lane < warps ? warp_off[lane] : 0;
        const int wi = kjit::warp_incl_scan(w);
        if (lane < warps) warp_off[lane] = wi - w;
        if (lane == 31) s_total = wi;
    }
    __syncthreads();
    int off = warp_off[warp] + incl - sum;
    for (long long i = lo; i < hi; ++i) {
        const int v = cnt[i];
        cnt[i] = off;
        off += v;
    }
    __syncthreads();
    const int total = s_total;
    for (long long r = tid; r < pt.r; r += blockDim.x) pt.start[r] = cnt[r * pt.tiles];
    if (tid == 0) pt.start[pt.r] = total;
    // chunk_row[c]: the largest r with start[r] <= c * chunk (< total).
    for (long long c = tid; c < pt.chunks; c += blockDim.x) {
        const long long pos = c * pt.chunk;
        int r = -1;
        if (pos < total) {
            int a = 0, z = (int)pt.r;
            while (z - a > 1) {
                const int mid = (a + z) >> 1;
                if ((long long)cnt[(long long)mid * pt.tiles] <= pos) a = mid;
                else z = mid;
            }
            r = a;
        }
        pt.chunk_row[c] = r;
    }
    __syncthreads(); // start values read above before the scatter moves them

    // Scatter: per tile, exactly as kjit_part_scatter.
    for (long long t = warp; t < pt.tiles; t += warps) {
        const long long n0 = t * pt.tile;
        const long long n1 = n0 + pt.tile < pt.n ? n0 + pt.tile : pt.n;
        for (long long b = n0; b < n1; b += 32 * KJIT_PART_STEPS) {
            int key[KJIT_PART_STEPS];
#pragma unroll
            for (int u = 0; u < KJIT_PART_STEPS; ++u) key[u] = kjit::part_key(ix, b + u * 32 + lane, n1, pt.r, bad);
#pragma unroll
            for (int u = 0; u < KJIT_PART_STEPS; ++u) {
                const unsigned m = __match_any_sync(0xffffffffu, key[u]);
                int *c = cnt + (long long)(key[u] < 0 ? 0 : key[u]) * pt.tiles + t;
                int pos = 0;
                if (key[u] >= 0) {
                    pos = *c;
                    pt.perm[pos + __popc(m & lt)] = (int)(b + u * 32 + lane);
                }
                __syncwarp();
                if (key[u] >= 0 && (m & lt) == 0) *c = pos + __popc(m);
                __syncwarp();
            }
        }
    }
}
// The same build as a call of its own (not inlined): its registers then
// stay out of the caller's code. The training forwards that run at a
// register cap (fwd_min_ctas > 0) use it: inlined, it made their row code
// spill (NVRTC 13.0, sm_90: 20 bytes in norm_modulate's default forward at
// 5376 bf16, 48 in the fused op's; none as a call; tests/test_spills.c).
// The others keep it inlined (gated_residual's training pair at 4097 rows
// was 2 us slower with the call, H200, 2026-12-01).
template <class TI>
__device__ __noinline__ void part_small_build_call(const kjit_index_arg &ixa, const kjit_partition &pt, int *cnt)
{
    part_small_build<TI>(ixa, pt, cnt);
}
} // namespace kjit

template <class TI>
__global__ void __launch_bounds__(1024, 1) kjit_part_small(const __grid_constant__ kjit_part_build_params p)
{
    kjit::grid_dep_sync();
    extern __shared__ int kjit_part_smem[];
    kjit::part_small_build<TI>(p.index, p.part, kjit_part_smem);
}

// The same build, launched right after a training forward's kernel with
// programmatic dependent launch, to run beside it (on an SM the forward's
// persistent grid leaves free) instead of before it:
//   kjit_part_beside<TI>   grid 1, block and smem as kjit_part_small
// It waits for the forward only at its end. At its start it needs nothing
// the forward writes (it reads the index, which the forward only reads, and
// writes the partition, which the forward does not touch), and every grid
// before the forward has completed: the forward waits for them before it
// lets this grid launch. The wait at the end keeps the stream's order for
// what follows: this grid completes after the forward, so a grid that waits
// for this one sees the forward's writes too. Launched without the
// attribute (or before sm_90), it runs after the forward, as any launch.
// Its index loads are made without a wait: they rely on the index's last
// writer having completed before this grid launched, which the CUDA
// documents order but do not state makes the writes visible to a grid that
// has not waited (griddepcontrol.wait is what they document). So they go
// through the L2 (ld.global.cg, part_key), where a completed grid's writes
// are, never a line left in this SM's L1. test_adaln's two training steps
// on one stream, the index rewritten between them, would show a stale read.
template <class TI>
__global__ void __launch_bounds__(1024, 1) kjit_part_beside(const __grid_constant__ kjit_part_build_params p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    extern __shared__ int kjit_part_smem[];
    kjit::part_small_build<TI>(p.index, p.part, kjit_part_smem);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

namespace kjit {
// Sum over m >= 0 strided fp32 partials, strictly in order, with up to U
// loads in flight per thread. U = 32 covers a group of the column sums and,
// at R = 9, a table row's heads (27 at 4097 rows, 28 at 32768) in one round,
// at half the registers of 64 (more finisher blocks resident at once). U
// changes only how many loads are in flight, never the order of the adds.
__device__ __forceinline__ float sum_strided(const float *q, long long m, long long stride, float acc)
{
    const int U = 32;
    for (; m >= U; m -= U, q += U * stride) {
        float v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = ld_partial(q + u * stride);
#pragma unroll
        for (int u = 0; u < U; ++u) acc += v[u];
    }
    if (m > 0) {
        float v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = u < m ? ld_partial(q + u * stride) : 0.f;
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (u < m) acc += v[u];
    }
    return acc;
}
} // namespace kjit

// The partition (start[]) was written by a grid that completed before the
// backward kernel's own wait returned, so before this grid could launch:
// each block reads it (from the L2) and finds its work before waiting for
// the backward kernel (programmatic dependent launch), and only the
// partials after.
template <class TP>
__global__ void kjit_part_finish(const __grid_constant__ kjit_finish_params p)
{
    __shared__ int list_r[1024], list_c0[1024], list_m[1024];
    __shared__ int n_list;
    const int g = blockIdx.z;
    const kjit_partition &pt = p.part;
    const long long chunk = pt.chunk;
    if (g == p.ng) {
        // Column sums. The chunks are cut into groups of KJIT_COLSUM_GROUP
        // consecutive chunks (at most 8 groups: chunks <= 256); each group is
        // summed in chunk order, then the group sums in group order: a fixed
        // order (independent of the launch) with one round of loads in
        // flight. A block takes 32 columns; its warps take the groups.
        __shared__ float grp[8][32];
        if (p.partial_w == 0) return;
        const long long total = kjit::ldcg_i32(pt.start + pt.r);
        const long long m = (total + chunk - 1) / chunk; // chunks holding rows
        const int ngrp = (int)((m + KJIT_COLSUM_GROUP - 1) / KJIT_COLSUM_GROUP);
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
        const int blk = blockIdx.y * gridDim.x + blockIdx.x, nblk = gridDim.x * gridDim.y;
        kjit::grid_dep_sync();
        for (long long c0 = (long long)blk * 32; c0 < p.h; c0 += (long long)nblk * 32) {
            const long long col = c0 + lane;
            if (col < p.h)
                for (int j = warp; j < ngrp; j += warps) {
                    const long long a = (long long)j * KJIT_COLSUM_GROUP;
                    const long long k = m - a < KJIT_COLSUM_GROUP ? m - a : KJIT_COLSUM_GROUP;
                    const float *q = p.partial_w + a * p.h + col;
                    grp[j][lane] = kjit::sum_strided(q + p.h, k - 1, p.h, kjit::ld_partial(q));
                    if ((KJIT_L2_HINT & 2) && p.h % 32 == 0) {
                        // Each line of partial_w is read here once, by this
                        // warp; a lane drops each.
                        __syncwarp();
                        for (long long u = lane; u < k; u += 32) kjit::l2_discard_line(q - lane + u * p.h);
                    }
                }
            __syncthreads();
            if (warp == 0 && col < p.h) {
                float acc = 0.f;
                if (ngrp > 0) {
                    acc = grp[0][lane];
                    for (int j = 1; j < ngrp; ++j) acc += grp[j][lane];
                }
                kjit::st_f32((TP *)p.dw + col, acc);
            }
            __syncthreads();
        }
        return;
    }
    if (g > p.ng) return;
    bool waited = false;
    const long long cstride = 2ll * p.ng * p.h; // one chunk's partials
    TP *out = (TP *)p.out[g];
    const long long os = p.out_stride[g];
    const int col0 = blockIdx.x * blockDim.x + threadIdx.x, cstep = gridDim.x * blockDim.x;
    // This block owns rows r = blockIdx.y + i * gridDim.y. Its threads find
    // in parallel the rows needing work (crossing or empty); the list order
    // does not matter (one output row per entry).
    for (long long i0 = 0; blockIdx.y + i0 * gridDim.y < pt.r; i0 += blockDim.x) {
        if (threadIdx.x == 0) n_list = 0;
        __syncthreads();
        const long long r = blockIdx.y + (i0 + threadIdx.x) * gridDim.y;
        if (r < pt.r) {
            const long long b = kjit::ldcg_i32(pt.start + r), e = kjit::ldcg_i32(pt.start + r + 1);
            const long long c0 = b / chunk, c1 = (e - 1) / chunk;
            if (b == e || c0 != c1) {
                const int i = atomicAdd(&n_list, 1);
                list_r[i] = (int)r;
                list_c0[i] = (int)c0;
                list_m[i] = b == e ? -1 : (int)(c1 - c0); // heads, or -1: empty row
            }
        }
        __syncthreads();
        const int nl = n_list;
        if (!waited) kjit::grid_dep_sync(), waited = true;
        for (int i = 0; i < nl; ++i) {
            const long long rr = list_r[i], c0 = list_c0[i];
            const int heads = list_m[i];
            for (int col = col0; col < p.h; col += cstep) {
                float acc = 0.f;
                if (heads >= 0) {
                    acc = kjit::ld_partial(kjit::part_slot(p.partial, c0, KJIT_SEG_TAIL, p.ng, g, p.h) + col);
                    const float *q = kjit::part_slot(p.partial, c0 + 1, KJIT_SEG_HEAD, p.ng, g, p.h) + col;
                    acc = kjit::sum_strided(q, heads, cstride, acc);
                }
                kjit::st_f32(out + rr * os + col, acc);
                if ((KJIT_L2_HINT & 2) && heads >= 0 && p.h % 32 == 0) {
                    // With h % 32 == 0 the warp read whole lines (its 32
                    // columns from cb), each slot's only reader; a lane
                    // drops each: u = 0 the tail, u > 0 head u - 1.
                    __syncwarp();
                    const int lane = threadIdx.x & 31;
                    const long long cb = col - lane;
                    for (int u = lane; u <= heads; u += 32)
                        kjit::l2_discard_line(kjit::part_slot(p.partial, c0 + u, u == 0 ? KJIT_SEG_TAIL : KJIT_SEG_HEAD,
                                                              p.ng, g, p.h) + cb);
                }
            }
        }
        __syncthreads();
    }
}
