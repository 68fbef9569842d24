/* A norm_modulate forward whose rows are split over a thread-block cluster,
 * as a probe (a measurement, not part of kjit): docs/PERF_NOTES.md, "the
 * forward split over a cluster".
 *
 * Why: at 4097 rows the forward's time above a copy's is the table rows.
 * Every SM reads every one of the R = 9 shift and scale rows (193 KB at
 * H = 5376 bf16), ~27-35 MB of L2 reads beside the 88 MB of rows, with the
 * L2 the busiest unit (norm_probe, 2026-12-01). Here CTA k of a cluster of
 * CL CTAs owns the columns [k H / CL, (k + 1) H / CL) of every row for its
 * whole life (a persistent grid), so it needs only its slice of w and of the
 * tables (25.5 KB at CL = 8), copied once to shared memory (TAB 1) or read
 * through the L1 (TAB 0). A row's sum of squares is reduced inside each CTA
 * (warp butterflies, then its warps in order) and then over the cluster in
 * rank order, so every row's bits depend on the shape alone (the order
 * kjit's rule needs for batch invariance).
 *
 * Layout: TPG threads a row group (the CTA's GR = 672 / CL granules of 16
 * bytes, rounded up to warps), RW row groups a CTA, RPT rows a thread, so a
 * batch is B = RW * RPT rows. Cluster q of Q takes rows q, q + Q, q + 2Q, ...
 * (neighbouring rows on neighbouring clusters), B at a time. The rows come
 * in (ST) either into registers, the next batch's loads issued before the
 * current batch's exchange (ST 0), or through a ring of ST stages in shared
 * memory, one bulk copy (cp.async.bulk, the async proxy) per row slice
 * issued by one thread with no part in the exchange, ST batches ahead and counted on the stage's mbarrier;
 * a stage is refilled as soon as every thread has its rows in registers
 * (no registers held for the rows in flight). Exchanges (SYNC):
 *   1  each CTA's partial sums in its own shared memory, one cluster barrier,
 *      then every thread reads the CL partials of its rows from the CTAs'
 *      shared memory (ld.shared::cluster);
 *   2  each CTA pushes its partials into every peer's shared memory
 *      (st.async, completing bytes on the peer's mbarrier) and waits on its
 *      own mbarrier: no cluster barrier, no fence;
 *   0  no exchange (the CTA's own partial times CL: wrong unless CL = 1);
 *      the difference to 1 and 2 is the exchange's cost.
 * A second kernel, fwdk (the CL = 7 rows of the table), keeps kjit's own
 * reduction order: CTA w of a 7-CTA cluster does warp w of kjit's 224-thread
 * row (lane l: granules 32 w + l + 224 k, k < 3), one warp a row, so its
 * per-thread sums, lane fold, butterfly and the warp totals added in rank
 * order are kjit's forward's, bit for bit, and with kjit's rstd and output
 * arithmetic so are its outputs: a cluster forward kjit could pick as a
 * launch choice without changing a bit (SPEC contract 3). The probe runs
 * kjit_norm_modulate_fwd (linked) on the same inputs and counts, for every
 * variant, the elements whose bits differ from it (kjit_diff): a fwdk
 * variant with any is NOT KJIT'S BITS.
 * A third, fwdt, keeps whole rows in kjit's order (a 224-thread row group a
 * row: kjit's bits, checked the same way) and changes only where the shift
 * and scale rows come from: through the L1 as kjit (TAB 0, the baseline), or
 * all of them in each CTA's shared memory (TAB 1, one CTA an SM), one bulk
 * copy a table row, multicast over a cluster of CL (the L2 then serves each
 * table row once a cluster, not once an SM). Multicast is an sm_90a
 * instruction, so the probe compiles for the arch-specific target.
 * Checked: every variant is poisoned, run, and every element of every row
 * compared with a double computation; then poisoned again, timed, and the
 * timed launches' output compared the same way. A variant that should be
 * right (SYNC 1 / 2, or CL = 1) above 1e-2 relative (floor 1e-3) is WRONG;
 * one that should be wrong (SYNC 0 with CL > 1: the check's own control)
 * within it (or left poisoned, which tests nothing) means the check is
 * BLIND; either, a fwdk variant off kjit's bits, or a variant that does not
 * fit makes the exit status 1.
 * Timed as sol_probe times its kernels (events per iteration and inside a
 * graph, rotating sets over 3x the L2). Floor: x read + out written over
 * 4.25 TB/s; kjit's forward: bench_ops in the same call (run_device.sh
 * cluster).
 * Built as build/bench/cluster_fwd_probe.
 * Usage: cluster_fwd_probe [ROWS...]      (default 4097 32768)
 *        cluster_fwd_probe --compile-only (NVRTC for sm_90a, no GPU: registers
 *                                          and spills of every variant)
 * CLUSTER_FWD_VARIANT=K runs only variant K (e.g. under ncu). */
#include <cuda.h>
#include <math.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kjit.h"
#include "probe_bf16.h"
#include "probe_device_src.h"
#include "probe_time.h"

#define H 5376
#define HG (H / 8)
#define R 9
/* fwdt: an mbarrier a table row's shift and one its scale, 32 in all */
_Static_assert(2 * R <= 32, "fwdt's tbar holds 2 R <= 32 barriers");
#define EPS 1e-5
#define PEAK_BW 4.25e12

