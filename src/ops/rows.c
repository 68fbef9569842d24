#include "ops/rows.h"

#include <stddef.h>
#include <stdio.h>

#include "core/error.h"
#include "ops/op.h"

int kjit__check_sizes(const char *fn, int64_t n, int h, int64_t rows)
{
    if (n < 0 || n > KJIT_MAX_ROWS)
        return kjit__fail(KJIT_EINVAL, "%s: n = %lld outside 0..%lld", fn, (long long)n, (long long)KJIT_MAX_ROWS);
    if (h < 1 || h > KJIT_MAX_HIDDEN)
        return kjit__fail(KJIT_EINVAL, "%s: hidden = %d outside 1..%d", fn, h, KJIT_MAX_HIDDEN);
    if (rows < 1 || rows > KJIT_MAX_TABLE_ROWS)
        return kjit__fail(KJIT_EINVAL, "%s: rows = %lld outside 1..%lld", fn, (long long)rows,
                          (long long)KJIT_MAX_TABLE_ROWS);
    return KJIT_OK;
}

int kjit__check_dtype(const char *op, const char *name, kjit_dtype dt, int allow_f16)
{
    if (dt == KJIT_F32 || dt == KJIT_BF16 || (allow_f16 && dt == KJIT_F16)) return KJIT_OK;
    return kjit__fail(KJIT_EINVAL, "%s: %s %s: expected fp32, bf16%s", op, name, kjit_dtype_name(dt),
                      allow_f16 ? " or fp16" : "");
}

int kjit__check_rows(const char *op, const char *name, const void *p, int64_t stride, int64_t rows, int h,
                     kjit_dtype dt, int *vec)
{
    const size_t es = kjit_dtype_size(dt);
    if (rows <= 0) return KJIT_OK;
    if (!p) return kjit__fail(KJIT_EINVAL, "%s: %s is NULL", op, name);
    if (stride < h)
        return kjit__fail(KJIT_EINVAL, "%s: %s row stride %lld < hidden %d", op, name, (long long)stride, h);
    if ((uintptr_t)p % es)
        return kjit__fail(KJIT_EINVAL, "%s: %s is not aligned to its %zu-byte elements", op, name, es);
    if ((uint64_t)(rows - 1) > (uint64_t)(INT64_MAX / 8) / (uint64_t)stride)
        return kjit__fail(KJIT_EINVAL, "%s: %s: %lld rows of stride %lld overflow 64-bit offsets", op, name,
                          (long long)rows, (long long)stride);
    /* One past the last byte within the address space: past it the
     * device's 64-bit addresses would wrap to low ones, which the overlap
     * check (exact integers) would not see. extent < INT64_MAX / 2 here. */
    const uint64_t extent = ((uint64_t)(rows - 1) * (uint64_t)stride + (uint64_t)h) * es;
    if (extent > UINTPTR_MAX - (uintptr_t)p)
        return kjit__fail(KJIT_EINVAL, "%s: %s: %lld rows of stride %lld from %p run past the end of the address space",
                          op, name, (long long)rows, (long long)stride, p);
    if ((uintptr_t)p % 16 || ((uint64_t)stride * es) % 16) *vec = 0;
    return KJIT_OK;
}

int kjit__check_vector(const char *op, const char *name, const void *p, int h, kjit_dtype dt, int *vec)
{
    return kjit__check_rows(op, name, p, h, 1, h, dt, vec);
}

int kjit__check_index(const char *op, const kjit_index *ix, int64_t n)
{
    if (ix->dtype != KJIT_I32 && ix->dtype != KJIT_I64)
        return kjit__fail(KJIT_EINVAL, "%s: index dtype %s: expected int32 or int64", op, kjit_dtype_name(ix->dtype));
    if (ix->rows < 1 || ix->rows > KJIT_MAX_TABLE_ROWS)
        return kjit__fail(KJIT_EINVAL, "%s: index.rows (table rows R) = %lld outside 1..%d", op,
                          (long long)ix->rows, KJIT_MAX_TABLE_ROWS);
    /* Like every operand of n rows, the index is not read at n = 0, and
     * not checked then: NULL or any address passes. */
    if (n == 0) return KJIT_OK;
    if (!ix->ptr) return kjit__fail(KJIT_EINVAL, "%s: index is NULL", op);
    if ((uintptr_t)ix->ptr % kjit_dtype_size(ix->dtype))
        return kjit__fail(KJIT_EINVAL, "%s: index is not aligned to its %zu-byte elements", op,
                          kjit_dtype_size(ix->dtype));
    if ((uint64_t)n > (UINTPTR_MAX - (uintptr_t)ix->ptr) / kjit_dtype_size(ix->dtype))
        return kjit__fail(KJIT_EINVAL, "%s: index: %lld entries from %p run past the end of the address space", op,
                          (long long)n, ix->ptr);
    return KJIT_OK;
}

