/* The AdaLN ops at hidden 5376, bf16 activations and tables, int32 index,
 * R = 9 table rows (the six table chunks are the chunk(6) views of one
 * (R, 6H) bf16 tensor), rows 4097 and 32768 (issue 3's benchmark).
 *
 * For each op: forward and forward+backward time (CUDA events around each
 * iteration, median of ITERS after WARM warm-up iterations), with rotating
 * sets of input/output buffers whose total exceeds 3x the 50 MB L2 (so each
 * iteration reads cold data), random data. Bytes moved are those of an ideal
 * single pass: every activation input read once, every output written once,
 * the (small) tables, weight and index counted too; floor = bytes / 4.25 TB/s.
 * bench/peers_ops.py measures the same computations in PyTorch and prints the
 * same table. Exits 77 without a GPU (after printing the workspace sizes,
 * which need none).
 *
 *   bench_ops [--ops LIST] [--rows LIST] [--index uniform|runs] [--sweep]
 * --ops: op names (default all four), --rows: row counts (default 4097,32768);
 * --index: each row's table row drawn uniformly (default), or runs of rows
 * sharing one (lengths uniform in 1..R0/6 for the smallest row count R0, the
 * table row uniform), as a packed sequence's tokens share a timestep;
 * --sweep: for norm_modulate, gated_residual and the fused op, also time every
 * forward and every backward candidate of the tuning space with this
 * benchmark's method (forward alone; forward + backward with the default
 * forward), so the tuner's choice can be checked against it.
 * forward+backward of norm_modulate, gated_residual and the fused op is the
 * training pair (kjit_adaln_train_fwd, kjit_adaln_train_bwd: the forward
 * builds the backward's partition); a second line times the plain calls, and
 * a third the plain calls with no table or weight gradient (the row
 * gradients alone, as with frozen tables). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_util.h"
#include "kjit.h"
#include "core/spin.h"
#include "ref.h"
#include "tune/config.h"
#include "tune/tune.h"

#define HID 5376
#define TROWS 9
#define NCHUNK 6
#define WARM 10
#define ITERS 100
#define PEAK_BW 4.25e12
#define L2_BYTES (50.0 * 1024 * 1024)
#define POOL_ELEMS ((size_t)64 << 20) /* random bf16 values on the device, copied into the inputs */

enum { OP_GATHER, OP_NM, OP_GR, OP_FUSED, NOPS };
/* Not an op: gated_residual then norm_modulate chained on a fused op's set (run_chain). */
#define OP_CHAIN NOPS
static const char *op_names[NOPS] = {"adaln_row_gather", "norm_modulate", "gated_residual",
                                     "gated_residual_norm_modulate"};

static const kjit_cu_api *cu;
static kjit_ctx *ctx;
static CUstream stream;
static CUdeviceptr pool, table, weight, didx, ws, part, part2;
static size_t ws_bytes, part_bytes;
static CUevent ev_start[ITERS], ev_end[ITERS];

#define KJ_CHECK(call)                                                                                  \
    do {                                                                                                \
        int rc_ = (call);                                                                               \
        if (rc_ != KJIT_OK) {                                                                           \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, kjit_status_name(rc_), \
                    kjit_last_error());                                                                 \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)

/* One rotating set of activation buffers (0 where the op has none). gather
 * uses out and dout as (n, 6H); dtab is an (R, 6H) gradient buffer whose
 * chunk views receive dtable / dshift, dscale, dgate. */
typedef struct bset {
    CUdeviceptr x, res, y, out, h, dout, dh, dx, dy, dw, dtab;
} bset;

static size_t act_bytes(int64_t n) { return (size_t)n * HID * 2; }

/* Fills a device buffer with random bf16 values from the pool. */
static void fill_random(CUdeviceptr dst, size_t bytes, uint64_t seed)
{
    const size_t pool_bytes = POOL_ELEMS * 2;
    size_t off = (size_t)(seed * 2654435761u % (POOL_ELEMS / 2)) * 2;
    for (size_t done = 0; done < bytes;) {
        size_t len = bytes - done;
        if (len > pool_bytes - off) len = pool_bytes - off;
        CU_CHECK(cu->MemcpyDtoDAsync(dst + done, pool + off, len, stream));
        done += len;
        off = 0;
    }
}

static CUdeviceptr alloc_rand(size_t bytes, uint64_t *seed)
{
    CUdeviceptr p = gpu_alloc(bytes);
    fill_random(p, bytes, ++*seed);
    return p;
}

/* Allocates one set for op at n rows; returns its bytes. */
static size_t set_alloc(int op, int64_t n, bset *s, uint64_t *seed)
{
    const size_t A = act_bytes(n), G = (size_t)n * NCHUNK * HID * 2, T = (size_t)TROWS * NCHUNK * HID * 2;
    memset(s, 0, sizeof *s);
    size_t total = T;
    s->dtab = gpu_alloc(T);
    switch (op) {
    case OP_GATHER:
        s->out = gpu_alloc(G), s->dout = alloc_rand(G, seed);
        total += 2 * G;
        break;
    case OP_NM:
        s->x = alloc_rand(A, seed), s->out = gpu_alloc(A), s->dout = alloc_rand(A, seed), s->dx = gpu_alloc(A);
        s->dw = gpu_alloc(HID * 2);
        total += 4 * A;
        break;
    case OP_GR:
        s->res = alloc_rand(A, seed), s->y = alloc_rand(A, seed), s->out = gpu_alloc(A), s->dout = alloc_rand(A, seed);
        s->dy = gpu_alloc(A);
        total += 5 * A;
        break;
    default: /* x: the unfused chain's dh + dx (run_chain); the fused op reads no x */
        s->res = alloc_rand(A, seed), s->y = alloc_rand(A, seed), s->h = gpu_alloc(A), s->out = gpu_alloc(A);
        s->dh = alloc_rand(A, seed), s->dout = alloc_rand(A, seed), s->dx = gpu_alloc(A), s->dy = gpu_alloc(A);
        s->dw = gpu_alloc(HID * 2), s->x = gpu_alloc(A);
        total += 9 * A;
        break;
    }
    return total;
}