static const char *src =
    "#define H 5376\n#define HG (H / 8)\n"
    PROBE_SRC_BF16
    "/* out = x * rstd * w * (1 + scale) + shift, two columns. */\n"
    "__device__ __forceinline__ unsigned mod2(unsigned x, unsigned w, unsigned s, unsigned c, float rs)\n"
    "{ return pk(lo(x) * rs * lo(w) * (1.f + lo(c)) + lo(s), hi(x) * rs * hi(w) * (1.f + hi(c)) + hi(s)); }\n"
    "__device__ __forceinline__ uint4 mod8(uint4 x, uint4 w, uint4 s, uint4 c, float rs)\n"
    "{ return make_uint4(mod2(x.x, w.x, s.x, c.x, rs), mod2(x.y, w.y, s.y, c.y, rs),\n"
    "                    mod2(x.z, w.z, s.z, c.z, rs), mod2(x.w, w.w, s.w, c.w, rs)); }\n"
    PROBE_SRC_CLUSTER
    "__device__ __forceinline__ float ld_peer(unsigned a)\n"
    "{ float v; asm volatile(\"ld.shared::cluster.f32 %0, [%1];\" : \"=f\"(v) : \"r\"(a) : \"memory\"); return v; }\n"
    "/* v into a peer's shared memory (remote address a), completing 4 bytes on\n"
    "   the peer's mbarrier (remote address bar). */\n"
    "__device__ __forceinline__ void push(unsigned a, float v, unsigned bar)\n"
    "{ asm volatile(\"st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\"\n"
    "               :: \"r\"(a), \"r\"(__float_as_uint(v)), \"r\"(bar) : \"memory\"); }\n"
    "/* bytes of global memory at src into local shared memory at dst (16-byte\n"
    "   aligned, a multiple of 16), completing them on the mbarrier at bar. */\n"
    "__device__ __forceinline__ void bulk_load(unsigned dst, const void *src, unsigned bytes, unsigned bar)\n"
    "{ asm volatile(\"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\"\n"
    "               :: \"r\"(dst), \"l\"(src), \"r\"(bytes), \"r\"(bar) : \"memory\"); }\n"
    "/* The same into shared memory at dst (and its mbarrier at bar) in every CTA\n"
    "   of the cluster whose rank's bit is set in mask (sm_90a). */\n"
    "__device__ __forceinline__ void bulk_mcast(unsigned dst, const void *src, unsigned bytes, unsigned bar, unsigned short mask)\n"
    "{ asm volatile(\"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;\"\n"
    "               :: \"r\"(dst), \"l\"(src), \"r\"(bytes), \"r\"(bar), \"h\"(mask) : \"memory\"); }\n"
    "/* GR granules a CTA, TPG threads a row group; MINB CTAs an SM where 768\n"
    "   threads make two or more (at most 80 registers a thread there). */\n"
    "template <int CL, int RW> struct geo {\n"
    "    static constexpr int GR = HG / CL, TPG = (GR + 31) / 32 * 32, MINB = 768 / (TPG * RW) > 1 ? 768 / (TPG * RW) : 1;\n"
    "};\n"
    "template <int CL, int RW, int RPT, int SYNC, int TAB, int ST>\n"
    "__global__ void __launch_bounds__(geo<CL, RW>::TPG * RW, (geo<CL, RW>::MINB)) fwd(const uint4 *__restrict__ x, const uint4 *__restrict__ w,\n"
    "    const uint4 *__restrict__ sh, const uint4 *__restrict__ sc, const int *__restrict__ idx,\n"
    "    uint4 *__restrict__ out, long long n, int r, float eps)\n"
    "{\n"
    "    constexpr int GR = geo<CL, RW>::GR, TPG = geo<CL, RW>::TPG, NWG = TPG / 32, B = RW * RPT;\n"
    "    static_assert(HG % CL == 0, \"CL divides the granules\");\n"
    "    static_assert(B * CL <= TPG * RW - 32, \"a thread for every (row, peer) of a batch, the last warp apart\");\n"
    "    extern __shared__ uint4 tab[]; /* TAB 1: w, shift[r], scale[r], this CTA's GR granules each; then the ring */\n"
    "    uint4 *const ring = tab + (TAB ? (1 + 2 * r) * GR : 0); /* ST > 0: [ST][B][GR] */\n"
    "    __shared__ __align__(8) unsigned long long full[ST > 0 ? ST : 1];\n"
    "    __shared__ float red[2][B][NWG];\n"
    "    __shared__ __align__(8) float slot[2][CL][B]; /* [parity][source rank][row of the batch] */\n"
    "    __shared__ __align__(8) unsigned long long bar[2];\n"
    "    unsigned rank = 0;\n"
    "    if (CL > 1) asm(\"mov.u32 %0, %%cluster_ctarank;\" : \"=r\"(rank));\n"
    "    const int tid = threadIdx.x, rg = tid / TPG, t = tid % TPG, wi = t / 32, lane = t % 32;\n"
    "    const bool mine = t < GR;\n"
    "    const int g = rank * GR + t; /* the thread's granule of a row */\n"
    "    const int Q = gridDim.x / CL, q = blockIdx.x / CL; /* (rows < 2^31: 32-bit row numbers) */\n"
    "    const int nq = q < n ? (int)((n - q + Q - 1) / Q) : 0, nb = (nq + B - 1) / B;\n"
    "    /* Batch k's rows: m = k B + j RW + rg of this cluster's, row q + m Q. */\n"
    "    uint4 xa[RPT];\n"
    "    int ia[RPT];\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < RPT; ++j) {\n"
    "        const int m = j * RW + rg, row = q + m * Q;\n"
    "        const bool ok = m < nq;\n"
    "        ia[j] = ok ? idx[row] : 0;\n"
    "        xa[j] = !ST && ok && mine ? ld_x(x + (long long)row * HG + g) : make_uint4(0, 0, 0, 0);\n"
    "    }\n"
    "    /* ST > 0: the producer loads batch kk's slices of its rows into stage kk % ST\n"
    "       (one bulk copy a row, GR * 16 contiguous bytes), counted on full[stage]. */\n"
    "    auto issue = [&](int kk) {\n"
    "        const int nv = min(B, nq - kk * B), st = ST ? kk % ST : 0;\n"
    "        if (nv <= 0) return;\n"
    "        const unsigned fb = smem_addr(&full[st]);\n"
    "        bar_expect(fb, (unsigned)(nv * GR * 16));\n"
    "        for (int b = 0; b < nv; ++b) {\n"
    "            const int row = q + (kk * B + b) * Q;\n"
    "            bulk_load(smem_addr(ring + (st * B + b) * GR), x + (long long)row * HG + (long long)rank * GR, GR * 16, fb);\n"
    "        }\n"
    "    };\n"
    "    if (TAB) {\n"
    "        for (int k = tid; k < (1 + 2 * r) * GR; k += TPG * RW) {\n"
    "            const int tr = k / GR, col = k % GR; /* 0: w, 1..r: shift, r+1..2r: scale */\n"
    "            const uint4 *s = tr == 0 ? w : tr <= r ? sh + (long long)(tr - 1) * HG : sc + (long long)(tr - 1 - r) * HG;\n"
    "            tab[k] = __ldg(s + (long long)rank * GR + col);\n"
    "        }\n"
    "    }\n"
    "    if ((SYNC == 2 || ST) && tid == 0) {\n"
    "        if (SYNC == 2) bar_init(smem_addr(&bar[0])), bar_init(smem_addr(&bar[1]));\n"
    "        for (int i = 0; i < ST; ++i) bar_init(smem_addr(&full[i]));\n"
    "        asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");\n"
    "    }\n"
    "    /* The barriers set up in every CTA before any peer pushes. */\n"
    "    if (CL > 1 && SYNC == 2) cluster_sync(); else __syncthreads();\n"
    "    /* The ring's producer: lane 0 of the last warp, no part in the exchange. */\n"
    "    const bool producer = ST && tid == TPG * RW - 32;\n"
    "    if (producer)\n"
    "        for (int kk = 0; kk < ST; ++kk) issue(kk);\n"
    "    const uint4 wv = !mine ? make_uint4(0, 0, 0, 0) : TAB ? tab[t] : __ldg(w + g);\n"
    "    for (int k = 0; k < nb; ++k) {\n"
    "        const int par = k & 1;\n"
    "        if (ST) {\n"
    "            const int st = ST ? k % ST : 0;\n"
    "            bar_wait(smem_addr(&full[st]), (unsigned)(ST ? k / ST : 0) & 1u);\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < RPT; ++j)\n"
    "                xa[j] = mine && k * B + j * RW + rg < nq ? ring[(st * B + j * RW + rg) * GR + t] : make_uint4(0, 0, 0, 0);\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < RPT; ++j) {\n"
    "            float s = sq4(xa[j]);\n"
    "#pragma unroll\n"
    "            for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);\n"
    "            if (lane == 0) red[par][j * RW + rg][wi] = s;\n"
    "        }\n"
    "        __syncthreads();\n"
    "        /* Every thread has its rows of this stage in registers: refill it with\n"
    "           batch k + ST (the proxy fence orders those reads before the copy). */\n"
    "        if (producer) {\n"
    "            asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");\n"
    "            issue(k + ST);\n"
    "        }\n"
    "        if (tid < (SYNC == 2 ? B * CL : B)) {\n"
    "            const int b = tid % B, d = tid / B;\n"
    "            float v = 0.f;\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < NWG; ++i) v += red[par][b][i];\n"
    "            if (SYNC == 2) push(peer(smem_addr(&slot[par][rank][b]), d), v, peer(smem_addr(&bar[par]), d));\n"
    "            else slot[par][0][b] = v;\n"
    "        }\n"
    "        if (SYNC == 2 && tid == 0) bar_expect(smem_addr(&bar[par]), CL * B * 4);\n"
    "        /* The next batch's rows, in flight during the exchange. */\n"
    "        uint4 xb[RPT];\n"
    "        int ib[RPT];\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < RPT; ++j) {\n"
    "            const int m = (k + 1) * B + j * RW + rg, row = q + m * Q;\n"
    "            const bool ok = m < nq;\n"
    "            ib[j] = ok ? idx[row] : 0;\n"
    "            xb[j] = !ST && ok && mine ? ld_x(x + (long long)row * HG + g) : make_uint4(0, 0, 0, 0);\n"
    "        }\n"
    "        if (SYNC == 1 && CL > 1) cluster_sync();\n"
    "        else if (SYNC == 2) bar_wait(smem_addr(&bar[par]), (unsigned)(k >> 1) & 1u);\n"
    "        else __syncthreads();\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < RPT; ++j) {\n"
    "            const int b = j * RW + rg;\n"
    "            float S = 0.f;\n"
    "            if (SYNC == 1 && CL > 1) {\n"
    "                const unsigned a = smem_addr(&slot[par][0][b]);\n"
    "#pragma unroll\n"
    "                for (int d = 0; d < CL; ++d) S += ld_peer(peer(a, d));\n"
    "            } else if (SYNC == 2) {\n"
    "#pragma unroll\n"
    "                for (int d = 0; d < CL; ++d) S += slot[par][d][b];\n"
    "            } else {\n"
    "                S = CL * slot[par][0][b];\n"
    "            }\n"
    "            const int m = k * B + b, row = q + m * Q;\n"
    "            if (m < nq && mine) {\n"
    "                const float rs = rsqrtf(S * (1.0f / H) + eps);\n"
    "                const int i = ia[j];\n"
    "                const uint4 s = TAB ? tab[(1 + i) * GR + t] : __ldg(sh + i * HG + g);\n"
    "                const uint4 c = TAB ? tab[(1 + r + i) * GR + t] : __ldg(sc + i * HG + g);\n"
    "                out[(long long)row * HG + g] = mod8(xa[j], wv, s, c, rs);\n"
    "            }\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < RPT; ++j) xa[j] = ST ? xa[j] : xb[j], ia[j] = ib[j];\n"
    "    }\n"
    "    /* SYNC 1: no CTA leaves while a peer may still read its slots. (SYNC 2\n"
    "       needs no barrier here: a CTA's last wait ends only after every push\n"
    "       into it has landed; it is kept for symmetry.) */\n"
    "    if (CL > 1 && SYNC) cluster_sync();\n"
    "}\n"
    "/* kjit's own reduction order (kernel_templates/adaln.cuh at h = 5376 bf16: TPR\n"
    "   224 threads a row, IT 3 granules a thread, WPR 7 warps) split over a cluster\n"
    "   of KCL = 7 CTAs: CTA w does warp w's part of every row (lane l of a row's\n"
    "   warp: granules 32 w + l + 224 k, k < 3), so the per-thread fma sums, the\n"
    "   lane fold, the butterfly and the warp totals added in warp order (here in\n"
    "   rank order, from the exchange) are kjit's, as are rstd and the outputs:\n"
    "   the same bits, a launch choice. RW warps a CTA, a row each; RPT rows a warp\n"
    "   a batch (B = RW RPT); the tables' slices in shared memory; ST as fwd's. */\n"
    "#define KCL 7\n#define KTPR 224\n#define KIT 3\n#define KGR (32 * KIT)\n"
    "__device__ __forceinline__ float lane_fold8(float (&a)[8])\n"
    "{\n"
    "#pragma unroll\n"
    "    for (int s = 1; s < 8; s *= 2)\n"
    "#pragma unroll\n"
    "        for (int i = 0; i < 8; i += 2 * s) a[i] = __fadd_rn(a[i], a[i + s]);\n"
    "    return a[0];\n"
    "}\n"
    "/* kjit's sum of squares over a lane's KIT granules (fma into 8 partials in\n"
    "   granule order, the lane fold), then its warp's xor butterfly. */\n"
    "__device__ __forceinline__ float warp_sq(const uint4 (&xv)[KIT])\n"
    "{\n"
    "    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};\n"
    "#pragma unroll\n"
    "    for (int kk = 0; kk < KIT; ++kk) {\n"
    "        const unsigned u[4] = {xv[kk].x, xv[kk].y, xv[kk].z, xv[kk].w};\n"
    "#pragma unroll\n"
    "        for (int e = 0; e < 4; ++e) {\n"
    "            acc[2 * e] = __fmaf_rn(lo(u[e]), lo(u[e]), acc[2 * e]);\n"
    "            acc[2 * e + 1] = __fmaf_rn(hi(u[e]), hi(u[e]), acc[2 * e + 1]);\n"
    "        }\n"
    "    }\n"
    "    float v = lane_fold8(acc);\n"
    "#pragma unroll\n"
    "    for (int o = 16; o; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
    "    return v;\n"
    "}\n"
    "/* kjit's nm_out for two columns: x rs w, then fma with (1 + scale) and shift. */\n"
    "__device__ __forceinline__ unsigned nm2(unsigned x, unsigned w, unsigned s, unsigned c, float rs)\n"
    "{\n"
    "    const float a = __fmul_rn(__fmul_rn(lo(x), rs), lo(w)), b = __fmul_rn(__fmul_rn(hi(x), rs), hi(w));\n"
    "    return pk(__fmaf_rn(a, __fadd_rn(1.f, lo(c)), lo(s)), __fmaf_rn(b, __fadd_rn(1.f, hi(c)), hi(s)));\n"
    "}\n"
    "template <int RW, int RPT, int SYNC, int ST, int MINB>\n"
    "__global__ void __launch_bounds__(32 * RW, MINB) fwdk(const uint4 *__restrict__ x, const uint4 *__restrict__ w,\n"
    "    const uint4 *__restrict__ sh, const uint4 *__restrict__ sc, const int *__restrict__ idx,\n"
    "    uint4 *__restrict__ out, long long n, int r, float eps)\n"
    "{\n"
    "    constexpr int B = RW * RPT;\n"
    "    extern __shared__ uint4 tab[]; /* w, shift[r], scale[r]: [table row][k][lane] */\n"
    "    uint4 *const ring = tab + (1 + 2 * r) * KGR; /* ST > 0: [ST][B][k][lane] */\n"
    "    __shared__ __align__(8) unsigned long long full[ST > 0 ? ST : 1];\n"
    "    __shared__ __align__(8) float slot[2][KCL][B]; /* [parity][source rank (SYNC 2; else 0)][row of the batch] */\n"
    "    __shared__ __align__(8) unsigned long long bar[2];\n"
    "    unsigned rank;\n"
    "    asm(\"mov.u32 %0, %%cluster_ctarank;\" : \"=r\"(rank));\n"
    "    const int tid = threadIdx.x, rg = tid >> 5, l = tid & 31;\n"
    "    const int c0 = 32 * rank + l; /* the lane's granule k: c0 + KTPR k */\n"
    "    const int Q = gridDim.x / KCL, q = blockIdx.x / KCL;\n"
    "    const int nq = q < n ? (int)((n - q + Q - 1) / Q) : 0, nb = (nq + B - 1) / B;\n"
    "    uint4 xa[RPT][KIT];\n"
    "    int ia[RPT];\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < RPT; ++j) {\n"
    "        const int m = j * RW + rg, row = q + m * Q;\n"
    "        const bool ok = m < nq;\n"
    "        ia[j] = ok ? idx[row] : 0;\n"
    "#pragma unroll\n"
    "        for (int k = 0; k < KIT; ++k)\n"
    "            xa[j][k] = !ST && ok ? ld_x(x + (long long)row * HG + c0 + KTPR * k) : make_uint4(0, 0, 0, 0);\n"
    "    }\n"
    "    /* ST > 0: the producer loads batch kk's parts of its rows into stage kk % ST\n"
    "       (three bulk copies a row, 512 contiguous bytes each), counted on full[stage]. */\n"
    "    auto issue = [&](int kk) {\n"
    "        const int nv = min(B, nq - kk * B), st = ST ? kk % ST : 0;\n"
    "        if (nv <= 0) return;\n"
    "        const unsigned fb = smem_addr(&full[st]);\n"
    "        bar_expect(fb, (unsigned)(nv * KGR * 16));\n"
    "        for (int b = 0; b < nv; ++b) {\n"
    "            const int row = q + (kk * B + b) * Q;\n"
    "            for (int k = 0; k < KIT; ++k)\n"
    "                bulk_load(smem_addr(ring + (st * B + b) * KGR + 32 * k), x + (long long)row * HG + 32 * rank + KTPR * k,\n"
    "                          512, fb);\n"
    "        }\n"
    "    };\n"
    "    for (int i = tid; i < (1 + 2 * r) * KGR; i += 32 * RW) {\n"
    "        const int tr = i / KGR, k = i % KGR / 32, ll = i % 32; /* 0: w, 1..r: shift, r+1..2r: scale */\n"
    "        const uint4 *src = tr == 0 ? w : tr <= r ? sh + (long long)(tr - 1) * HG : sc + (long long)(tr - 1 - r) * HG;\n"
    "        tab[i] = __ldg(src + 32 * rank + ll + KTPR * k);\n"
    "    }\n"
    "    if ((SYNC == 2 || ST) && tid == 0) {\n"
    "        if (SYNC == 2) bar_init(smem_addr(&bar[0])), bar_init(smem_addr(&bar[1]));\n"
    "        for (int i = 0; i < ST; ++i) bar_init(smem_addr(&full[i]));\n"
    "        asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");\n"
    "    }\n"
    "    /* The tables and barriers set up, in every CTA before any peer pushes. */\n"
    "    if (SYNC == 2) cluster_sync(); else __syncthreads();\n"
    "    /* The ring's producer: lane 31 of the last warp (the pushes are lanes 0..6). */\n"
    "    const bool producer = ST && tid == 32 * RW - 1;\n"
    "    if (producer)\n"
    "        for (int kk = 0; kk < ST; ++kk) issue(kk);\n"
    "    uint4 wv[KIT];\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < KIT; ++k) wv[k] = tab[32 * k + l];\n"
    "    for (int k = 0; k < nb; ++k) {\n"
    "        const int par = k & 1;\n"
    "        if (ST) {\n"
    "            const int st = ST ? k % ST : 0;\n"
    "            bar_wait(smem_addr(&full[st]), (unsigned)(ST ? k / ST : 0) & 1u);\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < RPT; ++j)\n"
    "#pragma unroll\n"
    "                for (int kk = 0; kk < KIT; ++kk)\n"
    "                    xa[j][kk] = k * B + j * RW + rg < nq ? ring[(st * B + j * RW + rg) * KGR + 32 * kk + l] : make_uint4(0, 0, 0, 0);\n"
    "            /* Every warp has its rows of this stage in registers: refill it. */\n"
    "            __syncthreads();\n"
    "            if (producer) {\n"
    "                asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");\n"
    "                issue(k + ST);\n"
    "            }\n"
    "        }\n"
    "        float tot[RPT];\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < RPT; ++j) {\n"
    "            tot[j] = warp_sq(xa[j]);\n"
    "        }\n"
    "        /* This CTA's warp total of each row: to every peer (SYNC 2), or into its own slot. */\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < RPT; ++j) {\n"
    "            const int b = j * RW + rg;\n"
    "            if (SYNC == 2) {\n"
    "                if (l < KCL) push(peer(smem_addr(&slot[par][rank][b]), l), tot[j], peer(smem_addr(&bar[par]), l));\n"
    "            } else if (l == 0) {\n"
    "                slot[par][0][b] = tot[j];\n"
    "            }\n"
    "        }\n"
    "        if (SYNC == 2 && tid == 0) bar_expect(smem_addr(&bar[par]), KCL * B * 4);\n"
    "        uint4 xb[RPT][KIT];\n"
    "        int ib[RPT];\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < RPT; ++j) {\n"
    "            const int m = (k + 1) * B + j * RW + rg, row = q + m * Q;\n"
    "            const bool ok = m < nq;\n"
    "            ib[j] = ok ? idx[row] : 0;\n"
    "#pragma unroll\n"
    "            for (int kk = 0; kk < KIT; ++kk)\n"
    "                xb[j][kk] = !ST && ok ? ld_x(x + (long long)row * HG + c0 + KTPR * kk) : make_uint4(0, 0, 0, 0);\n"
    "        }\n"
    "        if (SYNC == 1) cluster_sync();\n"
    "        else if (SYNC == 2) bar_wait(smem_addr(&bar[par]), (unsigned)(k >> 1) & 1u);\n"
    "        else __syncwarp();\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < RPT; ++j) {\n"
    "            const int b = j * RW + rg;\n"
    "            float S;\n"
    "            if (SYNC == 1) {\n"
    "                const unsigned a = smem_addr(&slot[par][0][b]);\n"
    "                S = ld_peer(peer(a, 0));\n"
    "#pragma unroll\n"
    "                for (int d = 1; d < KCL; ++d) S = __fadd_rn(S, ld_peer(peer(a, d)));\n"
    "            } else if (SYNC == 2) {\n"
    "                S = slot[par][0][b];\n"
    "#pragma unroll\n"
    "                for (int d = 1; d < KCL; ++d) S = __fadd_rn(S, slot[par][d][b]);\n"
    "            } else {\n"
    "                S = KCL * slot[par][0][b];\n"
    "            }\n"
    "            const int m = k * B + b, row = q + m * Q;\n"
    "            if (m < nq) {\n"
    "                const float rs = __frsqrt_rn(__fadd_rn(__fdiv_rn(S, 5376.0f), eps));\n"
    "                const int i = ia[j];\n"
    "#pragma unroll\n"
    "                for (int kk = 0; kk < KIT; ++kk) {\n"
    "                    const uint4 xv = xa[j][kk], wq = wv[kk], sv = tab[(1 + i) * KGR + 32 * kk + l],\n"
    "                                cv = tab[(1 + r + i) * KGR + 32 * kk + l];\n"
    "                    out[(long long)row * HG + c0 + KTPR * kk] = make_uint4(nm2(xv.x, wq.x, sv.x, cv.x, rs),\n"
    "                        nm2(xv.y, wq.y, sv.y, cv.y, rs), nm2(xv.z, wq.z, sv.z, cv.z, rs), nm2(xv.w, wq.w, sv.w, cv.w, rs));\n"
    "                }\n"
    "            }\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < RPT; ++j) {\n"
    "            ia[j] = ib[j];\n"
    "#pragma unroll\n"
    "            for (int kk = 0; kk < KIT; ++kk) xa[j][kk] = ST ? xa[j][kk] : xb[j][kk];\n"
    "        }\n"
    "    }\n"
    "    if (SYNC) cluster_sync(); /* SYNC 1: no CTA leaves while a peer may read its slots */\n"
    "}\n"
    "/* kjit's order with whole rows (fwdt): a 224-thread row group a row, thread t\n"
    "   the granules t + 224 k, its warp totals added in warp order, as kjit's\n"
    "   forward at h = 5376 bf16, so the same bits; only where the shift and scale\n"
    "   rows come from differs. TAB 0: through the L1, as kjit reads them (this\n"
    "   code's baseline). TAB 1: every table row in each CTA's shared memory\n"
    "   (193.5 KB at R = 9, one CTA an SM), one bulk copy a table row issued at the\n"
    "   start, in table-row order, and waited for by the first row that needs it\n"
    "   (an mbarrier a table row). In a cluster of CL > 1 CTAs the copies are\n"
    "   shared out by rank and each multicast into every CTA of the cluster, so\n"
    "   the L2 serves each table row once a cluster instead of once an SM. RW row\n"
    "   groups a CTA, the next PF rows' x in registers (PF rows ahead). */\n"
    "template <int CL, int RW, int TAB, int PF>\n"
    "__global__ void __launch_bounds__(KTPR * RW, 1) fwdt(const uint4 *__restrict__ x, const uint4 *__restrict__ w,\n"
    "    const uint4 *__restrict__ sh, const uint4 *__restrict__ sc, const int *__restrict__ idx,\n"
    "    uint4 *__restrict__ out, long long n, int r, float eps)\n"
    "{\n"
    "    extern __shared__ uint4 tab[]; /* TAB 1: shift rows 0..r-1, then scale rows; HG granules each */\n"
    "    __shared__ __align__(8) unsigned long long tbar[32]; /* table slot i's arrival (2 r <= 32) */\n"
    "    __shared__ float red[2][RW][KTPR / 32];\n"
    "    unsigned rank = 0;\n"
    "    if (CL > 1) asm(\"mov.u32 %0, %%cluster_ctarank;\" : \"=r\"(rank));\n"
    "    const int tid = threadIdx.x, rg = tid / KTPR, t = tid - rg * KTPR, wq = t >> 5, l = tid & 31;\n"
    "    const long long G = (long long)gridDim.x * RW;\n"
    "    if (TAB) {\n"
    "        if (tid == 0) {\n"
    "            for (int i = 0; i < 2 * r; ++i) bar_init(smem_addr(&tbar[i]));\n"
    "            asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");\n"
    "        }\n"
    "        /* Every CTA's barriers initialised before any copy may complete on them. */\n"
    "        if (CL > 1) cluster_sync(); else __syncthreads();\n"
    "        if (tid == 0) {\n"
    "            for (int i = 0; i < 2 * r; ++i) bar_expect(smem_addr(&tbar[i]), HG * 16);\n"
    "            /* Copy j: table row j / 2, its shift (j even) or scale (j odd). */\n"
    "            for (int j = (int)rank; j < 2 * r; j += CL) {\n"
    "                const int tr = j >> 1, slot = (j & 1) ? r + tr : tr;\n"
    "                const uint4 *s = ((j & 1) ? sc : sh) + (long long)tr * HG;\n"
    "                const unsigned d = smem_addr(tab + (long long)slot * HG), b = smem_addr(&tbar[slot]);\n"
    "                if (CL > 1) bulk_mcast(d, s, HG * 16, b, (unsigned short)((1u << CL) - 1u));\n"
    "                else bulk_load(d, s, HG * 16, b);\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "    uint4 wv[KIT];\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < KIT; ++k) wv[k] = __ldg(w + t + KTPR * k);\n"
    "    unsigned ready = 0; /* TAB 1: the table rows this thread has seen land */\n"
    "    long long row = (long long)blockIdx.x * RW + rg;\n"
    "    /* xq[0]: this row; xq[p]: the row p on (loaded when it is < n). */\n"
    "    uint4 xq[PF + 1][KIT];\n"
    "    int iq[PF + 1];\n"
    "#pragma unroll\n"
    "    for (int p = 0; p < PF; ++p) {\n"
    "        const long long rr = row + p * G;\n"
    "        iq[p] = 0;\n"
    "        if (rr < n) {\n"
    "            iq[p] = idx[rr];\n"
    "#pragma unroll\n"
    "            for (int k = 0; k < KIT; ++k) xq[p][k] = ld_x(x + rr * HG + t + KTPR * k);\n"
    "        }\n"
    "    }\n"
    "    for (int m = 0; row < n; ++m, row += G) {\n"
    "        const long long nrow = row + PF * G;\n"
    "        iq[PF] = 0;\n"
    "        if (nrow < n) {\n"
    "            iq[PF] = idx[nrow];\n"
    "#pragma unroll\n"
    "            for (int k = 0; k < KIT; ++k) xq[PF][k] = ld_x(x + nrow * HG + t + KTPR * k);\n"
    "        }\n"
    "        const float v = warp_sq(xq[0]);\n"
    "        /* Double-buffered: a thread writes this slot again two rows on, after the\n"
    "           group's next barrier, which every reader of this row passes only\n"
    "           after its reads. */\n"
    "        const int par = m & 1;\n"
    "        if (l == 0) red[par][rg][wq] = v;\n"
    "        asm volatile(\"bar.sync %0, %1;\" :: \"r\"(1 + rg), \"r\"(KTPR) : \"memory\");\n"
    "        float S = red[par][rg][0];\n"
    "#pragma unroll\n"
    "        for (int d = 1; d < KTPR / 32; ++d) S = __fadd_rn(S, red[par][rg][d]);\n"
    "        const float rs = __frsqrt_rn(__fadd_rn(__fdiv_rn(S, 5376.0f), eps));\n"
    "        const int i = iq[0];\n"
    "        uint4 sv[KIT], cv[KIT];\n"
    "        if (TAB) {\n"
    "            if (!(ready >> i & 1u)) {\n"
    "                bar_wait(smem_addr(&tbar[i]), 0u);\n"
    "                bar_wait(smem_addr(&tbar[r + i]), 0u);\n"
    "                ready |= 1u << i;\n"
    "            }\n"
    "#pragma unroll\n"
    "            for (int kk = 0; kk < KIT; ++kk)\n"
    "                sv[kk] = tab[(long long)i * HG + t + KTPR * kk], cv[kk] = tab[(long long)(r + i) * HG + t + KTPR * kk];\n"
    "        } else {\n"
    "#pragma unroll\n"
    "            for (int kk = 0; kk < KIT; ++kk)\n"
    "                sv[kk] = __ldg(sh + (long long)i * HG + t + KTPR * kk), cv[kk] = __ldg(sc + (long long)i * HG + t + KTPR * kk);\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int kk = 0; kk < KIT; ++kk) {\n"
    "            const uint4 xv = xq[0][kk], wq4 = wv[kk], s4 = sv[kk], c4 = cv[kk];\n"
    "            out[row * HG + t + KTPR * kk] = make_uint4(nm2(xv.x, wq4.x, s4.x, c4.x, rs), nm2(xv.y, wq4.y, s4.y, c4.y, rs),\n"
    "                                                       nm2(xv.z, wq4.z, s4.z, c4.z, rs), nm2(xv.w, wq4.w, s4.w, c4.w, rs));\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int p = 0; p < PF; ++p) {\n"
    "            iq[p] = iq[p + 1];\n"
    "#pragma unroll\n"
    "            for (int kk = 0; kk < KIT; ++kk) xq[p][kk] = xq[p + 1][kk];\n"
    "        }\n"
    "    }\n"
    "    if (TAB) {\n"
    "        /* No CTA leaves with a copy still landing in it (a table row none of\n"
    "           its rows used), nor while a peer's copies may still be issued into\n"
    "           it. */\n"
    "        for (int i = 0; i < 2 * r; ++i) bar_wait(smem_addr(&tbar[i]), 0u);\n"
    "        if (CL > 1) cluster_sync();\n"
    "    }\n"
    "}\n";

