/* How fast a plain norm_modulate forward can be at the benchmark's shape (a
 * measurement, not part of kjit): y = x * rstd * w * (1 + scale[i]) + shift[i]
 * over N rows of 5376 bf16, bf16 tables of R = 9 rows, written the simplest
 * way (each thread's granules of a row in registers, the row reduced by warp
 * butterflies and one shared-memory pass, no staging), against which
 * kjit's forward (bench_ops) and the 1in1out plain copy (sol_probe) are read.
 *
 * Variants (template parameters of the probe kernel):
 *   G     16-byte granules per thread of a row: 1 (672 threads a row) or 3 (224)
 *   RPC   rows per CTA side by side (block = RPC * 672 / G)
 *   RPT   rows per thread, all loads issued before the first reduction
 *   TAB   1: read w, shift[i], scale[i] (i = index[row]) from global memory;
 *         2: all of w and the tables copied to shared memory first (one
 *         CTA per SM, 204 KB); 0: y = x * rstd
 *   RED   1: the row's sum of squares; 0: no reduction (each thread's own)
 *   PERS  0: full grid; 1: a persistent grid (the occupancy's CTAs per SM)
 *         walking the rows grid-strided, the next rows' x loaded while the
 *         current ones are reduced
 * Each runs with the driver's shared-memory carveout and with the largest L1
 * (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT -1 and 0: carve), and
 * with two index patterns: uniform over the R rows per row
 * (bench_ops' pattern) and runs of rows sharing a table row (lengths uniform
 * in 1..N/6, the conformance report's H3 pattern).
 * Timed as bench_ops times the ops (probe_time.h). Rows 0, 1, N/2 and N-1 of
 * every TAB = RED = 1 variant are compared with a double computation on the
 * host (max relative error printed; the probe fails above 1e-2).
 * Built as build/bench/norm_probe; run by bench/run_device.sh normp.
 * Usage: norm_probe [ROWS...]   (default 4097 32768)
 * NORM_PROBE_VARIANT=K runs only variant K of VARIANTS (uniform index, the
 * driver's carveout), e.g. under ncu. */
#include <cuda.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_bf16.h"
#include "probe_device_src.h"
#include "probe_time.h"

#define H 5376
#define HG (H / 8)
#define R 9
#define PEAK_BW 4.25e12

