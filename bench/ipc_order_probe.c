/* How one process can order its GPU work after another's, and what each way
 * costs (a measurement, not part of kjit). Two processes on one GPU: the
 * "client" queues work (W: two 256 MiB memsets, then A = value i) and orders
 * a "server" op (copy A -> B, 64 MiB) after it by
 *   event  an IPC event recorded after the work; the server's stream waits on it
 *   dflag  cuStreamWriteValue32 of i into device memory shared by an IPC
 *          memory handle; the server's stream waits for >= i (cuStreamWaitValue32)
 *   hflag  cuStreamWriteValue32 of i into a host page both map; the server's
 *          stream waits for >= i on it
 *   hpoll  the same host page; the server's host thread spins until >= i,
 *          then launches
 *   host   the client synchronizes its stream, then asks (no token)
 * Latency: the client's stream idle, token, request, reply: the round trip
 * minus the server's op time (events in the server). Order: the client's
 * work still queued when it asks; the client checks B == i after the reply.
 * Built as build/bench/ipc_order_probe; run by bench/run_device.sh ipc with
 * and without MPS. Usage: ipc_order_probe [ITERATIONS] */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe_check.h"


enum { M_EVENT, M_DFLAG, M_HFLAG, M_HPOLL, M_HOST, M_COUNT };
static const char *mode_name[M_COUNT] = {"event", "dflag", "hflag", "hpoll", "host"};

typedef struct {
    CUipcMemHandle a, b, flag;
    CUipcEventHandle ev;
} handles;
typedef struct { int mode, i; } msg;
typedef struct { float op_us; unsigned ok; } reply;

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static void xread(int fd, void *p, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, (char *)p + got, n - got);
        if (k <= 0) _exit(3);
        got += (size_t)k;
    }
}

static void xwrite(int fd, const void *p, size_t n)
{
    if (write(fd, p, n) != (ssize_t)n) _exit(4);
}

#define A_BYTES (64u << 20)
#define W_BYTES (256u << 20)

/* This process's context on GPU 0 (primary, current), a stream, and the
 * shared host page's device address. */
