/* Tuning never changes the numbers (SPEC.md contract 3), on the GPU:
 *
 * 1. For each AdaLN op, at hidden 5376, 3072, 1000 (bf16) and 1024 (fp32) at
 *    1, 4097 and 9000 rows, and at 8192 (bf16) and 5376 (fp16) at 1 and 4097
 *    rows (R = 9, chunk(6) tables, weight given): every
 *    forward candidate of the tuning space gives out (and h) bitwise equal to
 *    the default config's, and every backward candidate gives dx, dy,
 *    dshift, dscale, dgate and dweight bitwise equal to the default's. Every
 *    output is poisoned before every call.
 * 2. kjit_tune on gated_residual_norm_modulate 5376 bf16: within 5 s, it
 *    writes nothing the caller owns (a poisoned buffer and a live problem's
 *    inputs and outputs are unchanged), the context then uses the result
 *    (TUNED), tune.json exists, parses and holds it for this device, and a
 *    new context picks it (STORED) and gives the default's bits with it.
 * 3. The context option tune = 1 tunes gated_residual 3072 bf16 on its first
 *    call (TUNED) and stores it too.
 * KJIT_TEST_TUNE_SHAPES="h:dtype,..." runs part 1 alone on those shapes, at
 * 1, 4097 and 9000 rows (a hidden size without a fast path has no tuning
 * space and is skipped, said so). */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/ctx.h"
#include "gpu_util.h"
#include "ref.h"
#include "test_util.h"
#include "tune/config.h"
#include "tune/tune.h"
#include "tune/tune_file.h"

#define TROWS 9
#define NMAX 9000

static ref_rng rng;
static const kjit_cu_api *cu;
static const char *const op_name[4] = {"", "norm_modulate", "gated_residual", "gated_residual_norm_modulate"};

typedef struct prob {
    int mode, h;
    kjit_dtype A, P;
    int64_t n; /* rows allocated */
    CUdeviceptr X, RES, Y, DOUT, DH, T, W, IDX;
    CUdeviceptr OUT, HO, DX, DY, DT, DW;
    size_t act_bytes, tab_bytes, w_bytes;
} prob;

static size_t es(kjit_dtype dt) { return kjit_dtype_size(dt); }

static CUdeviceptr upload_random(kjit_dtype dt, size_t n, double mean, double sd)
{
    double *v = malloc(sizeof(double) * n);
    void *q = malloc(es(dt) * n);
    for (size_t i = 0; i < n; ++i) v[i] = mean + sd * ref_rng_normal(&rng);
    host_from_double(dt, v, q, n);
    CUdeviceptr d = gpu_alloc(es(dt) * n);
    gpu_upload(d, q, es(dt) * n);
    free(v), free(q);
    return d;
}

static void prob_init(prob *p, int mode, int h, kjit_dtype A, int64_t n)
{
    memset(p, 0, sizeof *p);
    p->mode = mode, p->h = h, p->A = A, p->P = A == KJIT_F16 ? KJIT_F32 : A, p->n = n;
    const size_t nh = (size_t)n * (size_t)h;
    p->act_bytes = nh * es(A);
    p->tab_bytes = (size_t)TROWS * 6 * (size_t)h * es(p->P);
    p->w_bytes = (size_t)h * es(p->P);
    p->X = upload_random(A, nh, 0.3, 1.0);
    p->RES = upload_random(A, nh, 0.0, 1.0);
    p->Y = upload_random(A, nh, 0.0, 1.0);
    p->DOUT = upload_random(A, nh, 0.0, 1.0);
    p->DH = upload_random(A, nh, 0.0, 1.0);
    p->T = upload_random(p->P, (size_t)TROWS * 6 * (size_t)h, 0.0, 0.5);
    p->W = upload_random(p->P, (size_t)h, 1.0, 0.1);
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; ++i) idx[i] = (int32_t)ref_rng_below(&rng, TROWS);
    p->IDX = gpu_alloc(sizeof(int32_t) * (size_t)n);
    gpu_upload(p->IDX, idx, sizeof(int32_t) * (size_t)n);
    free(idx);
    p->OUT = gpu_alloc(p->act_bytes), p->HO = gpu_alloc(p->act_bytes);
    p->DX = gpu_alloc(p->act_bytes), p->DY = gpu_alloc(p->act_bytes);
    p->DT = gpu_alloc(p->tab_bytes), p->DW = gpu_alloc(p->w_bytes);
}

