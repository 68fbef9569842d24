/* adaln_row_gather: K tables gathered by one index (kernel_templates/adaln_row_gather.cuh). */
#include <stdio.h>
#include <string.h>

#include "common/kjit_params.h"
#include "core/error.h"
#include "ops/op.h"
#include "ops/overlap.h"
#include "ops/partition.h"
#include "ops/rows.h"

#define OP "adaln_row_gather"
/* Fewest rows per backward chunk (part of the partition, so of the bits):
 * the gather's backward fits two CTAs per SM, like norm_modulate's. */
#define GATHER_MIN_CHUNK 16
#define GATHER_TEMPLATE "adaln_row_gather.cuh"
#define GATHER_BLOCK 256

static kjit_dtype table_dtype(kjit_dtype act) { return act == KJIT_F16 ? KJIT_F32 : act; }

static int gather_kernels(int hidden, kjit_dtype act, kjit_kernel_spec *out, int max)
{
    if (hidden < 1 || hidden > KJIT_MAX_HIDDEN)
        return kjit__fail(KJIT_EINVAL, OP ": hidden %d outside 1..%d", hidden, KJIT_MAX_HIDDEN);
    const kjit_dtype tp = table_dtype(act);
    const char *vec = hidden % (16 / (int)kjit_dtype_size(tp)) == 0 ? "true" : "false";
    int n = 0;
    for (int i = 0; i < 2; ++i) {
        const char *ti = i ? "long long" : "int";
        n = kjit__spec_add(out, max, n, &kjit__op_adaln_row_gather, "kjit_gather_fwd<%s, %s, %s>", kjit__dtype_cxx(tp), ti, vec);
        n = kjit__spec_add(out, max, n, &kjit__op_adaln_row_gather, "kjit_gather_bwd<%s, %s, %s>", kjit__dtype_cxx(tp), ti, vec);
        n = kjit__spec_add(out, max, n, &kjit__op_adaln_row_gather, "kjit_index_check<%s>", ti);
        if (n <= max) out[n - 1].template_file = "index_check.cuh";
    }
    return kjit__part_specs(OP, tp, out, max, n);
}

const kjit_op_desc kjit__op_adaln_row_gather = {OP, GATHER_TEMPLATE, gather_kernels};

/* The argument checks; sp (2 * KJIT_MAX_TABLES + 2 spans) receives the
 * call's memory operands: the index, tables and outputs, or douts and table
 * gradients (and the workspace, added by the caller). */
static int validate(const kjit_row_gather_args *a, int bwd, int *vec, kjit_span *sp, int *nsp)
{
    int rc;
    static const char *const tn[KJIT_MAX_TABLES] = {"table[0]", "table[1]", "table[2]", "table[3]",
                                                    "table[4]", "table[5]", "table[6]", "table[7]"};
    static const char *const on[KJIT_MAX_TABLES] = {"out[0]", "out[1]", "out[2]", "out[3]",
                                                    "out[4]", "out[5]", "out[6]", "out[7]"};
    static const char *const dn[KJIT_MAX_TABLES] = {"dout[0]", "dout[1]", "dout[2]", "dout[3]",
                                                    "dout[4]", "dout[5]", "dout[6]", "dout[7]"};
    static const char *const gn[KJIT_MAX_TABLES] = {"dtable[0]", "dtable[1]", "dtable[2]", "dtable[3]",
                                                    "dtable[4]", "dtable[5]", "dtable[6]", "dtable[7]"};
    *nsp = 0;
    if (a->n < 0 || a->n > KJIT_MAX_ROWS)
        return kjit__fail(KJIT_EINVAL, OP ": n = %lld outside 0..%lld", (long long)a->n, KJIT_MAX_ROWS);
    if (a->hidden < 1 || a->hidden > KJIT_MAX_HIDDEN)
        return kjit__fail(KJIT_EINVAL, OP ": hidden %d outside 1..%d", a->hidden, KJIT_MAX_HIDDEN);
    if (a->num_tables < 1 || a->num_tables > KJIT_MAX_TABLES)
        return kjit__fail(KJIT_EINVAL, OP ": num_tables %d outside 1..%d", a->num_tables, KJIT_MAX_TABLES);
    if ((rc = kjit__check_dtype(OP, "dtype", a->dtype, 0))) return rc;
    if ((rc = kjit__check_index(OP, &a->index, a->n))) return rc;
    *vec = a->hidden % (16 / (int)kjit_dtype_size(a->dtype)) == 0;
    const size_t es = kjit_dtype_size(a->dtype);
    sp[(*nsp)++] = kjit__span_bytes("index", a->index.ptr, (size_t)a->n * kjit_dtype_size(a->index.dtype), 0);
    for (int k = 0; k < a->num_tables; ++k) {
        /* Forward: tables in, rows out; backward: rows in, tables out. */
        const char *in = bwd ? dn[k] : tn[k], *ou = bwd ? gn[k] : on[k];
        const void *ip = bwd ? a->dout[k] : a->table[k];
        const void *op = bwd ? (const void *)a->dtable[k] : (const void *)a->out[k];
        const int64_t is = bwd ? a->dout_stride[k] : a->table_stride[k], os = bwd ? a->dtable_stride[k] : a->out_stride[k];
        const int64_t ir = bwd ? a->n : a->index.rows, orows = bwd ? a->index.rows : a->n;
        if ((rc = kjit__check_rows(OP, in, ip, is, ir, a->hidden, a->dtype, vec))) return rc;
        if ((rc = kjit__check_rows(OP, ou, op, os, orows, a->hidden, a->dtype, vec))) return rc;
        sp[(*nsp)++] = kjit__span_rows(in, ip, is, ir, a->hidden, es, 0);
        sp[(*nsp)++] = kjit__span_rows(ou, op, os, orows, a->hidden, es, 1);
    }
    return KJIT_OK;
}

