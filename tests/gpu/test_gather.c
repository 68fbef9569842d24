/* adaln_row_gather on the GPU: forward bitwise equal to the table rows,
 * backward vs the fp64 reference, every dtype x index dtype x K x H x R,
 * chunk-view and contiguous layouts, misaligned views (scalar path), every
 * output poisoned before each call and checked for full coverage and for
 * writes outside its views, bitwise batch invariance of the forward, bitwise
 * repeatable dtable, index checking (sync and async), bad arguments, N = 0. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "ref.h"
#include "test_util.h"

#define MAXK KJIT_MAX_TABLES

/* ---- operands ------------------------------------------------------------
 * One operand of K (rows, H) views: the K chunk views of one buffer of row
 * stride `stride` (shared: view q starts at column q*H), or K separate
 * buffers of row stride `stride`. Every allocation has one guard row before
 * and after the views and 16 spare elements; `mis` shifts every view by that
 * many elements. Everything outside the views is 0xFF (poison) on the device
 * and must stay so. */
typedef struct opnd {
    int shared, k, h, mis, nalloc;
    int64_t rows, stride;
    kjit_dtype dt;
    size_t es, nelem; /* per allocation */
    CUdeviceptr alloc[MAXK];
    unsigned char *host[MAXK]; /* host image of each allocation */
    unsigned char *mask[MAXK]; /* 1 where an element of a view lies */
    void *view[MAXK];
} opnd;

static size_t off_el(const opnd *o, int q, int64_t i)
{
    return (size_t)o->mis + (size_t)(1 + i) * (size_t)o->stride + (o->shared ? (size_t)q * (size_t)o->h : 0);
}

static int alloc_of(const opnd *o, int q) { return o->shared ? 0 : q; }

static void opnd_init(opnd *o, int shared, int k, int h, int64_t rows, int64_t stride, int mis, kjit_dtype dt)
{
    memset(o, 0, sizeof *o);
    o->shared = shared, o->k = k, o->h = h, o->mis = mis, o->rows = rows, o->stride = stride, o->dt = dt;
    o->es = kjit_dtype_size(dt);
    o->nalloc = shared ? 1 : k;
    o->nelem = (size_t)(rows + 2) * (size_t)stride + 16;
    for (int a = 0; a < o->nalloc; ++a) {
        o->alloc[a] = gpu_alloc(o->nelem * o->es);
        o->host[a] = malloc(o->nelem * o->es);
        o->mask[a] = calloc(o->nelem, 1);
        if (!o->host[a] || !o->mask[a]) {
            fprintf(stderr, "out of host memory\n");
            exit(1);
        }
    }
    for (int q = 0; q < k; ++q) {
        const int a = alloc_of(o, q);
        o->view[q] = (void *)(uintptr_t)(o->alloc[a] + off_el(o, q, 0) * o->es);
        for (int64_t i = 0; i < rows; ++i) memset(o->mask[a] + off_el(o, q, i), 1, (size_t)h);
    }
}

static void opnd_free(opnd *o)
{
    for (int a = 0; a < o->nalloc; ++a) gpu_free(o->alloc[a]), free(o->host[a]), free(o->mask[a]);
    memset(o, 0, sizeof *o);
}

/* Fills the views from dense src (view q, row i at src + i*ld + q*H), poison elsewhere. */
static void opnd_upload(opnd *o, const double *src, int64_t ld)
{
    for (int a = 0; a < o->nalloc; ++a) memset(o->host[a], 0xFF, o->nelem * o->es);
    for (int q = 0; q < o->k; ++q)
        for (int64_t i = 0; i < o->rows; ++i)
            host_from_double(o->dt, src + i * ld + (int64_t)q * o->h, o->host[alloc_of(o, q)] + off_el(o, q, i) * o->es,
                             (size_t)o->h);
    for (int a = 0; a < o->nalloc; ++a) gpu_upload(o->alloc[a], o->host[a], o->nelem * o->es);
}

static void opnd_poison(opnd *o)
{
    for (int a = 0; a < o->nalloc; ++a) gpu_poison(o->alloc[a], o->nelem * o->es);
}

static int is_poison(const unsigned char *p, size_t es)
{
    for (size_t b = 0; b < es; ++b)
        if (p[b] != 0xFF) return 0;
    return 1;
}

/* Downloads the images; returns how many elements outside the views lost
 * their poison. With dst, converts view q row i to dst + i*ld + q*H. */
static int64_t opnd_fetch(opnd *o, double *dst, int64_t ld)
{
    int64_t bad = 0;
    for (int a = 0; a < o->nalloc; ++a) {
        gpu_download(o->host[a], o->alloc[a], o->nelem * o->es);
        for (size_t e = 0; e < o->nelem; ++e)
            if (!o->mask[a][e] && !is_poison(o->host[a] + e * o->es, o->es)) bad++;
    }
    if (dst)
        for (int q = 0; q < o->k; ++q)
            for (int64_t i = 0; i < o->rows; ++i)
                host_to_double(o->dt, o->host[alloc_of(o, q)] + off_el(o, q, i) * o->es, dst + i * ld + (int64_t)q * o->h,
                               (size_t)o->h);
    return bad;
}

/* 1 when every byte of every allocation is still poison. */
static int opnd_untouched(opnd *o)
{
    int ok = 1;
    for (int a = 0; a < o->nalloc; ++a) {
        gpu_download(o->host[a], o->alloc[a], o->nelem * o->es);
        for (size_t e = 0; e < o->nelem * o->es && ok; ++e) ok = o->host[a][e] == 0xFF;
    }
    return ok;
}

/* 1 when row i of every view is still poison (after opnd_fetch). */
static int opnd_row_poisoned(const opnd *o, int64_t i)
{
    for (int q = 0; q < o->k; ++q) {
        const unsigned char *p = o->host[alloc_of(o, q)] + off_el(o, q, i) * o->es;
        for (size_t b = 0; b < (size_t)o->h * o->es; ++b)
            if (p[b] != 0xFF) return 0;
    }
    return 1;
}