static const char *src =
    "#define HG 672\n"
    PROBE_SRC_BF16
    "__device__ __forceinline__ unsigned mod2(unsigned x, unsigned w, unsigned s, unsigned c, float rs, int tab)\n"
    "{ if (!tab) return pk(lo(x) * rs, hi(x) * rs);\n"
    "  return pk(lo(x) * rs * lo(w) * (1.f + lo(c)) + lo(s), hi(x) * rs * hi(w) * (1.f + hi(c)) + hi(s)); }\n"
    "template <int G, int RPC, int RPT, int TAB, int RED, int PERS>\n"
    "__global__ void __launch_bounds__(HG / G * RPC) nm(const uint4 *__restrict__ x, const uint4 *__restrict__ w,\n"
    "    const uint4 *__restrict__ sh, const uint4 *__restrict__ sc, const int *__restrict__ idx,\n"
    "    uint4 *__restrict__ out, long long n, int rt)\n"
    "{\n"
    "    constexpr int TPR = HG / G, NW = TPR / 32;\n"
    "    __shared__ float part[2][RPT][RPC][NW];\n"
    "    extern __shared__ uint4 tsm[];\n"
    "    const int sub = threadIdx.x / TPR, t = threadIdx.x % TPR, wi = t / 32, lane = t % 32;\n"
    "    if (TAB == 2) {\n"
    "        for (int k = threadIdx.x; k < HG; k += blockDim.x) tsm[k] = __ldg(w + k);\n"
    "        for (int k = threadIdx.x; k < rt * HG; k += blockDim.x) tsm[HG + k] = __ldg(sh + k), tsm[HG + rt * HG + k] = __ldg(sc + k);\n"
    "        __syncthreads();\n"
    "    }\n"
    "    const long long step = (long long)gridDim.x * RPC * RPT;\n"
    "    uint4 wv[G];\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < G; ++k) wv[k] = TAB == 1 ? __ldg(w + t + k * TPR) : make_uint4(0, 0, 0, 0);\n"
    "    uint4 xv[RPT][G];\n"
    "    long long base = (long long)blockIdx.x * RPC * RPT;\n"
    "#pragma unroll\n"
    "    for (int q = 0; q < RPT; ++q) {\n"
    "        const long long row = base + q * RPC + sub;\n"
    "#pragma unroll\n"
    "        for (int k = 0; k < G; ++k) xv[q][k] = row < n ? ld_x(x + row * HG + t + k * TPR) : make_uint4(0, 0, 0, 0);\n"
    "    }\n"
    "    int par = 0;\n"
    "    for (; base < n; base += step, par ^= 1) {\n"
    "        uint4 sv[RPT][G], cv[RPT][G];\n"
    "#pragma unroll\n"
    "        for (int q = 0; q < RPT; ++q) {\n"
    "            const long long row = base + q * RPC + sub;\n"
    "            const int i = TAB == 1 && row < n ? idx[row] : 0;\n"
    "#pragma unroll\n"
    "            for (int k = 0; k < G; ++k) {\n"
    "                sv[q][k] = TAB == 1 ? __ldg(sh + (long long)i * HG + t + k * TPR) : make_uint4(0, 0, 0, 0);\n"
    "                cv[q][k] = TAB == 1 ? __ldg(sc + (long long)i * HG + t + k * TPR) : make_uint4(0, 0, 0, 0);\n"
    "            }\n"
    "        }\n"
    "        float rs[RPT];\n"
    "#pragma unroll\n"
    "        for (int q = 0; q < RPT; ++q) {\n"
    "            float s = 0.f;\n"
    "#pragma unroll\n"
    "            for (int k = 0; k < G; ++k) s += sq4(xv[q][k]);\n"
    "            if (RED) {\n"
    "#pragma unroll\n"
    "                for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);\n"
    "                if (lane == 0) part[par][q][sub][wi] = s;\n"
    "            }\n"
    "            rs[q] = s;\n"
    "        }\n"
    "        if (RED) {\n"
    "            __syncthreads();\n"
    "#pragma unroll\n"
    "            for (int q = 0; q < RPT; ++q) {\n"
    "                float s = 0.f;\n"
    "#pragma unroll\n"
    "                for (int j = 0; j < NW; ++j) s += part[par][q][sub][j];\n"
    "                rs[q] = s;\n"
    "            }\n"
    "        }\n"
    "        uint4 xc[RPT][G];\n"
    "#pragma unroll\n"
    "        for (int q = 0; q < RPT; ++q)\n"
    "#pragma unroll\n"
    "            for (int k = 0; k < G; ++k) xc[q][k] = xv[q][k];\n"
    "        if (PERS) {\n"
    "#pragma unroll\n"
    "            for (int q = 0; q < RPT; ++q) {\n"
    "                const long long row = base + step + q * RPC + sub;\n"
    "#pragma unroll\n"
    "                for (int k = 0; k < G; ++k) if (row < n) xv[q][k] = ld_x(x + row * HG + t + k * TPR);\n"
    "            }\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int q = 0; q < RPT; ++q) {\n"
    "            const long long row = base + q * RPC + sub;\n"
    "            if (row >= n) continue;\n"
    "            const float r = rsqrtf(rs[q] * (1.0f / 5376.0f) + 1e-5f);\n"
    "            const int i = TAB == 2 ? idx[row] : 0;\n"
    "#pragma unroll\n"
    "            for (int k = 0; k < G; ++k) {\n"
    "                const int gi = t + k * TPR;\n"
    "                const uint4 a = xc[q][k], b = TAB == 2 ? tsm[gi] : wv[k];\n"
    "                const uint4 s = TAB == 2 ? tsm[HG + i * HG + gi] : sv[q][k], c = TAB == 2 ? tsm[HG + (rt + i) * HG + gi] : cv[q][k];\n"
    "                uint4 o;\n"
    "                o.x = mod2(a.x, b.x, s.x, c.x, r, TAB); o.y = mod2(a.y, b.y, s.y, c.y, r, TAB);\n"
    "                o.z = mod2(a.z, b.z, s.z, c.z, r, TAB); o.w = mod2(a.w, b.w, s.w, c.w, r, TAB);\n"
    "                out[row * HG + t + k * TPR] = o;\n"
    "            }\n"
    "        }\n"
    "        if (!PERS) break;\n"
    "    }\n"
    "}\n";

typedef struct { int g, rpc, rpt, tab, red, pers; } variant;

