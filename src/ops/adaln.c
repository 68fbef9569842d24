/* norm_modulate, gated_residual and gated_residual_norm_modulate: one
 * template family (kernel_templates/adaln.cuh, MODE 1, 2, 3), one host path. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/kjit_params.h"
#include "core/error.h"
#include "ops/op.h"
#include "ops/overlap.h"
#include "ops/partition.h"
#include "ops/rows.h"
#include "tune/config.h"
#include "tune/tune.h"

#define ADALN_TEMPLATE "adaln.cuh"
#define FAST_MAX_HIDDEN 16384

typedef struct mode_info {
    const char *name;
    const kjit_op_desc *desc;
    int ng; /* table gradients: 1 shift, scale; 2 gate; 3 shift, scale, gate */
    /* Fewest rows per backward chunk (part of the partition, so of the
     * bits). 16 gives two CTAs per SM at 4097 rows; the fused backward fits
     * one CTA per SM, where more chunks than SMs run in two waves: 32 (H200,
     * 2026-11-30, 4097 rows: its backward 109 us with 32 and 136 us with 16
     * in the tuner; bench_ops forward+backward 162.5 us with 32, 170.2 us
     * with 16 and the other changes of 81b907b..c3deb3f). */
    int min_chunk;
    /* Most chunks: the fused backward's 7 partial rows per chunk would give
     * 194 chunks of 169 rows at 32768 rows, one full wave of one CTA per SM
     * and a second of 62; at most 128 (256 rows) is one wave on the H200's
     * 132 SMs and the B200's 148. */
    int max_chunks;
} mode_info;

static const mode_info modes[4] = {
    {0},
    {"norm_modulate", &kjit__op_norm_modulate, 2, 16, KJIT_PART_MAX_CHUNKS},
    {"gated_residual", &kjit__op_gated_residual, 1, 16, KJIT_PART_MAX_CHUNKS},
    {"gated_residual_norm_modulate", &kjit__op_gated_residual_norm_modulate, 3, 32, 128},
};

static kjit_dtype param_for(kjit_dtype act) { return act == KJIT_F16 ? KJIT_F32 : act; }

/* train: the training forward (the kernel kjit_adaln_fwd_train: the same
 * rows, and block 0 builds the backward's partition). */
static void fwd_expr(char *buf, size_t len, int mode, kjit_dtype act, kjit_dtype par, kjit_dtype idx, int h, int vec,
                     const kjit_adaln_config *c, int train)
{
    snprintf(buf, len, "kjit_adaln_fwd%s<%d, %s, %s, %s, %d, %d, %d, %d>", train ? "_train" : "", mode, kjit__dtype_cxx(act),
             kjit__dtype_cxx(par), kjit__dtype_cxx(idx), vec ? h : 0, kjit__adaln_tpr(h, act), c->rpc, vec ? c->pf : 0);
}

static void bwd_expr(char *buf, size_t len, int mode, kjit_dtype act, kjit_dtype par, kjit_dtype idx, int h, int vec,
                     const kjit_adaln_config *c)
{
    snprintf(buf, len, "kjit_adaln_bwd<%d, %s, %s, %s, %d, %d, %d, %d>", mode, kjit__dtype_cxx(act),
             kjit__dtype_cxx(par), kjit__dtype_cxx(idx), vec ? h : 0, kjit__adaln_tpr(h, act), vec ? c->bwd_pf : 0,
             vec ? c->accs : 0);
}

/* The backward's row gradients alone (no parameter gradient asked for). */
static void bwd_dx_expr(char *buf, size_t len, int mode, kjit_dtype act, kjit_dtype par, kjit_dtype idx, int h, int vec)
{
    snprintf(buf, len, "kjit_adaln_bwd_dx<%d, %s, %s, %s, %d, %d>", mode, kjit__dtype_cxx(act), kjit__dtype_cxx(par),
             kjit__dtype_cxx(idx), vec ? h : 0, kjit__adaln_tpr(h, act));
}

static int fast_ok(int h) { return h % 8 == 0 && h <= FAST_MAX_HIDDEN; }

/* The backward's fast path stages whole rows in shared memory; where its
 * stages are more than the device's smem_max (0: the default's 200 KiB)
 * allow (fp32 rows of 16384 for the fused op), the generic path runs it
 * (same bits). The fast path's dynamic shared memory, or 0 for the generic
 * path: one rule for the launch and for the kernel lists. */