static CUdevice gpu_start(CUstream *s, volatile uint32_t *page, CUdeviceptr *hpage)
{
    CUdevice d;
    CUcontext c;
    CK(cuInit(0));
    CK(cuDeviceGet(&d, 0));
    CK(cuDevicePrimaryCtxRetain(&c, d));
    CK(cuCtxSetCurrent(c));
    CK(cuStreamCreate(s, CU_STREAM_NON_BLOCKING));
    CK(cuMemHostRegister((void *)page, 4096, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
    CK(cuMemHostGetDevicePointer(hpage, (void *)page, 0));
    return d;
}

static void server(int rfd, int wfd, volatile uint32_t *page)
{
    CUstream s;
    CUdeviceptr a, b, flag, hpage;
    gpu_start(&s, page, &hpage);
    handles h;
    xread(rfd, &h, sizeof h);
    CUevent ev, e0, e1;
    CK(cuIpcOpenMemHandle(&a, h.a, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CK(cuIpcOpenMemHandle(&b, h.b, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CK(cuIpcOpenMemHandle(&flag, h.flag, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CK(cuIpcOpenEventHandle(&ev, h.ev));
    CK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    for (;;) {
        msg m;
        xread(rfd, &m, sizeof m);
        if (m.mode < 0) break;
        switch (m.mode) {
        case M_EVENT: CK(cuStreamWaitEvent(s, ev, 0)); break;
        case M_DFLAG: CK(cuStreamWaitValue32(s, flag, (cuuint32_t)m.i, CU_STREAM_WAIT_VALUE_GEQ)); break;
        case M_HFLAG: CK(cuStreamWaitValue32(s, hpage, (cuuint32_t)m.i, CU_STREAM_WAIT_VALUE_GEQ)); break;
        case M_HPOLL:
            while ((int)page[0] < m.i) __asm__ volatile("pause");
            break;
        default: break;
        }
        CK(cuEventRecord(e0, s));
        CK(cuMemcpyDtoDAsync(b, a, A_BYTES, s));
        CK(cuEventRecord(e1, s));
        CK(cuStreamSynchronize(s));
        reply r = {0, 1};
        CK(cuEventElapsedTime(&r.op_us, e0, e1));
        r.op_us *= 1000.f;
        xwrite(wfd, &r, sizeof r);
    }
    CK(cuIpcCloseMemHandle(a));
    CK(cuIpcCloseMemHandle(b));
    CK(cuIpcCloseMemHandle(flag));
    _exit(0);
}

int main(int argc, char **argv)
{
    const int iters = argc > 1 ? atoi(argv[1]) : 40;
    if (iters < 1 || iters > 1000) {
        fprintf(stderr, "usage: %s [ITERATIONS]  (1..1000, default 40)\n", argv[0]);
        return 1;
    }
    volatile uint32_t *page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return 1;
    page[0] = 0;
    int to_s[2], to_c[2];
    if (pipe(to_s) || pipe(to_c)) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(to_s[1]), close(to_c[0]);
        server(to_s[0], to_c[1], page);
    }
    close(to_s[0]), close(to_c[1]);
    CUstream s;
    CUdeviceptr a, b, flag, w, hpage;
    const CUdevice d = gpu_start(&s, page, &hpage);
    int memops = 0;
    CK(cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, d));
    char name[128];
    CK(cuDeviceGetName(name, sizeof name, d));
    printf("device %s, wait-value NOR %d\n", name, memops);
    CK(cuMemAlloc(&a, A_BYTES));
    CK(cuMemAlloc(&b, A_BYTES));
    CK(cuMemAlloc(&flag, 2 << 20));
    CK(cuMemAlloc(&w, W_BYTES));
    CK(cuMemsetD32(flag, 0, 1));
    CUevent ev;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS));
    handles h;
    CK(cuIpcGetMemHandle(&h.a, a));
    CK(cuIpcGetMemHandle(&h.b, b));
    CK(cuIpcGetMemHandle(&h.flag, flag));
    CK(cuIpcGetEventHandle(&h.ev, ev));
    xwrite(to_s[1], &h, sizeof h);
    int seq = 0;
    uint32_t *check = malloc(8);
    for (int phase = 0; phase < 2; ++phase) {
        for (int mode = 0; mode < M_COUNT; ++mode) {
            double lat[1000];
            int bad = 0, n = 0;
            for (int it = -3; it < iters; ++it) {
                ++seq;
                if (phase == 1) { /* order: long work still queued when the request goes */
                    CK(cuMemsetD32Async(w, (unsigned)seq, W_BYTES / 4, s));
                    CK(cuMemsetD32Async(w, (unsigned)seq + 1, W_BYTES / 4, s));
                }
                CK(cuMemsetD32Async(a, (unsigned)seq, A_BYTES / 4, s));
                if (phase == 0) CK(cuStreamSynchronize(s));
                switch (mode) {
                case M_EVENT: CK(cuEventRecord(ev, s)); break;
                case M_DFLAG: CK(cuStreamWriteValue32(s, flag, (cuuint32_t)seq, CU_STREAM_WRITE_VALUE_DEFAULT)); break;
                case M_HFLAG:
                case M_HPOLL: CK(cuStreamWriteValue32(s, hpage, (cuuint32_t)seq, CU_STREAM_WRITE_VALUE_DEFAULT)); break;
                case M_HOST: CK(cuStreamSynchronize(s)); break;
                }
                if (phase == 0 && mode != M_HOST) CK(cuStreamSynchronize(s)); /* token done: idle stream */
                const double t0 = now_us();
                msg m = {mode, seq};
                xwrite(to_s[1], &m, sizeof m);
                reply r;
                xread(to_c[0], &r, sizeof r);
                const double t1 = now_us();
                CK(cuStreamSynchronize(s));
                CK(cuMemcpyDtoH(check, b, 4));
                CK(cuMemcpyDtoH(check + 1, b + A_BYTES - 4, 4));
                if (it < 0) continue;
                if (check[0] != (uint32_t)seq || check[1] != (uint32_t)seq) ++bad;
                lat[n++] = t1 - t0 - r.op_us;
            }
            qsort(lat, n, sizeof lat[0], cmp_d);
            printf("%-8s %-7s round trip - op: min %7.1f  median %7.1f  p90 %7.1f us; B != value after reply: %d of %d\n",
                   phase ? "queued" : "idle", mode_name[mode], lat[0], lat[n / 2], lat[n * 9 / 10], bad, n);
            fflush(stdout);
        }
    }
    msg q = {-1, 0};
    xwrite(to_s[1], &q, sizeof q);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 5;
}
