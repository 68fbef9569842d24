/* A sort-free norm_modulate backward for small R, as a probe (a measurement,
 * not part of kjit): docs/PERF_NOTES.md, "a direction not yet tried".
 *
 * Chunk c of C holds rows [c * rpc, (c + 1) * rpc) in their natural order
 * (rpc = ceil(N / C)); a thread-block cluster of CL = 8 CTAs takes a chunk,
 * CTA k of it columns [k * H / 8, (k + 1) * H / 8) (672 at H = 5376 bf16),
 * one thread a 16-byte granule of 8 columns. Rows go B at a time: each thread
 * loads its granule of x, dy and the row's scale, the CTA reduces each row's
 * two sums (sum x^2, sum g x with g = dy * w * (1 + scale)) over its columns
 * (warp butterflies, then the warps in order), then the eight CTAs' sums are
 * exchanged and added in rank order (SYNC):
 *   1  every CTA reads them through distributed shared memory after one
 *      cluster barrier per batch (its release / acquire is a memory fence
 *      and an L1 invalidate in SASS);
 *   2  every CTA pushes its sums into each peer's shared memory (st.async,
 *      completing bytes on the peer's mbarrier) and waits on its own
 *      mbarrier: no cluster barrier, no fence (the same bits as 1);
 *   0  no exchange (the CTA's own sums times 8: wrong results; the
 *      difference is what the exchange costs). Each thread writes dx
 * and adds dy, dy * xhat * w and dy * xhat * (1 + scale) into the shared-
 * memory accumulators of the row's table row (R x 3 x 672 fp32, rows in
 * order); at the chunk's end they are written out as the chunk's partials
 * (C x R x 3 x H fp32). The finisher (summing the C partials in order) is
 * not timed: it is the same kernel shape as kjit's.
 *
 * Timed as sol_probe times its kernels (events per iteration and inside a
 * graph, rotating sets over 3x the L2), for B = 1, 2, 4, 8, 16, SYNC 0 / 1 / 2
 * and C = 16, 32; every variant's dx (every row) and partials (every chunk)
 * are poisoned and checked against a double computation after one launch
 * and after its timed launches. A SYNC 1 / 2 variant above 1e-2 is WRONG, a
 * SYNC 0 one within it (or left poisoned, which tests nothing) means the
 * check is BLIND; either makes the exit status 1. The floor is the rows'
 * bytes (x, dy read, dx written) over 4.25 TB/s; kjit's main backward kernel
 * took 40.5 us at 4097 rows under ncu (2026-12-01).
 * Built as build/bench/cluster_probe; run by bench/run_device.sh cluster.
 * Usage: cluster_probe [ROWS...]      (default 4097 32768)
 *        cluster_probe --compile-only (NVRTC for sm_90, no GPU: registers
 *                                      and spills of every variant) */
#include <cuda.h>
#include <math.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_bf16.h"
#include "probe_device_src.h"
#include "probe_time.h"

#define H 5376
#define CL 8
#define COLS (H / CL)
#define GRAN (COLS / 8)
#define THREADS 96
#define R 9
#define EPS 1e-5
#define PEAK_BW 4.25e12
#define ACC_BYTES ((size_t)R * 3 * COLS * 4)