static void prob_free(prob *p)
{
    CUdeviceptr all[] = {p->X, p->RES, p->Y, p->DOUT, p->DH, p->T, p->W, p->IDX,
                         p->OUT, p->HO, p->DX, p->DY, p->DT, p->DW};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) gpu_free(all[i]);
}

#define PTR(d) ((void *)(uintptr_t)(d))

/* Arguments for the first n rows. */
static void make_args(const prob *p, int64_t n, kjit_adaln_args *a)
{
    const size_t ep = es(p->P), H = (size_t)p->h;
    const int64_t ld = p->h, ts = 6 * (int64_t)p->h;
    memset(a, 0, sizeof *a);
    a->n = n, a->hidden = p->h, a->eps = 1e-6f;
    a->act_dtype = p->A, a->param_dtype = p->P;
    a->index.ptr = PTR(p->IDX), a->index.dtype = KJIT_I32, a->index.rows = TROWS;
    a->x = PTR(p->X), a->x_stride = ld;
    a->res = PTR(p->RES), a->res_stride = ld;
    a->y = PTR(p->Y), a->y_stride = ld;
    a->dout = PTR(p->DOUT), a->dout_stride = ld;
    a->dh = PTR(p->DH), a->dh_stride = ld;
    a->out = PTR(p->OUT), a->out_stride = ld;
    a->h = PTR(p->HO), a->h_stride = ld;
    a->dx = PTR(p->DX), a->dx_stride = ld;
    a->dy = PTR(p->DY), a->dy_stride = ld;
    a->shift = PTR(p->T), a->scale = PTR(p->T + H * ep), a->gate = PTR(p->T + 2 * H * ep);
    a->shift_stride = a->scale_stride = a->gate_stride = ts;
    a->dshift = PTR(p->DT), a->dscale = PTR(p->DT + H * ep), a->dgate = PTR(p->DT + 2 * H * ep);
    a->dshift_stride = a->dscale_stride = a->dgate_stride = ts;
    if (p->mode != 2) a->weight = PTR(p->W), a->dweight = PTR(p->DW);
}

static int run_fwd(kjit_ctx *ctx, const prob *p, int64_t n)
{
    kjit_adaln_args a;
    make_args(p, n, &a);
    gpu_poison(p->OUT, p->act_bytes), gpu_poison(p->HO, p->act_bytes);
    int rc = p->mode == 1 ? kjit_norm_modulate_fwd(ctx, &a, NULL)
           : p->mode == 2 ? kjit_gated_residual_fwd(ctx, &a, NULL)
                          : kjit_gated_residual_norm_modulate_fwd(ctx, &a, NULL);
    gpu_sync();
    return rc;
}

static int run_bwd(kjit_ctx *ctx, const prob *p, int64_t n)
{
    kjit_adaln_args a;
    make_args(p, n, &a);
    gpu_poison(p->DX, p->act_bytes), gpu_poison(p->DY, p->act_bytes);
    gpu_poison(p->DT, p->tab_bytes), gpu_poison(p->DW, p->w_bytes);
    int rc = p->mode == 1 ? kjit_norm_modulate_bwd(ctx, &a, NULL, 0, NULL)
           : p->mode == 2 ? kjit_gated_residual_bwd(ctx, &a, NULL, 0, NULL)
                          : kjit_gated_residual_norm_modulate_bwd(ctx, &a, NULL, 0, NULL);
    gpu_sync();
    return rc;
}

/* The outputs a direction writes: device buffer, bytes compared, name. */
typedef struct outv {
    CUdeviceptr dev;
    size_t bytes;
    const char *name;
} outv;

