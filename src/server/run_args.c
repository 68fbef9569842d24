#include "server/run_args.h"

#include <stdio.h>
#include <string.h>

/* What a buffer holds, which fixes its dtype and how many rows it spans. */
enum {
    ACT,   /* n rows of hidden, dtype */
    PARAM, /* R rows of hidden, param_dtype */
    VEC,   /* hidden elements, param_dtype */
    INDEX, /* n elements, index_dtype */
    TIME   /* n elements, fp32 */
};

/* A buffer of an op family: where its pointer and row stride go in the
 * family's argument block. */
typedef struct slot {
    const char *name;
    int kind;
    size_t ptr, stride;
} slot_desc;

enum { ADALN, GATHER, SINUSOID };


#define S2(blk, nm, kind, f) {nm, kind, offsetof(blk, f), offsetof(blk, f##_stride)}
#define S1(blk, nm, kind, f) {nm, kind, offsetof(blk, f), 0}

enum { X, RES, Y, W, SHIFT, SCALE, GATE, OUT, H, DOUT, DH, DX, DY, DW, DSHIFT, DSCALE, DGATE, AINDEX };
static const slot_desc adaln_slots[] = {
    S2(kjit_adaln_args, "x", ACT, x),          S2(kjit_adaln_args, "res", ACT, res),
    S2(kjit_adaln_args, "y", ACT, y),          S1(kjit_adaln_args, "weight", VEC, weight),
    S2(kjit_adaln_args, "shift", PARAM, shift), S2(kjit_adaln_args, "scale", PARAM, scale),
    S2(kjit_adaln_args, "gate", PARAM, gate),  S2(kjit_adaln_args, "out", ACT, out),
    S2(kjit_adaln_args, "h", ACT, h),          S2(kjit_adaln_args, "dout", ACT, dout),
    S2(kjit_adaln_args, "dh", ACT, dh),        S2(kjit_adaln_args, "dx", ACT, dx),
    S2(kjit_adaln_args, "dy", ACT, dy),        S1(kjit_adaln_args, "dweight", VEC, dweight),
    S2(kjit_adaln_args, "dshift", PARAM, dshift), S2(kjit_adaln_args, "dscale", PARAM, dscale),
    S2(kjit_adaln_args, "dgate", PARAM, dgate), S1(kjit_adaln_args, "index", INDEX, index.ptr),
};

/* adaln_row_gather: table<k> and out<k> forward, dout<k> and dtable<k>
 * backward, k = 0..7, then the index. */
