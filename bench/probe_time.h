/* Timing and NVRTC helpers of the standalone probes (sol_probe, norm_probe):
 * a kernel timed as bench_ops times the ops, with CUDA events around each
 * iteration over rotating buffer sets (median of PROBE_ITERS after
 * PROBE_WARM) and inside a CUDA graph (2 x nsets launches per graph, median
 * of PROBE_GRAPH_REPS replays, per launch). launch(arg, i) enqueues
 * iteration i on the probe's stream (set i % nsets is the callee's choice). */
#pragma once

#include <cuda.h>
#include <math.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>

#include "probe_check.h"

#define PROBE_WARM 10
#define PROBE_ITERS 100
#define PROBE_GRAPH_REPS 11

#define NK(x)                                                                                    \
    do {                                                                                         \
        nvrtcResult r_ = (x);                                                                    \
        if (r_ != NVRTC_SUCCESS) {                                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, nvrtcGetErrorString(r_)); \
            _exit(2);                                                                            \
        }                                                                                        \
    } while (0)

typedef void (*probe_launch_fn)(const void *arg, int i);

static CUstream probe_stream;
static CUevent probe_ev0[PROBE_ITERS], probe_ev1[PROBE_ITERS];

static void probe_events_create(void)
{
    CK(cuStreamCreate(&probe_stream, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < PROBE_ITERS; ++i) {
        CK(cuEventCreate(&probe_ev0[i], 0));
        CK(cuEventCreate(&probe_ev1[i], 0));
    }
}

static int probe_cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double probe_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, probe_cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double probe_time_events(probe_launch_fn launch, const void *arg)
{
    for (int i = 0; i < PROBE_WARM; ++i) launch(arg, i);
    for (int i = 0; i < PROBE_ITERS; ++i) {
        CK(cuEventRecord(probe_ev0[i], probe_stream));
        launch(arg, i);
        CK(cuEventRecord(probe_ev1[i], probe_stream));
    }
    CK(cuStreamSynchronize(probe_stream));
    double t[PROBE_ITERS];
    for (int i = 0; i < PROBE_ITERS; ++i) {
        float ms;
        CK(cuEventElapsedTime(&ms, probe_ev0[i], probe_ev1[i]));
        t[i] = ms * 1e3;
    }
    return probe_median(t, PROBE_ITERS);
}

static double probe_time_graph(probe_launch_fn launch, const void *arg, int nsets)
{
    const int k = 2 * nsets;
    CUgraph g;
    CUgraphExec ge;
    CK(cuStreamBeginCapture(probe_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int i = 0; i < k; ++i) launch(arg, i);
    CK(cuStreamEndCapture(probe_stream, &g));
    CK(cuGraphInstantiate(&ge, g, 0));
    CK(cuGraphLaunch(ge, probe_stream));
    double t[PROBE_GRAPH_REPS];
    for (int r = 0; r < PROBE_GRAPH_REPS; ++r) {
        CK(cuEventRecord(probe_ev0[r], probe_stream));
        CK(cuGraphLaunch(ge, probe_stream));
        CK(cuEventRecord(probe_ev1[r], probe_stream));
    }
    CK(cuStreamSynchronize(probe_stream));
    for (int r = 0; r < PROBE_GRAPH_REPS; ++r) {
        float ms;
        CK(cuEventElapsedTime(&ms, probe_ev0[r], probe_ev1[r]));
        t[r] = ms * 1e3 / k;
    }
    CK(cuGraphExecDestroy(ge));
    CK(cuGraphDestroy(g));
    return probe_median(t, PROBE_GRAPH_REPS);
}

/* A device copy of n bytes at h (freed by the caller with cuMemFree). */
static inline CUdeviceptr probe_upload(const void *h, size_t n)
{
    CUdeviceptr d;
    CK(cuMemAlloc(&d, n));
    CK(cuMemcpyHtoD(d, h, n));
    return d;
}

/* How many rotating buffer sets, each moving `moved` bytes, make one pass
 * over them more than 3x the L2 (at least 2). */
static int probe_nsets(double l2, double moved)
{
    const int n = (int)ceil(3.0 * l2 / moved) + 1;
    return n < 2 ? 2 : n;
}

/* Compiles src for arch ("sm_90") with the given name expressions into
 * *prog; with ptxas_v, ptxas's resource report joins the log. The log goes
 * to stdout when ptxas_v is set, else to stderr on a failure. */
static nvrtcResult probe_compile(const char *src, const char *const *names, int count, const char *arch, int ptxas_v,
                                 nvrtcProgram *prog)
{
    NK(nvrtcCreateProgram(prog, src, "probe.cu", 0, NULL, NULL));
    for (int i = 0; i < count; ++i) NK(nvrtcAddNameExpression(*prog, names[i]));
    char opt[48];
    snprintf(opt, sizeof opt, "--gpu-architecture=%s", arch);
    const char *opts[] = {opt, "-std=c++17", "-Xptxas=-v"};
    const nvrtcResult rc = nvrtcCompileProgram(*prog, ptxas_v ? 3 : 2, opts);
    if (ptxas_v || rc != NVRTC_SUCCESS) {
        size_t len;
        NK(nvrtcGetProgramLogSize(*prog, &len));
        char *log = malloc(len + 1);
        NK(nvrtcGetProgramLog(*prog, log));
        fprintf(ptxas_v ? stdout : stderr, "%s\n", log);
        free(log);
    }
    return rc;
}

/* Appended to the device's arch by probe_build: "a" for the arch-specific
 * target (sm_90a: what cp.async.bulk's multicast is built for). */
static const char *probe_arch_suffix = "";

/* Compiles src for the device's arch (plus probe_arch_suffix) with the given
 * name expressions and loads them into fns (in order). */
static void probe_build(CUdevice dev, const char *src, const char *const *names, int count, CUfunction *fns)
{
    int maj, min;
    CK(cuDeviceGetAttribute(&maj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CK(cuDeviceGetAttribute(&min, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d%d%s", maj, min, probe_arch_suffix);
    nvrtcProgram prog;
    if (probe_compile(src, names, count, arch, 0, &prog) != NVRTC_SUCCESS) _exit(2);
    size_t sz;
    NK(nvrtcGetCUBINSize(prog, &sz));
    char *cubin = malloc(sz);
    NK(nvrtcGetCUBIN(prog, cubin));
    CUmodule mod;
    CK(cuModuleLoadData(&mod, cubin));
    for (int i = 0; i < count; ++i) {
        const char *lowered;
        NK(nvrtcGetLoweredName(prog, names[i], &lowered));
        CK(cuModuleGetFunction(&fns[i], mod, lowered));
    }
    free(cubin);
    nvrtcDestroyProgram(&prog);
}

/* The probes' ROWS... arguments: up to 8 row counts in 1..max (none: 4097
 * and 32768). Returns how many, or -1 after a message naming the bad one. */
static int probe_rows(const char *name, int argc, char **argv, long long max, long long rows[8])
{
    rows[0] = 4097, rows[1] = 32768;
    if (argc <= 1) return 2;
    int n = 0;
    for (int i = 1; i < argc && n < 8; ++i) {
        char *end;
        rows[n] = strtoll(argv[i], &end, 10);
        if (*end || end == argv[i] || rows[n] < 1 || rows[n] > max) {
            fprintf(stderr, "%s: ROWS must be integers in 1..%lld, got '%s'\n", name, max, argv[i]);
            return -1;
        }
        n++;
    }
    return n;
}

/* Device 0's primary context made current, its SM count and L2 bytes, the
 * probes' stream and events. 77 (after a message) without a CUDA driver. */
static int probe_start(const char *name, CUdevice *dev, int *sms, int *l2)
{
    if (cuInit(0) != CUDA_SUCCESS) {
        fprintf(stderr, "%s: no CUDA driver\n", name);
        return 77;
    }
    CUcontext ctx;
    CK(cuDeviceGet(dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, *dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuDeviceGetAttribute(sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, *dev));
    CK(cuDeviceGetAttribute(l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, *dev));
    probe_events_create();
    return 0;
}