static int outputs(const prob *p, int bwd, int64_t n, outv *o)
{
    const size_t act = (size_t)n * (size_t)p->h * es(p->A);
    int k = 0;
    if (!bwd) {
        o[k++] = (outv){p->OUT, act, "out"};
        if (p->mode == 3) o[k++] = (outv){p->HO, act, "h"};
        return k;
    }
    o[k++] = (outv){p->DX, act, p->mode == 1 ? "dx" : "dres"};
    if (p->mode != 1) o[k++] = (outv){p->DY, act, "dy"};
    /* The whole (R, 6H) gradient buffer: dshift, dscale, dgate views (and the
     * columns no op writes, which must stay poisoned). */
    o[k++] = (outv){p->DT, p->tab_bytes, p->mode == 1 ? "dshift/dscale" : p->mode == 2 ? "dgate" : "dshift/dscale/dgate"};
    if (p->mode != 2) o[k++] = (outv){p->DW, p->w_bytes, "dweight"};
    return k;
}

static unsigned char *pinned;
static size_t pinned_bytes;

static void *download_pinned(CUdeviceptr src, size_t bytes)
{
    if (bytes > pinned_bytes) {
        if (pinned) cu->MemFreeHost(pinned);
        pinned = NULL;
        if (cu->MemHostAlloc((void **)&pinned, bytes, 0) != CUDA_SUCCESS) {
            fprintf(stderr, "cuMemHostAlloc of %zu bytes failed\n", bytes);
            exit(1);
        }
        pinned_bytes = bytes;
    }
    if (cu->MemcpyDtoH(pinned, src, bytes) != CUDA_SUCCESS) {
        fprintf(stderr, "cuMemcpyDtoH failed\n");
        exit(1);
    }
    return pinned;
}

static const char *cfg_str(const kjit_adaln_config *c, char *buf, size_t len)
{
    snprintf(buf, len, "rpc %d pf %d grid %d bwd_pf %d accs %d", c->rpc, c->pf, c->grid_per_sm, c->bwd_pf, c->accs);
    return buf;
}

static int n_checked, n_differ;