static size_t bwd_fast_smem(int mode, int h, kjit_dtype act, const kjit_adaln_config *c, size_t smem_max)
{
    const size_t smem = fast_ok(h) ? kjit__adaln_bwd_smem(mode, h, act, c) : 0;
    return smem <= (smem_max ? smem_max : KJIT_DEFAULT_SMEM) ? smem : 0;
}

/* smem_max 0: the built-in default config; else that config as a device
 * with smem_max bytes of shared memory a block runs it (fitted, and the
 * backward's generic path where a row stage does not fit), as the launch
 * paths below choose it. */
int kjit__adaln_kernels_fit(int mode, int hidden, kjit_dtype act, size_t smem_max, kjit_kernel_spec *out, int max)
{
    const mode_info *m = &modes[mode];
    if (hidden < 1 || hidden > KJIT_MAX_HIDDEN)
        return kjit__fail(KJIT_EINVAL, "%s: hidden %d outside 1..%d", m->name, hidden, KJIT_MAX_HIDDEN);
    const kjit_dtype par = param_for(act), idx[2] = {KJIT_I32, KJIT_I64};
    kjit_adaln_config c;
    kjit__adaln_config_default(mode, hidden, act, &c);
    if (smem_max) kjit__adaln_config_fit(mode, hidden, act, &c, smem_max);
    /* A count alone (what a request's check asks) formats no expression:
     * per index dtype a forward, a training forward, a backward, the row
     * gradients' backward and an index check. */
    if (max <= 0) return kjit__part_specs(m->name, par, out, max, 10);
    int n = 0;
    char e[224];
    for (int i = 0; i < 2; ++i) {
        for (int train = 0; train < 2; ++train) {
            fwd_expr(e, sizeof e, mode, act, par, idx[i], hidden, fast_ok(hidden), &c, train);
            n = kjit__spec_add(out, max, n, m->desc, "%s", e);
        }
        bwd_expr(e, sizeof e, mode, act, par, idx[i], hidden, bwd_fast_smem(mode, hidden, act, &c, smem_max) != 0, &c);
        n = kjit__spec_add(out, max, n, m->desc, "%s", e);
        bwd_dx_expr(e, sizeof e, mode, act, par, idx[i], hidden, fast_ok(hidden));
        n = kjit__spec_add(out, max, n, m->desc, "%s", e);
        n = kjit__spec_add(out, max, n, m->desc, "kjit_index_check<%s>", kjit__dtype_cxx(idx[i]));
        if (n <= max) out[n - 1].template_file = "index_check.cuh";
    }
    return kjit__part_specs(m->name, par, out, max, n);
}

static int nm_kernels(int h, kjit_dtype d, kjit_kernel_spec *o, int max) { return kjit__adaln_kernels_fit(1, h, d, 0, o, max); }
static int gr_kernels(int h, kjit_dtype d, kjit_kernel_spec *o, int max) { return kjit__adaln_kernels_fit(2, h, d, 0, o, max); }
static int fu_kernels(int h, kjit_dtype d, kjit_kernel_spec *o, int max) { return kjit__adaln_kernels_fit(3, h, d, 0, o, max); }

const kjit_op_desc kjit__op_norm_modulate = {"norm_modulate", ADALN_TEMPLATE, nm_kernels};
const kjit_op_desc kjit__op_gated_residual = {"gated_residual", ADALN_TEMPLATE, gr_kernels};
const kjit_op_desc kjit__op_gated_residual_norm_modulate = {"gated_residual_norm_modulate", ADALN_TEMPLATE,
                                                            fu_kernels};

/* Which operands an op reads and writes. */
enum { X = 1, RES = 2, Y = 4, SHIFT = 8, SCALE = 16, GATE = 32, OUT = 64, HOUT = 128, DOUT = 256, DH = 512,
       DX = 1024, DY = 2048, DSHIFT = 4096, DSCALE = 8192, DGATE = 16384 };

static unsigned operands(int mode, int bwd)
{
    if (!bwd) return mode == 1 ? X | SHIFT | SCALE | OUT
                 : mode == 2 ? RES | Y | GATE | OUT
                             : RES | Y | GATE | SHIFT | SCALE | OUT | HOUT;
    return mode == 1 ? X | SCALE | DOUT | DX | DSHIFT | DSCALE
         : mode == 2 ? Y | GATE | DOUT | DY | DGATE
                     : X | Y | GATE | SCALE | DOUT | DX | DY | DGATE | DSHIFT | DSCALE;
}