static const char *src =
    "#define H 5376\n#define CL 8\n#define COLS (H / CL)\n#define GRAN (COLS / 8)\n#define THREADS 96\n"
    "#define NW (THREADS / 32)\n"
    "__device__ __forceinline__ float bf(unsigned short h) { return __uint_as_float((unsigned)h << 16); }\n"
    "__device__ __forceinline__ unsigned short to_bf(float f)\n"
    "{\n"
    "    unsigned u = __float_as_uint(f);\n"
    "    u += 0x7fffu + ((u >> 16) & 1u);\n"
    "    return (unsigned short)(u >> 16);\n"
    "}\n"
    "__device__ __forceinline__ void unpack(uint4 v, float *f)\n"
    "{\n"
    "    const unsigned w[4] = {v.x, v.y, v.z, v.w};\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < 4; ++i) { f[2 * i] = bf(w[i] & 0xffffu); f[2 * i + 1] = bf(w[i] >> 16); }\n"
    "}\n"
    PROBE_SRC_CLUSTER
    "/* The pair of floats at local (8-byte aligned) in cluster CTA rank's shared memory. */\n"
    "__device__ __forceinline__ float2 ld_remote2(unsigned local, unsigned rank)\n"
    "{\n"
    "    unsigned ra;\n"
    "    float2 v;\n"
    "    asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\" : \"=r\"(ra) : \"r\"(local), \"r\"(rank));\n"
    "    asm volatile(\"ld.shared::cluster.v2.f32 {%0, %1}, [%2];\" : \"=f\"(v.x), \"=f\"(v.y) : \"r\"(ra) : \"memory\");\n"
    "    return v;\n"
    "}\n"
    "/* (u, v) into a peer's shared memory (remote address a, 8-byte aligned),\n"
    "   completing 8 bytes on the peer's mbarrier (remote address bar). */\n"
    "__device__ __forceinline__ void push2(unsigned a, float u, float v, unsigned bar)\n"
    "{ asm volatile(\"st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];\"\n"
    "               :: \"r\"(a), \"r\"(__float_as_uint(u)), \"r\"(__float_as_uint(v)), \"r\"(bar) : \"memory\"); }\n"
    "template <int B, int SYNC>\n"
    "__global__ void __launch_bounds__(THREADS) bwd(const uint4 *__restrict__ x, const uint4 *__restrict__ dy,\n"
    "    uint4 *__restrict__ dx, const uint4 *__restrict__ scale, const uint4 *__restrict__ w,\n"
    "    const int *__restrict__ idx, float *__restrict__ partial, long long n, long long rpc, int r, float eps)\n"
    "{\n"
    "    extern __shared__ float acc[]; /* [r][3][COLS] */\n"
    "    __shared__ float red[2][NW][B][2];\n"
    "    __shared__ __align__(8) float slot[2][CL][B][2]; /* [parity][source rank (SYNC 2; else 0)][row][sum] */\n"
    "    __shared__ __align__(8) unsigned long long bar[2];\n"
    "    unsigned rank;\n"
    "    asm(\"mov.u32 %0, %%cluster_ctarank;\" : \"=r\"(rank));\n"
    "    const long long c = blockIdx.x / CL;\n"
    "    const int t = threadIdx.x, lane = t & 31, wp = t >> 5;\n"
    "    const bool mine = t < GRAN;\n"
    "    const long long g = (long long)rank * GRAN + t; /* granule within a row */\n"
    "    for (int i = t; i < r * 3 * COLS; i += THREADS) acc[i] = 0.f;\n"
    "    float wv[8];\n"
    "    unpack(mine ? w[g] : make_uint4(0, 0, 0, 0), wv);\n"
    "    if (SYNC == 2 && t == 0) {\n"
    "        bar_init(smem_addr(&bar[0])), bar_init(smem_addr(&bar[1]));\n"
    "        asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");\n"
    "    }\n"
    "    /* SYNC 2: every CTA's barriers set up before any peer pushes. */\n"
    "    if (SYNC == 2) cluster_sync(); else __syncthreads();\n"
    "    const long long r0 = c * rpc, r1 = min(n, r0 + rpc);\n"
    "    int par = 0, it = 0; /* bar[par]'s phase: it / 2 */\n"
    "    for (long long base = r0; base < r1; base += B, par ^= 1, ++it) {\n"
    "        uint4 xq[B], dq[B], sq[B]; /* packed: 12 registers a row */\n"
    "        float s2[B], gx[B];\n"
    "        int id[B];\n"
    "#pragma unroll\n"
    "        for (int b = 0; b < B; ++b) {\n"
    "            const long long row = base + b < r1 ? base + b : r1 - 1;\n"
    "            id[b] = idx[row];\n"
    "            uint4 a = make_uint4(0, 0, 0, 0), d = a, s = a;\n"
    "            if (mine) { a = __ldcs(x + row * GRAN * CL + g); d = __ldcs(dy + row * GRAN * CL + g);\n"
    "                        s = __ldg(scale + (long long)id[b] * GRAN * CL + g); }\n"
    "            xq[b] = a, dq[b] = d, sq[b] = s;\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int b = 0; b < B; ++b) {\n"
    "            float p = 0.f, q = 0.f, xv[8], dv[8], sv[8];\n"
    "            unpack(xq[b], xv), unpack(dq[b], dv), unpack(sq[b], sv);\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < 8; ++j) {\n"
    "                p += xv[j] * xv[j];\n"
    "                q += dv[j] * wv[j] * (1.f + sv[j]) * xv[j];\n"
    "            }\n"
    "#pragma unroll\n"
    "            for (int o = 16; o; o >>= 1) { p += __shfl_xor_sync(~0u, p, o); q += __shfl_xor_sync(~0u, q, o); }\n"
    "            if (lane == 0) red[par][wp][b][0] = p, red[par][wp][b][1] = q;\n"
    "        }\n"
    "        /* Opaque to the compiler: the rows stay packed (12 registers a row)\n"
    "         * instead of unpacked floats living across the exchange. */\n"
    "#pragma unroll\n"
    "        for (int b = 0; b < B; ++b)\n"
    "            asm volatile(\"\" : \"+r\"(xq[b].x), \"+r\"(xq[b].y), \"+r\"(xq[b].z), \"+r\"(xq[b].w),\n"
    "                         \"+r\"(dq[b].x), \"+r\"(dq[b].y), \"+r\"(dq[b].z), \"+r\"(dq[b].w),\n"
    "                         \"+r\"(sq[b].x), \"+r\"(sq[b].y), \"+r\"(sq[b].z), \"+r\"(sq[b].w));\n"
    "        __syncthreads();\n"
    "        if (SYNC == 2) {\n"
    "            /* Each (row, peer) pair: the CTA's two sums pushed into the peer's slot for this rank. */\n"
    "            for (int e = t; e < B * CL; e += THREADS) {\n"
    "                const int b = e % B, d = e / B;\n"
    "                float u = 0.f, v = 0.f;\n"
    "                for (int k = 0; k < NW; ++k) u += red[par][k][b][0], v += red[par][k][b][1];\n"
    "                push2(peer(smem_addr(&slot[par][rank][b][0]), d), u, v, peer(smem_addr(&bar[par]), d));\n"
    "            }\n"
    "            if (t == 0) bar_expect(smem_addr(&bar[par]), CL * B * 8);\n"
    "            bar_wait(smem_addr(&bar[par]), (unsigned)(it >> 1) & 1u);\n"
    "        } else {\n"
    "            if (t < 2 * B) {\n"
    "                float v = 0.f;\n"
    "                for (int k = 0; k < NW; ++k) v += red[par][k][t >> 1][t & 1];\n"
    "                slot[par][0][t >> 1][t & 1] = v;\n"
    "            }\n"
    "            if (SYNC) cluster_sync(); else __syncthreads();\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int b = 0; b < B; ++b) {\n"
    "            float S = 0.f, Q = 0.f;\n"
    "            if (SYNC == 1) {\n"
    "                for (unsigned k = 0; k < CL; ++k) {\n"
    "                    const float2 v = ld_remote2(smem_addr(&slot[par][0][b][0]), k);\n"
    "                    S += v.x, Q += v.y;\n"
    "                }\n"
    "            } else if (SYNC == 2) {\n"
    "                for (int k = 0; k < CL; ++k) S += slot[par][k][b][0], Q += slot[par][k][b][1];\n"
    "            } else {\n"
    "                S = CL * slot[par][0][b][0], Q = CL * slot[par][0][b][1];\n"
    "            }\n"
    "            s2[b] = S, gx[b] = Q;\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int b = 0; b < B; ++b) {\n"
    "            if (!mine || base + b >= r1) continue;\n"
    "            const float rstd = rsqrtf(s2[b] / H + eps), mg = rstd * gx[b] / H; /* (a multiply by 1/H here made ptxas spill at B = 8, 16) */\n"
    "            float *a = acc + (long long)id[b] * 3 * COLS + 8 * t;\n"
    "            unsigned o[4];\n"
    "            float xv[8], dv[8], sv[8];\n"
    "            unpack(xq[b], xv), unpack(dq[b], dv), unpack(sq[b], sv);\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < 8; ++j) {\n"
    "                const float xh = xv[j] * rstd, gg = dv[j] * wv[j] * (1.f + sv[j]);\n"
    "                const unsigned short h = to_bf(rstd * (gg - xh * mg));\n"
    "                o[j >> 1] = (j & 1) ? (o[j >> 1] | ((unsigned)h << 16)) : h;\n"
    "                a[j] += dv[j];\n"
    "                a[COLS + j] += dv[j] * xh * wv[j];\n"
    "                a[2 * COLS + j] += dv[j] * xh * (1.f + sv[j]);\n"
    "            }\n"
    "            __stcs(dx + (base + b) * GRAN * CL + g, make_uint4(o[0], o[1], o[2], o[3]));\n"
    "        }\n"
    "    }\n"
    "    __syncthreads();\n"
    "    for (int i = t; i < r * 3 * COLS; i += THREADS) {\n"
    "        const int col = i % COLS, rk = i / COLS; /* rk = table row * 3 + k */\n"
    "        partial[(c * r * 3 + rk) * (long long)H + rank * COLS + col] = acc[i];\n"
    "    }\n"
    "    if (SYNC) cluster_sync(); /* no CTA leaves while a peer may read its slots */\n"
    "}\n";