/* ---- data ---------------------------------------------------------------- */

/* Uniform in [-amp, amp), quantized to dt (so the double is exactly the value the GPU sees). */
static void gen_quant(ref_rng *g, kjit_dtype dt, double *v, size_t n, double amp)
{
    for (size_t i = 0; i < n; ++i) {
        float f = (float)(((double)(ref_rng_u64(g) >> 40) * 0x1p-23 - 1.0) * amp);
        v[i] = dt == KJIT_BF16 ? (double)ref_bf16_to_float(ref_float_to_bf16(f)) : (double)f;
    }
}

/* Random quantized data for every case: slices of one pool per dtype
 * (bf16 values in [-2, 2), fp32 values in [-2, 2)), at random offsets. */
#define POOL_ELEMS ((size_t)42 << 20)
static double *pools[2];

static const double *pool_slice(ref_rng *g, kjit_dtype dt, size_t n)
{
    if (n > POOL_ELEMS) {
        fprintf(stderr, "pool_slice: %zu elements > pool\n", n);
        exit(1);
    }
    const int p = dt == KJIT_BF16;
    if (!pools[p]) {
        pools[p] = malloc(sizeof(double) * POOL_ELEMS);
        if (!pools[p]) {
            fprintf(stderr, "out of host memory\n");
            exit(1);
        }
        gen_quant(g, dt, pools[p], POOL_ELEMS, 2.0);
    }
    return pools[p] + ref_rng_below(g, POOL_ELEMS - n + 1);
}

/* 0: uniform (first row R-1, last row 0); 1: runs of 1..400 equal indices
 * (a packed sequence); 2: 90 % the last table row, the rest uniform. */
static void gen_index(ref_rng *g, int pattern, int64_t *idx, int64_t n, int64_t r)
{
    if (pattern == 1) {
        for (int64_t i = 0; i < n;) {
            int64_t len = 1 + (int64_t)ref_rng_below(g, 400), v = (int64_t)ref_rng_below(g, (uint64_t)r);
            for (int64_t j = 0; j < len && i < n; ++j) idx[i++] = v;
        }
        return;
    }
    for (int64_t i = 0; i < n; ++i)
        idx[i] = pattern == 2 && ref_rng_below(g, 10) ? r - 1 : (int64_t)ref_rng_below(g, (uint64_t)r);
    if (pattern == 0 && n > 1) idx[0] = r - 1, idx[n - 1] = 0;
}

static CUdeviceptr upload_index(const int64_t *idx, int64_t n, kjit_dtype it)
{
    const size_t es = kjit_dtype_size(it);
    void *h = malloc(es * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; ++i) {
        if (it == KJIT_I32) ((int32_t *)h)[i] = (int32_t)idx[i];
        else ((int64_t *)h)[i] = idx[i];
    }
    CUdeviceptr d = gpu_alloc(es * (size_t)(n ? n : 1));
    gpu_upload(d, h, es * (size_t)n);
    free(h);
    return d;
}

/* Bitwise comparison of doubles converted exactly from the outputs. */
static int64_t count_mismatch(const double *got, const double *want, size_t n)
{
    int64_t bad = 0;
    for (size_t i = 0; i < n; ++i)
        if (!(got[i] == want[i]) || signbit(got[i]) != signbit(want[i])) bad++;
    return bad;
}

/* (row, view) pairs where row i of O differs bitwise from row idx[i] of T
 * (host images: O after opnd_fetch, T as uploaded); rows whose index is
 * outside [0, R) (skipped by the device) are not compared. */
static int64_t gather_rows_bad(const opnd *O, const opnd *T, const int64_t *idx)
{
    int64_t bad = 0;
    const size_t bytes = (size_t)O->h * O->es;
    for (int q = 0; q < O->k; ++q)
        for (int64_t i = 0; i < O->rows; ++i) {
            if (idx[i] < 0 || idx[i] >= T->rows) continue;
            bad += memcmp(O->host[alloc_of(O, q)] + off_el(O, q, i) * O->es,
                          T->host[alloc_of(T, q)] + off_el(T, q, idx[i]) * T->es, bytes) != 0;
        }
    return bad;
}

static int64_t count_nan(const double *v, size_t n)
{
    int64_t bad = 0;
    for (size_t i = 0; i < n; ++i)
        if (isnan(v[i])) bad++;
    return bad;
}

/* ---- one case -------------------------------------------------------------- */

typedef struct gcase {
    kjit_dtype dt, it;
    int k, h;
    int64_t r, n;
    int shared;           /* chunk views of one buffer, else separate contiguous buffers */
    int pad_out;          /* extra columns of the out / dtable buffers (shared layout) */
    int pad_in;           /* extra columns of the table / dout buffers (shared layout) */
    int mis_in, mis_out;  /* element offsets of the input / output views */
    int ctx_ws;           /* backward with the context's workspace (NULL) */
    int pattern;
} gcase;

static void args_for(kjit_row_gather_args *a, const gcase *c, CUdeviceptr didx, const opnd *T, const opnd *O,
                     const opnd *D, const opnd *DT)
{
    memset(a, 0, sizeof *a);
    a->n = c->n, a->hidden = c->h, a->num_tables = c->k, a->dtype = c->dt;
    a->index.ptr = (const void *)(uintptr_t)didx, a->index.dtype = c->it, a->index.rows = c->r;
    for (int q = 0; q < c->k; ++q) {
        a->table[q] = T->view[q], a->table_stride[q] = T->stride;
        a->out[q] = O->view[q], a->out_stride[q] = O->stride;
        a->dout[q] = D->view[q], a->dout_stride[q] = D->stride;
        a->dtable[q] = DT->view[q], a->dtable_stride[q] = DT->stride;
    }
}

static void describe(const gcase *c, char *buf, size_t len)
{
    snprintf(buf, len, "%s idx=%s K=%d H=%d R=%lld N=%lld %s pad=%d/%d mis=%d/%d ws=%s pattern=%d", kjit_dtype_name(c->dt),
             kjit_dtype_name(c->it), c->k, c->h, (long long)c->r, (long long)c->n, c->shared ? "chunk-views" : "contiguous",
             c->pad_in, c->pad_out, c->mis_in, c->mis_out, c->ctx_ws ? "ctx" : "caller", c->pattern);
}

