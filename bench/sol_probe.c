/* What the fastest plain kernels this GPU runs reach for the AdaLN ops' bytes
 * (a measurement, not part of kjit): the "speed of light" at a size, against
 * which the ops' times and the targets are read.
 *
 * Two byte patterns of N rows of 5376 bf16 (10752 bytes a row):
 *   1in1out  read one (N, H) tensor, write one: norm_modulate's forward
 *   2in1out  read two, write one (a ^ b): norm_modulate's backward rows
 *            (x and dout read, dx written)
 * Each is run as a sweep of plain vectorized kernels (16-byte loads, U of them
 * in flight per thread, block B, a full grid or a persistent grid of P CTAs
 * per SM walking the tensor grid-strided, default or streaming cache hints,
 * launched plainly or with programmatic dependent launch) and timed exactly as
 * bench_ops times the ops: CUDA events around each iteration over rotating
 * buffer sets larger than 3x the L2 (median of 100 after 10), and inside a CUDA
 * graph (twice the sets' count of iterations per graph, median of 11 replays).
 * Prints every variant, then the best of each pattern and size.
 * Built as build/bench/sol_probe; run by bench/run_device.sh sol.
 * Usage: sol_probe [ROWS...]   (default 4097 32768) */
#include <cuda.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_time.h"

#define ROW_BYTES (5376 * 2)
#define PEAK_BW 4.25e12

/* One kernel per (inputs, U, hint). n: 16-byte items per tensor. Thread t of
 * the grid takes items t + k * stride for k = 0, 1, ... in groups of U loads
 * issued before any store. */
static const char *src =
    "#define LD(p) (HINT ? __ldcs(p) : __ldg(p))\n"
    "#define ST(p, v) do { if (HINT) __stcs(p, v); else *(p) = v; } while (0)\n"
    "template <int NIN, int U, int HINT, int PDL>\n"
    "__global__ void sol(const uint4 *__restrict__ a, const uint4 *__restrict__ b, uint4 *__restrict__ o,\n"
    "                    long long n)\n"
    "{\n"
    "#if __CUDA_ARCH__ >= 900\n"
    "    if (PDL) asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
    "    if (PDL) asm volatile(\"griddepcontrol.launch_dependents;\");\n"
    "#endif\n"
    "    const long long stride = (long long)gridDim.x * blockDim.x;\n"
    "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += U * stride) {\n"
    "        uint4 v[U], w[U];\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < U; ++u) {\n"
    "            const long long j = i + u * stride;\n"
    "            if (j < n) { v[u] = LD(a + j); if (NIN == 2) w[u] = LD(b + j); }\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < U; ++u) {\n"
    "            const long long j = i + u * stride;\n"
    "            if (j < n) {\n"
    "                uint4 r = v[u];\n"
    "                if (NIN == 2) { r.x ^= w[u].x; r.y ^= w[u].y; r.z ^= w[u].z; r.w ^= w[u].w; }\n"
    "                ST(o + j, r);\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "}\n";

static const int U_VALUES[] = {1, 2, 4, 8};
static const int B_VALUES[] = {256, 512, 1024};
static const int P_VALUES[] = {0, 1, 2, 4, 8}; /* 0: full grid */
#define NU 4
#define NB 3
#define NP 5

static CUfunction fns[2][NU][2][2]; /* [nin-1][u][hint][pdl] */
static int sms;
static double l2_bytes; /* the device's L2 */

static char *name_of(int nin, int u, int hint, int pdl)
{
    static char buf[64];
    snprintf(buf, sizeof buf, "sol<%d, %d, %d, %d>", nin, u, hint, pdl);
    return buf;
}

static void build(CUdevice dev)
{
    static char names[2 * NU * 2 * 2][64];
    const char *np[2 * NU * 2 * 2];
    int k = 0;
    for (int n = 0; n < 2; ++n)
        for (int u = 0; u < NU; ++u)
            for (int h = 0; h < 2; ++h)
                for (int p = 0; p < 2; ++p, ++k) {
                    strcpy(names[k], name_of(n + 1, U_VALUES[u], h, p));
                    np[k] = names[k];
                }
    probe_build(dev, src, np, k, &fns[0][0][0][0]);
}

typedef struct { CUdeviceptr a, b, o; } set;
typedef struct { int nin, u, b, p, hint, pdl; } variant;

typedef struct { const variant *v; const set *sets; int nsets; long long n; } run;

static void launch_run(const void *arg, int i)
{
    const run *r = arg;
    const variant *v = r->v;
    const set *s = &r->sets[i % r->nsets];
    long long n = r->n;
    CUfunction f = fns[v->nin - 1][v->u][v->hint][v->pdl];
    const int block = B_VALUES[v->b], per = U_VALUES[v->u];
    long long grid = P_VALUES[v->p] ? (long long)P_VALUES[v->p] * sms : (n + (long long)block * per - 1) / ((long long)block * per);
    if (grid < 1) grid = 1;
    void *args[] = {(void *)&s->a, (void *)&s->b, (void *)&s->o, &n};
    CUlaunchConfig cfg = {0};
    CUlaunchAttribute at;
    cfg.gridDimX = (unsigned)grid, cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = (unsigned)block, cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = probe_stream;
    if (v->pdl) {
        at.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        at.value.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = &at, cfg.numAttrs = 1;
    }
    CK(cuLaunchKernelEx(&cfg, f, args, NULL));
}

