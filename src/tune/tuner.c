/* The tuner: for (op, hidden, act dtype) on the context's device, time every
 * forward and every backward candidate of the tuning space (config.h) through
 * the public op calls, with CUDA events, on scratch buffers of its own:
 *
 * - row counts 32768, 4097 and 1024 (the largest lowered so the buffers fit
 *   a memory budget: min(device memory / 4, 16 GiB));
 * - every activation operand is a pool of 3 to 14 times the largest row
 *   count's rows (kjit__tune_rotation_sets: more where rows are small),
 *   walked as >= 3 (up to 16) rotating sets, so each call reads and writes
 *   buffers that are cold in the L2 (50 MB on the H100/H200); tables R = 9
 *   rows as chunk(6) views of one (R, 6H) tensor, weight given, int32 index
 *   (random), random activations exact in every dtype;
 * - per (candidate, row count): WARM calls, then a memset that lets the host
 *   queue ahead of the device, then REPS calls each between two events; the
 *   median (REPS = 11; the memset, ~0.3 ms, covers the host's queueing of
 *   the calls, so no host gap is timed even for short calls). Candidates
 *   are pruned once their partial sum exceeds the best eligible one; the
 *   default is timed first and in full;
 * - the forward and the backward are chosen separately: the smallest sum of
 *   medians over the row counts among the candidates no more than 2% slower
 *   than the default at any row count, kept only when it beats the default's
 *   sum by 1% (noise never swaps in a slower config).
 * Every candidate's kernels are compiled first, in parallel, into the cache. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/ctx.h"
#include "core/error.h"
#include "gpu/cuda_api.h"
#include "tune/tune.h"
#include "tune/tune_file.h"

#define ADALN_TEMPLATE "adaln.cuh"
#define TROWS 9
#define WARM 3
#define REPS 11
#define MAX_SETS 16
#define MAX_COUNT 32768
#define MIN_COUNT 1024
#define BLOCKER_BYTES ((size_t)1 << 30) /* ~0.3 ms of memset on an H200: the host queues 11 calls meanwhile */
#define HOST_BLOCK_BYTES ((size_t)8 << 20)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- parallel prebuild -------------------------------------------------- */

typedef struct build_pool {
    kjit_ctx *ctx;
    const kjit_kernel_spec *jobs;
    int n;
    int next;
    int first_rc;
    pthread_mutex_t lock;
} build_pool;

static void *build_worker(void *arg)
{
    build_pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        const int i = p->next++;
        pthread_mutex_unlock(&p->lock);
        if (i >= p->n) return NULL;
        const kjit_kernel_spec *j = &p->jobs[i];
        int rc = kjit__ctx_build(p->ctx, j->template_file, j->op, j->name_expr, p->ctx->sm, NULL);
        if (rc) {
            kjit__log("tuner: building %s failed: %s", j->name_expr, kjit_last_error());
            pthread_mutex_lock(&p->lock);
            if (!p->first_rc) p->first_rc = rc;
            pthread_mutex_unlock(&p->lock);
        }
    }
}

static int add_spec(kjit_kernel_spec *out, int n, int max, const char *op, const char *tf, const char *expr)
{
    for (int i = 0; i < n; ++i)
        if (!strcmp(out[i].name_expr, expr) && !strcmp(out[i].template_file, tf)) return n;
    if (n >= max) return n;
    out[n].op = op, out[n].template_file = tf;
    snprintf(out[n].name_expr, sizeof out[n].name_expr, "%s", expr);
    return n + 1;
}