/* kord 1: fwdk (kjit's order, cl 7, minb its launch bound's CTAs an SM);
 * kord 2: fwdt (kjit's order, whole rows; tab 1: the tables in shared
 * memory, multicast over cl > 1; rw row groups of 224 threads; rpt the rows
 * loaded ahead; sync, st unused); kord 0: fwd (contiguous slices). */
typedef struct { int cl, rw, rpt, sync, tab, st, kord, minb; } variant;

static const variant VARIANTS[] = {
    /* cl rw rpt sync tab st */
    /* eight CTAs: 96-thread row groups; the next batch in registers */
    {8, 2, 2, 1, 1, 0}, {8, 2, 4, 1, 1, 0}, {8, 4, 2, 1, 1, 0}, {8, 4, 4, 1, 1, 0},
    {8, 2, 2, 2, 1, 0}, {8, 2, 4, 2, 1, 0}, {8, 4, 2, 2, 1, 0}, {8, 4, 4, 2, 1, 0},
    {8, 4, 4, 1, 0, 0}, {8, 4, 4, 2, 0, 0},
    {8, 2, 4, 0, 1, 0}, {8, 4, 4, 0, 1, 0}, /* no exchange: what it costs */
    /* four CTAs: 192-thread row groups */
    {4, 1, 4, 1, 1, 0}, {4, 2, 2, 1, 1, 0}, {4, 2, 4, 1, 1, 0}, {4, 1, 4, 2, 1, 0}, {4, 2, 2, 2, 1, 0},
    {4, 2, 4, 2, 1, 0}, {4, 2, 4, 0, 1, 0},
    /* two CTAs: 352-thread row groups (336 granules) */
    {2, 1, 2, 1, 1, 0}, {2, 1, 4, 1, 1, 0}, {2, 1, 2, 2, 1, 0}, {2, 1, 4, 2, 1, 0},
    /* one CTA a row (no cluster; the tables through the L1): the same code's baseline */
    {1, 1, 2, 0, 0, 0}, {1, 1, 4, 0, 0, 0},
    /* ST batches ahead in a shared-memory ring filled by bulk copies */
    {8, 4, 2, 1, 1, 4}, {8, 4, 2, 2, 1, 2}, {8, 4, 2, 2, 1, 4}, {8, 4, 2, 2, 1, 6}, {8, 4, 4, 2, 1, 3},
    {8, 2, 4, 2, 1, 2}, {8, 4, 2, 0, 1, 4}, {4, 2, 2, 2, 1, 4}, {4, 2, 4, 2, 1, 2}, {1, 1, 2, 0, 0, 4},
    /* kjit's own order over seven CTAs (fwdk): bits as kjit's forward; a warp a row */
    {7, 4, 1, 2, 1, 0, 1, 4}, {7, 8, 1, 2, 1, 0, 1, 3}, {7, 4, 2, 2, 1, 0, 1, 3}, {7, 8, 1, 1, 1, 0, 1, 3},
    {7, 8, 1, 0, 1, 0, 1, 3},
    {7, 8, 1, 2, 1, 4, 1, 2}, {7, 8, 2, 2, 1, 3, 1, 2}, {7, 16, 1, 2, 1, 3, 1, 1}, {7, 8, 1, 1, 1, 4, 1, 2},
    {7, 4, 2, 2, 1, 4, 1, 2}, {7, 8, 1, 0, 1, 4, 1, 2},
    /* kjit's order with whole rows (fwdt): the tables through the L1 (tab 0, as
       kjit), in each CTA's shared memory (tab 1, cl 1), multicast over a cluster */
    {1, 2, 1, 1, 0, 0, 2, 1}, {1, 3, 1, 1, 0, 0, 2, 1}, {1, 4, 1, 1, 0, 0, 2, 1},
    {1, 2, 1, 1, 1, 0, 2, 1}, {1, 3, 1, 1, 1, 0, 2, 1}, {1, 4, 1, 1, 1, 0, 2, 1},
    {2, 2, 1, 1, 1, 0, 2, 1}, {2, 4, 1, 1, 1, 0, 2, 1}, {4, 2, 1, 1, 1, 0, 2, 1}, {4, 3, 1, 1, 1, 0, 2, 1},
    {4, 4, 1, 1, 1, 0, 2, 1},
    /* two rows loaded ahead (fewer row groups in flight need more each) */
    {1, 2, 2, 1, 0, 0, 2, 1}, {1, 2, 2, 1, 1, 0, 2, 1}, {4, 2, 2, 1, 1, 0, 2, 1},
};
#define NV ((int)(sizeof VARIANTS / sizeof VARIANTS[0]))

