/* 64-bit offsets: every op with rows, table rows and outputs that lie more
 * than 2^31 elements (and 2^32 bytes) past their base pointers.
 *
 * All the tensors of a problem live in one buffer of n rows, each tensor a
 * slot of columns with the buffer's row stride S (table slots at the
 * buffer's rows j * q, so the table stride is q * S). With the far layout
 * (S = 2^20 + 8 elements) the last rows and the last table row sit past
 * 2^31 elements; with the near layout (S = the slots' width, q = 1) the
 * same problem fits in a few MB. The same inputs go to both; every op runs
 * in both (forwards, backwards, the training pair, the row gradients alone,
 * the row gather, the sinusoid), and then:
 *   - both layouts' outputs, and the gap columns after every slot, are
 *     bitwise equal (the ops' bits depend on the shape only);
 *   - every output element was written (the buffer is poisoned first) and
 *     no gap column was;
 *   - the far layout's outputs match the fp64 references (tests/ref);
 *   - the training pair and the row-only backward give the plain calls' bits.
 * Shapes: bf16 on the vector fast path (hidden 264, int32 index) and fp32
 * on the scalar path (hidden 100, int64 index); the far buffers take 4.4
 * and 8.8 GB of device memory, one at a time (too little free memory
 * skips the test). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "ref.h"
#include "test_util.h"

static const kjit_cu_api *cu;

/* Slots (one enum for activation and table slots; is_tab marks the latter). */
enum {
    X, RES, Y, DOUT, DH, SHIFT, SCALE, GATE,                          /* inputs */
    NM_OUT, NM_DX, NM_DSHIFT, NM_DSCALE,                              /* norm_modulate */
    NMT_OUT, NMT_DX, NMT_DSHIFT, NMT_DSCALE, NMR_DX,                  /* its training pair, rows only */
    GR_OUT, GR_DX, GR_DY, GR_DGATE,                                   /* gated_residual */
    GRT_OUT, GRT_DX, GRT_DY, GRT_DGATE,                               /* its training pair */
    F_H, F_OUT, F_DX, F_DY, F_DGATE, F_DSHIFT, F_DSCALE,              /* fused */
    FT_H, FT_OUT, FT_DX, FT_DY, FT_DGATE, FT_DSHIFT, FT_DSCALE,       /* its training pair */
    FR_DX, FR_DY,                                                     /* its rows only */
    G_OUT0, G_OUT1, G_OUT2, G_DT0, G_DT1, G_DT2,                      /* row gather, K = 3 */
    SIN_OUT,                                                          /* sinusoid, d = hidden */
    NSLOT
};
static int is_tab(int s)
{
    switch (s) {
    case SHIFT: case SCALE: case GATE: case NM_DSHIFT: case NM_DSCALE: case NMT_DSHIFT: case NMT_DSCALE:
    case GR_DGATE: case GRT_DGATE: case F_DGATE: case F_DSHIFT: case F_DSCALE: case FT_DGATE: case FT_DSHIFT:
    case FT_DSCALE: case G_DT0: case G_DT1: case G_DT2: return 1;
    default: return 0;
    }
}
static int is_input(int s) { return s <= GATE; }
enum { NDW = 4 }; /* dweight: norm_modulate plain / training, fused plain / training */

typedef struct shape {
    int64_t n, r;
    int h;
    kjit_dtype dt, idx; /* activations and parameters: dt */
} shape;

/* The problem's inputs on the host (quantized through dt), shared by both layouts. */
typedef struct inputs {
    double *a[NSLOT]; /* input slots: n * h (tables r * h), dense */
    double *w;        /* weight [h] */
    int64_t *idx;     /* [n] */
    float *t;         /* sinusoid times [n] */
} inputs;

/* What one layout gave: each slot's rows (hp columns: h and the gap) as
 * raw bytes, in slot order, and the dweights. */
typedef struct image {
    unsigned char *slot[NSLOT];
    unsigned char *dw; /* NDW * h */
} image;

static int hp_of(int h) { return (h + 7) / 8 * 8 + 8; }
static int64_t rows_of(const shape *s, int slot) { return is_tab(slot) ? s->r : s->n; }