int kjit__tune_space_specs(int mode, int h, kjit_dtype act, size_t smem_max, kjit_kernel_spec *out, int max)
{
    const char *op = kjit__adaln_mode_name(mode);
    kjit_adaln_config f[KJIT_TUNE_MAX_FWD], b[KJIT_TUNE_MAX_BWD];
    const int nf = kjit__adaln_space_fwd(mode, h, act, f);
    const int nb = kjit__adaln_space_bwd(mode, h, act, smem_max, b);
    char fe[224], be[224];
    int n = 0;
    for (int i = 0; i < nf; ++i) {
        kjit__adaln_exprs(mode, h, act, &f[i], fe, be, sizeof fe);
        n = add_spec(out, n, max, op, ADALN_TEMPLATE, fe);
    }
    for (int i = 0; i < nb; ++i) {
        kjit__adaln_exprs(mode, h, act, &b[i], fe, be, sizeof fe);
        n = add_spec(out, n, max, op, ADALN_TEMPLATE, be);
    }
    /* The op's other kernels (index check, partition, finishing), int32 only. */
    kjit_kernel_spec specs[64];
    int ns = 0;
    if (kjit_op_kernels(op, h, act, specs, 64, &ns) == KJIT_OK) {
        for (int i = 0; i < ns && i < 64; ++i)
            if (!strstr(specs[i].name_expr, "long long"))
                n = add_spec(out, n, max, op, specs[i].template_file, specs[i].name_expr);
    }
    kjit__clear_error();
    return n;
}

int kjit__tune_prebuild(kjit_ctx *ctx, int mode, int h, kjit_dtype act, int threads, double *seconds)
{
    const double t0 = now_s();
    kjit_kernel_spec *jobs = calloc(KJIT_TUNE_MAX_SPECS, sizeof *jobs);
    if (!jobs) return kjit__fail(KJIT_ENOMEM, "tuner: out of memory");
    const int n =
        kjit__tune_space_specs(mode, h, act, kjit__tune_table_smem_max(ctx->tune), jobs, KJIT_TUNE_MAX_SPECS);
    /* One compile per core, up to 16: the fused op's 44 candidates at 5120
     * bf16 took 5.6 s on 8 of the H200 host's 16 cores (2026-12-02), over
     * the 5 s a tune may take. */
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores < 1 ? 1 : cores > 16 ? 16 : (int)cores;
    }
    if (threads > n) threads = n > 0 ? n : 1;
    build_pool p = {.ctx = ctx, .jobs = jobs, .n = n};
    pthread_mutex_init(&p.lock, NULL);
    pthread_t th[16];
    int started = 0;
    for (; started < threads && started < 16; ++started)
        if (pthread_create(&th[started], NULL, build_worker, &p)) break;
    if (!started) build_worker(&p);
    for (int i = 0; i < started; ++i) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&p.lock);
    free(jobs);
    if (seconds) *seconds = now_s() - t0;
    if (p.first_rc) return kjit__fail(p.first_rc, "tuner: some candidate kernels did not build (KJIT_LOG=1 lists them)");
    return KJIT_OK;
}

/* ---- scratch buffers ---------------------------------------------------- */

enum { P_X, P_Y, P_DOUT, P_DH, P_OUT, P_H, P_DX, P_DY, NPOOL };

typedef struct bench {
    kjit_ctx *ctx;
    const kjit_cu_api *cu;
    int mode, h;
    kjit_dtype act, par;
    size_t row_bytes;
    int64_t pool_rows;
    int n_counts;
    int64_t counts[3];
    unsigned used; /* pools in use, bit per P_* */
    CUstream s;
    CUdeviceptr pool[NPOOL];
    CUdeviceptr idx, tab, dtab, w, dw, ws, blocker;
    size_t ws_bytes, blocker_bytes;
    CUevent ev[REPS + 1];
    int n_ev;
} bench;