int kjit__run(kjit_ctx *ctx, const char *template_file, const char *label, const char *name_expr,
              unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned smem, CUstream stream, void *params)
{
    CUfunction fn;
    int rc = kjit__ctx_kernel_smem(ctx, template_file, label, name_expr, smem, &fn);
    return rc ? rc : kjit__launch(ctx, fn, gx, gy, gz, bx, smem, stream, params, name_expr);
}

/* Runs the loaded check kernel fn (expr) and reads back the first bad row
 * (~0: none). */
static int check_indices(kjit_ctx *ctx, CUfunction fn, const char *expr, const kjit_index *ix, int64_t n,
                         CUstream stream, unsigned long long *bad)
{
    const kjit_cu_api *cu = kjit__cu();
    const CUdeviceptr pos = ctx->err_flag + offsetof(kjit_index_report, pos);
    KJIT_CU_TRY(cu, MemsetD8Async(pos, 0xFF, sizeof(unsigned long long), stream), "index check");
    kjit_index_check_params p = {ix->ptr, (void *)(uintptr_t)ctx->err_flag, n, ix->rows};
    int64_t blocks = (n + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    int rc = kjit__launch(ctx, fn, (unsigned)blocks, 1, 1, 256, 0, stream, &p, expr);
    if (rc) return rc;
    KJIT_CU_TRY(cu, MemcpyDtoHAsync(bad, pos, sizeof *bad, stream), "index check");
    KJIT_CU_TRY(cu, StreamSynchronize(stream), "index check");
    return KJIT_OK;
}

int kjit__index_prepare(kjit_ctx *ctx, const char *op, const kjit_index *ix, int64_t n, CUstream stream,
                        kjit_index_arg *out)
{
    out->ptr = ix->ptr;
    out->r = ix->rows;
    out->err = ctx->index_check == KJIT_INDEX_CHECK_ASYNC ? (int *)(uintptr_t)ctx->err_flag : NULL;
    if (ctx->index_check != KJIT_INDEX_CHECK_SYNC || n == 0) return KJIT_OK;
    /* The check reads its result back and waits for the stream, neither of
     * which a capture allows (the capture would be invalidated): refuse
     * before recording anything. */
    const kjit_cu_api *cu = kjit__cu();
    const char *which;
    if (kjit__cu_capturing(cu, stream, &which))
        return kjit__fail(KJIT_EINVAL, "%s: index checking SYNC waits for the stream, which cannot happen while %s is "
                          "being captured into a CUDA graph: use KJIT_INDEX_CHECK_ASYNC (or OFF) in a context for "
                          "captured calls", op, which);

    /* Loaded (a compile on first use, perhaps a wait for another process's
     * build) before the lock, which then covers only the launch and the
     * read back. */
    char expr[64];
    snprintf(expr, sizeof expr, "kjit_index_check<%s>", kjit__dtype_cxx(ix->dtype));
    CUfunction fn;
    int rc = kjit__ctx_kernel_smem(ctx, "index_check.cuh", "index_check", expr, 0, &fn);
    if (rc) return rc;
    /* The report word is the context's: one check at a time uses it. */
    pthread_mutex_lock(&ctx->index_lock);
    unsigned long long bad = 0;
    rc = check_indices(ctx, fn, expr, ix, n, stream, &bad);
    pthread_mutex_unlock(&ctx->index_lock);
    if (rc || bad == ~0ULL) return rc;
    long long v = 0;
    const size_t es = kjit_dtype_size(ix->dtype);
    /* On the call's stream (a plain copy would order against the legacy
     * stream, and so against other threads' work). */
    KJIT_CU_TRY(cu, MemcpyDtoHAsync(&v, (CUdeviceptr)(uintptr_t)ix->ptr + bad * es, es, stream), "index check");
    KJIT_CU_TRY(cu, StreamSynchronize(stream), "index check");
    if (es == 4) v = (long long)(int)v;
    return kjit__fail(KJIT_EINDEX, "%s: index[%llu] = %lld is outside [0, %lld); nothing was written", op, bad, v,
                      (long long)ix->rows);
}

int kjit__workspace_check(const char *op, const void *ws, size_t ws_bytes, size_t need, const char *fn)
{
    if (!ws) return KJIT_OK;
    if (ws_bytes < need)
        return kjit__fail(KJIT_EINVAL, "%s backward: workspace of %zu bytes, %zu needed (%s)", op, ws_bytes, need, fn);
    if ((uintptr_t)ws % 256) return kjit__fail(KJIT_EINVAL, "%s backward: workspace is not 256-byte aligned", op);
    /* The bytes the call writes, as for every other operand: past 2^64
     * the device would wrap to low addresses the overlap check does not see. */
    if (need > UINTPTR_MAX - (uintptr_t)ws)
        return kjit__fail(KJIT_EINVAL, "%s backward: workspace: %zu bytes from %p run past the end of the address space",
                          op, need, ws);
    return KJIT_OK;
}

int kjit__workspace(kjit_ctx *ctx, void *ws, size_t need, CUstream stream, CUdeviceptr *out)
{
    if (!ws) return kjit__ctx_workspace(ctx, need, stream, out);
    *out = (CUdeviceptr)(uintptr_t)ws;
    return KJIT_OK;
}