static int threads_of(const variant *v)
{
    return v->kord == 2 ? 224 * v->rw : v->kord ? 32 * v->rw : (HG / v->cl + 31) / 32 * 32 * v->rw;
}
static unsigned smem_of(const variant *v)
{
    if (v->kord == 2) return v->tab ? (unsigned)(2 * R * HG * 16) : 0u; /* every shift and scale row */
    /* fwdk keeps its table slices in shared memory whatever tab says */
    return (unsigned)(((v->tab || v->kord ? 1 + 2 * R : 0) + v->st * v->rw * v->rpt) * (HG / v->cl) * 16);
}
/* Whether the variant computes the right sums (SYNC 0 over a cluster does not). */
static int exact(const variant *v) { return v->sync > 0 || v->cl == 1; }

static void names(char out[NV][64], const char *ptr[NV])
{
    for (int i = 0; i < NV; ++i) {
        const variant *v = &VARIANTS[i];
        if (v->kord == 2)
            snprintf(out[i], 64, "fwdt<%d, %d, %d, %d>", v->cl, v->rw, v->tab, v->rpt);
        else if (v->kord)
            snprintf(out[i], 64, "fwdk<%d, %d, %d, %d, %d>", v->rw, v->rpt, v->sync, v->st, v->minb);
        else
            snprintf(out[i], 64, "fwd<%d, %d, %d, %d, %d, %d>", v->cl, v->rw, v->rpt, v->sync, v->tab, v->st);
        ptr[i] = out[i];
    }
}