static unsigned pools_of(int mode)
{
    if (mode == 1) return 1u << P_X | 1u << P_DOUT | 1u << P_OUT | 1u << P_DX;
    if (mode == 2) return 1u << P_X | 1u << P_Y | 1u << P_DOUT | 1u << P_OUT | 1u << P_DY;
    return (1u << NPOOL) - 1;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Writes v (a value with at most 8 significant bits and a modest exponent:
 * exact in every dtype) as dt at p[i]. */
static void put(kjit_dtype dt, void *p, size_t i, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    if (dt == KJIT_F32) {
        ((float *)p)[i] = v;
    } else if (dt == KJIT_BF16) {
        ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
    } else { /* fp16: normal range, mantissa fits */
        uint16_t hv = (uint16_t)((u >> 16) & 0x8000u);
        if (v != 0.0f) {
            const int e = (int)((u >> 23) & 0xFF) - 127 + 15;
            hv |= (uint16_t)((unsigned)e << 10 | ((u >> 13) & 0x3FFu));
        }
        ((uint16_t *)p)[i] = hv;
    }
}

/* k / 64 for k in [-128, 128): in [-2, 2), exact in bf16, fp16 and fp32. */
static float rnd_act(uint64_t *s) { return (float)((int)(rng_next(s) % 256) - 128) / 64.0f; }

static int cu_ok(CUresult r, const char *what) { return r == CUDA_SUCCESS ? KJIT_OK : kjit__cu_fail(r, what); }

/* Fills a device buffer with random activations: one host block uploaded,
 * then doubled in place on the device. */
static int fill_random(bench *b, CUdeviceptr dst, size_t bytes, uint64_t seed)
{
    const size_t es = kjit_dtype_size(b->act);
    size_t blk = bytes < HOST_BLOCK_BYTES ? bytes : HOST_BLOCK_BYTES;
    blk -= blk % es;
    void *host = malloc(blk ? blk : 1);
    if (!host) return kjit__fail(KJIT_ENOMEM, "tuner: out of host memory");
    for (size_t i = 0; i < blk / es; ++i) put(b->act, host, i, rnd_act(&seed));
    int rc = cu_ok(b->cu->MemcpyHtoD(dst, host, blk), "tuner: uploading random data");
    free(host);
    /* A pageable upload may still be in flight on return: order it before
     * the copies on our (non-blocking) stream. */
    if (!rc) rc = cu_ok(b->cu->CtxSynchronize(), "tuner: uploading random data");
    for (size_t done = blk; !rc && done < bytes;) {
        size_t len = done < bytes - done ? done : bytes - done;
        rc = cu_ok(b->cu->MemcpyDtoDAsync(dst + done, dst, len, b->s), "tuner: filling random data");
        done += len;
    }
    return rc;
}

static int alloc(bench *b, CUdeviceptr *p, size_t bytes, const char *what)
{
    CUresult r = b->cu->MemAlloc(p, bytes ? bytes : 16);
    if (r != CUDA_SUCCESS) {
        *p = 0;
        return kjit__cu_fail(r, what);
    }
    return KJIT_OK;
}

static void bench_free(bench *b)
{
    const kjit_cu_api *cu = b->cu;
    if (b->s) cu->StreamSynchronize(b->s);
    for (int i = 0; i < NPOOL; ++i)
        if (b->pool[i]) cu->MemFree(b->pool[i]), b->pool[i] = 0;
    CUdeviceptr *others[] = {&b->idx, &b->tab, &b->dtab, &b->w, &b->dw, &b->ws, &b->blocker};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; ++i)
        if (*others[i]) cu->MemFree(*others[i]), *others[i] = 0;
    for (int i = 0; i < b->n_ev; ++i) cu->EventDestroy(b->ev[i]);
    b->n_ev = 0;
    if (b->s) cu->StreamDestroy(b->s), b->s = NULL;
}

int kjit__tune_rotation_sets(size_t l2, size_t set_bytes)
{
    /* An L2 that was not reported: as large as any known (B200: 126 MB). */
    const double need = 2.0 * (double)(l2 ? l2 : (size_t)128 << 20);
    int sets = 3;
    while (sets < WARM + REPS && (double)(sets - 1) * (double)set_bytes < need) ++sets;
    return sets;
}

/* Pools for n_max rows (times the rotation's sets), tables, index,
 * workspace, events. */