static const variant VARIANTS[] = {
    /* g rpc rpt tab red pers */
    {1, 1, 1, 1, 1, 0}, {1, 1, 2, 1, 1, 0}, {1, 1, 1, 1, 1, 1}, {1, 1, 2, 1, 1, 1},
    {3, 1, 1, 1, 1, 0}, {3, 2, 1, 1, 1, 0}, {3, 4, 1, 1, 1, 0}, {3, 1, 2, 1, 1, 0},
    {3, 4, 1, 1, 1, 1}, {3, 2, 2, 1, 1, 1}, {3, 1, 2, 1, 1, 1},
    /* the tables in shared memory (one CTA per SM, persistent) */
    {3, 4, 1, 2, 1, 1}, {3, 4, 2, 2, 1, 1}, {3, 2, 2, 2, 1, 1}, {1, 1, 2, 2, 1, 1}, {1, 1, 3, 2, 1, 1},
    /* what the tables and the reduction cost: the best shapes without them */
    {1, 1, 1, 0, 1, 0}, {1, 1, 1, 1, 0, 0}, {1, 1, 1, 0, 0, 0}, {1, 1, 2, 0, 0, 0},
    {3, 1, 1, 0, 1, 0}, {3, 1, 1, 1, 0, 0}, {3, 1, 1, 0, 0, 0},
};
#define NV ((int)(sizeof VARIANTS / sizeof VARIANTS[0]))

static CUfunction fns[NV];
static int sms;

typedef struct { CUdeviceptr x, o; } set;
typedef struct { const variant *v; CUfunction f; const set *sets; int nsets; long long n, grid; CUdeviceptr w, sh, sc, idx; unsigned smem; } run;

static void launch_run(const void *arg, int i)
{
    const run *r = arg;
    const set *s = &r->sets[i % r->nsets];
    long long n = r->n;
    int rt = R;
    void *args[] = {(void *)&s->x, (void *)&r->w, (void *)&r->sh, (void *)&r->sc, (void *)&r->idx,
                    (void *)&s->o, &n, &rt};
    CK(cuLaunchKernel(r->f, (unsigned)r->grid, 1, 1, (unsigned)(HG / r->v->g * r->v->rpc), 1, 1, r->smem, probe_stream,
                      args, NULL));
}