static const int B_VALUES[] = {1, 2, 4, 8, 16};
static const int C_VALUES[] = {16, 32};
#define NBV 5
#define NC 2

#define NS 3 /* SYNC 0, 1, 2 */
static CUfunction fns[NBV][NS];

/* The kernels' name expressions, in fns' order, and pointers to them. */
static void names(char out[NBV * NS][48], const char *ptr[NBV * NS])
{
    for (int b = 0; b < NBV; ++b)
        for (int s = 0; s < NS; ++s) {
            snprintf(out[b * NS + s], 48, "bwd<%d, %d>", B_VALUES[b], s);
            ptr[b * NS + s] = out[b * NS + s];
        }
}

/* No GPU: compile every variant for sm_90 and print ptxas's registers and
 * spills. 0 when all compile. */
static int compile_only(void)
{
    char nm[NBV * NS][48];
    const char *np[NBV * NS];
    names(nm, np);
    nvrtcProgram prog;
    const nvrtcResult rc = probe_compile(src, np, NBV * NS, "sm_90", 1, &prog);
    nvrtcDestroyProgram(&prog);
    printf("cluster_probe: %s\n", rc == NVRTC_SUCCESS ? "every variant compiled for sm_90" : "compile failed");
    return rc == NVRTC_SUCCESS ? 0 : 1;
}