static int bench_alloc(bench *b, int64_t n_max, int npools)
{
    const kjit_cu_api *cu = b->cu;
    int rc;
    b->counts[0] = n_max, b->n_counts = 1;
    if (n_max > 4097) b->counts[b->n_counts++] = 4097;
    if (n_max > MIN_COUNT) b->counts[b->n_counts++] = MIN_COUNT;
    /* Small rows: more sets, so a timed call at n_max rows does not find
     * its inputs in the L2 from the call a few sets before (3 sets of
     * 32768 rows of 128 bf16 columns are 100 MB over norm_modulate's four
     * pools, within twice an H200's 50 MB L2). */
    int l2 = 0;
    if (cu->DeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, b->ctx->dev) != CUDA_SUCCESS || l2 < 0) l2 = 0;
    b->pool_rows = n_max * kjit__tune_rotation_sets((size_t)l2, (size_t)n_max * b->row_bytes * (size_t)npools);
    const size_t pool_bytes = (size_t)b->pool_rows * b->row_bytes;
    for (int i = 0; i < NPOOL; ++i)
        if (b->used & 1u << i)
            if ((rc = alloc(b, &b->pool[i], pool_bytes, "tuner: allocating scratch activations"))) return rc;
    /* Inputs random; outputs are written before they are read. */
    for (int i = P_X; i <= P_DH; ++i)
        if (b->pool[i] && (rc = fill_random(b, b->pool[i], pool_bytes, 0x6B6A6974ull * (uint64_t)(i + 1) + (uint64_t)b->h)))
            return rc;
    /* Tables (R, 6H): shift, scale, gate at columns 0, H, 2H; weight 1 + k/128. */
    const size_t ep = kjit_dtype_size(b->par), tab_elems = (size_t)TROWS * 6 * (size_t)b->h;
    void *host = malloc(tab_elems * ep + (size_t)b->h * ep + (size_t)b->pool_rows * 4);
    if (!host) return kjit__fail(KJIT_ENOMEM, "tuner: out of host memory");
    uint64_t seed = 0x74756E65ull + (uint64_t)b->mode;
    for (size_t i = 0; i < tab_elems; ++i) put(b->par, host, i, rnd_act(&seed) / 4.0f);
    void *wh = (char *)host + tab_elems * ep;
    for (int i = 0; i < b->h; ++i) put(b->par, wh, (size_t)i, 1.0f + (float)((int)(rng_next(&seed) % 16) - 8) / 128.0f);
    int32_t *ih = (int32_t *)((char *)wh + (size_t)b->h * ep);
    for (int64_t i = 0; i < b->pool_rows; ++i) ih[i] = (int32_t)(rng_next(&seed) % TROWS);
    rc = alloc(b, &b->tab, tab_elems * ep, "tuner: allocating tables");
    if (!rc) rc = alloc(b, &b->dtab, tab_elems * ep, "tuner: allocating tables");
    if (!rc) rc = alloc(b, &b->w, (size_t)b->h * ep, "tuner: allocating the weight");
    if (!rc) rc = alloc(b, &b->dw, (size_t)b->h * ep, "tuner: allocating the weight");
    if (!rc) rc = alloc(b, &b->idx, (size_t)b->pool_rows * 4, "tuner: allocating the index");
    if (!rc) rc = cu_ok(cu->MemcpyHtoD(b->tab, host, tab_elems * ep), "tuner: uploading tables");
    if (!rc) rc = cu_ok(cu->MemcpyHtoD(b->w, wh, (size_t)b->h * ep), "tuner: uploading the weight");
    if (!rc) rc = cu_ok(cu->MemcpyHtoD(b->idx, ih, (size_t)b->pool_rows * 4), "tuner: uploading the index");
    free(host);
    if (rc) return rc;
    b->ws_bytes = 0;
    for (int i = 0; i < b->n_counts; ++i) {
        size_t wb = 0;
        if ((rc = kjit_adaln_workspace((kjit_adaln_op)b->mode, b->counts[i], b->h, TROWS, &wb))) return rc;
        if (wb > b->ws_bytes) b->ws_bytes = wb;
    }
    if ((rc = alloc(b, &b->ws, b->ws_bytes, "tuner: allocating the workspace"))) return rc;
    b->blocker_bytes = BLOCKER_BYTES;
    if ((rc = alloc(b, &b->blocker, b->blocker_bytes, "tuner: allocating scratch"))) return rc;
    for (; b->n_ev < REPS + 1; ++b->n_ev)
        if ((rc = cu_ok(cu->EventCreate(&b->ev[b->n_ev], CU_EVENT_DEFAULT), "tuner: cuEventCreate"))) return rc;
    return cu_ok(cu->CtxSynchronize(), "tuner: preparing scratch buffers");
}

#define PTR(dev) ((void *)(uintptr_t)(dev))