/* A backward asked for its row gradients alone: no table or weight
 * gradient given (gated_residual: no dgate). */
static int rows_only(int mode, const kjit_adaln_args *a)
{
    if (mode == 2) return !a->dgate;
    return !a->dshift && !a->dscale && !a->dweight && (mode == 1 || !a->dgate);
}

/* Memory operands of one call: those validate finds in use, then the
 * partition and workspace. */
enum { MAX_SPANS = 21 };
typedef struct spans {
    kjit_span s[MAX_SPANS];
    int n;
} spans;

static int span_add(spans *sp, kjit_span s)
{
    sp->s[sp->n] = s;
    return sp->n++;
}

/* The argument checks; sp receives every memory operand the call uses
 * (outputs marked, with the in-place pairs the forward allows: norm_modulate
 * out = x, gated_residual out = res, the fused op's h = res). */
static int validate(int mode, int bwd, const kjit_adaln_args *a, int *vec, spans *sp)
{
    const char *op = modes[mode].name;
    unsigned need = operands(mode, bwd);
    if (bwd && mode != 2 && a->dweight && !a->weight)
        return kjit__fail(KJIT_EINVAL, "%s: dweight given but weight is NULL", op);
    /* The row gradients alone read no y (y only feeds dgate). */
    if (bwd && rows_only(mode, a)) need &= ~(unsigned)(DSHIFT | DSCALE | DGATE | Y);
    else if (bwd && mode != 2) {
        /* Some parameter gradients given, not all: name the first missing. */
        const char *miss = !a->dshift ? "dshift" : !a->dscale ? "dscale" : mode == 3 && !a->dgate ? "dgate" : NULL;
        if (miss)
            return kjit__fail(KJIT_EINVAL, "%s: %s is NULL while other parameter gradients are given (give dshift, "
                              "dscale%s and optionally dweight, or none of them for the row gradients alone)",
                              op, miss, mode == 3 ? ", dgate" : "");
    }
    if (a->n < 0 || a->n > KJIT_MAX_ROWS)
        return kjit__fail(KJIT_EINVAL, "%s: n = %lld outside 0..%lld", op, (long long)a->n, KJIT_MAX_ROWS);
    if (a->hidden < 1 || a->hidden > KJIT_MAX_HIDDEN)
        return kjit__fail(KJIT_EINVAL, "%s: hidden %d outside 1..%d", op, a->hidden, KJIT_MAX_HIDDEN);
    int rc;
    if ((rc = kjit__check_dtype(op, "act_dtype", a->act_dtype, 1))) return rc;
    if ((rc = kjit__check_dtype(op, "param_dtype", a->param_dtype, 0))) return rc;
    if (mode != 2 && (!isfinite(a->eps) || a->eps < 0))
        return kjit__fail(KJIT_EINVAL, "%s: eps %g must be finite and >= 0", op, (double)a->eps);
    if ((rc = kjit__check_index(op, &a->index, a->n))) return rc;
    const int h = a->hidden;
    const int64_t n = a->n, r = a->index.rows;
    const kjit_dtype A = a->act_dtype, P = a->param_dtype;
    *vec = fast_ok(h);
    struct { unsigned bit; const char *name; const void *p; int64_t stride, rows; kjit_dtype dt; } ops[] = {
        {X, bwd && mode == 3 ? "x (the forward's h)" : "x", a->x, a->x_stride, n, A},
        {RES, "res", a->res, a->res_stride, n, A},
        {Y, "y", a->y, a->y_stride, n, A},
        {SHIFT, "shift", a->shift, a->shift_stride, r, P},
        {SCALE, "scale", a->scale, a->scale_stride, r, P},
        {GATE, "gate", a->gate, a->gate_stride, r, P},
        {OUT, "out", a->out, a->out_stride, n, A},
        {HOUT, "h", a->h, a->h_stride, n, A},
        {DOUT, "dout", a->dout, a->dout_stride, n, A},
        {DX, mode == 1 ? "dx" : "dx (dres)", a->dx, a->dx_stride, n, A},
        {DY, "dy", a->dy, a->dy_stride, n, A},
        {DSHIFT, "dshift", a->dshift, a->dshift_stride, r, P},
        {DSCALE, "dscale", a->dscale, a->dscale_stride, r, P},
        {DGATE, "dgate", a->dgate, a->dgate_stride, r, P},
    };
    const unsigned outs = OUT | HOUT | DX | DY | DSHIFT | DSCALE | DGATE;
    int at[15] = {0}; /* span of each operand bit (log2) */
    sp->n = 0;
    span_add(sp, kjit__span_bytes("index", a->index.ptr, (size_t)n * kjit_dtype_size(a->index.dtype), 0));
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i)
        if (need & ops[i].bit) {
            if ((rc = kjit__check_rows(op, ops[i].name, ops[i].p, ops[i].stride, ops[i].rows, h, ops[i].dt, vec)))
                return rc;
            at[__builtin_ctz(ops[i].bit)] =
                span_add(sp, kjit__span_rows(ops[i].name, ops[i].p, ops[i].stride, ops[i].rows, h,
                                             kjit_dtype_size(ops[i].dt), (ops[i].bit & outs) != 0));
        }
    /* Optional operands: checked when given. */
    if (bwd && mode == 2 && a->dx) {
        if ((rc = kjit__check_rows(op, "dx (dres)", a->dx, a->dx_stride, n, h, A, vec))) return rc;
        span_add(sp, kjit__span_rows("dx (dres)", a->dx, a->dx_stride, n, h, kjit_dtype_size(A), 1));
    }
    if (bwd && mode == 3 && a->dh) {
        if ((rc = kjit__check_rows(op, "dh", a->dh, a->dh_stride, n, h, A, vec))) return rc;
        span_add(sp, kjit__span_rows("dh", a->dh, a->dh_stride, n, h, kjit_dtype_size(A), 0));
    }
    if (mode != 2) {
        if (a->weight) {
            if ((rc = kjit__check_vector(op, "weight", a->weight, h, P, vec))) return rc;
            span_add(sp, kjit__span_rows("weight", a->weight, h, 1, h, kjit_dtype_size(P), 0));
        }
        if (bwd && a->dweight) {
            if ((rc = kjit__check_vector(op, "dweight", a->dweight, h, P, vec))) return rc;
            span_add(sp, kjit__span_rows("dweight", a->dweight, h, 1, h, kjit_dtype_size(P), 1));
        }
    }
    if (!bwd) {
        if (mode == 1) sp->s[at[__builtin_ctz(OUT)]].alias = at[__builtin_ctz(X)];
        if (mode == 2) sp->s[at[__builtin_ctz(OUT)]].alias = at[__builtin_ctz(RES)];
        if (mode == 3) sp->s[at[__builtin_ctz(HOUT)]].alias = at[__builtin_ctz(RES)];
    }
    return KJIT_OK;
}