/* One layout: runs everything and returns its image; 0 when the buffer
 * could not be allocated (out of memory). */
static int run_layout(kjit_ctx *ctx, CUstream stream, const shape *s, const inputs *in, int64_t S, int64_t q,
                      image *img)
{
    const int h = s->h, hp = hp_of(h);
    const int64_t n = s->n, r = s->r, width = (int64_t)NSLOT * hp;
    const size_t es = kjit_dtype_size(s->dt), big = (size_t)((n - 1) * S + width) * es;
    CUdeviceptr B = 0;
    CUresult rc = cu->MemAlloc(&B, big);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) return 0;
    CU_CHECK(rc);
    gpu_poison(B, big);
    const CUdeviceptr W = gpu_alloc((size_t)h * es), DW = gpu_alloc((size_t)NDW * h * es);
    const CUdeviceptr T = gpu_alloc((size_t)n * 4), I = gpu_alloc((size_t)n * kjit_dtype_size(s->idx));
    gpu_poison(DW, (size_t)NDW * h * es);
    gpu_sync();

    /* Inputs, row by row: buffer row i holds its activation slots and, when
     * i = j * q with j < r, table row j; the other columns keep the poison. */
    unsigned char *row = malloc((size_t)width * es);
    double *tmp = malloc(sizeof(double) * (size_t)h);
    for (int64_t i = 0; i < n; ++i) {
        memset(row, 0xFF, (size_t)width * es);
        int any = 0;
        for (int sl = 0; sl <= GATE; ++sl) {
            int64_t src = i;
            if (is_tab(sl)) {
                if (i % q || i / q >= r) continue;
                src = i / q;
            }
            memcpy(tmp, in->a[sl] + src * h, sizeof(double) * (size_t)h);
            host_from_double(s->dt, tmp, row + (size_t)sl * hp * es, (size_t)h);
            any = 1;
        }
        if (any) gpu_upload(B + (CUdeviceptr)((size_t)i * S * es), row, (size_t)width * es);
    }
    void *wh = malloc((size_t)h * es);
    host_from_double(s->dt, in->w, wh, (size_t)h);
    gpu_upload(W, wh, (size_t)h * es);
    gpu_upload(T, in->t, (size_t)n * 4);
    void *ih = malloc((size_t)n * kjit_dtype_size(s->idx));
    for (int64_t i = 0; i < n; ++i) {
        if (s->idx == KJIT_I32) ((int32_t *)ih)[i] = (int32_t)in->idx[i];
        else ((int64_t *)ih)[i] = in->idx[i];
    }
    gpu_upload(I, ih, (size_t)n * kjit_dtype_size(s->idx));
    gpu_sync(); /* the uploads, before the non-blocking stream's kernels */