static unsigned cells(const kjit_row_gather_args *a, int vec)
{
    return (unsigned)(vec ? a->hidden / (16 / (int)kjit_dtype_size(a->dtype)) : a->hidden);
}

int kjit_adaln_row_gather_fwd(kjit_ctx *ctx, const kjit_row_gather_args *a, CUstream stream)
{
    kjit__clear_error();
    if (!ctx || !a) return kjit__fail(KJIT_EINVAL, OP ": %s is NULL", ctx ? "args" : "ctx");
    kjit_span sp[2 * KJIT_MAX_TABLES + 2];
    int nsp, vec, rc = validate(a, 0, &vec, sp, &nsp);
    if (!rc) rc = kjit__spans_check(OP " forward", sp, nsp);
    if (rc || a->n == 0) return rc;
    int pushed;
    if ((rc = kjit__ctx_enter(ctx, &pushed))) return rc;
    kjit_gather_fwd_params p = {0};
    if ((rc = kjit__index_prepare(ctx, OP, &a->index, a->n, stream, &p.index))) goto out;
    for (int k = 0; k < a->num_tables; ++k) {
        p.table.ptr[k] = a->table[k], p.table.stride[k] = a->table_stride[k];
        p.out[k] = a->out[k], p.out_stride[k] = a->out_stride[k];
    }
    p.n = a->n, p.h = a->hidden, p.k = a->num_tables;
    const unsigned hv = cells(a, vec);
    const unsigned block = hv < GATHER_BLOCK ? (hv + 31) / 32 * 32 : GATHER_BLOCK;
    long long g = (a->n + 31) / 32;
    if (g > 65535) g = 65535;
    char e[128];
    snprintf(e, sizeof e, "kjit_gather_fwd<%s, %s, %s>", kjit__dtype_cxx(a->dtype), kjit__dtype_cxx(a->index.dtype),
             vec ? "true" : "false");
    rc = kjit__run(ctx, GATHER_TEMPLATE, OP, e, (hv + block - 1) / block, (unsigned)a->num_tables, (unsigned)g, block, 0,
                   stream, &p);
out:
    kjit__ctx_leave(ctx, pushed);
    return rc;
}