/* Table chunks in the kernels' order: 0 shift, 1 scale, 2 gate. */
static kjit_table_set tables(const kjit_adaln_args *a)
{
    kjit_table_set t = {{a->shift, a->scale, a->gate}, {a->shift_stride, a->scale_stride, a->gate_stride}};
    return t;
}

/* The backward's partition plan of an op for a's shapes. The plan always
 * budgets dw's partials (modes 1, 3): the partition, and so every
 * gradient's bits, must not depend on whether dw is asked for. */
static void plan_of(int mode, const kjit_adaln_args *a, kjit_part_plan *pl)
{
    kjit__part_plan(pl, a->n, a->index.rows, modes[mode].ng, a->hidden, mode != 2, modes[mode].min_chunk,
                    modes[mode].max_chunks);
}

/* A training pair's partition buffer: the caller's, 256-byte aligned, at
 * least the plan's partition bytes (everything before the partials). */
static int train_partition(const char *op, const char *dir, const void *part, size_t bytes, size_t need)
{
    if (!part)
        return kjit__fail(KJIT_EINVAL, "%s %s: partition is NULL (kjit_adaln_partition_bytes bytes of the caller's, "
                          "kept from the training forward to its backward)", op, dir);
    if ((uintptr_t)part % 256)
        return kjit__fail(KJIT_EINVAL, "%s %s: partition is not 256-byte aligned", op, dir);
    if (bytes < need)
        return kjit__fail(KJIT_EINVAL, "%s %s: partition_bytes %zu, %zu needed (kjit_adaln_partition_bytes)", op,
                          dir, bytes, need);
    if (need > UINTPTR_MAX - (uintptr_t)part)
        return kjit__fail(KJIT_EINVAL, "%s %s: partition: %zu bytes from %p run past the end of the address space", op,
                          dir, need, part);
    return KJIT_OK;
}

/* The forward; with a partition buffer (a training forward), the same
 * launch also builds the backward's partition into it, or a one-CTA build
 * launched after a persistent grid runs beside its rows, or (otherwise) the
 * three build launches run before it. */