static void set_free(bset *s)
{
    const CUdeviceptr all[] = {s->x, s->res, s->y, s->out, s->h, s->dout, s->dh, s->dx, s->dy, s->dw, s->dtab};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) gpu_free(all[i]);
    memset(s, 0, sizeof *s);
}

#define PTR(d) ((void *)(uintptr_t)(d))
#define CHUNK(base, k) ((void *)(uintptr_t)((base) + (CUdeviceptr)(k) * HID * 2))

/* The unfused chain on a fused op's set, each op reading what the one
 * before it just wrote, as in a model (at 4097 rows a 44 MB tensor just
 * written may still be in the L2 for the next kernel): gated_residual's
 * forward writes h and norm_modulate's forward reads it. With bwd, then
 * norm_modulate's backward (dx), the dh + dx add (a gated_residual forward
 * on (dh, dx): the add's bytes and kernel shape; the sum's values are not
 * those of a plain add) into the set's x, and gated_residual's backward of
 * that sum. bwd 1: training pairs (a partition each); 2: plain calls. The
 * tables: the MLP chunks 3, 4, 5, as the fused op's. */
static void run_chain(int bwd, int64_t n, const bset *s)
{
    const kjit_index index = {PTR(didx), KJIT_I32, TROWS};
    const int64_t W6 = (int64_t)NCHUNK * HID;
    kjit_adaln_args g, m, d;
    memset(&g, 0, sizeof g);
    g.n = n, g.hidden = HID, g.eps = 1e-6f, g.act_dtype = KJIT_BF16, g.param_dtype = KJIT_BF16, g.index = index;
    m = g;
    g.res = PTR(s->res), g.y = PTR(s->y), g.out = PTR(s->h);
    g.res_stride = g.y_stride = g.out_stride = HID;
    g.gate = CHUNK(table, 5), g.gate_stride = W6;
    g.dout = PTR(s->x), g.dy = PTR(s->dy), g.dout_stride = g.dy_stride = HID; /* dres = the sum: not copied */
    g.dgate = CHUNK(s->dtab, 5), g.dgate_stride = W6;
    d = g; /* the add: dh + gate * dx into x */
    d.res = PTR(s->dh), d.y = PTR(s->dx), d.out = PTR(s->x);
    m.x = PTR(s->h), m.out = PTR(s->out), m.dout = PTR(s->dout), m.dx = PTR(s->dx);
    m.x_stride = m.out_stride = m.dout_stride = m.dx_stride = HID;
    m.shift = CHUNK(table, 3), m.scale = CHUNK(table, 4), m.shift_stride = m.scale_stride = W6;
    m.dshift = CHUNK(s->dtab, 3), m.dscale = CHUNK(s->dtab, 4), m.dshift_stride = m.dscale_stride = W6;
    m.weight = PTR(weight), m.dweight = PTR(s->dw);
    if (bwd == 1) {
        KJ_CHECK(kjit_adaln_train_fwd(ctx, KJIT_GATED_RESIDUAL, &g, PTR(part2), part_bytes, stream));
        KJ_CHECK(kjit_adaln_train_fwd(ctx, KJIT_NORM_MODULATE, &m, PTR(part), part_bytes, stream));
        KJ_CHECK(kjit_adaln_train_bwd(ctx, KJIT_NORM_MODULATE, &m, PTR(part), part_bytes, PTR(ws), ws_bytes, stream));
        KJ_CHECK(kjit_gated_residual_fwd(ctx, &d, stream));
        KJ_CHECK(kjit_adaln_train_bwd(ctx, KJIT_GATED_RESIDUAL, &g, PTR(part2), part_bytes, PTR(ws), ws_bytes, stream));
        return;
    }
    KJ_CHECK(kjit_gated_residual_fwd(ctx, &g, stream));
    KJ_CHECK(kjit_norm_modulate_fwd(ctx, &m, stream));
    if (!bwd) return;
    KJ_CHECK(kjit_norm_modulate_bwd(ctx, &m, PTR(ws), ws_bytes, stream));
    KJ_CHECK(kjit_gated_residual_fwd(ctx, &d, stream));
    KJ_CHECK(kjit_gated_residual_bwd(ctx, &g, PTR(ws), ws_bytes, stream));
}