/* One op call on rows [set * n, (set + 1) * n) of the pools. */
static int call(bench *b, int bwd, int64_t n, int set)
{
    kjit_adaln_args a;
    memset(&a, 0, sizeof a);
    const size_t off = (size_t)set * (size_t)n * b->row_bytes, ep = kjit_dtype_size(b->par);
    const int64_t ld = b->h, ts = 6 * (int64_t)b->h;
    a.n = n, a.hidden = b->h, a.eps = 1e-6f;
    a.act_dtype = b->act, a.param_dtype = b->par;
    a.index.ptr = PTR(b->idx + (size_t)set * (size_t)n * 4), a.index.dtype = KJIT_I32, a.index.rows = TROWS;
#define POOL(field, k) (a.field = b->pool[k] ? PTR(b->pool[k] + off) : NULL, a.field##_stride = ld)
    a.shift = PTR(b->tab), a.scale = PTR(b->tab + (size_t)b->h * ep), a.gate = PTR(b->tab + 2 * (size_t)b->h * ep);
    a.shift_stride = a.scale_stride = a.gate_stride = ts;
    a.dshift = PTR(b->dtab), a.dscale = PTR(b->dtab + (size_t)b->h * ep);
    a.dgate = PTR(b->dtab + 2 * (size_t)b->h * ep);
    a.dshift_stride = a.dscale_stride = a.dgate_stride = ts;
    if (b->mode != 2) a.weight = PTR(b->w);
    const CUstream s = b->s;
    if (!bwd) {
        if (b->mode == 1) {
            POOL(x, P_X);
        } else {
            POOL(res, P_X);
            POOL(y, P_Y);
        }
        POOL(out, P_OUT);
        if (b->mode == 3) POOL(h, P_H);
        return b->mode == 1 ? kjit_norm_modulate_fwd(b->ctx, &a, s)
             : b->mode == 2 ? kjit_gated_residual_fwd(b->ctx, &a, s)
                            : kjit_gated_residual_norm_modulate_fwd(b->ctx, &a, s);
    }
    POOL(x, P_X);
    POOL(dout, P_DOUT);
    if (b->mode != 1) POOL(y, P_Y);
    if (b->mode != 2) {
        POOL(dx, P_DX);
        a.dweight = PTR(b->dw);
    }
    if (b->mode != 1) POOL(dy, P_DY);
    if (b->mode == 3) POOL(dh, P_DH);
#undef POOL
    void *ws = PTR(b->ws);
    return b->mode == 1 ? kjit_norm_modulate_bwd(b->ctx, &a, ws, b->ws_bytes, s)
         : b->mode == 2 ? kjit_gated_residual_bwd(b->ctx, &a, ws, b->ws_bytes, s)
                        : kjit_gated_residual_norm_modulate_bwd(b->ctx, &a, ws, b->ws_bytes, s);
}

static int cmp_d(const void *x, const void *y)
{
    const double u = *(const double *)x, v = *(const double *)y;
    return (u > v) - (u < v);
}

/* Median us of one call of config c at n rows. */
static int time_config(bench *b, int bwd, const kjit_adaln_config *c, int64_t n, double *us)
{
    const kjit_cu_api *cu = b->cu;
    int64_t sets = b->pool_rows / n;
    if (sets > MAX_SETS) sets = MAX_SETS;
    kjit__tune_override(b->mode, b->h, b->act, c);
    int rc = KJIT_OK;
    for (int i = 0; i < WARM && !rc; ++i) rc = call(b, bwd, n, (int)(i % sets));
    /* The device works through the memset while the host queues the calls. */
    if (!rc) rc = cu_ok(cu->MemsetD8Async(b->blocker, 0, b->blocker_bytes, b->s), "tuner: cuMemsetD8Async");
    for (int i = 0; i < REPS && !rc; ++i) {
        rc = cu_ok(cu->EventRecord(b->ev[i], b->s), "tuner: cuEventRecord");
        if (!rc) rc = call(b, bwd, n, (int)((WARM + i) % sets));
    }
    if (!rc) rc = cu_ok(cu->EventRecord(b->ev[REPS], b->s), "tuner: cuEventRecord");
    kjit__tune_override(0, 0, KJIT_F32, NULL);
    /* Wait even after a failed call, so nothing of it is left in flight. */
    CUresult sr = cu->StreamSynchronize(b->s);
    if (!rc) rc = cu_ok(sr, "tuner: timing a candidate");
    if (rc) return rc;
    double t[REPS];
    for (int i = 0; i < REPS; ++i) {
        float ms = 0;
        if ((rc = cu_ok(cu->EventElapsedTime(&ms, b->ev[i], b->ev[i + 1]), "tuner: cuEventElapsedTime"))) return rc;
        t[i] = (double)ms * 1e3;
    }
    qsort(t, REPS, sizeof t[0], cmp_d);
    *us = t[REPS / 2];
    return KJIT_OK;
}