static int adaln_fwd(kjit_ctx *ctx, int mode, const kjit_adaln_args *a, int train, void *partb, size_t partb_bytes,
                     CUstream stream)
{
    const char *op = modes[mode].name, *dir = train ? "training forward" : "forward";
    kjit__clear_error();
    if (!ctx || !a) return kjit__fail(KJIT_EINVAL, "%s %s: %s is NULL", op, dir, ctx ? "args" : "ctx");
    spans sp;
    int vec, rc = validate(mode, 0, a, &vec, &sp);
    if (rc) return rc;
    kjit_part_plan pl;
    if (train) {
        plan_of(mode, a, &pl);
        if ((rc = train_partition(op, dir, partb, partb_bytes, pl.off_partial))) return rc;
        if (a->n > 0) span_add(&sp, kjit__span_bytes("partition", partb, pl.off_partial, 1)); /* n = 0 writes none */
    }
    char who[64];
    snprintf(who, sizeof who, "%s %s", op, dir);
    if ((rc = kjit__spans_check(who, sp.s, sp.n))) return rc;
    if (a->n == 0) return KJIT_OK;
    int pushed;
    if ((rc = kjit__ctx_enter(ctx, &pushed))) return rc;
    kjit_adaln_fwd_params p = {0};
    if ((rc = kjit__index_prepare(ctx, op, &a->index, a->n, stream, &p.index))) goto out;
    kjit_adaln_config c;
    kjit__tune_config(ctx, mode, a->hidden, a->act_dtype, vec, stream, &c);
    p.x = a->x, p.x_stride = a->x_stride;
    p.res = a->res, p.res_stride = a->res_stride;
    p.y = a->y, p.y_stride = a->y_stride;
    p.w = mode != 2 ? a->weight : NULL;
    p.table = tables(a);
    p.h_out = mode == 3 ? a->h : NULL, p.h_stride = a->h_stride;
    p.out = a->out, p.out_stride = a->out_stride;
    p.n = a->n, p.h = a->hidden, p.eps = a->eps;
    const int tpr = kjit__adaln_tpr(a->hidden, a->act_dtype);
    long long groups = (a->n + c.rpc - 1) / c.rpc;
    const long long persist = (long long)c.grid_per_sm * ctx->sm_count;
    const int persistent = c.grid_per_sm > 0 && groups >= persist;
    if (persistent) groups = persist;
    if (groups > 2147483646LL) groups = 2147483646LL;
    char e[224];
    size_t smem = vec ? kjit__adaln_fwd_smem(mode, a->hidden, a->act_dtype, &c) : 0;
    fwd_expr(e, sizeof e, mode, a->act_dtype, a->param_dtype, a->index.dtype, a->hidden, vec, &c, 0);
    if (train) {
        kjit_partition part;
        CUfunction fn;
        kjit__part_carve(&pl, (CUdeviceptr)(uintptr_t)partb, &part, NULL, NULL);
        const size_t row_bytes = (size_t)a->hidden * kjit_dtype_size(a->act_dtype);
        const unsigned inl = kjit__part_inline_smem(ctx, &part, tpr * c.rpc, row_bytes, smem, persistent);
        const unsigned beside = !inl && persistent && groups >= 2 ? kjit__part_beside_smem(ctx, &part, row_bytes) : 0;
        if (inl) {
            fwd_expr(e, sizeof e, mode, a->act_dtype, a->param_dtype, a->index.dtype, a->hidden, vec, &c, 1);
            p.part = part;
            /* Block 0 builds. A full persistent grid gives it one of its
             * slots (the rows spread over the others: a row's result does
             * not depend on its block) instead of one block more, which
             * would wait for a slot and run its rows after the build. */
            if (!persistent || groups < 2) groups += 1;
            if (inl > smem) smem = inl;
        } else if (beside) {
            /* The rows on one block fewer of the persistent grid; the build
             * launched after them takes the slot left free. Both kernels
             * are readied before either launches. */
            CUfunction build;
            if ((rc = kjit__ctx_kernel_smem(ctx, ADALN_TEMPLATE, op, e, (unsigned)smem, &fn))) goto out;
            if ((rc = kjit__part_beside_load(ctx, op, a->index.dtype, beside, &build))) goto out;
            rc = kjit__launch(ctx, fn, (unsigned)(groups - 1), 1, 1, (unsigned)(tpr * c.rpc), (unsigned)smem, stream,
                              &p, e);
            if (!rc) rc = kjit__part_beside(ctx, build, &part, &p.index, (unsigned)(tpr * c.rpc), beside, stream);
            goto out;
        } else {
            /* Load the forward, with the shared memory its launch asks
             * for, before the build writes anything. */
            if ((rc = kjit__ctx_kernel_smem(ctx, ADALN_TEMPLATE, op, e, (unsigned)smem, &fn))) goto out;
            if ((rc = kjit__part_build(ctx, op, &part, &p.index, a->index.dtype, stream))) goto out;
            rc = kjit__launch(ctx, fn, (unsigned)groups, 1, 1, (unsigned)(tpr * c.rpc), (unsigned)smem, stream, &p, e);
            goto out;
        }
    }
    rc = kjit__run(ctx, ADALN_TEMPLATE, op, e, (unsigned)groups, 1, 1, (unsigned)(tpr * c.rpc), (unsigned)smem, stream,
                   &p);
out:
    kjit__ctx_leave(ctx, pushed);
    return rc;
}

