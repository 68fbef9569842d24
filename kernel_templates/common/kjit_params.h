/* Kernel parameter blocks, shared verbatim by the host (C11) and the device
 * templates (NVRTC, C++17). Each kernel takes exactly one of these by value
 * as a __grid_constant__ argument. Plain C types only: pointers are device
 * addresses, strides are in elements, counts are 64-bit where rows are
 * counted. Changing a struct changes the template text and so every cache key.
 */
#ifndef KJIT_PARAMS_H
#define KJIT_PARAMS_H

#define KJIT_MAX_TABLES 8

/* timestep_sinusoid: t[n] (fp32) -> out[n, d]. */
typedef struct kjit_sinusoid_params {
    const float *t;
    void *out;
    long long n;
    long long out_stride;
    int d;
    int flip;              /* 1: [cos | sin] */
    double shift;          /* downscale_freq_shift */
    double scale;
    double log_max_period; /* ln(max_period) */
} kjit_sinusoid_params;

/* One table argument: K row-strided (R, H) views. */
typedef struct kjit_table_set {
    const void *ptr[KJIT_MAX_TABLES];
    long long stride[KJIT_MAX_TABLES];
} kjit_table_set;

/* Index checking: when err != 0 an index outside [0, r) sets *err to 1 and
 * the row is skipped (nothing read through it, nothing written for it). */
typedef struct kjit_index_arg {
    const void *ptr; /* int32 or int64, chosen by the template */
    long long r;     /* table rows */
    int *err;        /* device flag, NULL when checking is off */
} kjit_index_arg;

/* Row partition of a backward pass: rows sorted stably by index, then cut
 * into fixed chunks of `chunk` sorted positions. Depends on (N, R, index)
 * only, never on the launch configuration. kernel_templates/partition.cuh
 * has the sizes (tile, tiles, chunk, chunks as C expressions) and the build.
 *   perm[N]          row ids in sorted order (int32: N < 2^31); only the
 *                    first start[R] entries are defined
 *   start[R + 1]     first sorted position of each table row; start[R] is
 *                    the number of valid rows (out-of-range ones left out)
 *   tile_pos[R * T]  scratch of the counting sort, r-major: [r * tiles + t]
 *   chunk_row, scan_state: see the fields
 * Partial sums: a segment (rows of one table row) that lies inside one chunk
 * is finished by that chunk; one that crosses chunk boundaries leaves
 * partials: its first chunk writes slot 1 ("tail"), every later chunk it
 * covers writes slot 0 ("head"); the finisher adds them in chunk order.
 * Layout for NG gradients: partial[((c * 2 + slot) * NG + g) * H + col]. */
typedef struct kjit_partition {
    int *perm;
    int *start;
    int *tile_pos;
    int *chunk_row;                 /* [chunks]: table row at c * chunk, -1 past start[R] */
    unsigned long long *scan_state; /* [ceil(tiles * R / 4096) + 1]: scan scratch */
    long long n;
    long long r;
    long long tile;   /* rows per sort tile (a multiple of 32) */
    long long tiles;
    long long chunk;  /* sorted positions per chunk */
    long long chunks;
} kjit_partition;

/* Partition build (kjit_part_count, kjit_part_scan, kjit_part_scatter).
 * index.r must equal part.r; index.err may be NULL. */
typedef struct kjit_part_build_params {
    kjit_index_arg index;
    kjit_partition part;
} kjit_part_build_params;

/* kjit_part_finish: completes the rows whose segment crosses chunks (and
 * zeroes empty rows) of NG = ng gradient outputs out[g] (r, h) row-strided;
 * with partial_w, also dw[col] = sum over used chunks c of partial_w[c][col]
 * (grid z = ng + 1). */
typedef struct kjit_finish_params {
    void *out[KJIT_MAX_TABLES];
    long long out_stride[KJIT_MAX_TABLES];
    const float *partial;   /* [chunks][2][ng][h] fp32 */
    const float *partial_w; /* [chunks][h] fp32, or NULL */
    void *dw;               /* [h], written when partial_w != NULL */
    kjit_partition part;
    int h;
    int ng;
} kjit_finish_params;