#define P(slot) ((void *)(uintptr_t)(B + (CUdeviceptr)((size_t)(slot) * hp * es)))
#define PW(k) ((void *)(uintptr_t)(DW + (CUdeviceptr)((size_t)(k) * h * es)))
    const int64_t TS = q * S; /* table stride */
    kjit_adaln_args base;
    memset(&base, 0, sizeof base);
    base.n = n, base.hidden = h, base.eps = 1e-6f, base.act_dtype = s->dt, base.param_dtype = s->dt;
    base.index.ptr = (void *)(uintptr_t)I, base.index.dtype = s->idx, base.index.rows = r;
    base.x_stride = base.res_stride = base.y_stride = base.out_stride = base.h_stride = S;
    base.dout_stride = base.dh_stride = base.dx_stride = base.dy_stride = S;
    base.shift_stride = base.scale_stride = base.gate_stride = TS;
    base.dshift_stride = base.dscale_stride = base.dgate_stride = TS;
    base.shift = P(SHIFT), base.scale = P(SCALE), base.gate = P(GATE), base.weight = (void *)(uintptr_t)W;
    base.dout = P(DOUT);
    size_t partb = 0;
    CHECK_STATUS(kjit_adaln_partition_bytes(KJIT_GATED_RESIDUAL_NORM_MODULATE, n, h, r, &partb), KJIT_OK);
    size_t pb1 = 0, pb2 = 0;
    CHECK_STATUS(kjit_adaln_partition_bytes(KJIT_NORM_MODULATE, n, h, r, &pb1), KJIT_OK);
    CHECK_STATUS(kjit_adaln_partition_bytes(KJIT_GATED_RESIDUAL, n, h, r, &pb2), KJIT_OK);
    if (pb1 > partb) partb = pb1;
    if (pb2 > partb) partb = pb2;
    const CUdeviceptr part = gpu_alloc(partb);
    void *pp = (void *)(uintptr_t)part;

    /* norm_modulate: plain, training pair, rows only. */
    kjit_adaln_args a = base;
    a.x = P(X), a.out = P(NM_OUT), a.dx = P(NM_DX), a.dshift = P(NM_DSHIFT), a.dscale = P(NM_DSCALE), a.dweight = PW(0);
    CHECK_STATUS(kjit_norm_modulate_fwd(ctx, &a, stream), KJIT_OK);
    CHECK_STATUS(kjit_norm_modulate_bwd(ctx, &a, NULL, 0, stream), KJIT_OK);
    a.out = P(NMT_OUT), a.dx = P(NMT_DX), a.dshift = P(NMT_DSHIFT), a.dscale = P(NMT_DSCALE), a.dweight = PW(1);
    CHECK_STATUS(kjit_adaln_train_fwd(ctx, KJIT_NORM_MODULATE, &a, pp, partb, stream), KJIT_OK);
    CHECK_STATUS(kjit_adaln_train_bwd(ctx, KJIT_NORM_MODULATE, &a, pp, partb, NULL, 0, stream), KJIT_OK);
    a.dx = P(NMR_DX), a.dshift = a.dscale = a.dweight = NULL;
    CHECK_STATUS(kjit_norm_modulate_bwd(ctx, &a, NULL, 0, stream), KJIT_OK);

    /* gated_residual: plain, training pair. */
    a = base;
    a.weight = NULL, a.res = P(RES), a.y = P(Y);
    a.out = P(GR_OUT), a.dx = P(GR_DX), a.dy = P(GR_DY), a.dgate = P(GR_DGATE);
    CHECK_STATUS(kjit_gated_residual_fwd(ctx, &a, stream), KJIT_OK);
    CHECK_STATUS(kjit_gated_residual_bwd(ctx, &a, NULL, 0, stream), KJIT_OK);
    a.out = P(GRT_OUT), a.dx = P(GRT_DX), a.dy = P(GRT_DY), a.dgate = P(GRT_DGATE);
    CHECK_STATUS(kjit_adaln_train_fwd(ctx, KJIT_GATED_RESIDUAL, &a, pp, partb, stream), KJIT_OK);
    CHECK_STATUS(kjit_adaln_train_bwd(ctx, KJIT_GATED_RESIDUAL, &a, pp, partb, NULL, 0, stream), KJIT_OK);

    /* The fused op: plain, training pair, rows only (its backward reads the
     * h its forward wrote, as x). */
    a = base;
    a.res = P(RES), a.y = P(Y), a.dh = P(DH);
    a.h = P(F_H), a.out = P(F_OUT), a.x = P(F_H), a.dx = P(F_DX), a.dy = P(F_DY);
    a.dgate = P(F_DGATE), a.dshift = P(F_DSHIFT), a.dscale = P(F_DSCALE), a.dweight = PW(2);
    CHECK_STATUS(kjit_gated_residual_norm_modulate_fwd(ctx, &a, stream), KJIT_OK);
    CHECK_STATUS(kjit_gated_residual_norm_modulate_bwd(ctx, &a, NULL, 0, stream), KJIT_OK);
    a.dx = P(FR_DX), a.dy = P(FR_DY), a.dgate = a.dshift = a.dscale = a.dweight = NULL;
    CHECK_STATUS(kjit_gated_residual_norm_modulate_bwd(ctx, &a, NULL, 0, stream), KJIT_OK);
    a.h = P(FT_H), a.out = P(FT_OUT), a.x = P(FT_H), a.dx = P(FT_DX), a.dy = P(FT_DY);
    a.dgate = P(FT_DGATE), a.dshift = P(FT_DSHIFT), a.dscale = P(FT_DSCALE), a.dweight = PW(3);
    CHECK_STATUS(kjit_adaln_train_fwd(ctx, KJIT_GATED_RESIDUAL_NORM_MODULATE, &a, pp, partb, stream), KJIT_OK);
    CHECK_STATUS(kjit_adaln_train_bwd(ctx, KJIT_GATED_RESIDUAL_NORM_MODULATE, &a, pp, partb, NULL, 0, stream),
                 KJIT_OK);

    /* adaln_row_gather of the three tables, its douts x, y and dout. */
    kjit_row_gather_args g;
    memset(&g, 0, sizeof g);
    g.n = n, g.hidden = h, g.num_tables = 3, g.dtype = s->dt, g.index = base.index;
    const int tin[3] = {SHIFT, SCALE, GATE}, gd[3] = {X, Y, DOUT};
    for (int k = 0; k < 3; ++k) {
        g.table[k] = P(tin[k]), g.table_stride[k] = TS;
        g.out[k] = P(G_OUT0 + k), g.out_stride[k] = S;
        g.dout[k] = P(gd[k]), g.dout_stride[k] = S;
        g.dtable[k] = P(G_DT0 + k), g.dtable_stride[k] = TS;
    }
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &g, stream), KJIT_OK);
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &g, NULL, 0, stream), KJIT_OK);

    /* The sinusoid, d = h, into its slot. */
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, (const float *)(uintptr_t)T, n, h, P(SIN_OUT), S, s->dt, NULL, stream),
                 KJIT_OK);
    CU_CHECK(cu->StreamSynchronize(stream));