typedef struct { CUdeviceptr x, dy, dx; } set;
typedef struct {
    CUfunction f;
    const set *sets;
    int nsets, chunks;
    CUdeviceptr scale, w, idx, partial;
    long long n;
} run;

/* A chunk per cluster of CL CTAs on the probe's stream; at is the cluster
 * attribute cfg points to. */
static void launch_config(int chunks, CUlaunchConfig *cfg, CUlaunchAttribute *at)
{
    memset(cfg, 0, sizeof *cfg);
    memset(at, 0, sizeof *at);
    at->id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    at->value.clusterDim.x = CL, at->value.clusterDim.y = at->value.clusterDim.z = 1;
    cfg->gridDimX = (unsigned)(chunks * CL), cfg->gridDimY = cfg->gridDimZ = 1;
    cfg->blockDimX = THREADS, cfg->blockDimY = cfg->blockDimZ = 1;
    cfg->sharedMemBytes = (unsigned)ACC_BYTES;
    cfg->hStream = probe_stream;
    cfg->attrs = at, cfg->numAttrs = 1;
}

static void launch_run(const void *arg, int i)
{
    const run *q = arg;
    const set *s = &q->sets[i % q->nsets];
    long long n = q->n, rpc = (q->n + q->chunks - 1) / q->chunks;
    int r = R;
    float eps = (float)EPS;
    CUdeviceptr scale = q->scale, w = q->w, idx = q->idx, partial = q->partial;
    void *args[] = {(void *)&s->x, (void *)&s->dy, (void *)&s->dx, &scale, &w, &idx, &partial, &n, &rpc, &r, &eps};
    CUlaunchConfig cfg;
    CUlaunchAttribute at;
    launch_config(q->chunks, &cfg, &at);
    CK(cuLaunchKernelEx(&cfg, q->f, args, NULL));
}


