/* Argument checks and index handling shared by the row ops. */
#ifndef KJIT_ROWS_H
#define KJIT_ROWS_H

#include <stdint.h>

#include "common/kjit_params.h"
#include "core/ctx.h"
#include "kjit.h"

#define KJIT_MAX_ROWS 2147483647LL /* N < 2^31: row ids are int32 in the partition */
#define KJIT_MAX_TABLE_ROWS 65535
#define KJIT_MAX_HIDDEN 65536

/* A row-strided (rows, h) operand `name` of op `op`: non-NULL (when rows >
 * 0), stride >= h, aligned to its element, no overflow. Clears *vec when the
 * operand cannot take 16-byte vector access. */
int kjit__check_rows(const char *op, const char *name, const void *p, int64_t stride, int64_t rows, int h,
                     kjit_dtype dt, int *vec);
/* A contiguous [h] vector (weight). */
int kjit__check_vector(const char *op, const char *name, const void *p, int h, kjit_dtype dt, int *vec);
int kjit__check_index(const char *op, const kjit_index *ix, int64_t n);
int kjit__check_dtype(const char *op, const char *name, kjit_dtype dt, int allow_f16);
/* The sizes a workspace query takes: n rows, hidden h, a table of rows
 * rows; each out of range is named with its range. */
int kjit__check_sizes(const char *fn, int64_t n, int h, int64_t rows);

/* The device-side index argument for the ctx's checking mode. In SYNC mode
 * this validates index[0, n) first and returns KJIT_EINDEX (naming the first
 * bad row and its value) before anything is written. Call inside enter/leave. */
int kjit__index_prepare(kjit_ctx *ctx, const char *op, const kjit_index *ix, int64_t n, CUstream stream,
                        kjit_index_arg *out);

/* A caller's workspace (NULL: the context's, nothing to check) holds need
 * bytes and is 256-byte aligned, else KJIT_EINVAL naming the size query fn.
 * Called with the other argument checks, before anything is loaded or run. */
int kjit__workspace_check(const char *op, const void *ws, size_t ws_bytes, size_t need, const char *fn);

/* The caller's workspace if given (checked by kjit__workspace_check), else
 * the context's own, grown to need bytes. */
int kjit__workspace(kjit_ctx *ctx, void *ws, size_t need, CUstream stream, CUdeviceptr *out);

/* kjit__ctx_kernel_smem (the kernel loaded and allowed smem bytes of
 * dynamic shared memory), then the launch. */
int kjit__run(kjit_ctx *ctx, const char *template_file, const char *label, const char *name_expr,
              unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned smem, CUstream stream, void *params);

#endif