#undef P
#undef PW

    /* The image: each row's slots, then scattered into per-slot arrays. */
    const size_t sb = (size_t)hp * es;
    for (int sl = 0; sl < NSLOT; ++sl) img->slot[sl] = malloc((size_t)rows_of(s, sl) * sb);
    for (int64_t i = 0; i < n; ++i) {
        gpu_download(row, B + (CUdeviceptr)((size_t)i * S * es), (size_t)width * es);
        for (int sl = 0; sl < NSLOT; ++sl) {
            if (!is_tab(sl)) memcpy(img->slot[sl] + (size_t)i * sb, row + (size_t)sl * sb, sb);
            else if (i % q == 0 && i / q < r) memcpy(img->slot[sl] + (size_t)(i / q) * sb, row + (size_t)sl * sb, sb);
        }
    }
    img->dw = malloc((size_t)NDW * h * es);
    gpu_download(img->dw, DW, (size_t)NDW * h * es);
    free(row), free(tmp), free(wh), free(ih);
    const CUdeviceptr all[] = {B, W, DW, T, I, part};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) gpu_free(all[i]);
    return 1;
}

static void image_free(image *img)
{
    for (int sl = 0; sl < NSLOT; ++sl) free(img->slot[sl]);
    free(img->dw);
}

/* Slot sl of an image as dense doubles (its h columns). */
static double *slot_values(const shape *s, const image *img, int sl)
{
    const int h = s->h, hp = hp_of(h);
    const int64_t rows = rows_of(s, sl);
    const size_t es = kjit_dtype_size(s->dt);
    double *d = malloc(sizeof(double) * (size_t)(rows * h));
    for (int64_t i = 0; i < rows; ++i)
        host_to_double(s->dt, img->slot[sl] + (size_t)i * hp * es, d + i * h, (size_t)h);
    return d;
}

static void expect_close(const shape *s, const char *what, const double *got, const double *ref, size_t n, double tol)
{
    const double e = ref_rel_err(got, ref, n);
    if (!(e <= tol)) {
        fprintf(stderr, "%s h %d: %s rel err %g > %g\n", kjit_dtype_name(s->dt), s->h, what, e, tol);
        kjit_test_failures++;
    }
}

static void expect_slot(const shape *s, const image *img, int sl, const char *what, const double *ref, double tol)
{
    double *got = slot_values(s, img, sl);
    expect_close(s, what, got, ref, (size_t)(rows_of(s, sl) * s->h), tol);
    free(got);
}

/* Two slots (or dweights) bitwise equal: the training pair's and the row-only
 * backward's bits against the plain calls'. */
