#include "ops/partition.h"

#include <stdio.h>

#include "core/error.h"
#include "ops/op.h"
#include "ops/rows.h"

#define PART_TEMPLATE "partition.cuh"
#define COUNT_WARPS 8
/* The one-CTA build (kjit_part_small) up to 64 tiles (16384 rows at the
 * smallest tile) whose counters fit 48 KiB of shared memory. */
#define SMALL_MAX_TILES 64
#define SMALL_MAX_SMEM (48 * 1024)
/* The training forward's partition block (kjit__part_inline_smem): at most
 * 3 tiles per warp of the forward's block (1 when the forward's grid is a
 * full persistent grid: there the block takes one of its slots, its rows
 * going to the others), rows of at least 4 KiB (a forward long enough to hide the
 * build), and counters that fit the forward's own dynamic shared memory or
 * 4 KiB (every row block reserves them). Measured only at H = 5376 bf16,
 * 4097 rows (1 tile per warp with norm_modulate's persistent grid, 3 with
 * the gated ops' full grids: each at least as fast as the separate build);
 * other shapes take the separate build, as the plain calls do. */
#define INLINE_MAX_ROUNDS 3
#define INLINE_MIN_ROW_BYTES 4096
#define INLINE_FREE_SMEM 4096
/* fp32 partial sums of a backward: with the sort's scratch this keeps the
 * workspace at N = 32768, H = 5376 under 32 MB for R up to 4096. */
#define PARTIAL_BUDGET (28LL << 20)

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

void kjit__part_plan(kjit_part_plan *pl, int64_t n, int64_t r, int ng, int h, int with_w, int min_chunk,
                     int max_chunks)
{
    const long long N = n > 0 ? n : 1, R = r;
    long long cap = 4194304 / R;
    if (cap > 8192) cap = 8192;
    if (cap > 16 * N / R) cap = 16 * N / R;
    if (cap < 1) cap = 1;
    long long tile = ((N + cap - 1) / cap + 31) / 32 * 32;
    if (tile < 256) tile = 256;
    /* At most max_chunks, fewer when their fp32 partials would pass
     * PARTIAL_BUDGET: a function of the op and the shapes, never of a launch
     * or of the device. */
    const long long per_chunk = (2LL * ng + (with_w ? 1 : 0)) * h * 4;
    long long target = per_chunk > 0 ? PARTIAL_BUDGET / per_chunk : KJIT_PART_MAX_CHUNKS;
    if (target > max_chunks) target = max_chunks;
    if (target > KJIT_PART_MAX_CHUNKS) target = KJIT_PART_MAX_CHUNKS;
    if (target < 16) target = 16;
    long long chunk = (N + target - 1) / target;
    if (chunk < min_chunk) chunk = min_chunk;
    pl->n = N;
    pl->r = R;
    pl->tile = tile;
    pl->tiles = (N + tile - 1) / tile;
    pl->chunk = chunk;
    pl->chunks = (N + chunk - 1) / chunk;
    pl->sblk = (pl->tiles * R + 4095) / 4096;
    pl->ng = ng;
    pl->h = h;
    pl->with_w = with_w;
    size_t off = align256(sizeof(int) * (size_t)N);
    pl->off_start = off;
    off = align256(off + sizeof(int) * (size_t)(R + 1));
    pl->off_tile_pos = off;
    off = align256(off + sizeof(int) * (size_t)(pl->tiles * R));
    pl->off_chunk_row = off;
    off = align256(off + sizeof(int) * (size_t)pl->chunks);
    pl->off_scan = off;
    off = align256(off + sizeof(unsigned long long) * (size_t)(pl->sblk + 1));
    pl->off_partial = off;
    off = align256(off + sizeof(float) * (size_t)pl->chunks * 2 * (size_t)ng * (size_t)h);
    pl->off_partial_w = off;
    if (with_w) off = align256(off + sizeof(float) * (size_t)pl->chunks * (size_t)h);
    pl->bytes = off;
}