int kjit_adaln_row_gather_bwd(kjit_ctx *ctx, const kjit_row_gather_args *a, void *ws, size_t ws_bytes, CUstream stream)
{
    kjit__clear_error();
    if (!ctx || !a) return kjit__fail(KJIT_EINVAL, OP " backward: %s is NULL", ctx ? "args" : "ctx");
    kjit_span sp[2 * KJIT_MAX_TABLES + 2];
    int nsp, vec, rc = validate(a, 1, &vec, sp, &nsp);
    if (rc) return rc;
    kjit_part_plan pl;
    kjit__part_plan(&pl, a->n, a->index.rows, a->num_tables, a->hidden, 0, GATHER_MIN_CHUNK, KJIT_PART_MAX_CHUNKS);
    if ((rc = kjit__workspace_check(OP, ws, ws_bytes, pl.bytes, "kjit_adaln_row_gather_workspace"))) return rc;
    if (ws) sp[nsp++] = kjit__span_bytes("workspace", ws, pl.bytes, 1);
    if ((rc = kjit__spans_check(OP " backward", sp, nsp))) return rc;
    int pushed;
    if ((rc = kjit__ctx_enter(ctx, &pushed))) return rc;
    kjit_gather_bwd_params p = {0};
    kjit_index_arg ix;
    CUdeviceptr base;
    const unsigned hv = cells(a, vec);
    const unsigned block = hv % 224 == 0 && hv <= 1024 ? 224 : hv < GATHER_BLOCK ? (hv + 31) / 32 * 32 : GATHER_BLOCK;
    char e[128];
    snprintf(e, sizeof e, "kjit_gather_bwd<%s, %s, %s>", kjit__dtype_cxx(a->dtype), kjit__dtype_cxx(a->index.dtype),
             vec ? "true" : "false");
    CUfunction fn;
    /* Everything loaded before anything is written. */
    if ((rc = kjit__ctx_kernel(ctx, GATHER_TEMPLATE, OP, e, &fn))) goto out;
    if ((rc = kjit__part_preload(ctx, OP, a->index.dtype, a->dtype))) goto out;
    if ((rc = kjit__index_prepare(ctx, OP, &a->index, a->n, stream, &ix))) goto out;
    if ((rc = kjit__workspace(ctx, ws, pl.bytes, stream, &base))) goto out;
    kjit__part_carve(&pl, base, &p.part, &p.partial, NULL);
    if (a->n == 0) p.part.n = 0;
    if ((rc = kjit__part_build(ctx, OP, &p.part, &ix, a->index.dtype, stream))) goto out;
    for (int k = 0; k < a->num_tables; ++k) {
        p.dout[k] = a->dout[k], p.dout_stride[k] = a->dout_stride[k];
        p.dtable[k] = a->dtable[k], p.dtable_stride[k] = a->dtable_stride[k];
    }
    p.h = a->hidden, p.k = a->num_tables;
    rc = kjit__run(ctx, GATHER_TEMPLATE, OP, e, (hv + block - 1) / block, (unsigned)p.part.chunks, (unsigned)a->num_tables,
                   block, 0, stream, &p);
    if (!rc) {
        void *outs[KJIT_MAX_TABLES];
        long long strides[KJIT_MAX_TABLES];
        for (int k = 0; k < a->num_tables; ++k) outs[k] = a->dtable[k], strides[k] = a->dtable_stride[k];
        rc = kjit__part_finish(ctx, OP, &p.part, p.partial, a->num_tables, a->hidden, outs, strides, NULL, NULL,
                               a->dtype, stream);
    }
out:
    kjit__ctx_leave(ctx, pushed);
    return rc;
}

int kjit_adaln_row_gather_workspace(int64_t n, int hidden, int num_tables, int64_t rows, size_t *bytes)
{
    kjit__clear_error();
    if (!bytes) return kjit__fail(KJIT_EINVAL, "kjit_adaln_row_gather_workspace: bytes is NULL");
    int rc = kjit__check_sizes("kjit_adaln_row_gather_workspace", n, hidden, rows);
    if (rc) return rc;
    if (num_tables < 1 || num_tables > KJIT_MAX_TABLES)
        return kjit__fail(KJIT_EINVAL, "kjit_adaln_row_gather_workspace: num_tables = %d outside 1..%d", num_tables,
                          KJIT_MAX_TABLES);
    kjit_part_plan pl;
    kjit__part_plan(&pl, n, rows, num_tables, hidden, 0, GATHER_MIN_CHUNK, KJIT_PART_MAX_CHUNKS);
    *bytes = pl.bytes;
    return KJIT_OK;
}