int main(int argc, char **argv)
{
    long long rows[8];
    const int nrows = probe_rows("sol_probe", argc, argv, (1LL << 24), rows);
    if (nrows < 0) return 2;
    CUdevice dev;
    int l2;
    const int rc = probe_start("sol_probe", &dev, &sms, &l2);
    if (rc) return rc;
    l2_bytes = l2;
    build(dev);
    printf("# sol_probe: plain vectorized kernels moving the ops' bytes; events per iteration / inside a graph,"
           " us; rotating sets > 3x the L2; floor = bytes / %.2f TB/s\n", PEAK_BW / 1e12);
    printf("%-8s %6s %2s %5s %2s %4s %3s %9s %9s %8s\n", "pattern", "rows", "U", "block", "P", "hint", "pdl",
           "events", "graph", "floor");
    for (int ri = 0; ri < nrows; ++ri)
        for (int nin = 1; nin <= 2; ++nin) {
            const size_t bytes = (size_t)rows[ri] * ROW_BYTES;
            const long long n = (long long)(bytes / 16);
            const double moved = (double)bytes * (nin + 1), floor_us = moved / PEAK_BW * 1e6;
            const int nsets = probe_nsets(l2_bytes, moved);
            set *sets = calloc((size_t)nsets, sizeof *sets);
            for (int i = 0; i < nsets; ++i) {
                CK(cuMemAlloc(&sets[i].a, bytes));
                CK(cuMemAlloc(&sets[i].o, bytes));
                CK(cuMemsetD8Async(sets[i].a, (unsigned char)(i * 37 + 1), bytes, probe_stream));
                if (nin == 2) {
                    CK(cuMemAlloc(&sets[i].b, bytes));
                    CK(cuMemsetD8Async(sets[i].b, (unsigned char)(i * 11 + 5), bytes, probe_stream));
                } else {
                    sets[i].b = sets[i].a;
                }
            }
            double best_ev = 1e30, best_gr = 1e30;
            variant bev = {0}, bgr = {0};
            for (int u = 0; u < NU; ++u)
                for (int b = 0; b < NB; ++b)
                    for (int p = 0; p < NP; ++p)
                        for (int hint = 0; hint < 2; ++hint)
                            for (int pdl = 0; pdl < 2; ++pdl) {
                                variant v = {nin, u, b, p, hint, pdl};
                                /* A persistent grid larger than the full one is the full one. */
                                const long long full = (n + (long long)B_VALUES[b] * U_VALUES[u] - 1) /
                                                       ((long long)B_VALUES[b] * U_VALUES[u]);
                                if (P_VALUES[p] && (long long)P_VALUES[p] * sms >= full) continue;
                                int maxt;
                                CK(cuFuncGetAttribute(&maxt, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                                      fns[nin - 1][u][hint][pdl]));
                                if (B_VALUES[b] > maxt) continue; /* too many registers for the block */
                                const run r = {&v, sets, nsets, n};
                                const double te = probe_time_events(launch_run, &r);
                                const double tg = probe_time_graph(launch_run, &r, nsets);
                                printf("%-8s %6lld %2d %5d %2d %4d %3d %9.1f %9.1f %8.1f\n",
                                       nin == 1 ? "1in1out" : "2in1out", rows[ri], U_VALUES[u], B_VALUES[b],
                                       P_VALUES[p], hint, pdl, te, tg, floor_us);
                                if (te < best_ev) best_ev = te, bev = v;
                                if (tg < best_gr) best_gr = tg, bgr = v;
                            }
            printf("BEST %-8s rows %6lld: events %.1f us (U %d block %d P %d hint %d pdl %d), graph %.1f us"
                   " (U %d block %d P %d hint %d pdl %d); floor %.1f us (%.1f MB); %.2f / %.2f TB/s\n",
                   nin == 1 ? "1in1out" : "2in1out", rows[ri], best_ev, U_VALUES[bev.u], B_VALUES[bev.b],
                   P_VALUES[bev.p], bev.hint, bev.pdl, best_gr, U_VALUES[bgr.u], B_VALUES[bgr.b], P_VALUES[bgr.p],
                   bgr.hint, bgr.pdl, floor_us, moved / 1e6, moved / best_ev / 1e6, moved / best_gr / 1e6);
            fflush(stdout);
            CK(cuStreamSynchronize(probe_stream));
            for (int i = 0; i < nsets; ++i) {
                CK(cuMemFree(sets[i].a));
                CK(cuMemFree(sets[i].o));
                if (nin == 2) CK(cuMemFree(sets[i].b));
            }
            free(sets);
        }
    return 0;
}