/* Every candidate of one direction vs the default, at n rows. */
static void check_direction(kjit_ctx *ctx, const prob *p, int bwd, int64_t n, int builtin)
{
    const char *op = op_name[p->mode];
    kjit_adaln_config def, cands[KJIT_TUNE_MAX_FWD];
    kjit__adaln_config_default(p->mode, p->h, p->A, &def);
    const int nc = bwd ? kjit__adaln_space_bwd(p->mode, p->h, p->A, kjit__tune_table_smem_max(ctx->tune), cands)
                       : kjit__adaln_space_fwd(p->mode, p->h, p->A, cands);
    /* Long fused rows leave fewer backward stages within the shared memory
     * (8192 bf16: 5). A caller's shape may leave only the default (16384
     * bf16 fused: its backward has one config that fits). */
    CHECK(nc >= (!builtin ? 1 : bwd ? (p->mode == 3 && p->h > 6144 ? 4 : 6) : 12));
    outv o[4];
    const int no = outputs(p, bwd, n, o);
    unsigned char *ref[4];
    CHECK_STATUS(kjit__tune_force(ctx, op, p->h, p->A, &def), KJIT_OK);
    CHECK_STATUS(bwd ? run_bwd(ctx, p, n) : run_fwd(ctx, p, n), KJIT_OK);
    for (int k = 0; k < no; ++k) {
        ref[k] = malloc(o[k].bytes ? o[k].bytes : 1);
        memcpy(ref[k], download_pinned(o[k].dev, o[k].bytes), o[k].bytes);
    }
    /* Sanity: the default wrote its outputs (the first row is not poison). */
    if (n > 0) {
        int written = 0;
        for (size_t b = 0; b < (size_t)p->h * es(p->A); ++b) written |= ref[0][b] != 0xFF;
        CHECK(written);
    }
    for (int i = 0; i < nc; ++i) {
        char cs[96];
        CHECK_STATUS(kjit__tune_force(ctx, op, p->h, p->A, &cands[i]), KJIT_OK);
        kjit_op_config used;
        CHECK_STATUS(kjit_op_config_get(ctx, op, p->h, p->A, &used), KJIT_OK);
        CHECK(used.source == KJIT_CONFIG_FORCED && used.rpc == cands[i].rpc && used.pf == cands[i].pf &&
              used.grid_per_sm == cands[i].grid_per_sm && used.bwd_pf == cands[i].bwd_pf &&
              used.accs == cands[i].accs);
        int rc = bwd ? run_bwd(ctx, p, n) : run_fwd(ctx, p, n);
        if (rc) {
            fprintf(stderr, "%s h=%d %s n=%lld %s: %s failed: %s (%s)\n", op, p->h, kjit_dtype_name(p->A),
                    (long long)n, cfg_str(&cands[i], cs, sizeof cs), bwd ? "backward" : "forward",
                    kjit_status_name(rc), kjit_last_error());
            kjit_test_failures++;
            continue;
        }
        for (int k = 0; k < no; ++k) {
            const unsigned char *got = download_pinned(o[k].dev, o[k].bytes);
            ++n_checked;
            if (memcmp(got, ref[k], o[k].bytes)) {
                size_t at = 0;
                while (at < o[k].bytes && got[at] == ref[k][at]) ++at;
                if (n_differ++ < 20)
                    fprintf(stderr, "%s h=%d %s n=%lld %s: %s differs from the default config's (byte %zu)\n", op,
                            p->h, kjit_dtype_name(p->A), (long long)n, cfg_str(&cands[i], cs, sizeof cs), o[k].name,
                            at);
                kjit_test_failures++;
            }
        }
    }
    CHECK_STATUS(kjit__tune_force(ctx, op, p->h, p->A, NULL), KJIT_OK);
    for (int k = 0; k < no; ++k) free(ref[k]);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct shape { int h; kjit_dtype A; } shape;

/* KJIT_TEST_TUNE_SHAPES="h:dtype,h:dtype,..." (e.g. "6144:f16,2056:bf16"):
 * part 1 on these shapes instead of the built-in ones, at every row count
 * (parts 2 and 3 are skipped). Returns the count, -1 on a malformed list. */
static int shapes_from_env(const char *env, shape *out, int cap)
{
    int n = 0;
    const char *at = env;
    while (*at) {
        char name[16];
        int h, used = 0;
        if (n == cap || sscanf(at, "%d:%15[a-z0-9]%n", &h, name, &used) != 2 || h <= 0) return -1;
        if (kjit_dtype_parse(name, &out[n].A) != KJIT_OK ||
            (out[n].A != KJIT_BF16 && out[n].A != KJIT_F16 && out[n].A != KJIT_F32))
            return -1;
        out[n++].h = h;
        at += used;
        if (*at == ',') ++at;
        else if (*at) return -1;
    }
    return n;
}

static void check_all_configs(kjit_ctx *ctx, const shape *shapes, int n_shapes, int all_rows)
{
    static const int64_t rows[] = {1, 4097, NMAX};
    for (int mode = 1; mode <= 3; ++mode)
        for (int s = 0; s < n_shapes; ++s) {
            if (!kjit__adaln_fast_hidden(shapes[s].h)) {
                /* The generic path has one config: tuning has nothing to
                 * choose there (test_adaln checks its bits). */
                printf("%-29s h=%-5d %s: not tuned (not a multiple of 8 in 8..%d): skipped\n", op_name[mode],
                       shapes[s].h, kjit_dtype_name(shapes[s].A), KJIT_TUNE_FAST_MAX_HIDDEN);
                continue;
            }
            const double t0 = now_s();
            double build_s = 0;
            CHECK_STATUS(kjit__tune_prebuild(ctx, mode, shapes[s].h, shapes[s].A, 0, &build_s), KJIT_OK);
            prob p;
            prob_init(&p, mode, shapes[s].h, shapes[s].A, NMAX);
            const int before = n_checked, differ = n_differ;
            /* The built-in list's last two shapes at two row counts: their
             * space is large. */
            const int nrows = all_rows || s < 4 ? 3 : 2;
            for (int r = 0; r < nrows; ++r) {
                check_direction(ctx, &p, 0, rows[r], !all_rows);
                check_direction(ctx, &p, 1, rows[r], !all_rows);
            }
            printf("%-29s h=%-5d %s: %d output comparisons over all configs, %d differ (build %.1f s, total %.1f s)\n",
                   op_name[mode], shapes[s].h, kjit_dtype_name(shapes[s].A), n_checked - before, n_differ - differ,
                   build_s, now_s() - t0);
            prob_free(&p);
        }
}

/* Raw bytes of every buffer of a problem. */
static unsigned char *snapshot(const prob *p, size_t *len)
{
    const CUdeviceptr d[] = {p->X, p->RES, p->Y, p->DOUT, p->DH, p->OUT, p->HO, p->DX, p->DY};
    const size_t n_act = sizeof d / sizeof d[0];
    *len = n_act * p->act_bytes + 2 * p->tab_bytes + 2 * p->w_bytes + (size_t)p->n * 4;
    unsigned char *s = malloc(*len), *at = s;
    for (size_t i = 0; i < n_act; ++i, at += p->act_bytes) gpu_download(at, d[i], p->act_bytes);
    gpu_download(at, p->T, p->tab_bytes), at += p->tab_bytes;
    gpu_download(at, p->DT, p->tab_bytes), at += p->tab_bytes;
    gpu_download(at, p->W, p->w_bytes), at += p->w_bytes;
    gpu_download(at, p->DW, p->w_bytes), at += p->w_bytes;
    gpu_download(at, p->IDX, (size_t)p->n * 4);
    return s;
}

static void check_tuner(kjit_ctx *ctx)
{
    const char *op = "gated_residual_norm_modulate";
    const int h = 5376;
    const kjit_dtype A = KJIT_BF16;
    const char *dir = kjit_ctx_cache_dir(ctx);
    CHECK(dir && dir[0]);
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/%s", dir, KJIT_TUNE_FILE);
    unlink(path); /* this run's result only */
    kjit_device_info di;
    CHECK_STATUS(kjit_device_info_get(0, &di), KJIT_OK);

    /* The caller's buffers: a live problem (after a forward and backward)
     * and a poisoned buffer; none may change. */
    prob p;
    prob_init(&p, 3, h, A, 4097);
    CHECK_STATUS(run_fwd(ctx, &p, p.n), KJIT_OK);
    CHECK_STATUS(run_bwd(ctx, &p, p.n), KJIT_OK);
    size_t snap_len = 0;
    unsigned char *before = snapshot(&p, &snap_len);
    const size_t poison_bytes = (size_t)512 << 20;
    CUdeviceptr poison = gpu_alloc(poison_bytes);
    gpu_poison(poison, poison_bytes);
    gpu_sync();

    kjit_tune_result r;
    memset(&r, 0, sizeof r);
    CHECK_STATUS(kjit_tune(ctx, op, h, A, &r), KJIT_OK);
    printf("kjit_tune %s %d bf16: %.2f s (compile %.2f s); fwd rpc %d pf %d grid %d: %.1f us (default %.1f); "
           "bwd pf %d accs %d: %.1f us (default %.1f); %d + %d candidates\n",
           op, h, r.seconds, r.compile_seconds, r.config.rpc, r.config.pf, r.config.grid_per_sm, r.fwd_us,
           r.default_fwd_us, r.config.bwd_pf, r.config.accs, r.bwd_us, r.default_bwd_us, r.fwd_candidates,
           r.bwd_candidates);
    for (int k = 0; k < r.n_rows; ++k)
        printf("  %6lld rows: fwd %8.1f us (default %8.1f)  bwd %8.1f us (default %8.1f)\n", (long long)r.rows[k],
               r.fwd_us_rows[k], r.default_fwd_us_rows[k], r.bwd_us_rows[k], r.default_bwd_us_rows[k]);
    CHECK_LE(r.seconds, 5.0);
    CHECK_EQ_INT(r.saved, 1);
    CHECK_EQ_INT(r.config.source, KJIT_CONFIG_TUNED);
    CHECK(r.fwd_candidates >= 12 && r.bwd_candidates >= 6);
    CHECK(r.n_rows >= 2 && r.fwd_us > 0 && r.bwd_us > 0);
    CHECK_LE(r.fwd_us, r.default_fwd_us);
    CHECK_LE(r.bwd_us, r.default_bwd_us);
    kjit_adaln_config tuned = {r.config.rpc, r.config.pf, r.config.grid_per_sm, r.config.bwd_pf, r.config.accs};
    CHECK_EQ_INT(kjit__adaln_config_check(3, h, A, &tuned, kjit__tune_table_smem_max(ctx->tune), NULL, 0), KJIT_OK);

    /* Nothing of the caller's changed. */
    gpu_sync();
    size_t after_len = 0;
    unsigned char *after = snapshot(&p, &after_len);
    CHECK(after_len == snap_len && !memcmp(before, after, snap_len));
    unsigned char *pz = malloc(poison_bytes);
    gpu_download(pz, poison, poison_bytes);
    size_t touched = 0;
    for (size_t i = 0; i < poison_bytes; ++i) touched += pz[i] != 0xFF;
    CHECK_EQ_INT(touched, 0);
    free(pz), free(after);
    gpu_free(poison);

    /* This context uses it. */
    kjit_op_config c;
    CHECK_STATUS(kjit_op_config_get(ctx, op, h, A, &c), KJIT_OK);
    CHECK(c.source == KJIT_CONFIG_TUNED && c.rpc == r.config.rpc && c.pf == r.config.pf &&
          c.grid_per_sm == r.config.grid_per_sm && c.bwd_pf == r.config.bwd_pf && c.accs == r.config.accs);

    /* The file: parses, this device's entry holds the result. */
    CHECK(access(path, R_OK) == 0);
    kjit_tune_list l = {0};
    int bad = 0;
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &bad, NULL, 0), KJIT_TUNE_FILE_OK);
    CHECK_EQ_INT(bad, 0);
    int found = 0;
    for (size_t i = 0; i < l.n; ++i) {
        const kjit_tune_entry *e = &l.v[i];
        if (e->mode == 3 && e->hidden == h && e->dtype == A && !strcmp(e->device, di.name)) {
            found = 1;
            CHECK(kjit__adaln_config_equal(&e->cfg, &tuned));
            CHECK(e->fwd_us > 0 && e->default_fwd_us > 0 && e->tune_seconds > 0 && e->n_rows == r.n_rows);
        }
    }
    CHECK(found);
    kjit__tune_list_free(&l);

    /* A new context picks it from the file, and it gives the default's bits. */
    kjit_ctx *ctx2 = NULL;
    CHECK_STATUS(kjit_ctx_create(&ctx2, NULL), KJIT_OK);
    if (ctx2) {
        CHECK_STATUS(kjit_op_config_get(ctx2, op, h, A, &c), KJIT_OK);
        CHECK(c.source == KJIT_CONFIG_STORED && c.rpc == r.config.rpc && c.pf == r.config.pf &&
              c.grid_per_sm == r.config.grid_per_sm && c.bwd_pf == r.config.bwd_pf && c.accs == r.config.accs);
        CHECK_STATUS(run_fwd(ctx2, &p, p.n), KJIT_OK);
        CHECK_STATUS(run_bwd(ctx2, &p, p.n), KJIT_OK);
        after = snapshot(&p, &after_len);
        CHECK(after_len == snap_len && !memcmp(before, after, snap_len));
        free(after);
        kjit_ctx_destroy(ctx2);
        cu->CtxSetCurrent(ctx->cuctx);
    }
    free(before);
    prob_free(&p);
}