/* The double computation every checked launch is held to: dx of every row
 * (as floats) and, for each chunk count, every chunk's partials. */
typedef struct {
    float *dx;
    double *part[NC];
} reference;

static void reference_make(reference *rf, long long n, const unsigned short *hx, const unsigned short *hdy,
                           const unsigned short *hs, const unsigned short *hw, const int *hidx)
{
    rf->dx = malloc(sizeof(float) * (size_t)n * H);
    for (int ci = 0; ci < NC; ++ci) rf->part[ci] = calloc((size_t)C_VALUES[ci] * R * 3 * H, sizeof(double));
    for (long long i = 0; i < n; ++i) {
        const unsigned short *xr = hx + i * H, *dr = hdy + i * H, *sr = hs + (long long)hidx[i] * H;
        double ss = 0, gxs = 0;
        for (int j = 0; j < H; ++j) {
            const double xv = probe_bf(xr[j]), gg = probe_bf(dr[j]) * probe_bf(hw[j]) * (1 + probe_bf(sr[j]));
            ss += xv * xv, gxs += gg * xv;
        }
        const double rstd = 1 / sqrt(ss / H + EPS), mg = rstd * gxs / H;
        for (int j = 0; j < H; ++j) {
            const double xv = probe_bf(xr[j]), d = probe_bf(dr[j]), sc = probe_bf(sr[j]), xh = xv * rstd;
            rf->dx[i * H + j] = (float)(rstd * (d * probe_bf(hw[j]) * (1 + sc) - xh * mg));
            for (int ci = 0; ci < NC; ++ci) {
                const long long rpc = (n + C_VALUES[ci] - 1) / C_VALUES[ci];
                double *p = rf->part[ci] + ((size_t)(i / rpc) * R * 3 + (size_t)hidx[i] * 3) * H + j;
                p[0] += d, p[H] += d * xh * probe_bf(hw[j]), p[2 * H] += d * xh * (1 + sc);
            }
        }
    }
}

static void reference_free(reference *rf)
{
    free(rf->dx);
    for (int ci = 0; ci < NC; ++ci) free(rf->part[ci]);
}

/* Every set's dx and the partials set to NaN (0xff bytes), on the probe's
 * own (non-blocking) stream: a plain memset would not be ordered before it. */
static void poison(const run *q)
{
    for (int i = 0; i < q->nsets; ++i) CK(cuMemsetD8Async(q->sets[i].dx, 0xff, (size_t)q->n * H * 2, probe_stream));
    CK(cuMemsetD8Async(q->partial, 0xff, sizeof(float) * (size_t)q->chunks * R * 3 * H, probe_stream));
}