static unsigned long long rng = 0x9e3779b97f4a7c15ull;
static double urand(void) /* [0, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

int main(int argc, char **argv)
{
    long long rows[8];
    const int nrows = probe_rows("norm_probe", argc, argv, (1LL << 22), rows);
    if (nrows < 0) return 2;
    CUdevice dev;
    int l2;
    const int rc = probe_start("norm_probe", &dev, &sms, &l2);
    if (rc) return rc;
    const char *only_s = getenv("NORM_PROBE_VARIANT");
    const int only = only_s ? atoi(only_s) : -1;
    static char names[NV][96];
    const char *np[NV];
    for (int i = 0; i < NV; ++i) {
        const variant *v = &VARIANTS[i];
        snprintf(names[i], sizeof names[i], "nm<%d, %d, %d, %d, %d, %d>", v->g, v->rpc, v->rpt, v->tab, v->red,
                 v->pers);
        np[i] = names[i];
    }
    probe_build(dev, src, np, NV, fns);

    /* Tables, w and one set of x drawn on the host (the other sets' x are
     * memset patterns: only their bytes matter for the timing). */
    const size_t tab_bytes = (size_t)R * H * 2;
    unsigned short *hw = malloc(H * 2), *hsh = malloc(tab_bytes), *hsc = malloc(tab_bytes);
    for (int c = 0; c < H; ++c) hw[c] = probe_to_bf((float)(0.5 + urand()));
    for (size_t k = 0; k < (size_t)R * H; ++k) {
        hsh[k] = probe_to_bf((float)(0.2 * (urand() - 0.5)));
        hsc[k] = probe_to_bf((float)(0.2 * (urand() - 0.5)));
    }
    const CUdeviceptr dw = probe_upload(hw, H * 2), dsh = probe_upload(hsh, tab_bytes), dsc = probe_upload(hsc, tab_bytes);

    printf("# norm_probe: plain norm_modulate forwards, H %d bf16, R %d; events per iteration / inside a graph, us;"
           " rotating sets > 3x the L2; floor = bytes / %.2f TB/s (x read, y written)\n", H, R, PEAK_BW / 1e12);
    printf("%6s %2s %3s %3s %3s %3s %4s %5s %4s %5s %7s %9s %9s %8s %9s\n", "rows", "G", "rpc", "rpt", "tab", "red",
           "pers", "carve", "regs", "ctas", "grid", "events", "graph", "floor", "max_rel");
    int bad = 0;
    for (int ri = 0; ri < nrows; ++ri) {
        const long long n = rows[ri];
        const size_t bytes = (size_t)n * H * 2;
        const double floor_us = 2.0 * (double)bytes / PEAK_BW * 1e6;
        const int nsets = probe_nsets(l2, 2.0 * (double)bytes);
        set *sets = calloc((size_t)nsets, sizeof *sets);
        for (int i = 0; i < nsets; ++i) {
            CK(cuMemAlloc(&sets[i].x, bytes));
            CK(cuMemAlloc(&sets[i].o, bytes));
            CK(cuMemsetD16(sets[i].x, (unsigned short)(0x3f00 + i), bytes / 2));
        }
        unsigned short *hx = malloc(bytes), *ho = malloc(bytes);
        int *hidx = malloc((size_t)n * sizeof(int));
        for (size_t k = 0; k < (size_t)n * H; ++k) hx[k] = probe_to_bf((float)(4.0 * (urand() - 0.5)));
        CK(cuMemcpyHtoD(sets[0].x, hx, bytes));
        CUdeviceptr didx;
        CK(cuMemAlloc(&didx, (size_t)n * sizeof(int)));
        for (int pat = 0; pat < 2; ++pat) {
        if (pat == 0) {
            for (long long k = 0; k < n; ++k) hidx[k] = (int)(urand() * R);
        } else {
            for (long long k = 0; k < n;) {
                long long len = 1 + (long long)(urand() * (double)(n / 6 > 1 ? n / 6 - 1 : 1));
                const int ti = (int)(urand() * R);
                for (; len > 0 && k < n; --len, ++k) hidx[k] = ti;
            }
        }
        CK(cuMemcpyHtoD(didx, hidx, (size_t)n * sizeof(int)));
        CK(cuCtxSynchronize()); /* the upload (legacy stream) before the probe's non-blocking stream reads it */
        printf("# index pattern: %s\n", pat ? "runs (H3)" : "uniform");
        for (int vi = 0; vi < NV; ++vi)
        for (int carve = -1; carve <= 0; ++carve) {
            const variant *v = &VARIANTS[vi];
            if (pat && !v->tab) continue;
            if (only >= 0 && (vi != only || carve != -1 || pat)) continue;
            CK(cuFuncSetAttribute(fns[vi], CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carve));
            const int block = HG / v->g * v->rpc;
            int regs, occ;
            CK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fns[vi]));
            const unsigned smem = v->tab == 2 ? (2 * R + 1) * HG * 16 : 0;
            CK(cuFuncSetAttribute(fns[vi], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem));
            CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fns[vi], block, smem));
            const long long full = (n + (long long)v->rpc * v->rpt - 1) / ((long long)v->rpc * v->rpt);
            long long grid = v->pers ? (long long)occ * sms : full;
            if (grid > full) grid = full;
            const run r = {v, fns[vi], sets, nsets, n, grid, dw, dsh, dsc, didx, smem};
            double max_rel = -1;
            if (v->tab && v->red) {
                CK(cuMemsetD8Async(sets[0].o, 0xff, bytes, probe_stream)); /* poison: NaN bf16, ordered before the launch */
                launch_run(&r, 0);
                CK(cuStreamSynchronize(probe_stream));
                CK(cuMemcpyDtoH(ho, sets[0].o, bytes));
                const long long check[4] = {0, n > 1 ? 1 : 0, n / 2, n - 1};
                max_rel = 0;
                for (int c = 0; c < 4; ++c) {
                    const long long row = check[c];
                    double ss = 0;
                    for (int j = 0; j < H; ++j) ss += (double)probe_bf(hx[row * H + j]) * probe_bf(hx[row * H + j]);
                    const double rstd = 1.0 / sqrt(ss / H + 1e-5);
                    const int ti = hidx[row];
                    for (int j = 0; j < H; ++j) {
                        const double want = probe_bf(hx[row * H + j]) * rstd * probe_bf(hw[j]) * (1.0 + probe_bf(hsc[ti * H + j])) +
                                            probe_bf(hsh[ti * H + j]);
                        const double got = probe_bf(ho[row * H + j]);
                        const double e = fabs(got - want) / (fabs(want) > 1e-3 ? fabs(want) : 1e-3);
                        if (!(e <= max_rel)) max_rel = isnan(e) ? INFINITY : e;
                    }
                }
                if (!(max_rel <= 1e-2)) bad = 1;
            }
            const double te = probe_time_events(launch_run, &r);
            const double tg = probe_time_graph(launch_run, &r, nsets);
            printf("%6lld %2d %3d %3d %3d %3d %4d %5d %4d %5d %7lld %9.1f %9.1f %8.1f %9.2g\n", n, v->g, v->rpc, v->rpt,
                   v->tab, v->red, v->pers, carve, regs, occ, grid, te, tg, floor_us, max_rel);
            fflush(stdout);
        }
        }
        CK(cuStreamSynchronize(probe_stream));
        for (int i = 0; i < nsets; ++i) {
            CK(cuMemFree(sets[i].x));
            CK(cuMemFree(sets[i].o));
        }
        CK(cuMemFree(didx));
        free(sets), free(hx), free(ho), free(hidx);
    }
    if (bad) fprintf(stderr, "norm_probe: a variant's output is wrong (max_rel above 1e-2)\n");
    return bad;
}