static void run(int op, int bwd, int64_t n, const bset *s)
{
    const kjit_index index = {PTR(didx), KJIT_I32, TROWS};
    const int64_t W6 = (int64_t)NCHUNK * HID;
    if (op == OP_CHAIN) {
        run_chain(bwd, n, s);
        return;
    }
    if (op == OP_GATHER) {
        kjit_row_gather_args a;
        memset(&a, 0, sizeof a);
        a.n = n, a.hidden = HID, a.num_tables = NCHUNK, a.dtype = KJIT_BF16, a.index = index;
        for (int k = 0; k < NCHUNK; ++k) {
            a.table[k] = CHUNK(table, k), a.table_stride[k] = W6;
            a.out[k] = CHUNK(s->out, k), a.out_stride[k] = W6;
            a.dout[k] = CHUNK(s->dout, k), a.dout_stride[k] = W6;
            a.dtable[k] = CHUNK(s->dtab, k), a.dtable_stride[k] = W6;
        }
        KJ_CHECK(kjit_adaln_row_gather_fwd(ctx, &a, stream));
        if (bwd) KJ_CHECK(kjit_adaln_row_gather_bwd(ctx, &a, PTR(ws), ws_bytes, stream));
        return;
    }
    kjit_adaln_args a;
    memset(&a, 0, sizeof a);
    a.n = n, a.hidden = HID, a.eps = 1e-6f, a.act_dtype = KJIT_BF16, a.param_dtype = KJIT_BF16, a.index = index;
    /* chunk(6) of the table as a DiT block uses it: shift_msa, scale_msa,
     * gate_msa, shift_mlp, scale_mlp, gate_mlp. */
    a.shift = CHUNK(table, op == OP_FUSED ? 3 : 0), a.shift_stride = W6;
    a.scale = CHUNK(table, op == OP_FUSED ? 4 : 1), a.scale_stride = W6;
    a.gate = CHUNK(table, op == OP_FUSED ? 5 : 2), a.gate_stride = W6;
    a.dshift = CHUNK(s->dtab, op == OP_FUSED ? 3 : 0), a.dshift_stride = W6;
    a.dscale = CHUNK(s->dtab, op == OP_FUSED ? 4 : 1), a.dscale_stride = W6;
    a.dgate = CHUNK(s->dtab, op == OP_FUSED ? 5 : 2), a.dgate_stride = W6;
    a.x = PTR(op == OP_FUSED ? s->h : s->x), a.x_stride = HID; /* fused backward: x = the forward's h */
    a.res = PTR(s->res), a.res_stride = HID;
    a.y = PTR(s->y), a.y_stride = HID;
    a.out = PTR(s->out), a.out_stride = HID;
    a.h = PTR(s->h), a.h_stride = HID;
    a.dout = PTR(s->dout), a.dout_stride = HID;
    a.dh = PTR(s->dh), a.dh_stride = HID;
    a.dx = PTR(s->dx), a.dx_stride = HID; /* gated_residual: NULL (dres = dout) */
    a.dy = PTR(s->dy), a.dy_stride = HID;
    if (op != OP_GR) a.weight = PTR(weight), a.dweight = PTR(s->dw);
    /* bwd 1: the training pair (the forward also builds the backward's
     * partition), as a training step runs it; 2: the plain calls; 3: the
     * plain calls with no table or weight gradient (the row gradients
     * alone: frozen tables). */
    if (bwd == 3) a.dshift = a.dscale = a.dgate = a.dweight = NULL;
    /* bwd 4: the plain backward alone (its inputs, and the fused op's h,
     * written by earlier forwards on this set): rotating over the sets, it
     * reads them from a cold L2, as a training step's backward does. */
    if (bwd == 4) {
        switch (op) {
        case OP_NM: KJ_CHECK(kjit_norm_modulate_bwd(ctx, &a, PTR(ws), ws_bytes, stream)); break;
        case OP_GR: KJ_CHECK(kjit_gated_residual_bwd(ctx, &a, PTR(ws), ws_bytes, stream)); break;
        default: KJ_CHECK(kjit_gated_residual_norm_modulate_bwd(ctx, &a, PTR(ws), ws_bytes, stream)); break;
        }
        return;
    }
    if (bwd == 1) {
        KJ_CHECK(kjit_adaln_train_fwd(ctx, (kjit_adaln_op)op, &a, PTR(part), part_bytes, stream));
        KJ_CHECK(kjit_adaln_train_bwd(ctx, (kjit_adaln_op)op, &a, PTR(part), part_bytes, PTR(ws), ws_bytes, stream));
        return;
    }
    switch (op) {
    case OP_NM:
        KJ_CHECK(kjit_norm_modulate_fwd(ctx, &a, stream));
        if (bwd) KJ_CHECK(kjit_norm_modulate_bwd(ctx, &a, PTR(ws), ws_bytes, stream));
        break;
    case OP_GR:
        KJ_CHECK(kjit_gated_residual_fwd(ctx, &a, stream));
        if (bwd) KJ_CHECK(kjit_gated_residual_bwd(ctx, &a, PTR(ws), ws_bytes, stream));
        break;
    default:
        KJ_CHECK(kjit_gated_residual_norm_modulate_fwd(ctx, &a, stream));
        if (bwd) KJ_CHECK(kjit_gated_residual_norm_modulate_bwd(ctx, &a, PTR(ws), ws_bytes, stream));
        break;
    }
}

static int cmp_d(const void *p, const void *q)
{
    double u = *(const double *)p, v = *(const double *)q;
    return (u > v) - (u < v);
}