static double worst_fp32, worst_bf16;

static void run_case(kjit_ctx *ctx, ref_rng *g, const gcase *c)
{
    char what[256];
    describe(c, what, sizeof what);
    const int K = c->k, H = c->h;
    const int64_t N = c->n, R = c->r, W = (int64_t)K * H;
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)N);
    const size_t nbig = (size_t)((N > R ? N : R) * W);
    double *got = malloc(sizeof(double) * nbig), *ref = malloc(sizeof(double) * nbig);
    gen_index(g, c->pattern, idx, N, R);
    const double *tab = pool_slice(g, c->dt, (size_t)(R * W)), *dout = pool_slice(g, c->dt, (size_t)(N * W));

    opnd T, O, D, DT;
    opnd_init(&T, c->shared, K, H, R, c->shared ? W + c->pad_in : H, c->mis_in, c->dt);
    opnd_init(&O, c->shared, K, H, N, c->shared ? W + c->pad_out : H, c->mis_out, c->dt);
    opnd_init(&D, c->shared, K, H, N, c->shared ? W + c->pad_in : H, c->mis_in, c->dt);
    opnd_init(&DT, c->shared, K, H, R, c->shared ? W + c->pad_out : H, c->mis_out, c->dt);
    opnd_upload(&T, tab, W);
    opnd_upload(&D, dout, W);
    CUdeviceptr didx = upload_index(idx, N, c->it);
    kjit_row_gather_args a;
    args_for(&a, c, didx, &T, &O, &D, &DT);

    const double *tabv[MAXK], *doutv[MAXK];
    double *refv[MAXK];
    int64_t ldv[MAXK];
    for (int q = 0; q < K; ++q) tabv[q] = tab + q * H, doutv[q] = dout + q * H, refv[q] = ref + q * H, ldv[q] = W;

    /* Forward: every row bitwise the (quantized) table row it selects, every
     * element written, nothing outside the views; on the smaller cases also
     * exactly the fp64 reference. */
    opnd_poison(&O);
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &a, NULL), KJIT_OK);
    gpu_sync();
    const int with_ref = N * W <= 4000000;
    int64_t outside = opnd_fetch(&O, with_ref ? got : NULL, W), mism = gather_rows_bad(&O, &T, idx), nan = 0;
    if (with_ref) {
        ref_adaln_row_gather_fwd(N, H, R, K, tabv, ldv, idx, refv, ldv);
        nan = count_nan(got, (size_t)(N * W));
        mism += count_mismatch(got, ref, (size_t)(N * W));
    }
    if (outside || nan || mism) {
        fprintf(stderr, "fwd %s: %lld elements outside the views changed, %lld unwritten (NaN), %lld rows/elements "
                "differ from the table rows\n", what, (long long)outside, (long long)nan, (long long)mism);
        kjit_test_failures++;
    }

    /* Backward, 5 times: fresh poison (outputs and workspace), bitwise the same each time. */
    size_t wsb = 0;
    CHECK_STATUS(kjit_adaln_row_gather_workspace(N, H, K, R, &wsb), KJIT_OK);
    CUdeviceptr ws = c->ctx_ws ? 0 : gpu_alloc(wsb);
    unsigned char *first[MAXK] = {0};
    for (int a2 = 0; a2 < DT.nalloc; ++a2) first[a2] = malloc(DT.nelem * DT.es);
    for (int rep = 0; rep < 5; ++rep) {
        opnd_poison(&DT);
        if (ws) gpu_poison(ws, wsb);
        CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &a, (void *)(uintptr_t)ws, ws ? wsb : 0, NULL), KJIT_OK);
        gpu_sync();
        outside = opnd_fetch(&DT, rep == 0 ? got : NULL, W);
        if (outside) {
            fprintf(stderr, "bwd %s run %d: %lld elements outside the dtable views changed\n", what, rep,
                    (long long)outside);
            kjit_test_failures++;
        }
        for (int a2 = 0; a2 < DT.nalloc; ++a2) {
            if (rep == 0) memcpy(first[a2], DT.host[a2], DT.nelem * DT.es);
            else if (memcmp(first[a2], DT.host[a2], DT.nelem * DT.es)) {
                fprintf(stderr, "bwd %s: dtable of run %d differs bitwise from run 0\n", what, rep);
                kjit_test_failures++;
            }
        }
    }
    ref_adaln_row_gather_bwd(N, H, R, K, doutv, ldv, idx, refv, ldv);
    nan = count_nan(got, (size_t)(R * W));
    const double e = ref_rel_err(got, ref, (size_t)(R * W)), tol = c->dt == KJIT_BF16 ? 4e-3 : 1e-6;
    if (c->dt == KJIT_BF16 && e > worst_bf16) worst_bf16 = e;
    if (c->dt == KJIT_F32 && e > worst_fp32) worst_fp32 = e;
    if (nan || !(e <= tol)) {
        fprintf(stderr, "bwd %s: dtable rel err %g (tol %g), %lld unwritten (NaN)\n", what, e, tol, (long long)nan);
        kjit_test_failures++;
    }

    for (int a2 = 0; a2 < DT.nalloc; ++a2) free(first[a2]);
    gpu_free(ws), gpu_free(didx);
    opnd_free(&T), opnd_free(&O), opnd_free(&D), opnd_free(&DT);
    free(idx), free(got), free(ref);
}

/* n index values of c's pattern and c's tables, on the host (idx, T's
 * images) and the device (didx, T). */