/* The row gradients alone (no parameter gradient asked for): one
 * row-parallel kernel, no partition, no workspace; the bits of the full
 * backward's row gradients. */
static int bwd_rows(kjit_ctx *ctx, int mode, const kjit_adaln_args *a, int vec, CUstream stream)
{
    const char *op = modes[mode].name;
    if (a->n == 0) return KJIT_OK;
    int pushed, rc;
    if ((rc = kjit__ctx_enter(ctx, &pushed))) return rc;
    kjit_adaln_bwd_params p = {0};
    if ((rc = kjit__index_prepare(ctx, op, &a->index, a->n, stream, &p.index))) goto out;
    p.x = a->x, p.x_stride = a->x_stride;
    p.y = a->y, p.y_stride = a->y_stride;
    p.w = mode != 2 ? a->weight : NULL;
    p.table = tables(a);
    p.dout = a->dout, p.dout_stride = a->dout_stride;
    p.dh = mode == 3 ? a->dh : NULL, p.dh_stride = a->dh_stride;
    p.dx = a->dx, p.dx_stride = a->dx_stride;
    p.dy = a->dy, p.dy_stride = a->dy_stride;
    p.n = a->n, p.h = a->hidden, p.eps = a->eps;
    char e[224];
    bwd_dx_expr(e, sizeof e, mode, a->act_dtype, a->param_dtype, a->index.dtype, a->hidden, vec);
    const long long grid = a->n < 2147483647LL ? a->n : 2147483647LL;
    rc = kjit__run(ctx, ADALN_TEMPLATE, op, e, (unsigned)grid, 1, 1, (unsigned)kjit__adaln_tpr(a->hidden, a->act_dtype),
                   0, stream, &p);
out:
    kjit__ctx_leave(ctx, pushed);
    return rc;
}

/* The backward; with a partition buffer (a training backward), the
 * partition a training forward built there (n > 0) is used, not built. */