/* The median of the first n event pairs' times (us), each divided by per. */
static double events_median_us(int n, double per)
{
    CU_CHECK(cu->EventSynchronize(ev_end[n - 1]));
    double t[ITERS];
    for (int i = 0; i < n; ++i) {
        float ms = 0;
        CU_CHECK(cu->EventElapsedTime(&ms, ev_start[i], ev_end[i]));
        t[i] = ms * 1e3 / per;
    }
    qsort(t, (size_t)n, sizeof t[0], cmp_d);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Median us of one iteration (forward, or forward then backward), rotating
 * sets. Warm-up: WARM iterations at least, and at least 20 ms of them, so
 * that the clocks have left their idle state (a 4097-row forward is ~30 us:
 * ten are 0.3 ms). */
static double time_op(int op, int bwd, int64_t n, const bset *sets, int nsets)
{
    const double t0 = kjit__now_us();
    do {
        for (int i = 0; i < WARM; ++i) run(op, bwd, n, &sets[i % nsets]);
        CU_CHECK(cu->StreamSynchronize(stream));
    } while (kjit__now_us() - t0 < 20000.0);
    for (int i = 0; i < ITERS; ++i) {
        CU_CHECK(cu->EventRecord(ev_start[i], stream));
        run(op, bwd, n, &sets[(i + WARM) % nsets]);
        CU_CHECK(cu->EventRecord(ev_end[i], stream));
    }
    return events_median_us(ITERS, 1);
}

/* The same, back to back inside a CUDA graph: GRAPH_REPS replays of one
 * graph holding 2 * nsets iterations over the rotating sets; the median
 * replay's time per iteration. What the ops cost in a captured training or
 * inference step, without this process's launch gaps and the events' own
 * cost around each iteration. copy_bytes > 0: the copy reference instead
 * (a device-to-device copy of that many bytes per iteration). */
#define GRAPH_REPS 11
static double time_graph(int op, int bwd, int64_t n, const bset *sets, int nsets, size_t copy_bytes,
                         const CUdeviceptr *src, const CUdeviceptr *dst)
{
    const int k = 2 * nsets;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    CU_CHECK(cu->StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int i = 0; i < k; ++i) {
        if (copy_bytes) CU_CHECK(cu->MemcpyDtoDAsync(dst[i % nsets], src[i % nsets], copy_bytes, stream));
        else run(op, bwd, n, &sets[i % nsets]);
    }
    CU_CHECK(cu->StreamEndCapture(stream, &graph));
    CU_CHECK(cu->GraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 2; ++i) CU_CHECK(cu->GraphLaunch(exec, stream));
    CU_CHECK(cu->StreamSynchronize(stream));
    for (int i = 0; i < GRAPH_REPS; ++i) {
        CU_CHECK(cu->EventRecord(ev_start[i], stream));
        CU_CHECK(cu->GraphLaunch(exec, stream));
        CU_CHECK(cu->EventRecord(ev_end[i], stream));
    }
    const double us = events_median_us(GRAPH_REPS, k);
    CU_CHECK(cu->GraphExecDestroy(exec));
    CU_CHECK(cu->GraphDestroy(graph));
    return us;
}

/* Median us of a device-to-device copy of `bytes` (rotating pairs of
 * buffers, > 4x the L2 in all), timed exactly as the ops: what the copy
 * bandwidth is at this size, launch and ramp included. */
static double time_copy(size_t bytes, uint64_t *seed, double *graph_us)
{
    int k = (int)ceil(4.0 * L2_BYTES / (2.0 * (double)bytes));
    if (k < 3) k = 3;
    if (k > 16) k = 16;
    CUdeviceptr src[16], dst[16];
    for (int i = 0; i < k; ++i) src[i] = alloc_rand(bytes, seed), dst[i] = gpu_alloc(bytes);
    for (int i = 0; i < WARM; ++i) CU_CHECK(cu->MemcpyDtoDAsync(dst[i % k], src[i % k], bytes, stream));
    CU_CHECK(cu->StreamSynchronize(stream));
    for (int i = 0; i < ITERS; ++i) {
        CU_CHECK(cu->EventRecord(ev_start[i], stream));
        CU_CHECK(cu->MemcpyDtoDAsync(dst[(i + WARM) % k], src[(i + WARM) % k], bytes, stream));
        CU_CHECK(cu->EventRecord(ev_end[i], stream));
    }
    const double us = events_median_us(ITERS, 1);
    *graph_us = time_graph(0, 0, 0, NULL, k, bytes, src, dst);
    for (int i = 0; i < k; ++i) gpu_free(src[i]), gpu_free(dst[i]);
    return us;
}

/* Ideal single-pass bytes of the forward and of the backward; rows: of the
 * backward asked for the row gradients alone (no y read for gated_residual
 * and the fused op, no parameter gradient written). */
static void op_bytes(int op, int64_t n, double *fwd, double *bwd, double *rows)
{
    const double A = (double)act_bytes(n), T = (double)TROWS * HID * 2, I = (double)n * 4, Wt = HID * 2.0;
    switch (op) {
    case OP_GATHER: /* fwd: 6 table chunks + index -> 6 outputs; bwd: 6 douts + index -> 6 dtables */
        *fwd = 6 * T + I + 6 * A;
        *bwd = 6 * A + I + 6 * T;
        *rows = 0;
        break;
    case OP_NM: /* fwd: x, w, shift, scale, index -> out; bwd: x, dout, w, scale, index -> dx, dw, dshift, dscale */
        *fwd = A + Wt + 2 * T + I + A;
        *bwd = 2 * A + Wt + T + I + A + Wt + 2 * T;
        *rows = 2 * A + Wt + T + I + A; /* x, dout, w, scale, index -> dx */
        break;
    case OP_GR: /* fwd: res, y, gate, index -> out; bwd: y, dout, gate, index -> dy, dgate (dres = dout, not copied) */
        *fwd = 2 * A + T + I + A;
        *bwd = 2 * A + T + I + A + T;
        *rows = A + T + I + A; /* dout, gate, index -> dy */
        break;
    default: /* fwd: res, y, gate, shift, scale, w, index -> h, out;
              * bwd: h, y, dh, dout, gate, scale, w, index -> dres, dy, dgate, dshift, dscale, dw */
        *fwd = 2 * A + 3 * T + Wt + I + 2 * A;
        *bwd = 4 * A + 2 * T + Wt + I + 2 * A + 3 * T + Wt;
        *rows = 3 * A + 2 * T + Wt + I + 2 * A; /* h, dh, dout, gate, scale, w, index -> dres, dy */
        break;
    }
}

static size_t op_workspace(int op, int64_t n, int64_t r)
{
    size_t b = 0;
    if (op == OP_GATHER) KJ_CHECK(kjit_adaln_row_gather_workspace(n, HID, NCHUNK, r, &b));
    else KJ_CHECK(kjit_adaln_workspace((kjit_adaln_op)op, n, HID, r, &b)); /* OP_NM = 1, OP_GR = 2, OP_FUSED = 3 */
    return b;
}

static void print_workspaces(void)
{
    printf("# backward workspace at N=32768, H=%d (bytes)\n", HID);
    printf("%-30s %14s %14s\n", "op", "R=9", "R=4096");
    for (int op = 0; op < NOPS; ++op) {
        size_t a = op_workspace(op, 32768, 9), b = op_workspace(op, 32768, 4096);
        printf("%-30s %14zu %14zu   (%.2f MB, %.2f MB)\n", op_names[op], a, b, a / 1e6, b / 1e6);
    }
    printf("\n");
}

/* Every candidate of op's tuning space at n rows, timed like the table. */
static void sweep(int op, int64_t n, const bset *sets, int nsets)
{
    kjit_adaln_config c[KJIT_TUNE_MAX_FWD > KJIT_TUNE_MAX_BWD ? KJIT_TUNE_MAX_FWD : KJIT_TUNE_MAX_BWD], d;
    kjit__adaln_config_default(op, HID, KJIT_BF16, &d);
    for (int bwd = 0; bwd < 2; ++bwd) {
        const int k = bwd ? kjit__adaln_space_bwd(op, HID, KJIT_BF16, KJIT_DEFAULT_SMEM, c)
                          : kjit__adaln_space_fwd(op, HID, KJIT_BF16, c);
        for (int i = 0; i < k; ++i) {
            KJ_CHECK(kjit__tune_force(ctx, op_names[op], HID, KJIT_BF16, &c[i]));
            const double us = time_op(op, bwd ? 2 : 0, n, sets, nsets); /* the plain calls, as the tuner times */
            printf("sweep %-28s %6lld %s rpc %d pf %d grid %d bwd_pf %d accs %d: %8.1f us%s\n", op_names[op],
                   (long long)n, bwd ? "fwd+bwd" : "fwd    ", c[i].rpc, c[i].pf, c[i].grid_per_sm, c[i].bwd_pf,
                   c[i].accs, us, kjit__adaln_config_equal(&c[i], &d) ? " (default)" : "");
        }
    }
    fflush(stdout);
    KJ_CHECK(kjit__tune_force(ctx, op_names[op], HID, KJIT_BF16, NULL));
}

/* Comma-separated op names into a mask. */
static int parse_ops(const char *arg)
{
    int mask = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", arg);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        int k = 0;
        while (k < NOPS && strcmp(t, op_names[k]) != 0) ++k;
        if (k == NOPS) {
            fprintf(stderr, "bench_ops: unknown op '%s'\n", t);
            exit(2);
        }
        mask |= 1 << k;
    }
    return mask;
}