static void inputs_make(ref_rng *g, const gcase *c, int64_t n, int64_t **idx, CUdeviceptr *didx, opnd *T)
{
    const int64_t W = (int64_t)c->k * c->h;
    *idx = malloc(sizeof(int64_t) * (size_t)n);
    gen_index(g, c->pattern, *idx, n, c->r);
    const double *tab = pool_slice(g, c->dt, (size_t)(c->r * W));
    *didx = upload_index(*idx, n, c->it);
    opnd_init(T, c->shared, c->k, c->h, c->r, c->shared ? W + c->pad_in : c->h, c->mis_in, c->dt);
    opnd_upload(T, tab, W);
}

/* ---- batch invariance of the forward -------------------------------------- *
 * Batches of 64, 257 and 2048 rows taken at different offsets of one index
 * array; each row computed alone (n = 1, index pointer at the row) into the
 * same row of a second, identically laid-out output: the two images must be
 * bitwise equal (poison included). */
static void batch_invariance(kjit_ctx *ctx, ref_rng *g, gcase c)
{
    const int64_t sizes[] = {64, 257, 2048}, offs[] = {1900, 333, 0}, total = 2400;
    const int K = c.k, H = c.h;
    const int64_t W = (int64_t)K * H;
    const size_t ies = kjit_dtype_size(c.it);
    int64_t *idx;
    CUdeviceptr didx;
    opnd T;
    inputs_make(g, &c, total, &idx, &didx, &T);
    char what[256];
    for (int s = 0; s < 3; ++s) {
        const int64_t B = sizes[s];
        c.n = B;
        describe(&c, what, sizeof what);
        opnd O, A;
        opnd_init(&O, c.shared, K, H, B, c.shared ? W + c.pad_out : H, c.mis_out, c.dt);
        opnd_init(&A, c.shared, K, H, B, c.shared ? W + c.pad_out : H, c.mis_out, c.dt);
        opnd_poison(&O), opnd_poison(&A);
        kjit_row_gather_args a;
        args_for(&a, &c, didx + (CUdeviceptr)(offs[s] * (int64_t)ies), &T, &O, &O, &O);
        CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &a, NULL), KJIT_OK);
        for (int64_t i = 0; i < B; ++i) {
            kjit_row_gather_args one;
            args_for(&one, &c, didx + (CUdeviceptr)((offs[s] + i) * (int64_t)ies), &T, &A, &A, &A);
            one.n = 1;
            for (int q = 0; q < K; ++q) one.out[q] = (char *)A.view[q] + (size_t)i * (size_t)A.stride * A.es;
            int rc = kjit_adaln_row_gather_fwd(ctx, &one, NULL);
            if (rc) {
                fprintf(stderr, "alone %s row %lld: %s (%s)\n", what, (long long)i, kjit_status_name(rc), kjit_last_error());
                kjit_test_failures++;
                break;
            }
        }
        gpu_sync();
        int64_t outside = opnd_fetch(&O, NULL, 0), wrong = gather_rows_bad(&O, &T, idx + offs[s]);
        outside += opnd_fetch(&A, NULL, 0);
        int64_t differ = 0;
        for (int a2 = 0; a2 < O.nalloc; ++a2) differ += memcmp(O.host[a2], A.host[a2], O.nelem * O.es) != 0;
        if (outside || wrong || differ) {
            fprintf(stderr, "batch invariance %s: %lld changed outside, %lld rows wrong, %lld buffer(s) differ alone "
                    "vs in batch\n", what, (long long)outside, (long long)wrong, (long long)differ);
            kjit_test_failures++;
        }
        opnd_free(&O), opnd_free(&A);
    }
    opnd_free(&T);
    gpu_free(didx);
    free(idx);
}

/* The forward at every size of the batch-size sweep (each row equal to its
 * table row, the rows past the batch untouched), and a 131072-row batch vs
 * its split into sub-batches of 1, 7, 4097, 32768 and 65536 rows, byte for
 * byte. A gather's row is a copy, so equal to the table row at every size is
 * invariance; the comparison of the split is the check as the issue states it. */
static void sweep_and_split(kjit_ctx *ctx, ref_rng *g, gcase c)
{
    static const int64_t sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129,
                                    255, 256, 257, 511, 512, 513, 1023, 1024, 1025, 2047, 2048};
    const int64_t big = 131072;
    const int K = c.k, H = c.h;
    const int64_t W = (int64_t)K * H;
    const size_t ies = kjit_dtype_size(c.it);
    int64_t *idx;
    CUdeviceptr didx;
    opnd T;
    inputs_make(g, &c, big, &idx, &didx, &T);
    char what[256];
    c.n = 2048;
    describe(&c, what, sizeof what);
    int64_t bad_sizes = 0;
    {
        opnd O;
        opnd_init(&O, c.shared, K, H, 2048, c.shared ? W + c.pad_out : H, c.mis_out, c.dt);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; ++si) {
            const int64_t m = sizes[si];
            opnd_poison(&O);
            kjit_row_gather_args a;
            args_for(&a, &c, didx, &T, &O, &O, &O);
            a.n = m;
            CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &a, NULL), KJIT_OK);
            gpu_sync();
            const int64_t outside = opnd_fetch(&O, NULL, 0);
            O.rows = m; /* compare the batch's rows */
            const int64_t wrong = gather_rows_bad(&O, &T, idx);
            O.rows = 2048;
            int64_t past = 0;
            for (int64_t i = m; i < 2048; ++i) past += !opnd_row_poisoned(&O, i);
            if (outside || wrong || past) {
                if (bad_sizes++ < 5)
                    fprintf(stderr, "sweep %s at %lld rows: %lld changed outside, %lld rows wrong, %lld rows past the "
                            "batch written\n", what, (long long)m, (long long)outside, (long long)wrong, (long long)past);
            }
        }
        opnd_free(&O);
    }
    c.n = big;
    describe(&c, what, sizeof what);
    opnd F, P;
    opnd_init(&F, c.shared, K, H, big, c.shared ? W + c.pad_out : H, c.mis_out, c.dt);
    opnd_init(&P, c.shared, K, H, big, c.shared ? W + c.pad_out : H, c.mis_out, c.dt);
    opnd_poison(&F), opnd_poison(&P);
    kjit_row_gather_args a;
    args_for(&a, &c, didx, &T, &F, &F, &F);
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &a, NULL), KJIT_OK);
    static const int64_t pieces[] = {1, 7, 4097, 32768, 65536};
    int64_t at = 0, subs = 0;
    for (int i = 0; at < big; i = (i + 1) % 5, ++subs) {
        const int64_t len = pieces[i] < big - at ? pieces[i] : big - at;
        kjit_row_gather_args s;
        args_for(&s, &c, didx + (CUdeviceptr)(at * (int64_t)ies), &T, &P, &P, &P);
        s.n = len;
        for (int q = 0; q < K; ++q) s.out[q] = (char *)P.view[q] + (size_t)at * (size_t)P.stride * P.es;
        CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &s, NULL), KJIT_OK);
        at += len;
    }
    gpu_sync();
    const int64_t outside = opnd_fetch(&F, NULL, 0) + opnd_fetch(&P, NULL, 0);
    const int64_t wrong = gather_rows_bad(&F, &T, idx);
    int64_t differ = 0;
    for (int a2 = 0; a2 < F.nalloc; ++a2) differ += memcmp(F.host[a2], P.host[a2], F.nelem * F.es) != 0;
    printf("test_gather %s: sweep of 32 batch sizes, %lld bad; 131072 rows vs %lld sub-batches: %lld buffer(s) "
           "differ, %lld rows wrong, %lld changed outside\n", what, (long long)bad_sizes, (long long)subs,
           (long long)differ, (long long)wrong, (long long)outside);
    if (bad_sizes || outside || wrong || differ) kjit_test_failures++;
    opnd_free(&F), opnd_free(&P), opnd_free(&T);
    gpu_free(didx);
    free(idx);
}