/* tune = 1: the first call of a new key tunes it. */
/* The context's tune option: the first call of a new (op, hidden, dtype)
 * tunes it first, then computes what the default config computes, bit for
 * bit, writing only its outputs (the tuner works on scratch buffers). */
static void check_tune_on_use(kjit_ctx *ctx)
{
    prob p;
    prob_init(&p, 2, 3072, KJIT_BF16, 500);
    CHECK_STATUS(run_fwd(ctx, &p, p.n), KJIT_OK); /* the default config (this context's) */
    CHECK_STATUS(run_bwd(ctx, &p, p.n), KJIT_OK);
    gpu_sync();
    size_t snap_len = 0, after_len = 0;
    unsigned char *before = snapshot(&p, &snap_len);
    const CUdeviceptr outs[] = {p.OUT, p.HO, p.DX, p.DY};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; ++i) gpu_poison(outs[i], p.act_bytes);
    gpu_poison(p.DT, p.tab_bytes), gpu_poison(p.DW, p.w_bytes);
    gpu_sync();
    kjit_ctx_options o;
    kjit_ctx_options_init(&o);
    o.tune = 1;
    kjit_ctx *ctx3 = NULL;
    CHECK_STATUS(kjit_ctx_create(&ctx3, &o), KJIT_OK);
    if (!ctx3) return;
    kjit_op_config c;
    CHECK_STATUS(kjit_op_config_get(ctx3, "gated_residual", 3072, KJIT_BF16, &c), KJIT_OK);
    CHECK_EQ_INT(c.source, KJIT_CONFIG_DEFAULT);
    const double t0 = now_s();
    CHECK_STATUS(run_fwd(ctx3, &p, p.n), KJIT_OK);
    printf("first gated_residual 3072 bf16 call with tune = 1: %.2f s\n", now_s() - t0);
    CHECK_STATUS(kjit_op_config_get(ctx3, "gated_residual", 3072, KJIT_BF16, &c), KJIT_OK);
    CHECK_EQ_INT(c.source, KJIT_CONFIG_TUNED);
    CHECK_STATUS(run_bwd(ctx3, &p, p.n), KJIT_OK);
    gpu_sync();
    unsigned char *after = snapshot(&p, &after_len);
    if (after_len != snap_len || memcmp(before, after, snap_len)) {
        fprintf(stderr, "tune on use: the first tuned calls' outputs or the caller's inputs differ from the default "
                        "config's run\n");
        kjit_test_failures++;
    }
    free(before), free(after);
    kjit_tune_list l = {0};
    int bad = 0, found = 0;
    kjit__tune_file_read(kjit_ctx_cache_dir(ctx3), &l, &bad, NULL, 0);
    for (size_t i = 0; i < l.n; ++i) found |= l.v[i].mode == 2 && l.v[i].hidden == 3072 && l.v[i].dtype == KJIT_BF16;
    CHECK(found);
    kjit__tune_list_free(&l);
    prob_free(&p);
    kjit_ctx_destroy(ctx3);
    cu->CtxSetCurrent(ctx->cuctx);
}