/* Synchronous index check (kernel_templates/index_check.cuh). */
typedef struct kjit_index_check_params {
    const void *index;
    void *report; /* kjit_index_report (src/core/ctx.h) */
    long long n;
    long long r;
} kjit_index_check_params;

/* adaln_row_gather forward: out_k[n] = table_k[index[n]]. */
typedef struct kjit_gather_fwd_params {
    kjit_table_set table;
    void *out[KJIT_MAX_TABLES];
    long long out_stride[KJIT_MAX_TABLES];
    kjit_index_arg index;
    long long n;
    int h;
    int k;
} kjit_gather_fwd_params;

/* adaln_row_gather backward: dtable_k[r] = sum_{index[n]=r} dout_k[n]. */
typedef struct kjit_gather_bwd_params {
    const void *dout[KJIT_MAX_TABLES];
    long long dout_stride[KJIT_MAX_TABLES];
    void *dtable[KJIT_MAX_TABLES];
    long long dtable_stride[KJIT_MAX_TABLES];
    kjit_partition part;
    float *partial; /* [chunks][2][k][h] fp32 */
    int h;
    int k;
} kjit_gather_bwd_params;

/* norm_modulate / gated_residual / gated_residual_norm_modulate share one
 * block: unused pointers are NULL. Table chunks: 0 shift, 1 scale, 2 gate. */
typedef struct kjit_adaln_fwd_params {
    const void *x;   long long x_stride;   /* norm input (norm_modulate) */
    const void *res; long long res_stride; /* residual (gated ops) */
    const void *y;   long long y_stride;   /* branch output (gated ops) */
    const void *w;                          /* optional weight [h] */
    kjit_table_set table;                   /* shift, scale, gate */
    kjit_index_arg index;
    void *h_out; long long h_stride;        /* gated ops: new residual */
    void *out;   long long out_stride;      /* normalised, modulated */
    float *rstd;                            /* optional [n], saved for bwd */
    long long n;
    int h;
    float eps;
    /* kjit_adaln_fwd_train: block 0 of the launch builds this partition
     * (kjit_part_small's build, counters in the launch's dynamic shared
     * memory) and the rows go to blocks 1..; unused by kjit_adaln_fwd. */
    kjit_partition part;
} kjit_adaln_fwd_params;

typedef struct kjit_adaln_bwd_params {
    const void *x;    long long x_stride;    /* norm input (the saved h for the fused op) */
    const void *y;    long long y_stride;    /* gated ops */
    const void *w;                           /* optional weight [h] */
    kjit_table_set table;                    /* shift, scale, gate */
    kjit_index_arg index;                    /* ptr only: the partition left bad rows out */
    const float *rstd;                       /* unused: rstd is recomputed bitwise */
    const void *dout; long long dout_stride; /* grad of out (every op) */
    const void *dh;   long long dh_stride;   /* fused: grad of h (NULL = zeros) */
    void *dx;   long long dx_stride;         /* norm_modulate: dx; gated: dres (gated_residual: NULL skips) */
    void *dy;   long long dy_stride;         /* gated ops */
    void *dw;                                /* [h], optional, written by kjit_part_finish */
    kjit_table_set dtable;                   /* dshift, dscale, dgate (const-cast) */
    kjit_partition part;
    float *partial;                          /* [chunks][2][ng][h] fp32 */
    float *partial_w;                        /* [chunks][h] fp32; NULL: no dw */
    long long n;
    int h;
    float eps;
} kjit_adaln_bwd_params;

/* kjit_bf16_rn_check (bf16_rn_check.cuh): float bit patterns [base, base + n). */
typedef struct kjit_bf16_check_params {
    unsigned long long base, n;
    unsigned long long *bad; /* patterns that differ (zeroed by the caller) */
    unsigned int *first;     /* one of them */
} kjit_bf16_check_params;

#endif