/* ---- index checking --------------------------------------------------------- */

static void index_checking(kjit_ctx *sync_ctx, kjit_ctx *async_ctx, ref_rng *g)
{
    const int64_t BAD_ROW = 1234;
    for (int it_i = 0; it_i < 2; ++it_i) {
        gcase c = {KJIT_BF16, it_i ? KJIT_I64 : KJIT_I32, 2, it_i ? 1001 : 512, 9, 3000, 1, 8, 0, 0, 0, 0, 0};
        char what[256];
        describe(&c, what, sizeof what);
        const int K = c.k, H = c.h;
        const int64_t N = c.n, R = c.r, W = (int64_t)K * H;
        int64_t *idx = malloc(sizeof(int64_t) * (size_t)N), *idx_ok = malloc(sizeof(int64_t) * (size_t)N);
        double *dout = malloc(sizeof(double) * (size_t)(N * W));
        double *got = malloc(sizeof(double) * (size_t)(N * W)), *ref = malloc(sizeof(double) * (size_t)(N * W));
        gen_index(g, 0, idx, N, R);
        const double *tab = pool_slice(g, c.dt, (size_t)(R * W));
        memcpy(dout, pool_slice(g, c.dt, (size_t)(N * W)), sizeof(double) * (size_t)(N * W));
        opnd T, O, D, DT;
        opnd_init(&T, 1, K, H, R, W, 0, c.dt);
        opnd_init(&O, 1, K, H, N, W + 8, 0, c.dt);
        opnd_init(&D, 1, K, H, N, W, 0, c.dt);
        opnd_init(&DT, 1, K, H, R, W + 8, 0, c.dt);
        opnd_upload(&T, tab, W);
        opnd_upload(&D, dout, W);
        const int64_t bads[3] = {R, -1, it_i ? (int64_t)1 << 33 : (int64_t)INT32_MIN};
        size_t wsb;
        CHECK_STATUS(kjit_adaln_row_gather_workspace(N, H, K, R, &wsb), KJIT_OK);
        CUdeviceptr ws = gpu_alloc(wsb);
        for (int b = 0; b < 3; ++b) {
            const int64_t keep = idx[BAD_ROW];
            idx[BAD_ROW] = bads[b];
            CUdeviceptr didx = upload_index(idx, N, c.it);
            idx[BAD_ROW] = keep;
            kjit_row_gather_args a;
            args_for(&a, &c, didx, &T, &O, &D, &DT);
            char row[32];
            snprintf(row, sizeof row, "%lld", (long long)BAD_ROW);

            /* SYNC: KJIT_EINDEX naming the row, nothing written. */
            opnd_poison(&O), opnd_poison(&DT);
            CHECK_STATUS(kjit_adaln_row_gather_fwd(sync_ctx, &a, NULL), KJIT_EINDEX);
            if (!strstr(kjit_last_error(), row)) {
                fprintf(stderr, "sync %s bad=%lld: message does not name row %s: %s\n", what, (long long)bads[b], row,
                        kjit_last_error());
                kjit_test_failures++;
            }
            CHECK_STATUS(kjit_adaln_row_gather_bwd(sync_ctx, &a, (void *)(uintptr_t)ws, wsb, NULL), KJIT_EINDEX);
            if (!strstr(kjit_last_error(), row)) {
                fprintf(stderr, "sync bwd %s bad=%lld: message does not name row %s: %s\n", what, (long long)bads[b], row,
                        kjit_last_error());
                kjit_test_failures++;
            }
            gpu_sync();
            if (!opnd_untouched(&O) || !opnd_untouched(&DT)) {
                fprintf(stderr, "sync %s bad=%lld: outputs written despite KJIT_EINDEX\n", what, (long long)bads[b]);
                kjit_test_failures++;
            }

            /* ASYNC: KJIT_OK, the bad row skipped, the others written, the flag raised once. */
            int flag = -1;
            CHECK_STATUS(kjit_ctx_index_error(async_ctx, NULL, &flag), KJIT_OK);
            CHECK_EQ_INT(flag, 0);
            opnd_poison(&O), opnd_poison(&DT);
            CHECK_STATUS(kjit_adaln_row_gather_fwd(async_ctx, &a, NULL), KJIT_OK);
            CHECK_STATUS(kjit_ctx_index_error(async_ctx, NULL, &flag), KJIT_OK);
            CHECK_EQ_INT(flag, 1);
            CHECK_STATUS(kjit_ctx_index_error(async_ctx, NULL, &flag), KJIT_OK);
            CHECK_EQ_INT(flag, 0);
            gpu_sync();
            int64_t outside = opnd_fetch(&O, got, W);
            if (!opnd_row_poisoned(&O, BAD_ROW)) {
                fprintf(stderr, "async %s bad=%lld: the bad row's output was written\n", what, (long long)bads[b]);
                kjit_test_failures++;
            }
            const double *tabv[MAXK], *doutv[MAXK];
            double *refv[MAXK];
            int64_t ldv[MAXK];
            for (int q = 0; q < K; ++q) tabv[q] = tab + q * H, doutv[q] = dout + q * H, refv[q] = ref + q * H, ldv[q] = W;
            ref_adaln_row_gather_fwd(N, H, R, K, tabv, ldv, idx, refv, ldv);
            for (int q = 0; q < K; ++q) /* the bad row: expect NaN (poison) there */
                for (int j = 0; j < H; ++j) ref[BAD_ROW * W + q * H + j] = got[BAD_ROW * W + q * H + j];
            int64_t mism = 0;
            for (int64_t i = 0; i < N; ++i)
                if (i != BAD_ROW) mism += count_mismatch(got + i * W, ref + i * W, (size_t)W);
            if (outside || mism) {
                fprintf(stderr, "async %s bad=%lld: %lld changed outside, %lld good-row elements wrong\n", what,
                        (long long)bads[b], (long long)outside, (long long)mism);
                kjit_test_failures++;
            }
            /* Backward: the bad row contributes nothing. */
            CHECK_STATUS(kjit_adaln_row_gather_bwd(async_ctx, &a, (void *)(uintptr_t)ws, wsb, NULL), KJIT_OK);
            CHECK_STATUS(kjit_ctx_index_error(async_ctx, NULL, &flag), KJIT_OK);
            CHECK_EQ_INT(flag, 1);
            CHECK_STATUS(kjit_ctx_index_error(async_ctx, NULL, &flag), KJIT_OK);
            CHECK_EQ_INT(flag, 0);
            gpu_sync();
            outside = opnd_fetch(&DT, got, W);
            memcpy(idx_ok, idx, sizeof(int64_t) * (size_t)N);
            idx_ok[BAD_ROW] = 0;
            double saved[2 * 1001];
            memcpy(saved, dout + BAD_ROW * W, sizeof(double) * (size_t)W);
            memset(dout + BAD_ROW * W, 0, sizeof(double) * (size_t)W);
            ref_adaln_row_gather_bwd(N, H, R, K, doutv, ldv, idx_ok, refv, ldv);
            memcpy(dout + BAD_ROW * W, saved, sizeof(double) * (size_t)W);
            double e = ref_rel_err(got, ref, (size_t)(R * W));
            if (outside || !(e <= 4e-3)) {
                fprintf(stderr, "async bwd %s bad=%lld: %lld changed outside, dtable rel err %g (without the bad row)\n",
                        what, (long long)bads[b], (long long)outside, e);
                kjit_test_failures++;
            }
            /* A good call afterwards leaves the flag down. */
            CUdeviceptr dgood = upload_index(idx, N, c.it);
            a.index.ptr = (const void *)(uintptr_t)dgood;
            CHECK_STATUS(kjit_adaln_row_gather_fwd(async_ctx, &a, NULL), KJIT_OK);
            CHECK_STATUS(kjit_ctx_index_error(async_ctx, NULL, &flag), KJIT_OK);
            CHECK_EQ_INT(flag, 0);
            /* SYNC with good indices runs normally. */
            opnd_poison(&O);
            CHECK_STATUS(kjit_adaln_row_gather_fwd(sync_ctx, &a, NULL), KJIT_OK);
            gpu_sync();
            outside = opnd_fetch(&O, got, W);
            ref_adaln_row_gather_fwd(N, H, R, K, tabv, ldv, idx, refv, ldv);
            mism = count_mismatch(got, ref, (size_t)(N * W));
            if (outside || mism) {
                fprintf(stderr, "sync %s good indices: %lld changed outside, %lld wrong\n", what, (long long)outside,
                        (long long)mism);
                kjit_test_failures++;
            }
            gpu_free(dgood), gpu_free(didx);
        }
        gpu_free(ws);
        opnd_free(&T), opnd_free(&O), opnd_free(&D), opnd_free(&DT);
        free(idx), free(idx_ok), free(dout), free(got), free(ref);
    }
}