void kjit__part_carve(const kjit_part_plan *pl, CUdeviceptr base, kjit_partition *part, float **partial,
                      float **partial_w)
{
    part->perm = (int *)(uintptr_t)base;
    part->start = (int *)(uintptr_t)(base + pl->off_start);
    part->tile_pos = (int *)(uintptr_t)(base + pl->off_tile_pos);
    part->chunk_row = (int *)(uintptr_t)(base + pl->off_chunk_row);
    part->scan_state = (unsigned long long *)(uintptr_t)(base + pl->off_scan);
    part->n = pl->n;
    part->r = pl->r;
    part->tile = pl->tile;
    part->tiles = pl->tiles;
    part->chunk = pl->chunk;
    part->chunks = pl->chunks;
    if (partial) *partial = (float *)(uintptr_t)(base + pl->off_partial);
    if (partial_w) *partial_w = pl->with_w ? (float *)(uintptr_t)(base + pl->off_partial_w) : NULL;
}

/* The name expressions of a backward's partition kernels. */
typedef struct part_names {
    char count[64], scatter[64], small[64], beside[64], finish[64];
} part_names;

static void names(part_names *nm, kjit_dtype index_dtype, kjit_dtype tp)
{
    const char *ti = kjit__dtype_cxx(index_dtype);
    snprintf(nm->count, sizeof nm->count, "kjit_part_count<%s>", ti);
    snprintf(nm->scatter, sizeof nm->scatter, "kjit_part_scatter<%s>", ti);
    snprintf(nm->small, sizeof nm->small, "kjit_part_small<%s>", ti);
    snprintf(nm->beside, sizeof nm->beside, "kjit_part_beside<%s>", ti);
    snprintf(nm->finish, sizeof nm->finish, "kjit_part_finish<%s>", kjit__dtype_cxx(tp));
}

int kjit__part_preload(kjit_ctx *ctx, const char *label, kjit_dtype index_dtype, kjit_dtype tp)
{
    part_names nm;
    names(&nm, index_dtype, tp);
    const char *all[] = {nm.count, "kjit_part_scan<256>", nm.scatter, nm.small, nm.finish};
    CUfunction fn;
    for (int i = 0; i < 5; ++i) {
        int rc = kjit__ctx_kernel(ctx, PART_TEMPLATE, label, all[i], &fn);
        if (rc) return rc;
    }
    return KJIT_OK;
}

int kjit__part_build(kjit_ctx *ctx, const char *label, const kjit_partition *part, const kjit_index_arg *ix,
                     kjit_dtype index_dtype, CUstream stream)
{
    kjit_part_build_params p = {*ix, *part};
    part_names nm;
    names(&nm, index_dtype, KJIT_F32);
    const char *count = nm.count, *scatter = nm.scatter;
    if (ctx->part_small && part->tiles <= SMALL_MAX_TILES && part->tiles * part->r * 4 <= SMALL_MAX_SMEM)
        return kjit__run(ctx, PART_TEMPLATE, label, nm.small, 1, 1, 1, 1024, (unsigned)(part->tiles * part->r * 4),
                         stream, &p);
    const unsigned grid = (unsigned)((part->tiles + COUNT_WARPS - 1) / COUNT_WARPS);
    const size_t want = (size_t)COUNT_WARPS * (size_t)part->r * 4;
    const unsigned smem = want <= 48 * 1024 ? (unsigned)want : 0;
    /* All three loaded before the first launches: a failure to load the
     * scan or the scatter must not leave the count's writes behind (the
     * training forward, whose partition is an output, has no preload). */
    static const char scan[] = "kjit_part_scan<256>";
    CUfunction f_count, f_scan, f_scatter;
    int rc = kjit__ctx_kernel_smem(ctx, PART_TEMPLATE, label, count, smem, &f_count);
    if (!rc) rc = kjit__ctx_kernel_smem(ctx, PART_TEMPLATE, label, scan, 0, &f_scan);
    if (!rc) rc = kjit__ctx_kernel_smem(ctx, PART_TEMPLATE, label, scatter, smem, &f_scatter);
    if (!rc) rc = kjit__launch(ctx, f_count, grid, 1, 1, 32 * COUNT_WARPS, smem, stream, &p, count);
    if (!rc) rc = kjit__launch(ctx, f_scan, (unsigned)(part->tiles * part->r + 4095) / 4096, 1, 1, 256, 0, stream, &p,
                               scan);
    if (!rc) rc = kjit__launch(ctx, f_scatter, grid, 1, 1, 32 * COUNT_WARPS, smem, stream, &p, scatter);
    return rc;
}