/* No GPU: compile every variant for sm_90 and print ptxas's registers and
 * spills. 0 when all compile. */
static int compile_only(void)
{
    char nm[NV][64];
    const char *np[NV];
    names(nm, np);
    nvrtcProgram prog;
    const nvrtcResult rc = probe_compile(src, np, NV, "sm_90a", 1, &prog);
    nvrtcDestroyProgram(&prog);
    printf("cluster_fwd_probe: %s (%d variants)\n", rc == NVRTC_SUCCESS ? "every variant compiled for sm_90a" : "compile failed", NV);
    return rc == NVRTC_SUCCESS ? 0 : 1;
}

typedef struct { CUdeviceptr x, o; } set;
typedef struct {
    const variant *v;
    CUfunction f;
    const set *sets;
    int nsets;
    long long n, clusters;
    CUdeviceptr w, sh, sc, idx;
} run;

/* clusters clusters of v->cl CTAs on the probe's stream (no cluster
 * attribute for cl = 1); at is the attribute cfg points to. */
static void launch_config(const variant *v, long long clusters, CUlaunchConfig *cfg, CUlaunchAttribute *at)
{
    memset(cfg, 0, sizeof *cfg);
    memset(at, 0, sizeof *at);
    at->id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    at->value.clusterDim.x = (unsigned)v->cl, at->value.clusterDim.y = at->value.clusterDim.z = 1;
    cfg->gridDimX = (unsigned)(clusters * v->cl), cfg->gridDimY = cfg->gridDimZ = 1;
    cfg->blockDimX = (unsigned)threads_of(v), cfg->blockDimY = cfg->blockDimZ = 1;
    cfg->sharedMemBytes = smem_of(v);
    cfg->hStream = probe_stream;
    cfg->attrs = at, cfg->numAttrs = v->cl > 1;
}