/* ---- bad arguments and N = 0 ----------------------------------------------- */

typedef struct bad_env {
    kjit_ctx *ctx;
    opnd *O, *DT;
    CUdeviceptr ws;
    size_t wsb;
} bad_env;

static void expect_einval(bad_env *env, const kjit_row_gather_args *b, int bwd, size_t wsb, int line, const char *what)
{
    opnd_poison(env->O), opnd_poison(env->DT);
    gpu_sync();
    int rc = bwd ? kjit_adaln_row_gather_bwd(env->ctx, b, (void *)(uintptr_t)env->ws, wsb, NULL)
                 : kjit_adaln_row_gather_fwd(env->ctx, b, NULL);
    if (rc != KJIT_EINVAL || !kjit_last_error()[0]) {
        fprintf(stderr, "line %d: %s %s: got %s (%s), expected KJIT_EINVAL with a message\n", line, bwd ? "bwd" : "fwd",
                what, kjit_status_name(rc), kjit_last_error());
        kjit_test_failures++;
    }
    gpu_sync();
    if (!opnd_untouched(env->O) || !opnd_untouched(env->DT)) {
        fprintf(stderr, "line %d: %s %s: an output was written\n", line, bwd ? "bwd" : "fwd", what);
        kjit_test_failures++;
    }
}