/* What both places of a training forward's one-CTA build need (inside its
 * launch or beside it): the build on, rows to sort, its counters within
 * 48 KiB, and rows of 4 KiB or more (a forward long enough to hide it).
 * Returns the counters' bytes, or 0. */
static unsigned small_build_bytes(const kjit_ctx *ctx, const kjit_partition *part, size_t row_bytes)
{
    const long long bytes = part->tiles * part->r * 4;
    return ctx->part_small && part->n > 0 && bytes <= SMALL_MAX_SMEM && row_bytes >= INLINE_MIN_ROW_BYTES
               ? (unsigned)bytes
               : 0;
}

unsigned kjit__part_beside_smem(const kjit_ctx *ctx, const kjit_partition *part, size_t row_bytes)
{
    return ctx->pdl ? small_build_bytes(ctx, part, row_bytes) : 0;
}

int kjit__part_beside_load(kjit_ctx *ctx, const char *label, kjit_dtype index_dtype, unsigned smem, CUfunction *fn)
{
    part_names nm;
    names(&nm, index_dtype, KJIT_F32);
    return kjit__ctx_kernel_smem(ctx, PART_TEMPLATE, label, nm.beside, smem, fn);
}

int kjit__part_beside(const kjit_ctx *ctx, CUfunction fn, const kjit_partition *part, const kjit_index_arg *ix,
                      unsigned threads, unsigned smem, CUstream stream)
{
    kjit_part_build_params p = {*ix, *part};
    return kjit__launch(ctx, fn, 1, 1, 1, threads, smem, stream, &p, "kjit_part_beside");
}

unsigned kjit__part_inline_smem(const kjit_ctx *ctx, const kjit_partition *part, int threads, size_t row_bytes,
                                size_t fwd_smem, int persistent)
{
    const unsigned bytes = small_build_bytes(ctx, part, row_bytes);
    const long long warps = threads / 32, rounds = warps > 0 ? (part->tiles + warps - 1) / warps : 1 << 30;
    const size_t room = fwd_smem > INLINE_FREE_SMEM ? fwd_smem : INLINE_FREE_SMEM;
    const int ok = bytes && part->tiles <= SMALL_MAX_TILES && rounds <= (persistent ? 1 : INLINE_MAX_ROUNDS) &&
                   (size_t)bytes <= room;
    return ok ? bytes : 0;
}

int kjit__part_finish(kjit_ctx *ctx, const char *label, const kjit_partition *part, const float *partial, int ng,
                      int h, void *const out[], const long long out_stride[], const float *partial_w, void *dw,
                      kjit_dtype tp, CUstream stream)
{
    kjit_finish_params p = {0};
    for (int g = 0; g < ng; ++g) {
        p.out[g] = out[g];
        p.out_stride[g] = out_stride[g];
    }
    p.partial = partial;
    p.partial_w = dw ? partial_w : NULL;
    p.dw = dw;
    p.part = *part;
    p.h = h;
    p.ng = ng;
    part_names nm;
    names(&nm, KJIT_I32, tp);
    const long long y = part->r < 32 ? part->r : 32;
    return kjit__run(ctx, PART_TEMPLATE, label, nm.finish, (unsigned)((h + 255) / 256), (unsigned)y,
                     (unsigned)(ng + (p.partial_w ? 1 : 0)), 256, 0, stream, &p);
}

int kjit__part_specs(const char *op, kjit_dtype tp, kjit_kernel_spec *out, int max, int n)
{
    const kjit_op_desc *d = kjit__op_find(op);
    static const char *const fixed[] = {"kjit_part_count<int>", "kjit_part_count<long long>",
                                        "kjit_part_scatter<int>", "kjit_part_scatter<long long>",
                                        "kjit_part_small<int>", "kjit_part_small<long long>",
                                        "kjit_part_beside<int>", "kjit_part_beside<long long>",
                                        "kjit_part_scan<256>"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; ++i) {
        n = kjit__spec_add(out, max, n, d, "%s", fixed[i]);
        if (n <= max) out[n - 1].template_file = PART_TEMPLATE;
    }
    n = kjit__spec_add(out, max, n, d, "kjit_part_finish<%s>", kjit__dtype_cxx(tp));
    if (n <= max) out[n - 1].template_file = PART_TEMPLATE;
    return n;
}