static void launch_run(const void *arg, int i)
{
    const run *q = arg;
    const set *s = &q->sets[i % q->nsets];
    long long n = q->n;
    int r = R;
    float eps = (float)EPS;
    CUdeviceptr w = q->w, sh = q->sh, sc = q->sc, idx = q->idx;
    void *args[] = {(void *)&s->x, &w, &sh, &sc, &idx, (void *)&s->o, &n, &r, &eps};
    CUlaunchConfig cfg;
    CUlaunchAttribute at;
    launch_config(q->v, q->clusters, &cfg, &at);
    CK(cuLaunchKernelEx(&cfg, q->f, args, NULL));
}

/* Set 0's output, every element, against want (the double computation
 * rounded to float): the worst |got - want| / max(|want|, 1e-3), infinite
 * where a value is NaN (left poisoned). */
static double check(const run *q, const float *want, unsigned short *got)
{
    const size_t n = (size_t)q->n * H;
    CK(cuMemcpyDtoH(got, q->sets[0].o, n * 2));
    double worst = 0;
    for (size_t j = 0; j < n; ++j) {
        const double e = fabs(probe_bf(got[j]) - want[j]) / fmax(fabs(want[j]), 1e-3);
        if (!(e <= worst)) worst = e != e ? INFINITY : e;
    }
    return worst;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--compile-only")) return compile_only();
    long long rows[8];
    const int nrows = probe_rows("cluster_fwd_probe", argc, argv, 1 << 18, rows);
    if (nrows < 0) return 2;
    const char *only_s = getenv("CLUSTER_FWD_VARIANT");
    char *end = NULL;
    const long only = only_s ? strtol(only_s, &end, 10) : -1;
    if (only_s && (*end || end == only_s || only < 0 || only >= NV)) {
        fprintf(stderr, "cluster_fwd_probe: CLUSTER_FWD_VARIANT must be an integer in 0..%d, got '%s'\n", NV - 1, only_s);
        return 2;
    }
    CUdevice dev;
    int sms, l2;
    const int rc = probe_start("cluster_fwd_probe", &dev, &sms, &l2);
    if (rc) return rc;
    static CUfunction fns[NV];
    char nm[NV][64];
    const char *np[NV];
    names(nm, np);
    probe_arch_suffix = "a"; /* fwdt's multicast is an sm_90a instruction */
    probe_build(dev, src, np, NV, fns);
    for (int i = 0; i < NV; ++i)
        CK(cuFuncSetAttribute(fns[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem_of(&VARIANTS[i])));
    /* kjit's own forward on the same inputs: the bits fwdk must reproduce. */
    kjit_ctx *kctx = NULL;
    if (kjit_ctx_create(&kctx, NULL) != KJIT_OK) {
        fprintf(stderr, "cluster_fwd_probe: kjit_ctx_create: %s\n", kjit_last_error());
        return 2;
    }

    const size_t tab_bytes = (size_t)R * H * 2;
    unsigned short *hw = malloc(H * 2), *hsh = malloc(tab_bytes), *hsc = malloc(tab_bytes);
    srand(12345);
    for (int c = 0; c < H; ++c) hw[c] = probe_to_bf((float)(0.5 + (double)rand() / RAND_MAX));
    for (size_t k = 0; k < (size_t)R * H; ++k) {
        hsh[k] = probe_to_bf((float)(0.2 * ((double)rand() / RAND_MAX - 0.5)));
        hsc[k] = probe_to_bf((float)(0.2 * ((double)rand() / RAND_MAX - 0.5)));
    }
    const CUdeviceptr dw = probe_upload(hw, H * 2), dsh = probe_upload(hsh, tab_bytes), dsc = probe_upload(hsc, tab_bytes);

    printf("# cluster_fwd_probe: norm_modulate forwards split over a cluster, or with the tables in shared memory (H %d bf16, R %d); events per iteration /"
           " inside a graph, us; rotating sets > 3x the L2; floor = x read + out written / %.2f TB/s\n", H, R,
           PEAK_BW / 1e12);
    printf("# kjit_diff: elements whose bits differ from kjit_norm_modulate_fwd's over the first launch and the timed ones (fwdk, fwdt: kjit's order, must be 0)\n");
    printf("%6s %2s %2s %3s %4s %3s %2s %7s %6s %4s %5s %8s %9s %9s %8s %9s %9s  %s\n", "rows", "CL", "RW", "RPT", "sync",
           "tab", "st", "threads", "smem", "regs", "local", "clusters", "events", "graph", "floor", "max_rel", "kjit_diff",
           "kernel");
    int failed = 0;
    for (int ri = 0; ri < nrows; ++ri) {
        const long long n = rows[ri];
        const size_t elems = (size_t)n * H, bytes = elems * 2;
        const double floor_us = 2.0 * (double)bytes / PEAK_BW * 1e6;
        const int nsets = probe_nsets(l2, 2.0 * (double)bytes);
        unsigned short *hx = malloc(bytes), *got = malloc(bytes), *kbits = malloc(bytes);
        int *hidx = malloc(sizeof(int) * (size_t)n);
        float *want = malloc(sizeof(float) * elems);
        for (size_t j = 0; j < elems; ++j) hx[j] = probe_to_bf((float)(4.0 * ((double)rand() / RAND_MAX - 0.5)));
        for (long long i = 0; i < n; ++i) hidx[i] = rand() % R;
        for (long long i = 0; i < n; ++i) {
            const unsigned short *xr = hx + i * H;
            double ss = 0;
            for (int j = 0; j < H; ++j) ss += (double)probe_bf(xr[j]) * probe_bf(xr[j]);
            const double rstd = 1 / sqrt(ss / H + EPS);
            const size_t t = (size_t)hidx[i] * H;
            for (int j = 0; j < H; ++j)
                want[i * H + j] = (float)(probe_bf(xr[j]) * rstd * probe_bf(hw[j]) * (1 + (double)probe_bf(hsc[t + j])) +
                                          probe_bf(hsh[t + j]));
        }
        set *sets = calloc((size_t)nsets, sizeof *sets);
        for (int i = 0; i < nsets; ++i) {
            CK(cuMemAlloc(&sets[i].x, bytes));
            CK(cuMemAlloc(&sets[i].o, bytes));
            CK(cuMemcpyHtoD(sets[i].x, hx, bytes));
        }
        CUdeviceptr didx;
        CK(cuMemAlloc(&didx, sizeof(int) * (size_t)n));
        CK(cuMemcpyHtoD(didx, hidx, sizeof(int) * (size_t)n));
        /* The uploads above ran on the legacy stream; the kernels run on the
         * probe's non-blocking one, which does not wait for them. */
        CK(cuCtxSynchronize());
        {
            CUdeviceptr kout;
            CK(cuMemAlloc(&kout, bytes));
            CK(cuMemsetD8Async(kout, 0xff, bytes, probe_stream));
            kjit_adaln_args a;
            memset(&a, 0, sizeof a);
            a.n = n, a.hidden = H, a.eps = (float)EPS, a.act_dtype = KJIT_BF16, a.param_dtype = KJIT_BF16;
            a.index.ptr = (const void *)(uintptr_t)didx, a.index.dtype = KJIT_I32, a.index.rows = R;
            a.x = (const void *)(uintptr_t)sets[0].x, a.x_stride = H, a.weight = (const void *)(uintptr_t)dw;
            a.shift = (const void *)(uintptr_t)dsh, a.shift_stride = H;
            a.scale = (const void *)(uintptr_t)dsc, a.scale_stride = H;
            a.out = (void *)(uintptr_t)kout, a.out_stride = H;
            if (kjit_norm_modulate_fwd(kctx, &a, probe_stream) != KJIT_OK) {
                fprintf(stderr, "cluster_fwd_probe: kjit_norm_modulate_fwd: %s\n", kjit_last_error());
                return 2;
            }
            CK(cuStreamSynchronize(probe_stream));
            CK(cuMemcpyDtoH(kbits, kout, bytes));
            CK(cuMemFree(kout));
        }
        for (int vi = 0; vi < NV; ++vi) {
            if (only >= 0 && vi != only) continue;
            const variant *v = &VARIANTS[vi];
            run q = {v, fns[vi], sets, nsets, n, 0, dw, dsh, dsc, didx};
            int regs, local, clusters = 0;
            CK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, q.f));
            CK(cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, q.f));
            if (v->cl > 1) {
                CUlaunchConfig cfg;
                CUlaunchAttribute at;
                launch_config(v, 1, &cfg, &at);
                if (cuOccupancyMaxActiveClusters(&clusters, q.f, &cfg) != CUDA_SUCCESS) clusters = 0;
            } else {
                int per_sm = 0;
                CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, q.f, threads_of(v), smem_of(v)));
                clusters = per_sm * sms;
            }
            if (clusters <= 0) {
                /* A failure: the variant list must fit (a control left out would leave the check untested). */
                printf("%6lld %2d %2d %3d %4d %3d %2d %7d %6u %4d %5d  DOES NOT FIT on this GPU  %s\n", n, v->cl, v->rw,
                       v->rpt, v->sync, v->tab, v->st, threads_of(v), smem_of(v), regs, local, nm[vi]);
                failed++;
                continue;
            }
            q.clusters = clusters;
            /* On the probe's own (non-blocking) stream: a plain memset would not be ordered before it. */
            CK(cuMemsetD8Async(sets[0].o, 0xff, bytes, probe_stream));
            launch_run(&q, 0);
            CK(cuStreamSynchronize(probe_stream));
            double err = check(&q, want, got);
            size_t kdiff = 0;
            for (size_t j = 0; j < elems; ++j) kdiff += got[j] != kbits[j];
            /* Set 0 poisoned again: the timed launches (the graph's last) must rewrite all of it. */
            CK(cuMemsetD8Async(sets[0].o, 0xff, bytes, probe_stream));
            const double te = probe_time_events(launch_run, &q), tg = probe_time_graph(launch_run, &q, nsets);
            err = fmax(err, check(&q, want, got));
            for (size_t j = 0; j < elems; ++j) kdiff += got[j] != kbits[j]; /* both launches' differences */
            /* A control must come out wrong with finite values: left poisoned (infinite) proves nothing of the check. */
            const int right = err <= 1e-2, bad = exact(v) ? !right : right || !isfinite(err);
            const int unlike = v->kord && exact(v) && kdiff != 0; /* kjit's order must give kjit's bits */
            failed += bad + unlike;
            printf("%6lld %2d %2d %3d %4d %3d %2d %7d %6u %4d %5d %8d %9.1f %9.1f %8.1f %9.2e %9zu  %s%s%s\n", n, v->cl,
                   v->rw, v->rpt, v->sync, v->tab, v->st, threads_of(v), smem_of(v), regs, local, clusters, te, tg,
                   floor_us, err, kdiff, nm[vi],
                   !bad ? (exact(v) ? "" : "  (no exchange: wrong, as it should be)") : exact(v) ? "  WRONG" : "  BLIND",
                   unlike ? "  NOT KJIT'S BITS" : "");
            fflush(stdout);
        }
        for (int i = 0; i < nsets; ++i) {
            CK(cuMemFree(sets[i].x));
            CK(cuMemFree(sets[i].o));
        }
        CK(cuMemFree(didx));
        free(sets), free(hx), free(got), free(kbits), free(hidx), free(want);
    }
    CK(cuMemFree(dw));
    CK(cuMemFree(dsh));
    CK(cuMemFree(dsc));
    free(hw), free(hsh), free(hsc);
    kjit_ctx_destroy(kctx);
    if (failed) fprintf(stderr, "cluster_fwd_probe: %d failure(s): WRONG, BLIND, NOT KJIT'S BITS or DOES NOT FIT\n", failed);
    return failed ? 1 : 0;
}