#define G(nm, kind, f, k) \
    {nm #k, kind, offsetof(kjit_row_gather_args, f[k]), offsetof(kjit_row_gather_args, f##_stride[k])}
#define G8(nm, kind, f) G(nm, kind, f, 0), G(nm, kind, f, 1), G(nm, kind, f, 2), G(nm, kind, f, 3), \
                        G(nm, kind, f, 4), G(nm, kind, f, 5), G(nm, kind, f, 6), G(nm, kind, f, 7)
enum { TABLE0 = 0, GOUT0 = 8, GDOUT0 = 16, DTABLE0 = 24, GINDEX = 32 };
static const slot_desc gather_slots[] = {
    G8("table", PARAM, table), G8("out", ACT, out), G8("dout", ACT, dout), G8("dtable", PARAM, dtable),
    S1(kjit_row_gather_args, "index", INDEX, index.ptr),
};

static const slot_desc sinusoid_slots[] = {
    S1(kjit_run_sinusoid_args, "t", TIME, t),
    S2(kjit_run_sinusoid_args, "out", ACT, out),
};

#define B(s) (1ull << (s))
#define EIGHT(first) (0xffull << (first))

struct kjit_run_op {
    const char *name;
    int family;
    int mode;                  /* adaln: 1 norm_modulate, 2 gated_residual, 3 fused */
    const slot_desc *slots;
    int n_slots;
    uint64_t need[2], opt[2];  /* [fwd, bwd]: the buffers it needs and those it may take */
    unsigned fields;
};

/* Mirrors the operands each op reads and writes (src/ops/adaln.c). The
 * parameter gradients are optional here: with none of them the backward
 * computes the row gradients alone (gated_residual and the fused op then
 * read no y); with some but not all, or y left out while they are given,
 * the library refuses the call naming the missing one (bad_request on the
 * GPU lane). */
static const kjit_run_op ops[] = {
    {"norm_modulate", ADALN, 1, adaln_slots, 18,
     {B(X) | B(SHIFT) | B(SCALE) | B(OUT) | B(AINDEX), B(X) | B(SCALE) | B(DOUT) | B(DX) | B(AINDEX)},
     {B(W), B(W) | B(DW) | B(DSHIFT) | B(DSCALE)},
     KJIT_RUN_ROWS | KJIT_RUN_PARAM_DTYPE | KJIT_RUN_INDEX_DTYPE | KJIT_RUN_EPS},
    {"gated_residual", ADALN, 2, adaln_slots, 18,
     {B(RES) | B(Y) | B(GATE) | B(OUT) | B(AINDEX), B(GATE) | B(DOUT) | B(DY) | B(AINDEX)},
     {0, B(DX) | B(Y) | B(DGATE)},
     KJIT_RUN_ROWS | KJIT_RUN_PARAM_DTYPE | KJIT_RUN_INDEX_DTYPE},
    {"gated_residual_norm_modulate", ADALN, 3, adaln_slots, 18,
     {B(RES) | B(Y) | B(GATE) | B(SHIFT) | B(SCALE) | B(OUT) | B(H) | B(AINDEX),
      B(X) | B(GATE) | B(SCALE) | B(DOUT) | B(DX) | B(DY) | B(AINDEX)},
     {B(W), B(W) | B(DW) | B(DH) | B(Y) | B(DGATE) | B(DSHIFT) | B(DSCALE)},
     KJIT_RUN_ROWS | KJIT_RUN_PARAM_DTYPE | KJIT_RUN_INDEX_DTYPE | KJIT_RUN_EPS},
    {"adaln_row_gather", GATHER, 0, gather_slots, 33,
     {B(GINDEX), B(GINDEX)},
     {EIGHT(TABLE0) | EIGHT(GOUT0), EIGHT(GDOUT0) | EIGHT(DTABLE0)},
     KJIT_RUN_ROWS | KJIT_RUN_INDEX_DTYPE},
    {"timestep_sinusoid", SINUSOID, 0, sinusoid_slots, 2, {B(0) | B(1), 0}, {0, 0}, KJIT_RUN_SINUSOID},
};

const kjit_run_op *kjit__run_op(const char *name)
{
    for (size_t i = 0; name && i < sizeof ops / sizeof ops[0]; ++i)
        if (!strcmp(ops[i].name, name)) return &ops[i];
    return NULL;
}

const char *kjit__run_op_name(const kjit_run_op *op) { return op->name; }
int kjit__run_op_has_bwd(const kjit_run_op *op) { return op->need[1] != 0; }
unsigned kjit__run_op_fields(const kjit_run_op *op) { return op->fields; }

int kjit__run_slot(const kjit_run_op *op, int bwd, const char *name)
{
    const uint64_t takes = op->need[bwd] | op->opt[bwd];
    for (int s = 0; s < op->n_slots; ++s)
        if ((takes & B(s)) && !strcmp(op->slots[s].name, name)) return s;
    return -1;
}

const char *kjit__run_slot_name(const kjit_run_op *op, int slot) { return op->slots[slot].name; }

int kjit__run_slot_2d(const kjit_run_op *op, int slot)
{
    const int k = op->slots[slot].kind;
    return k == ACT || k == PARAM;
}

static void append(char *buf, size_t len, const char *sep, const char *s)
{
    size_t at = strlen(buf);
    if (at < len) snprintf(buf + at, len - at, "%s%s", at ? sep : "", s);
}

void kjit__run_slot_list(const kjit_run_op *op, int bwd, char *buf, size_t len)
{
    buf[0] = '\0';
    if (op->family == GATHER) {
        snprintf(buf, len, bwd ? "dout<k> and dtable<k> for k = 0..K-1 (K = 1..8), index"
                               : "table<k> and out<k> for k = 0..K-1 (K = 1..8), index");
        return;
    }
    for (int s = 0; s < op->n_slots; ++s)
        if (op->need[bwd] & B(s)) append(buf, len, ", ", op->slots[s].name);
    for (int s = 0, first = 1; s < op->n_slots; ++s)
        if (op->opt[bwd] & B(s)) {
            append(buf, len, first ? "; optional: " : ", ", op->slots[s].name);
            first = 0;
        }
}

static uint64_t given(const kjit_run_req *r)
{
    uint64_t m = 0;
    for (int i = 0; i < r->n_buffers; ++i) m |= B(r->buf[i].slot);
    return m;
}

int kjit__run_complete(const kjit_run_req *r, char *why, size_t len)
{
    const kjit_run_op *op = r->op;
    uint64_t have = given(r), need = op->need[r->bwd];
    if (op->family == GATHER) {
        /* K pairs: table<k>/out<k> (dout<k>/dtable<k>) for k = 0..K-1. */
        const int a = r->bwd ? GDOUT0 : TABLE0, b = r->bwd ? DTABLE0 : GOUT0;
        int k = 8;
        while (k > 0 && !(have & (B(a + k - 1) | B(b + k - 1)))) --k;
        need |= ((B(k) - 1) << a | (B(k) - 1) << b) | B(a) | B(b);
    }
    for (int s = 0; s < op->n_slots; ++s)
        if ((need & B(s)) && !(have & B(s))) {
            char list[256];
            kjit__run_slot_list(op, r->bwd, list, sizeof list);
            snprintf(why, len, "buffer '%s' is missing (%s %s takes %s)", op->slots[s].name, op->name,
                     r->bwd ? "bwd" : "fwd", list);
            return -1;
        }
    return 0;
}

int kjit__run_extent(const kjit_run_req *r, int i, uint64_t *bytes)
{
    const kjit_run_buffer *b = &r->buf[i];
    const int kind = r->op->slots[b->slot].kind;
    kjit_dtype dt = kind == ACT ? r->dtype : kind == INDEX ? r->index_dtype : kind == TIME ? KJIT_F32 : r->param_dtype;
    uint64_t elems = kind == VEC ? (uint64_t)r->hidden : (uint64_t)r->n;
    if (kind == ACT || kind == PARAM) {
        const uint64_t rows = kind == ACT ? (uint64_t)r->n : (uint64_t)r->rows;
        if (!rows) elems = 0;
        else if (__builtin_mul_overflow(rows - 1, (uint64_t)b->stride, &elems) ||
                 __builtin_add_overflow(elems, (uint64_t)r->hidden, &elems))
            return -1;
    }
    return __builtin_mul_overflow(elems, (uint64_t)kjit_dtype_size(dt), bytes) ? -1 : 0;
}

void kjit__run_call_make(const kjit_run_req *r, const uint64_t *ptr, kjit_run_call *c)
{
    const kjit_run_op *op = r->op;
    memset(c, 0, sizeof *c);
    c->op = op;
    c->bwd = r->bwd;
    for (int i = 0; i < r->n_buffers; ++i) {
        const slot_desc *s = &op->slots[r->buf[i].slot];
        const void *p = (const void *)(uintptr_t)ptr[i];
        memcpy((char *)&c->u + s->ptr, &p, sizeof p);
        if (kjit__run_slot_2d(op, r->buf[i].slot)) memcpy((char *)&c->u + s->stride, &r->buf[i].stride, sizeof(int64_t));
    }
    if (op->family == SINUSOID) {
        kjit_run_sinusoid_args *s = &c->u.s;
        s->n = r->n;
        s->d = r->hidden;
        s->dtype = r->dtype;
        s->flip_sin_to_cos = r->sinusoid.flip_sin_to_cos;
        s->downscale_freq_shift = r->sinusoid.downscale_freq_shift;
        s->scale = r->sinusoid.scale;
        s->max_period = r->sinusoid.max_period;
    } else if (op->family == GATHER) {
        kjit_row_gather_args *g = &c->u.g;
        const uint64_t have = given(r) >> (r->bwd ? GDOUT0 : TABLE0);
        g->n = r->n;
        g->hidden = r->hidden;
        while (g->num_tables < KJIT_MAX_TABLES && (have & B(g->num_tables))) g->num_tables++;
        g->dtype = r->dtype;
        g->index.dtype = r->index_dtype;
        g->index.rows = r->rows;
    } else {
        kjit_adaln_args *a = &c->u.a;
        a->n = r->n;
        a->hidden = r->hidden;
        a->eps = r->eps;
        a->act_dtype = r->dtype;
        a->param_dtype = r->param_dtype;
        a->index.dtype = r->index_dtype;
        a->index.rows = r->rows;
    }
}

int kjit__run_call_invoke(kjit_ctx *ctx, const kjit_run_call *c, CUstream stream)
{
    const kjit_run_op *op = c->op;
    if (op->family == SINUSOID) {
        const kjit_run_sinusoid_args *s = &c->u.s;
        kjit_sinusoid_opts o = {s->flip_sin_to_cos, s->downscale_freq_shift, s->scale, s->max_period};
        return kjit_timestep_sinusoid(ctx, s->t, s->n, s->d, s->out, s->out_stride, s->dtype, &o, stream);
    }
    if (op->family == GATHER) {
        kjit_row_gather_args g = c->u.g;
        return c->bwd ? kjit_adaln_row_gather_bwd(ctx, &g, NULL, 0, stream) : kjit_adaln_row_gather_fwd(ctx, &g, stream);
    }
    kjit_adaln_args a = c->u.a;
    switch (op->mode * 2 + c->bwd) {
    case 2: return kjit_norm_modulate_fwd(ctx, &a, stream);
    case 3: return kjit_norm_modulate_bwd(ctx, &a, NULL, 0, stream);
    case 4: return kjit_gated_residual_fwd(ctx, &a, stream);
    case 5: return kjit_gated_residual_bwd(ctx, &a, NULL, 0, stream);
    case 6: return kjit_gated_residual_norm_modulate_fwd(ctx, &a, stream);
    default: return kjit_gated_residual_norm_modulate_bwd(ctx, &a, NULL, 0, stream);
    }
}