typedef struct cand {
    kjit_adaln_config c;
    double us[3];
    double sum;
    int complete;
} cand;

/* One log line per timed candidate (KJIT_LOG=1): its fields, the times per
 * row count, and the kernel's registers and local (spill) bytes. */
static void log_cand(bench *b, int bwd, const cand *c, int timed)
{
    if (!kjit__log_on()) return;
    char fe[224], be[224], us[96] = "";
    kjit__adaln_exprs(b->mode, b->h, b->act, &c->c, fe, be, sizeof fe);
    int regs = -1, local = -1;
    CUfunction fn;
    if (kjit__ctx_kernel(b->ctx, "adaln.cuh", kjit__adaln_mode_name(b->mode), bwd ? be : fe, &fn) == KJIT_OK) {
        b->cu->FuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
        b->cu->FuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn);
    }
    kjit__clear_error();
    size_t o = 0;
    for (int k = 0; k < timed && o < sizeof us; ++k)
        o += (size_t)snprintf(us + o, sizeof us - o, "%s%.1f", k ? " " : "", c->us[k]);
    if (bwd)
        kjit__log("tuner: %s bwd pf %d accs %d: us [%s] regs %d local %d", kjit__adaln_mode_name(b->mode),
                  c->c.bwd_pf, c->c.accs, us, regs, local);
    else
        kjit__log("tuner: %s fwd rpc %d pf %d grid %d: us [%s] regs %d local %d", kjit__adaln_mode_name(b->mode),
                  c->c.rpc, c->c.pf, c->c.grid_per_sm, us, regs, local);
}

/* Times the candidates of one direction; cands[0] is the default. Returns
 * the chosen index (0 = the default). */
static int choose(bench *b, int bwd, cand *cands, int n, int *rc_out)
{
    *rc_out = KJIT_OK;
    double best = INFINITY;
    for (int i = 0; i < n; ++i) {
        cand *c = &cands[i];
        c->sum = 0, c->complete = 0;
        int k, rc = KJIT_OK;
        for (k = 0; k < b->n_counts; ++k) {
            rc = time_config(b, bwd, &c->c, b->counts[k], &c->us[k]);
            if (rc) break;
            c->sum += c->us[k];
            if (i > 0 && c->sum > best && k + 1 < b->n_counts) { /* cannot win */
                log_cand(b, bwd, c, k + 1);
                k = -1;
                break;
            }
        }
        if (!rc && k == b->n_counts) log_cand(b, bwd, c, k);
        if (rc) {
            if (i == 0) return *rc_out = rc, 0; /* the default must run */
            kjit__log("tuner: %s candidate %d skipped: %s", bwd ? "backward" : "forward", i, kjit_last_error());
            kjit__clear_error();
            /* A failure that broke the context (an illegal address: a
             * sticky error) ends the tuning, nothing after it could run,
             * and nothing is chosen or saved from it. */
            const int rs = cu_ok(b->cu->CtxSynchronize(), "tuner: the context after a failed candidate");
            if (rs) return *rc_out = rs, 0;
            continue;
        }
        if (k == b->n_counts) {
            /* Eligible: no more than 2% (+0.3 us) slower than the default at any row count. */
            c->complete = 1;
            for (k = 0; k < b->n_counts; ++k) c->complete &= c->us[k] <= cands[0].us[k] * 1.02 + 0.3;
            if (c->complete && c->sum < best) best = c->sum;
        }
    }
    int pick = 0;
    double pick_sum = cands[0].sum * 0.99;
    for (int i = 1; i < n; ++i)
        if (cands[i].complete && cands[i].sum < pick_sum) pick = i, pick_sum = cands[i].sum;
    return pick;
}