/* Set 0's dx (every row) and the last launch's partials (every chunk: every
 * set holds the same inputs) against rf; the worst of max |err| / max |ref|
 * over dx and over the partials. */
static double check(const run *q, const reference *rf, int ci)
{
    const size_t n = (size_t)q->n * H, pn = (size_t)q->chunks * R * 3 * H;
    unsigned short *got = malloc(sizeof(unsigned short) * n);
    float *part = malloc(sizeof(float) * pn);
    CK(cuMemcpyDtoH(got, q->sets[0].dx, sizeof(unsigned short) * n));
    CK(cuMemcpyDtoH(part, q->partial, sizeof(float) * pn));
    double e = 0, m = 0, ep = 0, mp = 0;
    size_t nan = 0; /* a value left poisoned (NaN), which fmax would skip */
    for (size_t j = 0; j < n; ++j) {
        const double d = fabs(probe_bf(got[j]) - rf->dx[j]);
        nan += d != d, e = fmax(e, d), m = fmax(m, fabs(rf->dx[j]));
    }
    for (size_t j = 0; j < pn; ++j) {
        const double d = fabs(part[j] - rf->part[ci][j]);
        nan += d != d, ep = fmax(ep, d), mp = fmax(mp, fabs(rf->part[ci][j]));
    }
    free(got), free(part);
    if (nan) return INFINITY;
    return fmax(m > 0 ? e / m : e, mp > 0 ? ep / mp : ep);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--compile-only")) return compile_only();
    long long rows[8];
    const int nrows = probe_rows("cluster_probe", argc, argv, 1 << 18, rows);
    if (nrows < 0) return 2;
    CUdevice dev;
    int sms, l2;
    const int rc = probe_start("cluster_probe", &dev, &sms, &l2);
    if (rc) return rc;
    char nm[NBV * NS][48];
    const char *np[NBV * NS];
    names(nm, np);
    probe_build(dev, src, np, NBV * NS, &fns[0][0]);
    for (int i = 0; i < NBV * NS; ++i)
        CK(cuFuncSetAttribute((&fns[0][0])[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)ACC_BYTES));
    printf("# cluster_probe: a sort-free norm_modulate backward (H %d bf16, R %d, clusters of %d CTAs of %d threads,"
           " %.1f KB of accumulators a CTA); events per iteration / inside a graph, us; floor = x, dy read + dx written"
           " / %.2f TB/s\n", H, R, CL, THREADS, ACC_BYTES / 1024.0, PEAK_BW / 1e12);
    printf("%6s %3s %3s %4s %5s %6s %8s %9s %9s %8s %9s\n", "rows", "C", "B", "sync", "regs", "local", "clusters",
           "events", "graph", "floor", "rel_err");
    int failed = 0;
    for (int ri = 0; ri < nrows; ++ri) {
        const long long n = rows[ri];
        const size_t bytes = (size_t)n * H * 2;
        const double floor_us = 3.0 * (double)bytes / PEAK_BW * 1e6;
        const int nsets = probe_nsets(l2, 3.0 * (double)bytes);
        unsigned short *hx = malloc(bytes), *hdy = malloc(bytes), *hs = malloc((size_t)R * H * 2), *hw = malloc(H * 2);
        int *hidx = malloc(sizeof(int) * (size_t)n);
        srand(12345);
        for (size_t j = 0; j < (size_t)n * H; ++j) {
            hx[j] = probe_to_bf(0.3 + 2.0 * rand() / RAND_MAX - 1.0);
            hdy[j] = probe_to_bf(2.0 * rand() / RAND_MAX - 1.0);
        }
        for (int j = 0; j < R * H; ++j) hs[j] = probe_to_bf(0.5 * (2.0 * rand() / RAND_MAX - 1.0));
        for (int j = 0; j < H; ++j) hw[j] = probe_to_bf(1.0 + 0.1 * (2.0 * rand() / RAND_MAX - 1.0));
        for (long long i = 0; i < n; ++i) hidx[i] = rand() % R;
        reference rf;
        reference_make(&rf, n, hx, hdy, hs, hw, hidx);
        set *sets = calloc((size_t)nsets, sizeof *sets);
        for (int i = 0; i < nsets; ++i) {
            CK(cuMemAlloc(&sets[i].x, bytes));
            CK(cuMemAlloc(&sets[i].dy, bytes));
            CK(cuMemAlloc(&sets[i].dx, bytes));
            CK(cuMemcpyHtoD(sets[i].x, hx, bytes));
            CK(cuMemcpyHtoD(sets[i].dy, hdy, bytes));
        }
        const CUdeviceptr scale = probe_upload(hs, (size_t)R * H * 2), w = probe_upload(hw, H * 2),
                          idx = probe_upload(hidx, sizeof(int) * (size_t)n);
        CUdeviceptr partial;
        CK(cuMemAlloc(&partial, sizeof(float) * (size_t)C_VALUES[NC - 1] * R * 3 * H));
        /* The uploads above ran on the legacy stream; the kernels run on the
         * probe's non-blocking one, which does not wait for them. */
        CK(cuCtxSynchronize());
        for (int ci = 0; ci < NC; ++ci)
            for (int b = 0; b < NBV; ++b)
                for (int s = NS - 1; s >= 0; --s) {
                    run q = {fns[b][s], sets, nsets, C_VALUES[ci], scale, w, idx, partial, n};
                    int regs, local, clusters = -1;
                    CK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, q.f));
                    CK(cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, q.f));
                    CUlaunchConfig cfg;
                    CUlaunchAttribute at;
                    launch_config(q.chunks, &cfg, &at);
                    if (cuOccupancyMaxActiveClusters(&clusters, q.f, &cfg) != CUDA_SUCCESS) clusters = -1;
                    /* The results, poisoned first, once alone and once from the
                     * timed launches (poisoned again before them). SYNC 0
                     * computes wrong sums on purpose: the check's control. */
                    poison(&q);
                    launch_run(&q, 0);
                    CK(cuStreamSynchronize(probe_stream));
                    double err = check(&q, &rf, ci);
                    poison(&q);
                    const double te = probe_time_events(launch_run, &q), tg = probe_time_graph(launch_run, &q, nsets);
                    err = fmax(err, check(&q, &rf, ci));
                    /* A control must come out wrong with finite values: left poisoned proves nothing of the check. */
                    const int right = err <= 1e-2, bad = s ? !right : right || !isfinite(err);
                    failed += bad;
                    printf("%6lld %3d %3d %4d %5d %6d %8d %9.1f %9.1f %8.1f %9.2e%s%s\n", n, q.chunks, B_VALUES[b], s,
                           regs, local, clusters, te, tg, floor_us, err,
                           !bad ? (s ? "" : "  (no exchange: wrong, as it should be)") : s ? "  WRONG" : "  BLIND",
                           clusters >= 0 && clusters < q.chunks ? "  (more clusters than fit at once)" : "");
                    fflush(stdout);
                }
        for (int i = 0; i < nsets; ++i) {
            CK(cuMemFree(sets[i].x));
            CK(cuMemFree(sets[i].dy));
            CK(cuMemFree(sets[i].dx));
        }
        CK(cuMemFree(scale));
        CK(cuMemFree(w));
        CK(cuMemFree(idx));
        CK(cuMemFree(partial));
        free(sets), free(hx), free(hdy), free(hs), free(hw), free(hidx);
        reference_free(&rf);
    }
    if (failed) fprintf(stderr, "cluster_probe: %d variant(s) WRONG or BLIND\n", failed);
    return failed ? 1 : 0;
}