static int adaln_bwd(kjit_ctx *ctx, int mode, const kjit_adaln_args *a, int train, const void *partb,
                     size_t partb_bytes, void *ws, size_t ws_bytes, CUstream stream)
{
    const char *op = modes[mode].name;
    kjit__clear_error();
    if (!ctx || !a) return kjit__fail(KJIT_EINVAL, "%s backward: %s is NULL", op, ctx ? "args" : "ctx");
    spans sp;
    int vec, rc = validate(mode, 1, a, &vec, &sp);
    if (rc) return rc;
    char who[64];
    snprintf(who, sizeof who, "%s %sbackward", op, train ? "training " : "");
    /* The row gradients alone need no partition: a training backward's
     * buffer is not read, nor checked. */
    if (rows_only(mode, a)) {
        if ((rc = kjit__spans_check(who, sp.s, sp.n))) return rc;
        return bwd_rows(ctx, mode, a, vec, stream);
    }
    const int ng = modes[mode].ng, with_w = mode != 2 && a->dweight;
    kjit_part_plan pl;
    plan_of(mode, a, &pl);
    if (train && (rc = train_partition(op, "training backward", partb, partb_bytes, pl.off_partial))) return rc;
    if ((rc = kjit__workspace_check(op, ws, ws_bytes, pl.bytes, "kjit_adaln_workspace"))) return rc;
    /* A training backward with rows reads the partition and leaves the
     * workspace's first pl.off_partial bytes alone (the partition may be
     * there); otherwise it writes the whole workspace. */
    const int reads_part = train && a->n > 0;
    if (reads_part) span_add(&sp, kjit__span_bytes("partition", partb, pl.off_partial, 0));
    if (ws) {
        const size_t skip = reads_part ? pl.off_partial : 0;
        span_add(&sp, kjit__span_bytes("workspace", (const char *)ws + skip, pl.bytes - skip, 1));
    }
    if ((rc = kjit__spans_check(who, sp.s, sp.n))) return rc;
    int pushed;
    if ((rc = kjit__ctx_enter(ctx, &pushed))) return rc;
    kjit_adaln_bwd_params p = {0};
    CUdeviceptr base;
    /* A bad index (SYNC checking) refuses the call before the tuner, if on,
     * runs on its behalf. */
    if ((rc = kjit__index_prepare(ctx, op, &a->index, a->n, stream, &p.index))) goto out;
    kjit_adaln_config c;
    kjit__tune_config(ctx, mode, a->hidden, a->act_dtype, vec, stream, &c);
    /* Rows too long to stage in this device's shared memory: generic path. */
    const size_t smem =
        vec ? bwd_fast_smem(mode, a->hidden, a->act_dtype, &c, kjit__tune_table_smem_max(ctx->tune)) : 0;
    if (!smem) vec = 0;
    char e[224];
    bwd_expr(e, sizeof e, mode, a->act_dtype, a->param_dtype, a->index.dtype, a->hidden, vec, &c);
    CUfunction fn;
    if ((rc = kjit__ctx_kernel(ctx, ADALN_TEMPLATE, op, e, &fn))) goto out;
    if ((rc = kjit__part_preload(ctx, op, a->index.dtype, a->param_dtype))) goto out;
    if ((rc = kjit__workspace(ctx, ws, pl.bytes, stream, &base))) goto out;
    kjit__part_carve(&pl, base, &p.part, &p.partial, &p.partial_w);
    /* A training backward reads the forward's partition (n > 0). With no
     * rows it builds the empty one in the workspace, as the plain backward
     * does: the caller's partition is written only where the caller placed
     * it at the workspace's head, and a forward of no rows left nothing in
     * it to keep. */
    const int built = train && a->n > 0;
    if (built) kjit__part_carve(&pl, (CUdeviceptr)(uintptr_t)partb, &p.part, NULL, NULL);
    /* Zero rows: the gradients of the tables and weight are zero. */
    if (a->n == 0) pl.n = p.part.n = 0;
    if (!built && (rc = kjit__part_build(ctx, op, &p.part, &p.index, a->index.dtype, stream))) goto out;
    p.x = a->x, p.x_stride = a->x_stride;
    p.y = a->y, p.y_stride = a->y_stride;
    p.w = mode != 2 ? a->weight : NULL;
    p.table = tables(a);
    p.index.err = NULL;
    p.dout = a->dout, p.dout_stride = a->dout_stride;
    p.dh = mode == 3 ? a->dh : NULL, p.dh_stride = a->dh_stride;
    p.dx = a->dx, p.dx_stride = a->dx_stride;
    p.dy = a->dy, p.dy_stride = a->dy_stride;
    p.dw = with_w ? a->dweight : NULL;
    p.dtable.ptr[0] = a->dshift, p.dtable.stride[0] = a->dshift_stride;
    p.dtable.ptr[1] = a->dscale, p.dtable.stride[1] = a->dscale_stride;
    p.dtable.ptr[2] = a->dgate, p.dtable.stride[2] = a->dgate_stride;
    if (!with_w) p.partial_w = NULL;
    p.n = a->n, p.h = a->hidden, p.eps = a->eps;
    const int tpr = kjit__adaln_tpr(a->hidden, a->act_dtype);
    rc = kjit__run(ctx, ADALN_TEMPLATE, op, e, (unsigned)p.part.chunks, 1, 1, (unsigned)tpr, (unsigned)smem, stream, &p);
    if (rc) goto out;
    void *outs[3];
    long long strides[3];
    int k = 0;
    if (mode != 2) {
        outs[k] = a->dshift, strides[k++] = a->dshift_stride;
        outs[k] = a->dscale, strides[k++] = a->dscale_stride;
    }
    if (mode != 1) outs[k] = a->dgate, strides[k++] = a->dgate_stride;
    rc = kjit__part_finish(ctx, op, &p.part, p.partial, ng, a->hidden, outs, strides, p.partial_w,
                           with_w ? a->dweight : NULL, a->param_dtype, stream);
out:
    kjit__ctx_leave(ctx, pushed);
    return rc;
}