static void to_public(const kjit_adaln_config *c, kjit_config_source src, kjit_op_config *o)
{
    o->rpc = c->rpc, o->pf = c->pf, o->grid_per_sm = c->grid_per_sm;
    o->bwd_pf = c->bwd_pf, o->accs = c->accs;
    o->source = src;
}

int kjit__tune_run(kjit_ctx *ctx, int mode, int h, kjit_dtype act, kjit_tune_result *out)
{
    const double t0 = now_s();
    memset(out, 0, sizeof *out);
    const kjit_cu_api *cu = kjit__cu();
    if (!cu) return KJIT_ENODRIVER;
    /* Candidates, the (fitted) default first. */
    kjit_adaln_config lf[KJIT_TUNE_MAX_FWD + 1], lb[KJIT_TUNE_MAX_BWD + 1];
    int nfc, nbc;
    kjit__adaln_tune_lists(mode, h, act, kjit__tune_table_smem_max(ctx->tune), lf, &nfc, lb, &nbc);
    const kjit_adaln_config def = lf[0];
    cand fw[KJIT_TUNE_MAX_FWD + 1], bw[KJIT_TUNE_MAX_BWD + 1];
    for (int i = 0; i < nfc; ++i) fw[i].c = lf[i];
    for (int i = 0; i < nbc; ++i) bw[i].c = lb[i];

    double compile_s = 0;
    if (kjit__tune_prebuild(ctx, mode, h, act, 0, &compile_s)) {
        kjit__log("tuner: %s", kjit_last_error());
        kjit__clear_error();
    }
    /* Nothing else of this context's running while we time. */
    int rc = cu_ok(cu->CtxSynchronize(), "tuner: cuCtxSynchronize");
    if (rc) return rc;

    bench b;
    memset(&b, 0, sizeof b);
    b.ctx = ctx, b.cu = cu, b.mode = mode, b.h = h, b.act = act;
    b.par = act == KJIT_F16 ? KJIT_F32 : act;
    b.row_bytes = (size_t)h * kjit_dtype_size(act);
    b.used = pools_of(mode);
    int npools = 0;
    for (int i = 0; i < NPOOL; ++i) npools += (b.used >> i) & 1;
    kjit_device_info di;
    uint64_t budget = (uint64_t)16 << 30;
    if (kjit_device_info_get(ctx->device, &di) == KJIT_OK && di.memory_bytes / 4 < budget) budget = di.memory_bytes / 4;
    int64_t n_max = (int64_t)(budget / ((uint64_t)npools * 3 * b.row_bytes));
    if (n_max > MAX_COUNT) n_max = MAX_COUNT;
    /* Fewer rows when the device is short of memory (other work on it). */
    char last[256] = "";
    for (;;) {
        if (n_max < MIN_COUNT) {
            bench_free(&b);
            return kjit__fail(KJIT_ENOMEM, "tuner: not enough device memory for %d-row buffers%s%s", MIN_COUNT,
                              last[0] ? ": " : "", last);
        }
        rc = cu_ok(cu->StreamCreate(&b.s, CU_STREAM_NON_BLOCKING), "tuner: cuStreamCreate");
        if (!rc) rc = bench_alloc(&b, n_max, npools);
        if (!rc) break;
        bench_free(&b);
        if (rc != KJIT_ENOMEM) return rc; /* out of memory: fewer rows */
        snprintf(last, sizeof last, "%s", kjit_last_error());
        kjit__log("tuner: %s; trying %lld rows", last, (long long)(n_max / 2));
        kjit__clear_error();
        n_max /= 2;
    }

    int rcf = KJIT_OK, rcb = KJIT_OK;
    const int pf = choose(&b, 0, fw, nfc, &rcf);
    const int pb = rcf ? 0 : choose(&b, 1, bw, nbc, &rcb);
    bench_free(&b);
    if (rcf || rcb) return rcf ? rcf : rcb;

    kjit_adaln_config best = def;
    best.rpc = fw[pf].c.rpc, best.pf = fw[pf].c.pf, best.grid_per_sm = fw[pf].c.grid_per_sm;
    best.bwd_pf = bw[pb].c.bwd_pf, best.accs = bw[pb].c.accs;
    to_public(&best, KJIT_CONFIG_TUNED, &out->config);
    to_public(&def, KJIT_CONFIG_DEFAULT, &out->default_config);
    out->fwd_us = fw[pf].sum, out->bwd_us = bw[pb].sum;
    out->default_fwd_us = fw[0].sum, out->default_bwd_us = bw[0].sum;
    out->n_rows = b.n_counts;
    for (int k = 0; k < b.n_counts; ++k) {
        out->rows[k] = b.counts[k];
        out->fwd_us_rows[k] = fw[pf].us[k], out->bwd_us_rows[k] = bw[pb].us[k];
        out->default_fwd_us_rows[k] = fw[0].us[k], out->default_bwd_us_rows[k] = bw[0].us[k];
    }
    out->fwd_candidates = nfc, out->bwd_candidates = nbc;
    out->compile_seconds = compile_s;
    if ((rc = kjit__tune_table_set(ctx->tune, mode, h, act, &best, KJIT_CONFIG_TUNED))) {
        memset(out, 0, sizeof *out); /* not in use: a failure before the tuning ended, as kjit.h says */
        return rc;
    }
    out->seconds = now_s() - t0;

    const char *dir = kjit_ctx_cache_dir(ctx);
    if (!dir || !dir[0] || !kjit__tune_table_device(ctx->tune)[0]) return KJIT_OK;
    kjit_tune_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.device, sizeof e.device, "%s", kjit__tune_table_device(ctx->tune));
    e.mode = mode, e.hidden = h, e.dtype = act, e.cfg = best;
    e.fwd_us = out->fwd_us, e.bwd_us = out->bwd_us;
    e.default_fwd_us = out->default_fwd_us, e.default_bwd_us = out->default_bwd_us;
    e.tune_seconds = out->seconds;
    e.n_rows = out->n_rows;
    for (int k = 0; k < out->n_rows; ++k) {
        e.rows[k] = out->rows[k];
        e.fwd_us_rows[k] = out->fwd_us_rows[k], e.bwd_us_rows[k] = out->bwd_us_rows[k];
        e.default_fwd_us_rows[k] = out->default_fwd_us_rows[k];
        e.default_bwd_us_rows[k] = out->default_bwd_us_rows[k];
    }
    e.fwd_candidates = nfc, e.bwd_candidates = nbc;
    e.tuned_at = (long long)time(NULL);
    rc = kjit__tune_file_update(dir, &e, 1);
    out->saved = rc == KJIT_OK;
    out->seconds = now_s() - t0;
    /* Tuned, not saved: KJIT_EIO whatever stopped the save (a path too
     * long, memory), its message kept, as kjit_tune documents. */
    return rc ? KJIT_EIO : KJIT_OK;
}

int kjit_tune(kjit_ctx *ctx, const char *op, int hidden, kjit_dtype dtype, kjit_tune_result *out)
{
    kjit__clear_error();
    if (out) memset(out, 0, sizeof *out); /* zeroed whatever fails (kjit.h) */
    if (!ctx) return kjit__fail(KJIT_EINVAL, "kjit_tune: ctx is NULL");
    int mode, rc = kjit__tune_key_check("kjit_tune", op, hidden, dtype, &mode);
    if (rc) return rc;
    if (!kjit__adaln_fast_hidden(hidden))
        return kjit__fail(KJIT_EUNSUPPORTED,
                          "kjit_tune: hidden %d takes the generic path, which is not tuned (a multiple of 8 up to %d is)",
                          hidden, KJIT_TUNE_FAST_MAX_HIDDEN);
    int pushed;
    if ((rc = kjit__ctx_enter(ctx, &pushed))) return rc;
    kjit_tune_result local;
    kjit__tune_lock(ctx->tune, 1);
    rc = kjit__tune_run(ctx, mode, hidden, dtype, out ? out : &local);
    kjit__tune_lock(ctx->tune, 0);
    kjit__ctx_leave(ctx, pushed);
    return rc;
}