static void expect_same(const shape *s, const image *img, int a, int b, const char *what)
{
    const size_t bytes = (size_t)rows_of(s, a) * hp_of(s->h) * kjit_dtype_size(s->dt);
    if (memcmp(img->slot[a], img->slot[b], bytes)) {
        fprintf(stderr, "%s h %d: %s differ\n", kjit_dtype_name(s->dt), s->h, what);
        kjit_test_failures++;
    }
}

static void check_refs(const shape *s, const inputs *in, const image *img)
{
    const int h = s->h;
    const int64_t n = s->n, r = s->r;
    const size_t nh = (size_t)(n * h), rh = (size_t)(r * h);
    const double ta = s->dt == KJIT_F32 ? 1e-6 : 4e-3;
    double *o = malloc(sizeof(double) * nh), *dx = malloc(sizeof(double) * nh), *dy = malloc(sizeof(double) * nh);
    double *dt[3], *dw = malloc(sizeof(double) * (size_t)h), *wgot = malloc(sizeof(double) * (size_t)h);
    for (int k = 0; k < 3; ++k) dt[k] = malloc(sizeof(double) * rh);
    double *const *A = in->a;

    ref_norm_modulate_fwd(n, h, r, A[X], h, in->w, A[SHIFT], h, A[SCALE], h, in->idx, 1e-6, o, h);
    ref_norm_modulate_bwd(n, h, r, A[DOUT], h, A[X], h, in->w, A[SCALE], h, in->idx, 1e-6, dx, h, dw, dt[0], h, dt[1],
                          h);
    expect_slot(s, img, NM_OUT, "norm_modulate out", o, ta);
    expect_slot(s, img, NM_DX, "norm_modulate dx", dx, ta);
    expect_slot(s, img, NM_DSHIFT, "norm_modulate dshift", dt[0], ta);
    expect_slot(s, img, NM_DSCALE, "norm_modulate dscale", dt[1], ta);
    host_to_double(s->dt, img->dw, wgot, (size_t)h);
    expect_close(s, "norm_modulate dweight", wgot, dw, (size_t)h, ta);

    ref_gated_residual_fwd(n, h, r, A[RES], h, A[Y], h, A[GATE], h, in->idx, o, h);
    ref_gated_residual_bwd(n, h, r, A[DOUT], h, A[Y], h, A[GATE], h, in->idx, dx, h, dy, h, dt[2], h);
    expect_slot(s, img, GR_OUT, "gated_residual out", o, ta);
    expect_slot(s, img, GR_DX, "gated_residual dres", dx, ta);
    expect_slot(s, img, GR_DY, "gated_residual dy", dy, ta);
    expect_slot(s, img, GR_DGATE, "gated_residual dgate", dt[2], ta);

    double *hh = malloc(sizeof(double) * nh);
    ref_gated_residual_norm_modulate_fwd(n, h, r, A[RES], h, A[Y], h, A[GATE], h, in->w, A[SHIFT], h, A[SCALE], h,
                                         in->idx, 1e-6, hh, h, o, h);
    expect_slot(s, img, F_H, "fused h", hh, ta);
    expect_slot(s, img, F_OUT, "fused out", o, ta);
    /* Its backward differentiates the op as computed: from the h it rounded. */
    double *hr = slot_values(s, img, F_H), *gsum = malloc(sizeof(double) * nh);
    ref_norm_modulate_bwd(n, h, r, A[DOUT], h, hr, h, in->w, A[SCALE], h, in->idx, 1e-6, gsum, h, dw, dt[0], h, dt[1],
                          h);
    for (size_t e = 0; e < nh; ++e) gsum[e] += A[DH][e];
    ref_gated_residual_bwd(n, h, r, gsum, h, A[Y], h, A[GATE], h, in->idx, dx, h, dy, h, dt[2], h);
    expect_slot(s, img, F_DX, "fused dres", dx, ta);
    expect_slot(s, img, F_DY, "fused dy", dy, ta);
    expect_slot(s, img, F_DGATE, "fused dgate", dt[2], ta);
    expect_slot(s, img, F_DSHIFT, "fused dshift", dt[0], ta);
    expect_slot(s, img, F_DSCALE, "fused dscale", dt[1], ta);
    host_to_double(s->dt, img->dw + (size_t)2 * h * kjit_dtype_size(s->dt), wgot, (size_t)h);
    expect_close(s, "fused dweight", wgot, dw, (size_t)h, ta);
    free(hh), free(hr), free(gsum);

    const double *tabs[3] = {A[SHIFT], A[SCALE], A[GATE]}, *douts[3] = {A[X], A[Y], A[DOUT]};
    double *outs[3] = {o, dx, dy};
    const int64_t ld[3] = {h, h, h};
    ref_adaln_row_gather_fwd(n, h, r, 3, tabs, ld, in->idx, outs, ld);
    ref_adaln_row_gather_bwd(n, h, r, 3, douts, ld, in->idx, dt, ld);
    for (int k = 0; k < 3; ++k) {
        expect_slot(s, img, G_OUT0 + k, "row gather out (exact)", outs[k], 0.0);
        expect_slot(s, img, G_DT0 + k, "row gather dtable", dt[k], ta);
    }

    ref_sinusoid(in->t, n, h, 0, 1.0, 1.0, 10000.0, o);
    expect_slot(s, img, SIN_OUT, "sinusoid", o, s->dt == KJIT_F32 ? 2e-7 : 4e-3);

    expect_same(s, img, NMT_OUT, NM_OUT, "norm_modulate training out");
    expect_same(s, img, NMT_DX, NM_DX, "norm_modulate training dx");
    expect_same(s, img, NMT_DSHIFT, NM_DSHIFT, "norm_modulate training dshift");
    expect_same(s, img, NMT_DSCALE, NM_DSCALE, "norm_modulate training dscale");
    expect_same(s, img, NMR_DX, NM_DX, "norm_modulate row-only dx");
    expect_same(s, img, GRT_OUT, GR_OUT, "gated_residual training out");
    expect_same(s, img, GRT_DX, GR_DX, "gated_residual training dres");
    expect_same(s, img, GRT_DY, GR_DY, "gated_residual training dy");
    expect_same(s, img, GRT_DGATE, GR_DGATE, "gated_residual training dgate");
    for (int k = 0; k < 7; ++k) expect_same(s, img, FT_H + k, F_H + k, "fused training outputs");
    expect_same(s, img, FR_DX, F_DX, "fused row-only dres");
    expect_same(s, img, FR_DY, F_DY, "fused row-only dy");
    const size_t wb = (size_t)h * kjit_dtype_size(s->dt);
    CHECK(memcmp(img->dw, img->dw + wb, wb) == 0 && memcmp(img->dw + 2 * wb, img->dw + 3 * wb, wb) == 0);
    free(o), free(dx), free(dy), free(dw), free(wgot);
    for (int k = 0; k < 3; ++k) free(dt[k]);
}