#define BAD(bwd, mutation)                                        \
    do {                                                          \
        kjit_row_gather_args b = a;                               \
        size_t wsb_ = env.wsb;                                    \
        mutation;                                                 \
        expect_einval(&env, &b, bwd, wsb_, __LINE__, #mutation);  \
    } while (0)

static void bad_arguments(kjit_ctx *ctx, ref_rng *g, kjit_dtype dt, kjit_dtype it)
{
    gcase c = {dt, it, 2, 64, 9, 100, 1, 8, 0, 0, 0, 0, 0};
    const int K = c.k, H = c.h;
    const int64_t N = c.n, R = c.r, W = (int64_t)K * H;
    const size_t es = kjit_dtype_size(dt), ies = kjit_dtype_size(it);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)N);
    gen_index(g, 0, idx, N, R);
    const double *tab = pool_slice(g, dt, (size_t)(R * W)), *dout = pool_slice(g, dt, (size_t)(N * W));
    opnd T, O, D, DT;
    opnd_init(&T, 1, K, H, R, W, 0, dt);
    opnd_init(&O, 1, K, H, N, W + 8, 0, dt);
    opnd_init(&D, 1, K, H, N, W, 0, dt);
    opnd_init(&DT, 1, K, H, R, W + 8, 0, dt);
    opnd_upload(&T, tab, W);
    opnd_upload(&D, dout, W);
    CUdeviceptr didx = upload_index(idx, N, it);
    kjit_row_gather_args a;
    args_for(&a, &c, didx, &T, &O, &D, &DT);
    bad_env env = {ctx, &O, &DT, 0, 0};
    CHECK_STATUS(kjit_adaln_row_gather_workspace(N, H, K, R, &env.wsb), KJIT_OK);
    env.ws = gpu_alloc(env.wsb);

    /* The valid call works (so the failures below are the mutation's). */
    opnd_poison(&O);
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &a, NULL), KJIT_OK);
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &a, (void *)(uintptr_t)env.ws, env.wsb, NULL), KJIT_OK);
    gpu_sync();

    for (int bwd = 0; bwd < 2; ++bwd) {
        BAD(bwd, b.num_tables = 0);
        BAD(bwd, b.num_tables = 9);
        BAD(bwd, b.num_tables = -1);
        BAD(bwd, b.hidden = 0);
        BAD(bwd, b.hidden = -64);
        BAD(bwd, b.n = -1);
        BAD(bwd, b.n = (int64_t)1 << 31);
        BAD(bwd, b.dtype = KJIT_F16);
        BAD(bwd, b.dtype = KJIT_I32);
        BAD(bwd, b.dtype = (kjit_dtype)99);
        BAD(bwd, b.index.dtype = KJIT_F32);
        BAD(bwd, b.index.dtype = KJIT_BF16);
        BAD(bwd, b.index.rows = 0);
        BAD(bwd, b.index.rows = -3);
        BAD(bwd, b.index.rows = 65536);
        BAD(bwd, b.index.ptr = NULL);
        BAD(bwd, b.index.ptr = (const char *)b.index.ptr + ies / 2);
    }
    BAD(0, b.table[0] = NULL);
    BAD(0, b.table[1] = NULL);
    BAD(0, b.out[1] = NULL);
    BAD(0, b.table_stride[1] = H - 1);
    BAD(0, b.table_stride[0] = 0);
    BAD(0, b.out_stride[0] = H - 1);
    BAD(0, b.out_stride[1] = -W);
    BAD(0, b.table[1] = (const char *)b.table[1] + es / 2);
    BAD(0, b.out[0] = (char *)b.out[0] + es / 2);
    BAD(1, b.dout[0] = NULL);
    BAD(1, b.dtable[1] = NULL);
    BAD(1, b.dout_stride[1] = H - 1);
    BAD(1, b.dtable_stride[0] = H - 1);
    BAD(1, b.dout[1] = (const char *)b.dout[1] + es / 2);
    BAD(1, b.dtable[0] = (char *)b.dtable[0] + es / 2);
    BAD(1, wsb_ = env.wsb - 1);
    BAD(1, wsb_ = 0);

    /* NULL ctx / args. */
    CHECK_STATUS(kjit_adaln_row_gather_fwd(NULL, &a, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, NULL, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_adaln_row_gather_bwd(NULL, &a, NULL, 0, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, NULL, NULL, 0, NULL), KJIT_EINVAL);
    size_t bytes;
    CHECK_STATUS(kjit_adaln_row_gather_workspace(N, H, 0, R, &bytes), KJIT_EINVAL);
    CHECK_STATUS(kjit_adaln_row_gather_workspace(N, H, 9, R, &bytes), KJIT_EINVAL);
    CHECK_STATUS(kjit_adaln_row_gather_workspace(N, 0, K, R, &bytes), KJIT_EINVAL);
    CHECK_STATUS(kjit_adaln_row_gather_workspace(N, H, K, 0, &bytes), KJIT_EINVAL);
    CHECK_STATUS(kjit_adaln_row_gather_workspace(-1, H, K, R, &bytes), KJIT_EINVAL);
    CHECK_STATUS(kjit_adaln_row_gather_workspace(N, H, K, R, NULL), KJIT_EINVAL);

    /* N = 0: a no-op, also with NULL pointers. */
    {
        kjit_row_gather_args z = a;
        z.n = 0;
        opnd_poison(&O), opnd_poison(&DT);
        CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &z, NULL), KJIT_OK);
        gpu_sync();
        CHECK(opnd_untouched(&O));
        z.index.ptr = NULL;
        for (int q = 0; q < K; ++q) z.out[q] = NULL;
        CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &z, NULL), KJIT_OK);
        /* Backward of no rows: dtable all zeros (the gradient of an empty
         * sum, kjit.h), nothing else written. */
        z = a;
        z.n = 0;
        CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &z, (void *)(uintptr_t)env.ws, env.wsb, NULL), KJIT_OK);
        gpu_sync();
        double *dt_got = malloc(sizeof(double) * (size_t)(R * W));
        int64_t outside = opnd_fetch(&DT, dt_got, W), zeros = 0, nans = 0;
        for (int64_t i = 0; i < R * W; ++i) zeros += dt_got[i] == 0.0, nans += isnan(dt_got[i]) != 0;
        if (outside || zeros != R * W) {
            fprintf(stderr, "bwd n=0 (%s): %lld changed outside, %lld of %lld dtable elements zero, %lld untouched\n",
                    kjit_dtype_name(dt), (long long)outside, (long long)zeros, (long long)(R * W), (long long)nans);
            kjit_test_failures++;
        } else {
            printf("bwd n=0 (%s): dtable zeroed\n", kjit_dtype_name(dt));
        }
        free(dt_got);
        CHECK(opnd_untouched(&O));
    }

    gpu_free(env.ws), gpu_free(didx);
    opnd_free(&T), opnd_free(&O), opnd_free(&D), opnd_free(&DT);
    free(idx);
}