int main(void)
{
    kjit_ctx *ctx = kjit_gpu_ctx_or_skip("test_tune", KJIT_INDEX_CHECK_OFF);
    cu = kjit__cu();
    ref_rng_seed(&rng, kjit_test_seed("test_tune"));
    const double t0 = now_s();
    /* 1000 bf16: the ragged fast path (125 granules over 128 threads);
     * 8192 bf16: backward candidates at one or two CTAs per SM (the launch
     * bounds follow the shared memory); 5376 fp16: fp32 tables. */
    static const shape builtin[] = {
        {5376, KJIT_BF16}, {3072, KJIT_BF16}, {1024, KJIT_F32}, {1000, KJIT_BF16}, {8192, KJIT_BF16}, {5376, KJIT_F16}};
    const char *env = getenv("KJIT_TEST_TUNE_SHAPES");
    if (env && *env) {
        shape own[16];
        const int n = shapes_from_env(env, own, 16);
        if (n <= 0) {
            fprintf(stderr, "test_tune: KJIT_TEST_TUNE_SHAPES=\"%s\": expected h:dtype[,h:dtype...] (at most 16, "
                            "dtype bf16, f16 or f32)\n", env);
            kjit_ctx_destroy(ctx);
            return 2;
        }
        check_all_configs(ctx, own, n, 1);
        printf("all configs (KJIT_TEST_TUNE_SHAPES): %d comparisons, %d differ, %.1f s\n", n_checked, n_differ,
               now_s() - t0);
        kjit_ctx_destroy(ctx);
        return kjit_test_result("test_tune");
    }
    check_all_configs(ctx, builtin, (int)(sizeof builtin / sizeof builtin[0]), 0);
    printf("all configs: %d comparisons, %d differ, %.1f s\n", n_checked, n_differ, now_s() - t0);
    check_tuner(ctx);
    cu->CtxSetCurrent(ctx->cuctx);
    check_tune_on_use(ctx);
    cu->CtxSetCurrent(ctx->cuctx);
    if (pinned) cu->MemFreeHost(pinned);
    kjit_ctx_destroy(ctx);
    printf("test_tune: %.1f s\n", now_s() - t0);
    return kjit_test_result("test_tune");
}