/* 0 when the shape's far buffer did not fit in device memory. */
static int run_shape(kjit_ctx *ctx, CUstream stream, ref_rng *g, const shape *s)
{
    const int h = s->h, hp = hp_of(h);
    const int64_t n = s->n, r = s->r;
    const size_t es = kjit_dtype_size(s->dt);
    inputs in;
    memset(&in, 0, sizeof in);
    for (int sl = 0; sl <= GATE; ++sl) {
        const size_t m = (size_t)(rows_of(s, sl) * h);
        double *d = malloc(sizeof(double) * m);
        void *q = malloc(m * es);
        ref_fill_normal(g, d, m, 0.0, is_tab(sl) ? 0.3 : sl == DH ? 0.5 : 1.0);
        host_from_double(s->dt, d, q, m); /* quantized, as the kernels see them */
        host_to_double(s->dt, q, d, m);
        in.a[sl] = d;
        free(q);
    }
    in.w = malloc(sizeof(double) * (size_t)h);
    void *q = malloc((size_t)h * es);
    ref_fill_normal(g, in.w, (size_t)h, 1.0, 0.2);
    host_from_double(s->dt, in.w, q, (size_t)h);
    host_to_double(s->dt, q, in.w, (size_t)h);
    free(q);
    in.idx = malloc(sizeof(int64_t) * (size_t)n);
    in.t = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; ++i) {
        in.idx[i] = (int64_t)ref_rng_below(g, (uint64_t)r);
        in.t[i] = (float)(ref_rng_uniform(g) * 1000.0);
    }

    /* far: past 2^31 elements from row (2^31 / S) on, table row 2 too. */
    const int64_t S = (1LL << 20) + 8, qfar = (n - 1) / (r - 1);
    image far, near;
    if (!run_layout(ctx, stream, s, &in, S, qfar, &far)) {
        for (int sl = 0; sl <= GATE; ++sl) free(in.a[sl]);
        free(in.w), free(in.idx), free(in.t);
        return 0;
    }
    CHECK((n - 1) * S > (1LL << 31) && (r - 1) * qfar * S > (1LL << 31));
    CHECK(run_layout(ctx, stream, s, &in, (int64_t)NSLOT * hp, 1, &near));

    /* Both layouts bitwise equal, gaps included; outputs written, gaps not. */
    const size_t sb = (size_t)hp * es;
    int64_t differ = 0, unwritten = 0, gap_written = 0;
    for (int sl = 0; sl < NSLOT; ++sl) {
        const int64_t rows = rows_of(s, sl);
        for (int64_t i = 0; i < rows; ++i) {
            const unsigned char *f = far.slot[sl] + (size_t)i * sb;
            differ += memcmp(f, near.slot[sl] + (size_t)i * sb, sb) != 0;
            for (size_t b = 0; b < sb; b += es) {
                int all_ff = 1;
                for (size_t k = 0; k < es; ++k) all_ff &= f[b + k] == 0xFF;
                if (b < (size_t)h * es) unwritten += !is_input(sl) && all_ff;
                else gap_written += !all_ff;
            }
        }
    }
    const size_t wb = (size_t)NDW * h * es;
    differ += memcmp(far.dw, near.dw, wb) != 0;
    for (size_t b = 0; b < wb; b += es) {
        int all_ff = 1;
        for (size_t k = 0; k < es; ++k) all_ff &= far.dw[b + k] == 0xFF;
        unwritten += all_ff;
    }
    if (differ || unwritten || gap_written) {
        fprintf(stderr, "%s h %d: %lld slot rows differ between the layouts, %lld output elements unwritten, %lld gap elements written\n",
                kjit_dtype_name(s->dt), h, (long long)differ, (long long)unwritten, (long long)gap_written);
        kjit_test_failures++;
    }
    check_refs(s, &in, &far);
    printf("offsets: %s h %d %s, n %lld, r %lld: rows to %.3g elements (%.3g bytes) past the base, "
           "every op equal to the near layout's bits and to fp64\n",
           kjit_dtype_name(s->dt), h, kjit_dtype_name(s->idx), (long long)n, (long long)r, (double)((n - 1) * S),
           (double)((n - 1) * S) * (double)es);
    image_free(&far), image_free(&near);
    for (int sl = 0; sl <= GATE; ++sl) free(in.a[sl]);
    free(in.w), free(in.idx), free(in.t);
    return 1;
}

int main(void)
{
    kjit_ctx *ctx = kjit_gpu_ctx_or_skip("test_offsets", KJIT_INDEX_CHECK_OFF);
    cu = kjit__cu();
    ref_rng g;
    ref_rng_seed(&g, kjit_test_seed("test_offsets"));
    CUstream stream;
    CU_CHECK(cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    const shape shapes[] = {
        {2100, 3, 264, KJIT_BF16, KJIT_I32},
        {2100, 3, 100, KJIT_F32, KJIT_I64},
    };
    int ran = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
        if (run_shape(ctx, stream, &g, &shapes[i])) ++ran;
        else printf("offsets: %s h %d not run: too little free device memory for its far layout\n",
                    kjit_dtype_name(shapes[i].dt), shapes[i].h);
    }
    if (!ran) {
        CU_CHECK(cu->StreamDestroy(stream));
        kjit_ctx_destroy(ctx);
        kjit_gpu_skip("test_offsets", "too little free device memory for the far layout");
    }
    CU_CHECK(cu->StreamDestroy(stream));
    kjit_ctx_destroy(ctx);
    return kjit_test_result("test_offsets");
}