int kjit_norm_modulate_fwd(kjit_ctx *ctx, const kjit_adaln_args *a, CUstream s)
{
    return adaln_fwd(ctx, 1, a, 0, NULL, 0, s);
}
int kjit_gated_residual_fwd(kjit_ctx *ctx, const kjit_adaln_args *a, CUstream s)
{
    return adaln_fwd(ctx, 2, a, 0, NULL, 0, s);
}
int kjit_gated_residual_norm_modulate_fwd(kjit_ctx *ctx, const kjit_adaln_args *a, CUstream s)
{
    return adaln_fwd(ctx, 3, a, 0, NULL, 0, s);
}
int kjit_norm_modulate_bwd(kjit_ctx *ctx, const kjit_adaln_args *a, void *ws, size_t bytes, CUstream s)
{
    return adaln_bwd(ctx, 1, a, 0, NULL, 0, ws, bytes, s);
}
int kjit_gated_residual_bwd(kjit_ctx *ctx, const kjit_adaln_args *a, void *ws, size_t bytes, CUstream s)
{
    return adaln_bwd(ctx, 2, a, 0, NULL, 0, ws, bytes, s);
}
int kjit_gated_residual_norm_modulate_bwd(kjit_ctx *ctx, const kjit_adaln_args *a, void *ws, size_t bytes, CUstream s)
{
    return adaln_bwd(ctx, 3, a, 0, NULL, 0, ws, bytes, s);
}

static int op_ok(const char *fn, kjit_adaln_op op)
{
    if (op < KJIT_NORM_MODULATE || op > KJIT_GATED_RESIDUAL_NORM_MODULATE)
        return kjit__fail(KJIT_EINVAL, "%s: op %d is not a kjit_adaln_op", fn, (int)op);
    return KJIT_OK;
}

int kjit_adaln_train_fwd(kjit_ctx *ctx, kjit_adaln_op op, const kjit_adaln_args *a, void *partition,
                         size_t partition_bytes, CUstream s)
{
    kjit__clear_error();
    int rc = op_ok("kjit_adaln_train_fwd", op);
    return rc ? rc : adaln_fwd(ctx, (int)op, a, 1, partition, partition_bytes, s);
}

int kjit_adaln_train_bwd(kjit_ctx *ctx, kjit_adaln_op op, const kjit_adaln_args *a, const void *partition,
                         size_t partition_bytes, void *workspace, size_t workspace_bytes, CUstream s)
{
    kjit__clear_error();
    int rc = op_ok("kjit_adaln_train_bwd", op);
    return rc ? rc : adaln_bwd(ctx, (int)op, a, 1, partition, partition_bytes, workspace, workspace_bytes, s);
}

/* The two size queries: range checks, then the plan of those shapes. */
static int sizes_plan(const char *fn, kjit_adaln_op op, int64_t n, int hidden, int64_t rows, const size_t *bytes,
                      kjit_part_plan *pl)
{
    kjit__clear_error();
    int rc = op_ok(fn, op);
    if (rc) return rc;
    if (!bytes) return kjit__fail(KJIT_EINVAL, "%s: bytes is NULL", fn);
    if ((rc = kjit__check_sizes(fn, n, hidden, rows))) return rc;
    kjit_adaln_args a = {0};
    a.n = n, a.hidden = hidden, a.index.rows = rows;
    plan_of((int)op, &a, pl);
    return KJIT_OK;
}

int kjit_adaln_partition_bytes(kjit_adaln_op op, int64_t n, int hidden, int64_t rows, size_t *bytes)
{
    kjit_part_plan pl;
    int rc = sizes_plan("kjit_adaln_partition_bytes", op, n, hidden, rows, bytes, &pl);
    if (!rc) *bytes = pl.off_partial;
    return rc;
}

int kjit_adaln_workspace(kjit_adaln_op op, int64_t n, int hidden, int64_t rows, size_t *bytes)
{
    kjit_part_plan pl;
    int rc = sizes_plan("kjit_adaln_workspace", op, n, hidden, rows, bytes, &pl);
    if (!rc) *bytes = pl.bytes;
    return rc;
}

void kjit__adaln_exprs(int mode, int h, kjit_dtype act, const kjit_adaln_config *c, char *fwd, char *bwd, size_t len)
{
    fwd_expr(fwd, len, mode, act, param_for(act), KJIT_I32, h, 1, c, 0);
    bwd_expr(bwd, len, mode, act, param_for(act), KJIT_I32, h, 1, c);
}