/* A second or third line under an op's (events) and in the graph table:
 * forward + backward of another call pattern, against the same floor. */
static void pair_line(const char *label, int64_t n, double us, double floor_us)
{
    printf("%-54s %6lld %10s %10.1f %10s %10s %9s %9.1f %7s %7.3f\n", label, (long long)n, "-", us, "", "", "",
           floor_us, "", floor_us / us);
}
static void graph_pair_line(const char *label, int64_t n, double us, double floor_us)
{
    printf("graph %-48s %6lld %10s %10.1f %9s %9.1f %7s %7.3f\n", label, (long long)n, "-", us, "", floor_us, "",
           floor_us / us);
}

int main(int argc, char **argv)
{
    int op_mask = (1 << NOPS) - 1, do_sweep = 0, n_rows = 2, index_runs = 0;
    int64_t rows[8] = {4097, 32768};
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--ops") && i + 1 < argc) {
            op_mask = parse_ops(argv[++i]);
        } else if (!strcmp(argv[i], "--rows") && i + 1 < argc) {
            n_rows = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", argv[++i]);
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                char *end = NULL;
                const long long v = strtoll(t, &end, 10);
                if (!end || *end || v < 1 || v > 65536) {
                    fprintf(stderr, "bench_ops: --rows: '%s' is not a row count in 1..65536\n", t);
                    return 2;
                }
                if (n_rows == 8) {
                    fprintf(stderr, "bench_ops: --rows: at most 8 row counts\n");
                    return 2;
                }
                rows[n_rows++] = v;
            }
        } else if (!strcmp(argv[i], "--index") && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "uniform") && strcmp(v, "runs")) {
                fprintf(stderr, "bench_ops: --index: '%s' is not uniform or runs\n", v);
                return 2;
            }
            index_runs = !strcmp(v, "runs");
        } else if (!strcmp(argv[i], "--sweep")) {
            do_sweep = 1;
        } else {
            const int help = !strcmp(argv[i], "--help");
            fprintf(help ? stdout : stderr, "usage: bench_ops [--ops LIST] [--rows LIST] [--index uniform|runs] [--sweep]\n"
                    "  ops: adaln_row_gather,norm_modulate,gated_residual,gated_residual_norm_modulate\n");
            return help ? 0 : 2;
        }
    }
    _Static_assert((int)OP_NM == (int)KJIT_NORM_MODULATE && (int)OP_GR == (int)KJIT_GATED_RESIDUAL &&
                   (int)OP_FUSED == (int)KJIT_GATED_RESIDUAL_NORM_MODULATE, "op numbering");
    print_workspaces();
    ctx = kjit_gpu_ctx_or_skip("bench_ops", KJIT_INDEX_CHECK_OFF);
    cu = kjit__cu();
    kjit_device_info di;
    memset(&di, 0, sizeof di);
    kjit_device_info_get(0, &di);
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("# kjit %s, %s, %s (sm_%d, %d SMs); H=%d bf16, int32 index (%s), R=%d, table = chunk(6) views of (R, 6H)\n",
           KJIT_VERSION_STRING, date, di.name, di.sm, di.sm_count, HID, index_runs ? "runs" : "uniform", TROWS);
    printf("# CUDA events per iteration, median of %d after at least %d warm-up iterations and 20 ms; rotating buffer "
           "sets > 3x the %.0f MB L2; floor = bytes / %.2f TB/s\n", ITERS, WARM, L2_BYTES / 1048576.0, PEAK_BW / 1e12);
    /* Where the launch configs come from: a tuning file in the cache (a
     * `kjit tune` run earlier on this machine) would change them. */
    printf("# configs:");
    for (int op = OP_NM; op <= OP_FUSED; ++op) {
        kjit_op_config oc;
        KJ_CHECK(kjit_op_config_get(ctx, op_names[op], HID, KJIT_BF16, &oc));
        printf(" %s %s (rpc %d pf %d grid %d bwd_pf %d accs %d)%s", op_names[op],
               oc.source == KJIT_CONFIG_DEFAULT ? "default" : oc.source == KJIT_CONFIG_STORED ? "STORED" : "TUNED",
               oc.rpc, oc.pf, oc.grid_per_sm, oc.bwd_pf, oc.accs, op < OP_FUSED ? ";" : "\n");
    }

    CU_CHECK(cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < ITERS; ++i) {
        CU_CHECK(cu->EventCreate(&ev_start[i], CU_EVENT_DEFAULT));
        CU_CHECK(cu->EventCreate(&ev_end[i], CU_EVENT_DEFAULT));
    }

    /* Random data: a device pool of uniform bf16 values in [-1, 1), copied into every input. */
    ref_rng g;
    ref_rng_seed(&g, 20261130);
    {
        uint16_t *h = malloc(POOL_ELEMS * 2);
        for (size_t i = 0; i < POOL_ELEMS; ++i)
            h[i] = ref_float_to_bf16((float)((double)(ref_rng_u64(&g) >> 40) * 0x1p-23 - 1.0));
        pool = gpu_alloc(POOL_ELEMS * 2);
        gpu_upload(pool, h, POOL_ELEMS * 2);
        /* table: 0.5 * uniform; weight: 1 + 0.1 * uniform */
        const size_t tn = (size_t)TROWS * NCHUNK * HID;
        for (size_t i = 0; i < tn; ++i) h[i] = ref_float_to_bf16(0.5f * ref_bf16_to_float(h[i]));
        table = gpu_alloc(tn * 2);
        gpu_upload(table, h, tn * 2);
        for (size_t i = 0; i < HID; ++i) h[i] = ref_float_to_bf16(1.0f + 0.1f * ref_bf16_to_float(h[tn + i]));
        weight = gpu_alloc(HID * 2);
        gpu_upload(weight, h, HID * 2);
        free(h);
    }
    int64_t n_max = 0;
    for (int i = 0; i < n_rows; ++i) n_max = rows[i] > n_max ? rows[i] : n_max;
    {
        int32_t *ix = malloc(sizeof(int32_t) * (size_t)n_max);
        if (!index_runs) {
            for (int64_t i = 0; i < n_max; ++i) ix[i] = (int32_t)ref_rng_below(&g, TROWS);
        } else {
            int64_t n_min = n_max;
            for (int i = 0; i < n_rows; ++i) n_min = rows[i] < n_min ? rows[i] : n_min;
            const uint64_t max_run = n_min / 6 > 1 ? (uint64_t)(n_min / 6) : 1;
            for (int64_t i = 0; i < n_max;) {
                const int32_t r = (int32_t)ref_rng_below(&g, TROWS);
                for (uint64_t len = 1 + ref_rng_below(&g, max_run); len > 0 && i < n_max; --len) ix[i++] = r;
            }
        }
        didx = gpu_alloc(sizeof(int32_t) * (size_t)n_max);
        gpu_upload(didx, ix, sizeof(int32_t) * (size_t)n_max);
        free(ix);
    }
    /* The workspace is not monotonic in n (one chunk more, one chunk's
     * partials more): size it for every requested row count. */
    for (int i = 0; i < n_rows; ++i)
        for (int op = 0; op < NOPS; ++op) {
            size_t b = op_workspace(op, rows[i], TROWS);
            if (b > ws_bytes) ws_bytes = b;
        }
    ws = gpu_alloc(ws_bytes);
    for (int i = 0; i < n_rows; ++i)
        for (int op = OP_NM; op <= OP_FUSED; ++op) {
            size_t b = 0;
            KJ_CHECK(kjit_adaln_partition_bytes((kjit_adaln_op)op, rows[i], HID, TROWS, &b));
            if (b > part_bytes) part_bytes = b;
        }
    part = gpu_alloc(part_bytes), part2 = gpu_alloc(part_bytes);

    double t_fwd[NOPS][8], t_fb[NOPS][8], g_fwd[NOPS][8], g_fb[NOPS][8], g_copy[8];
    double t_plain[NOPS][8], g_plain[NOPS][8], t_rows[NOPS][8], g_rows[NOPS][8], t_apart[NOPS][8];
    /* The unfused chain (run_chain): forward, training pairs, plain calls; events and graph. */
    double c_fwd[8], c_fb[8], c_plain[8], cg_fwd[8], cg_fb[8], cg_plain[8];
    printf("%-54s %6s %10s %10s %10s %10s %9s %9s %7s %7s %12s %8s\n", "op", "rows", "fwd_us", "fwd_bwd_us", "fwd_MB",
           "bwd_MB", "fwd_floor", "fb_floor", "fwd_frac", "fb_frac", "bwd_ws_bytes", "rot_MB");
    uint64_t seed = 1;
    for (int ni = 0; ni < n_rows; ++ni) {
        /* Every op's buffer sets of this row count are allocated before any
         * is timed, and freed after: with an alloc / time / free cycle per
         * op, norm_modulate's forward at 32768 rows measured 209 us after
         * the gather's 12.7 GB of sets had been freed, and 180 us when timed
         * alone (H200, 2026-11-30). A process with a caching allocator
         * allocates once, as here. */
        const int64_t n = rows[ni];
        static bset sets[NOPS][16];
        int nsets[NOPS] = {0};
        size_t set_bytes[NOPS] = {0};
        for (int op = 0; op < NOPS; ++op) {
            if (!(op_mask & (1 << op))) continue;
            set_bytes[op] = set_alloc(op, n, &sets[op][0], &seed);
            nsets[op] = (int)ceil(4.0 * L2_BYTES / (double)set_bytes[op]);
            if (nsets[op] < 3) nsets[op] = 3;
            if (nsets[op] > 16) nsets[op] = 16;
            for (int s = 1; s < nsets[op]; ++s) set_alloc(op, n, &sets[op][s], &seed);
        }
        CU_CHECK(cu->StreamSynchronize(stream));
        for (int op = 0; op < NOPS; ++op) {
            if (!(op_mask & (1 << op))) continue;
            t_fwd[op][ni] = time_op(op, 0, n, sets[op], nsets[op]);
            t_fb[op][ni] = time_op(op, 1, n, sets[op], nsets[op]);
            double bf, bb, br;
            op_bytes(op, n, &bf, &bb, &br);
            const double ff = bf / PEAK_BW * 1e6, fb = (bf + bb) / PEAK_BW * 1e6, fr = (bf + br) / PEAK_BW * 1e6;
            printf("%-54s %6lld %10.1f %10.1f %10.1f %10.1f %9.1f %9.1f %7.3f %7.3f %12zu %8.0f\n", op_names[op],
                   (long long)n, t_fwd[op][ni], t_fb[op][ni], bf / 1e6, bb / 1e6, ff, fb, ff / t_fwd[op][ni],
                   fb / t_fb[op][ni], op_workspace(op, n, TROWS), (double)set_bytes[op] * nsets[op] / 1e6);
            fflush(stdout);
            g_fwd[op][ni] = time_graph(op, 0, n, sets[op], nsets[op], 0, NULL, NULL);
            g_fb[op][ni] = time_graph(op, 1, n, sets[op], nsets[op], 0, NULL, NULL);
            if (op != OP_GATHER) {
                t_plain[op][ni] = time_op(op, 2, n, sets[op], nsets[op]);
                g_plain[op][ni] = time_graph(op, 2, n, sets[op], nsets[op], 0, NULL, NULL);
                pair_line("  the same, plain fwd + bwd calls", n, t_plain[op][ni], fb);
                t_rows[op][ni] = time_op(op, 3, n, sets[op], nsets[op]);
                g_rows[op][ni] = time_graph(op, 3, n, sets[op], nsets[op], 0, NULL, NULL);
                pair_line("  the same, row gradients only", n, t_rows[op][ni], fr);
                /* The pairs above run the backward right after its forward
                 * on the same set: at 4097 rows a (N, H) tensor (44 MB) fits
                 * the L2, so the backward may find some of its reads there.
                 * Timed apart, each on a cold L2: */
                t_apart[op][ni] = t_fwd[op][ni] + time_op(op, 4, n, sets[op], nsets[op]);
                pair_line("  plain fwd, then plain bwd timed alone (cold L2)", n, t_apart[op][ni], fb);
                fflush(stdout);
            }
            if (op == OP_FUSED && (op_mask & (1 << OP_NM)) && (op_mask & (1 << OP_GR))) {
                c_fwd[ni] = time_op(OP_CHAIN, 0, n, sets[op], nsets[op]);
                c_fb[ni] = time_op(OP_CHAIN, 1, n, sets[op], nsets[op]);
                c_plain[ni] = time_op(OP_CHAIN, 2, n, sets[op], nsets[op]);
                cg_fwd[ni] = time_graph(OP_CHAIN, 0, n, sets[op], nsets[op], 0, NULL, NULL);
                cg_fb[ni] = time_graph(OP_CHAIN, 1, n, sets[op], nsets[op], 0, NULL, NULL);
                cg_plain[ni] = time_graph(OP_CHAIN, 2, n, sets[op], nsets[op], 0, NULL, NULL);
            }
            if (do_sweep && op != OP_GATHER) sweep(op, n, sets[op], nsets[op]);
        }
        /* The reference for what "memory-bound" reaches at this size: one
         * (N, H) bf16 tensor copied, as norm_modulate's forward moves it;
         * timed before the sets are freed, as the ops are. */
        const double tc = time_copy(act_bytes(n), &seed, &g_copy[ni]);
        for (int op = 0; op < NOPS; ++op)
            for (int s = 0; s < nsets[op]; ++s) set_free(&sets[op][s]);
        printf("%-54s %6lld %10.1f %10s %10.1f %10.1f %9.1f %9s %7.3f   (%.2f TB/s read + written)\n",
               "copy reference (cuMemcpyDtoD of one (N, H) tensor)", (long long)n, tc, "-", act_bytes(n) / 1e6,
               act_bytes(n) / 1e6, 2.0 * act_bytes(n) / PEAK_BW * 1e6, "-", 2.0 * act_bytes(n) / PEAK_BW * 1e6 / tc,
               2.0 * act_bytes(n) / tc / 1e6);
        fflush(stdout);
    }
    printf("\n# inside a CUDA graph: twice the rotating sets' count of iterations per graph, median of %d replays, "
           "per iteration (no launch gaps, no events between iterations)\n", GRAPH_REPS);
    printf("%-54s %6s %10s %10s %9s %9s %7s %7s\n", "op", "rows", "fwd_us", "fwd_bwd_us", "fwd_floor", "fb_floor",
           "fwd_frac", "fb_frac");
    for (int ni = 0; ni < n_rows; ++ni) {
        for (int op = 0; op < NOPS; ++op) {
            if (!(op_mask & (1 << op))) continue;
            double bf, bb, br;
            op_bytes(op, rows[ni], &bf, &bb, &br);
            const double ff = bf / PEAK_BW * 1e6, fb = (bf + bb) / PEAK_BW * 1e6, fr = (bf + br) / PEAK_BW * 1e6;
            printf("graph %-48s %6lld %10.1f %10.1f %9.1f %9.1f %7.3f %7.3f\n", op_names[op], (long long)rows[ni],
                   g_fwd[op][ni], g_fb[op][ni], ff, fb, ff / g_fwd[op][ni], fb / g_fb[op][ni]);
            if (op != OP_GATHER) {
                graph_pair_line("  the same, plain fwd + bwd calls", rows[ni], g_plain[op][ni], fb);
                graph_pair_line("  the same, row gradients only", rows[ni], g_rows[op][ni], fr);
            }
        }
        const double fc = 2.0 * act_bytes(rows[ni]) / PEAK_BW * 1e6;
        printf("graph %-48s %6lld %10.1f %10s %9.1f %9s %7.3f\n", "copy reference (cuMemcpyDtoD)", (long long)rows[ni],
               g_copy[ni], "-", fc, "-", fc / g_copy[ni]);
    }
    printf("\n");
    const int pair = (1 << OP_NM) | (1 << OP_GR) | (1 << OP_FUSED);
    for (int ni = 0; ni < n_rows && (op_mask & pair) == pair; ++ni) {
        const double uf = t_fwd[OP_GR][ni] + t_fwd[OP_NM][ni], ub = t_fb[OP_GR][ni] + t_fb[OP_NM][ni];
        printf("fused vs gated_residual+norm_modulate, rows %lld: fwd %.2fx (%.1f + %.1f = %.1f us vs %.1f us), "
               "fwd+bwd %.2fx (%.1f + %.1f = %.1f us vs %.1f us; the unfused backward also needs dh + dx, not "
               "counted)\n",
               (long long)rows[ni], uf / t_fwd[OP_FUSED][ni], t_fwd[OP_GR][ni], t_fwd[OP_NM][ni], uf,
               t_fwd[OP_FUSED][ni], ub / t_fb[OP_FUSED][ni], t_fb[OP_GR][ni], t_fb[OP_NM][ni], ub, t_fb[OP_FUSED][ni]);
        /* In a model, the pair's backward also adds the two gradients of h
         * (dh from the residual stream, dx from norm_modulate) before
         * gated_residual's backward: an elementwise add of two (N, H) tensors
         * into a third, the bytes and the kernel shape of a gated_residual
         * forward, whose measured time stands in for it. The fused backward
         * does that add in its pass. */
        const double gf = g_fwd[OP_GR][ni] + g_fwd[OP_NM][ni], gb = g_fb[OP_GR][ni] + g_fb[OP_NM][ni] + g_fwd[OP_GR][ni];
        printf("fused vs gated_residual+norm_modulate inside a CUDA graph, rows %lld: fwd %.2fx (%.1f vs %.1f us), "
               "fwd+bwd with the dh + dx add %.2fx (%.1f vs %.1f us), without it %.2fx\n", (long long)rows[ni],
               gf / g_fwd[OP_FUSED][ni], gf, g_fwd[OP_FUSED][ni], gb / g_fb[OP_FUSED][ni], gb, g_fb[OP_FUSED][ni],
               (gb - g_fwd[OP_GR][ni]) / g_fb[OP_FUSED][ni]);
        const double ua = ub + t_fwd[OP_GR][ni];
        printf("fused vs gated_residual+norm_modulate with the dh + dx add, rows %lld: fwd+bwd %.2fx (%.1f + %.1f + "
               "%.1f = %.1f us vs %.1f us; the add timed as a gated_residual forward, same bytes)\n",
               (long long)rows[ni], ua / t_fb[OP_FUSED][ni], t_fb[OP_GR][ni], t_fb[OP_NM][ni], t_fwd[OP_GR][ni], ua,
               t_fb[OP_FUSED][ni]);
        /* The sums above add ops timed each on its own cold inputs; chained,
         * norm_modulate reads the h gated_residual just wrote (and the
         * backward the dx it just wrote), some of it from the L2. */
        printf("fused vs gated_residual -> norm_modulate chained (each reading what the one before wrote), rows %lld: "
               "fwd %.2fx (%.1f vs %.1f us), fwd+bwd with the dh + dx add %.2fx (%.1f vs %.1f us, training pairs; "
               "plain calls %.2fx, %.1f vs %.1f us); inside a CUDA graph: fwd %.2fx (%.1f vs %.1f), fwd+bwd %.2fx "
               "(%.1f vs %.1f), plain calls %.2fx (%.1f vs %.1f)\n",
               (long long)rows[ni], c_fwd[ni] / t_fwd[OP_FUSED][ni], c_fwd[ni], t_fwd[OP_FUSED][ni],
               c_fb[ni] / t_fb[OP_FUSED][ni], c_fb[ni], t_fb[OP_FUSED][ni], c_plain[ni] / t_plain[OP_FUSED][ni],
               c_plain[ni], t_plain[OP_FUSED][ni], cg_fwd[ni] / g_fwd[OP_FUSED][ni], cg_fwd[ni], g_fwd[OP_FUSED][ni],
               cg_fb[ni] / g_fb[OP_FUSED][ni], cg_fb[ni], g_fb[OP_FUSED][ni], cg_plain[ni] / g_plain[OP_FUSED][ni],
               cg_plain[ni], g_plain[OP_FUSED][ni]);
    }

    for (int i = 0; i < ITERS; ++i) cu->EventDestroy(ev_start[i]), cu->EventDestroy(ev_end[i]);
    gpu_free(ws), gpu_free(didx), gpu_free(weight), gpu_free(table), gpu_free(pool), gpu_free(part), gpu_free(part2);
    CU_CHECK(cu->StreamDestroy(stream));
    kjit_ctx_destroy(ctx);
    return 0;
}
