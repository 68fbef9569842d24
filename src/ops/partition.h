/* Host side of the backward row partition (kernel_templates/partition.cuh):
 * sizes, workspace layout, the three build launches and the finishers. */
#ifndef KJIT_PARTITION_H
#define KJIT_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#include "common/kjit_params.h"
#include "core/ctx.h"
#include "kjit.h"

typedef struct kjit_part_plan {
    long long n, r, tile, tiles, chunk, chunks, sblk;
    int ng, h, with_w;
    size_t off_start, off_tile_pos, off_chunk_row, off_scan, off_partial, off_partial_w, bytes;
} kjit_part_plan;

/* The most chunks of any partition: the finisher's column sums take at most
 * 8 groups of 32 chunks (kernel_templates/partition.cuh). */
#define KJIT_PART_MAX_CHUNKS 256

/* Sizes and workspace layout for n rows, r table rows, ng gradients of h
 * columns, with or without a weight gradient (partial_w), chunks of at
 * least min_chunk rows and at most max_chunks (<= KJIT_PART_MAX_CHUNKS)
 * chunks, both fixed per op. */
void kjit__part_plan(kjit_part_plan *pl, int64_t n, int64_t r, int ng, int h, int with_w, int min_chunk,
                     int max_chunks);
/* Points part / partial / partial_w into the workspace at base (partial and
 * partial_w may be NULL: a partition alone). */
void kjit__part_carve(const kjit_part_plan *pl, CUdeviceptr base, kjit_partition *part, float **partial,
                      float **partial_w);
/* Loads every partition kernel a backward will launch before the backward
 * writes anything: a failure to load one must not leave outputs half
 * written. */
int kjit__part_preload(kjit_ctx *ctx, const char *label, kjit_dtype index_dtype, kjit_dtype tp);
/* The build: count, scan, scatter, or the one-CTA build for small problems
 * (same bits; ctx->part_small, KJIT_PART_SMALL=0 turns it off); graph
 * capturable. */
int kjit__part_build(kjit_ctx *ctx, const char *label, const kjit_partition *part, const kjit_index_arg *ix,
                     kjit_dtype index_dtype, CUstream stream);
/* Whether a training forward's extra block may build part (kjit_part_small's
 * build inside the forward launch of `threads` threads per block, rows of
 * row_bytes, fwd_smem bytes of its own dynamic shared memory, persistent:
 * its grid capped at the persistent size): the one-CTA build's limits (64
 * tiles, 48 KiB of counters) and the one-CTA build on, at most 3 tiles per
 * warp (1 for a persistent grid), rows of 4 KiB or more, counters within
 * the forward's shared memory or 4 KiB. Past 64 tiles the block outlasts the
 * forward's rows (H200, 2026-11-30, 32768 rows = 128 tiles: norm_modulate
 * forward + backward 510 us with it, 477 us with the three build
 * launches). Returns the dynamic shared memory it needs, or 0. */
unsigned kjit__part_inline_smem(const kjit_ctx *ctx, const kjit_partition *part, int threads, size_t row_bytes,
                                size_t fwd_smem, int persistent);
/* The build beside a training forward's persistent grid (kjit_part_beside,
 * partition.cuh): launched right after the forward, it runs on the SM the
 * forward leaves free instead of before it. Needs programmatic dependent
 * launch (ctx->pdl), the one-CTA build on, its counters within 48 KiB and
 * rows of row_bytes >= 4 KiB (a forward long enough to hide it; measured at
 * H = 5376 bf16, 8192 and 32768 rows, H200, 2026-12-03: norm_modulate's
 * training pair 144.3 -> 134.4 and 475.5 -> 468.4 us against the three
 * launches): returns the counters' bytes, or 0 where it does not apply.
 * _load readies the kernel for smem bytes (kjit__ctx_kernel_smem; before the
 * forward launches: a failure must not leave the forward's outputs written
 * and no partition); _beside launches that kernel with the forward's block
 * size, so that the build's block fits where a forward block would. */
unsigned kjit__part_beside_smem(const kjit_ctx *ctx, const kjit_partition *part, size_t row_bytes);
int kjit__part_beside_load(kjit_ctx *ctx, const char *label, kjit_dtype index_dtype, unsigned smem, CUfunction *fn);
int kjit__part_beside(const kjit_ctx *ctx, CUfunction fn, const kjit_partition *part, const kjit_index_arg *ix,
                      unsigned threads, unsigned smem, CUstream stream);
/* Finishes ng row-strided gradient outputs of dtype tp from the partials,
 * and with partial_w != NULL also dw[h] = the sum of partial_w over the
 * chunks (groups of 32 chunks in chunk order, then the groups in order:
 * kernel_templates/partition.cuh): one launch. */
int kjit__part_finish(kjit_ctx *ctx, const char *label, const kjit_partition *part, const float *partial, int ng,
                      int h, void *const out[], const long long out_stride[], const float *partial_w, void *dw,
                      kjit_dtype tp, CUstream stream);

/* The partition kernels' name expressions (for prewarm). */
int kjit__part_specs(const char *op, kjit_dtype tp, kjit_kernel_spec *out, int max, int n);

#endif