int main(void)
{
    kjit_ctx *ctx = kjit_gpu_ctx_or_skip("test_gather", KJIT_INDEX_CHECK_OFF);
    kjit_ctx *sync_ctx = kjit_gpu_ctx_or_skip("test_gather", KJIT_INDEX_CHECK_SYNC);
    kjit_ctx *async_ctx = kjit_gpu_ctx_or_skip("test_gather", KJIT_INDEX_CHECK_ASYNC);
    ref_rng g;
    ref_rng_seed(&g, kjit_test_seed("test_gather"));

    /* The matrix: dtype x index dtype x K x H x R. int32 cases use the chunk
     * views of one buffer (outputs padded except for R = 9, so the pad
     * columns are checked), int64 cases separate contiguous buffers. */
    const kjit_dtype dts[] = {KJIT_BF16, KJIT_F32}, its[] = {KJIT_I32, KJIT_I64};
    const int ks[] = {1, 6, 8}, hs[] = {5376, 1001, 64};
    const int64_t rs[] = {1, 9, 300};
    int ncases = 0;
    for (int di = 0; di < 2; ++di)
        for (int ii = 0; ii < 2; ++ii)
            for (int ki = 0; ki < 3; ++ki)
                for (int hi = 0; hi < 3; ++hi)
                    for (int ri = 0; ri < 3; ++ri) {
                        gcase c;
                        memset(&c, 0, sizeof c);
                        c.dt = dts[di], c.it = its[ii], c.k = ks[ki], c.h = hs[hi], c.r = rs[ri];
                        /* N = 3000, fewer rows for the widest (reference work <= ~10M elements). */
                        c.n = 10000000 / ((int64_t)c.k * c.h);
                        c.n = c.n > 3000 ? 3000 : c.n < 256 ? 256 : c.n;
                        c.shared = ii == 0;
                        c.pad_out = c.shared && c.r != 9 ? 8 : 0;
                        c.ctx_ws = ri == 2 && ki == 1;
                        c.pattern = (ki + hi + ri + ii) % 3;
                        run_case(ctx, &g, &c);
                        ncases++;
                    }
    /* Misaligned views (scalar path), odd strides, large N. */
    const gcase extra[] = {
        /* dt, it, K, H, R, N, shared, pad_out, pad_in, mis_in, mis_out, ctx_ws, pattern */
        {KJIT_BF16, KJIT_I32, 6, 5376, 9, 700, 1, 0, 0, 1, 1, 0, 1},
        {KJIT_F32, KJIT_I64, 2, 64, 300, 3000, 0, 0, 0, 0, 1, 0, 0},
        {KJIT_BF16, KJIT_I64, 3, 512, 9, 3000, 1, 1, 1, 0, 0, 0, 1},
        {KJIT_F32, KJIT_I32, 4, 1024, 9, 3000, 1, 3, 0, 1, 0, 1, 2},
        {KJIT_F32, KJIT_I32, 1, 1024, 1, 40000, 1, 8, 0, 0, 0, 0, 0},
        {KJIT_BF16, KJIT_I64, 2, 256, 300, 40000, 0, 0, 0, 0, 0, 0, 1},
        /* K = 5 and 7: every K in 1..8 runs once. */
        {KJIT_BF16, KJIT_I32, 5, 1001, 9, 1500, 1, 2, 0, 0, 0, 0, 2},
        {KJIT_F32, KJIT_I64, 7, 64, 300, 3000, 0, 0, 0, 0, 0, 1, 1},
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; ++i, ++ncases) run_case(ctx, &g, &extra[i]);
    printf("test_gather: %d accuracy cases; worst dtable rel err: bf16 %.3g, fp32 %.3g\n", ncases, worst_bf16,
           worst_fp32);

    const gcase inv[] = {
        {KJIT_BF16, KJIT_I32, 6, 5376, 9, 0, 1, 0, 0, 0, 0, 0, 1},
        {KJIT_F32, KJIT_I64, 8, 1001, 300, 0, 0, 0, 0, 0, 0, 0, 0},
        {KJIT_BF16, KJIT_I64, 3, 64, 1, 0, 1, 8, 0, 1, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof inv / sizeof inv[0]; ++i) batch_invariance(ctx, &g, inv[i]);
    /* The sweep and the split: the chunk(6) layout in bf16, and separate fp32 tables with int64 indices
     * through misaligned views (the scalar path). */
    const gcase sweep[] = {
        {KJIT_BF16, KJIT_I32, 6, 256, 9, 0, 1, 8, 0, 0, 0, 0, 1},
        {KJIT_F32, KJIT_I64, 3, 136, 300, 0, 0, 0, 0, 1, 1, 0, 2},
    };
    for (size_t i = 0; i < sizeof sweep / sizeof sweep[0]; ++i) sweep_and_split(ctx, &g, sweep[i]);

    index_checking(sync_ctx, async_ctx, &g);
    bad_arguments(ctx, &g, KJIT_BF16, KJIT_I32);
    bad_arguments(ctx, &g, KJIT_F32, KJIT_I64);

    free(pools[0]), free(pools[1]);
    kjit_ctx_destroy(async_ctx);
    kjit_ctx_destroy(sync_ctx);
    kjit_ctx_destroy(ctx);
    return kjit_test_result("test_gather");
}
