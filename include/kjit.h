/* kjit: runtime-compiled CUDA kernels for the per-row AdaLN ops of diffusion
 * transformers, bitwise batch-invariant and deterministic.
 *
 * Conventions kept by every function here:
 * - Calls that can fail return int: KJIT_OK (0) or a negative KJIT_E* status.
 *   kjit_last_error() then holds a thread-local message naming the argument,
 *   file or kernel at fault and why (for compiles, the NVRTC log).
 * - A call that fails on its arguments writes nothing to any output, except
 *   that a call returning a handle or a result through an out pointer
 *   (kjit_ctx_create, kjit_tune, kjit_client_connect, kjit_client_request,
 *   kjit_client_tune) may set it to NULL or zero it before a later check
 *   refuses an argument.
 * - Device pointers are plain addresses (torch's data_ptr(), cuMemAlloc's
 *   CUdeviceptr); strides are in elements; rows are counted in int64_t.
 * - Nothing is printed unless KJIT_LOG=1, but for one warning line a
 *   process when a context finds its tuning file damaged (its entries not
 *   used; KJIT_LOG=0 silences it); nothing calls exit().
 * - Threads: every call may run on any thread, and calls on one context
 *   may run at once on several (a kernel's first use compiles or loads it
 *   once, the other callers waiting for it), with two exceptions:
 *   kjit_ctx_destroy, which no other call on that context may overlap or
 *   follow, and the context's own backward workspace (a backward given
 *   NULL), one stream at a time (kjit_norm_modulate_bwd's comment). With
 *   tuning on first use, a thread whose first use of a new (hidden, dtype)
 *   runs the tuner holds up other threads' first uses of other ones until
 *   it is done, and their launches on the device meanwhile enter its
 *   timings: tune such a process ahead (kjit tune).
 * - Processes: contexts of several processes may share a cache directory
 *   (one compile per kernel among them; an entry is never seen half
 *   written), and a process may fork with a context open: the descriptors
 *   the child inherits keep none of the cache's or the tuning file's locks
 *   once the parent's call that took them has returned. A child does not
 *   use the parent's context (CUDA does not survive fork): there a call
 *   that would build, load, launch, tune or read its counters or configs
 *   returns KJIT_EINVAL naming the fork (after its own argument checks),
 *   and kjit_ctx_destroy of it does nothing; the child creates its own (a compile-only one where the
 *   parent had started CUDA, which cannot start again in the child).
 */
#ifndef KJIT_H
#define KJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KJIT_VERSION_MAJOR 0
#define KJIT_VERSION_MINOR 1
#define KJIT_VERSION_PATCH 0
#define KJIT_VERSION_STRING "0.1.0"

#if defined(_WIN32)
#define KJIT_API
#else
#define KJIT_API __attribute__((visibility("default")))
#endif

/* CUstream without pulling in cuda.h (the same typedef as the driver API). */
typedef struct CUstream_st *CUstream;

/* name, value, message */
#define KJIT_ERROR_MAP(XX)                                                        \
    XX(OK, 0, "success")                                                          \
    XX(EINVAL, -1, "invalid argument")                                            \
    XX(ENOMEM, -2, "out of memory")                                               \
    XX(ENODRIVER, -3, "no CUDA driver")                                           \
    XX(ENONVRTC, -4, "NVRTC library not found")                                   \
    XX(ECOMPILE, -5, "kernel compile failed")                                     \
    XX(ECUDA, -6, "CUDA driver call failed")                                      \
    XX(EIO, -7, "I/O error")                                                      \
    XX(EPERM, -8, "permission refused")                                           \
    XX(EUNSUPPORTED, -9, "unsupported configuration")                             \
    XX(EINDEX, -10, "index out of range")                                         \
    XX(EBADENTRY, -11, "bad cache entry")                                         \
    XX(ENOTFOUND, -12, "not found")

/* Every refusal (KJIT_EINVAL, KJIT_EINDEX, ...) comes before an op writes
 * anything. KJIT_ECUDA or KJIT_ENOMEM (a driver call out of device memory)
 * from an op that launches several kernels (a backward: partition, rows,
 * finisher) may come after some of them ran: its outputs are then
 * undefined, as after any failed CUDA call. */
typedef enum kjit_status {
#define KJIT_STATUS_ENUM(name, code, msg) KJIT_##name = code,
    KJIT_ERROR_MAP(KJIT_STATUS_ENUM)
#undef KJIT_STATUS_ENUM
} kjit_status;

/* "KJIT_EINVAL" */
KJIT_API const char *kjit_status_name(int status);
/* "invalid argument" */
KJIT_API const char *kjit_status_string(int status);
/* The message of the calling thread's last failed call; a call that can
 * fail clears it on entry, so "" after one that succeeded: read it right
 * after the failed call. */
KJIT_API const char *kjit_last_error(void);

typedef enum kjit_dtype {
    KJIT_F32 = 0,
    KJIT_BF16 = 1,
    KJIT_F16 = 2,
    KJIT_I32 = 3,
    KJIT_I64 = 4
} kjit_dtype;

/* "fp32", "bf16", "fp16", "int32", "int64" */
KJIT_API const char *kjit_dtype_name(kjit_dtype dt);
/* Accepts the names above and "float32", "bfloat16", "float16", "f32", ... */
KJIT_API int kjit_dtype_parse(const char *name, kjit_dtype *out);
KJIT_API size_t kjit_dtype_size(kjit_dtype dt);


/* ---- Context ----------------------------------------------------------- */

typedef struct kjit_ctx kjit_ctx;

#define KJIT_NO_DEVICE (-1)

typedef enum kjit_index_check {
    KJIT_INDEX_CHECK_OFF = 0,   /* fast default: the caller guarantees 0 <= index < R */
    KJIT_INDEX_CHECK_SYNC = 1,  /* a bad index fails the call with KJIT_EINDEX (syncs the stream) */
    KJIT_INDEX_CHECK_ASYNC = 2  /* a device flag is raised; read it with kjit_ctx_index_error */
} kjit_index_check;

typedef struct kjit_ctx_options {
    int device;            /* CUDA ordinal, or KJIT_NO_DEVICE for a compile-only context */
    const char *cache_dir; /* NULL: $KJIT_CACHE_DIR, $XDG_CACHE_HOME/kjit, ~/.cache/kjit; "" memory only */
    const char *arch;      /* NULL: the device's own (sm_90 without a device; where
                              NVRTC does not list it, the newest listed arch whose
                              cubins run there). With a device, an arch it cannot
                              run (another major version, a higher minor) is
                              KJIT_EINVAL: compile for it with KJIT_NO_DEVICE */
    kjit_index_check index_check;
    int tune;              /* 1: the first use of an AdaLN op at a new (hidden, dtype)
                              runs the tuner (kjit_tune) before launching; also
                              $KJIT_TUNE=1. 0 (default): the stored result for this
                              device if any, else the built-in default. The tuner
                              allocates and synchronizes the context: it is skipped
                              while the call's stream is captured, but a capture of
                              another thread in the global mode would be broken by
                              it, so tune such a process ahead (kjit tune).
                              Any other value: KJIT_EINVAL. */
} kjit_ctx_options;

KJIT_API void kjit_ctx_options_init(kjit_ctx_options *opts);

/* Creates a context on a device's primary CUDA context (made current on the
 * calling thread if that thread has none, as the CUDA runtime does). Without
 * a CUDA driver the context is created compile-only (prewarm works) and every
 * op call with valid arguments returns KJIT_ENODRIVER, except a forward, or a
 * backward asking for row gradients only, with n = 0: nothing to do, KJIT_OK. opts may be NULL (defaults, device 0).
 * When $KJIT_SERVER (read here) names a socket, a kernel found neither in
 * memory nor on disk is asked of the `kjit serve` there first, and compiled
 * in process when no server answers, the server refuses, its cache key
 * differs (other templates or NVRTC) or it shares this cache directory
 * (KJIT_LOG=1 says which); either way it is stored in this cache. */
KJIT_API int kjit_ctx_create(kjit_ctx **out, const kjit_ctx_options *opts);
/* Waits for the device's work (cuCtxSynchronize: all of it on the
 * device's primary context, the application's too), then frees the
 * context's buffers, unloads its modules and releases the primary context.
 * NULL is a no-op. No other call on ctx may be running or come after it,
 * and graphs that captured its ops must be destroyed first (their kernels
 * and workspaces go with it). Not while a stream of the device is captured
 * in the global mode, nor while the calling thread captures one: the wait
 * would end that capture. In a process forked from the one that made ctx
 * it does nothing (no CUDA call there; the child's copy of the memory goes
 * at its exit). */
KJIT_API void kjit_ctx_destroy(kjit_ctx *ctx);
/* 1 when ops can run (driver and device present). */
KJIT_API int kjit_ctx_has_device(const kjit_ctx *ctx);
/* "sm_90" */
KJIT_API const char *kjit_ctx_arch(const kjit_ctx *ctx);
KJIT_API const char *kjit_ctx_cache_dir(const kjit_ctx *ctx);
/* Asynchronous index checking: waits for `stream`, returns 1 in *flag if any
 * op since the last call saw an index out of range, and clears the flag.
 * The flag is the context's, shared by all its streams: read it once the
 * streams whose ops it covers are done (an op still running on another
 * stream may raise it between this call's read and its clear). On a stream
 * being captured into a CUDA graph it is refused (KJIT_EINVAL), recording
 * nothing: read the flag after the graph's launch. */
KJIT_API int kjit_ctx_index_error(kjit_ctx *ctx, CUstream stream, int *flag);

/* compiles: builds on a miss of memory and disk, failed ones included; of
 * them, server_builds were the cubins of the kjit server named by
 * KJIT_SERVER (compiles - server_builds ran NVRTC in this process). */
typedef struct kjit_cache_counters {
    uint64_t mem_hits, disk_hits, misses, compiles, bad_entries, evictions;
    uint64_t server_builds;
    uint64_t store_failures; /* compiled kernels the disk cache could not store (KJIT_LOG=1: why) */
} kjit_cache_counters;
KJIT_API int kjit_ctx_cache_counters(kjit_ctx *ctx, kjit_cache_counters *out);

/* ---- Versions and environment ----------------------------------------- */

typedef struct kjit_runtime_info {
    int nvrtc_major, nvrtc_minor; /* 0 when NVRTC is missing */
    char nvrtc_path[256];
    int n_archs;
    int archs[64];               /* sm numbers NVRTC can target */
    int driver_version;          /* e.g. 13000; 0 without a driver */
    int device_count;
} kjit_runtime_info;
KJIT_API int kjit_runtime_info_get(kjit_runtime_info *out);

typedef struct kjit_device_info {
    char name[128];
    int sm;           /* 90 */
    int sm_count;
    uint64_t memory_bytes;
} kjit_device_info;
KJIT_API int kjit_device_info_get(int ordinal, kjit_device_info *out);

/* ---- Registered ops and their kernels (prewarm) ------------------------ */

KJIT_API int kjit_op_count(void);
/* NULL when i is out of range. */
KJIT_API const char *kjit_op_name(int i);

typedef struct kjit_kernel_spec {
    const char *op;            /* registered op name */
    const char *template_file; /* e.g. "timestep_sinusoid.cuh" */
    char name_expr[224];       /* e.g. "kjit_sinusoid<kjit::bf16>" */
} kjit_kernel_spec;

/* Lists the kernels (forward and backward) an op uses for a hidden size
 * (for timestep_sinusoid: D) and a model's activation dtype. Writes up to
 * max specs, sets *count to the number there are. Parameters follow the
 * activations (bf16 or fp32); an fp16 model's are taken as fp32, for
 * adaln_row_gather too, whose own dtype is its tables'. The AdaLN ops'
 * entries are their default launch configs as a device with 200 KiB of
 * shared memory a block runs them; a device with less (sm_75, sm_8x,
 * sm_120) or more (sm_90: the fused op's fp32 backward at many hidden
 * sizes from 12296 up)
 * launches fitted ones: `kjit prewarm --arch` compiles those of each arch. */
KJIT_API int kjit_op_kernels(const char *op, int hidden, kjit_dtype dtype,
                             kjit_kernel_spec *out, int max, int *count);

/* Compiles one kernel for an arch ("sm_90"; NULL: the context's) into the
 * context's cache. *cached (may be NULL) is 1 when it was there already. */
KJIT_API int kjit_kernel_build(kjit_ctx *ctx, const kjit_kernel_spec *spec, const char *arch,
                               int *cached);

/* A kernel's compiled image, as the cache holds it (owned by the context's
 * cache; valid until kjit_ctx_destroy). */
typedef struct kjit_kernel_image {
    const char *lowered_name; /* mangled entry name for cuModuleGetFunction */
    const void *cubin;
    size_t cubin_len;
    char key[33];             /* cache key, 32 hex digits */
    int cached;               /* 1: from memory or disk, 0: compiled now */
} kjit_kernel_image;

/* kjit_kernel_build that also returns the image (for `kjit serve`). */
KJIT_API int kjit_kernel_fetch(kjit_ctx *ctx, const kjit_kernel_spec *spec, const char *arch,
                               kjit_kernel_image *out);

/* ---- timestep_sinusoid -------------------------------------------------- */

typedef struct kjit_sinusoid_opts {
    int flip_sin_to_cos;         /* default 0 */
    double downscale_freq_shift; /* default 1 */
    double scale;                /* default 1 */
    double max_period;           /* default 10000 */
} kjit_sinusoid_opts;

KJIT_API void kjit_sinusoid_opts_init(kjit_sinusoid_opts *o);

/* out[n, d] (row stride out_stride >= d, dtype fp32/bf16/fp16) from t[n]
 * (fp32, contiguous). opts NULL: diffusers' defaults. n == 0 is a no-op.
 * 1 <= d <= 65536; d/2 - downscale_freq_shift must not be 0. */
KJIT_API int kjit_timestep_sinusoid(kjit_ctx *ctx, const float *t, int64_t n, int d, void *out,
                                    int64_t out_stride, kjit_dtype out_dtype,
                                    const kjit_sinusoid_opts *opts, CUstream stream);

/* ---- AdaLN ops (docs/SPEC.md) ------------------------------------------- *
 * Activations bf16, fp16 or fp32; tables and weight bf16 or fp32; indices
 * int32 or int64; fp32 compute, one rounding per output. Every 2-D argument
 * has its own row stride (elements), so the chunk(6) views of one (R, 6H)
 * projection are passed as six base pointers with stride 6H, no copy.
 * Sizes: n 0..2^31-1 rows, hidden 1..65536, R (index.rows) 1..65535; for
 * adaln_row_gather num_tables 1..8. Each out of range is KJIT_EINVAL naming it.
 * Hidden sizes that are multiples of 8 (up to 16384) with 16-byte aligned
 * pointers and strides take the vector fast path; anything else (odd H,
 * misaligned views) a scalar path with bitwise the same results.
 * Index checking (kjit_ctx_options.index_check): OFF: the caller guarantees
 * 0 <= index < R; SYNC: the call validates the indices first and returns
 * KJIT_EINDEX with every output untouched (it waits for the stream, so it
 * cannot be graph-captured: a call on a capturing stream is refused with
 * KJIT_EINVAL before it records anything, the capture left valid); ASYNC: rows with a bad index are skipped on the
 * device and a flag is raised, read with kjit_ctx_index_error.
 * Memory: an output may not share a byte with another output, an input, or
 * the bytes of the workspace and partition buffer the call uses (their
 * first kjit_adaln_workspace / kjit_adaln_partition_bytes bytes: the rest
 * of a larger buffer is neither read nor written) (KJIT_EINVAL naming both), except in
 * place: the forward's out given exactly as x (norm_modulate) or res
 * (gated_residual), the fused op's h exactly as res (the same pointer and
 * row stride). Inputs may share memory; chunk(6) views of one table, whose
 * rows interleave, share no byte. The test is exact (byte for byte), except
 * for two views of different row strides that both have more than 65536
 * rows, compared by the address ranges that hold them. The same holds for
 * adaln_row_gather (out vs tables, dtable vs douts) and timestep_sinusoid
 * (out vs t).
 * Backward passes need a workspace (kjit_*_workspace gives its size; 256-byte
 * aligned, as cuMemAlloc's are); pass NULL to use one owned by the context (grown on demand: one stream at a
 * time, since nothing orders two streams' use of it: backwards given NULL on streams whose work may overlap,
 * or from two threads, race on it and give wrong parameter gradients, so give each such stream a workspace
 * of its own; and a call that must grow it while its stream is being captured returns KJIT_EINVAL, launching
 * nothing and leaving the capture valid: make the call once before capturing (only the call's own stream
 * is asked: a growth while another stream of the thread, or in the global mode another thread, captures
 * meets cuMemAlloc's refusal there, as any allocation would); a buffer
 * it outgrows stays allocated until kjit_ctx_destroy, so a graph that
 * captured it stays valid, up to the 48 most recent: at the 49th growth
 * the oldest is freed after a cuCtxSynchronize (the call fails, the
 * workspace as it was, where that synchronization fails, e.g. while
 * another stream of the context is captured). A growth allocates 1.5x the need, or the need alone
 * when that does not fit; when neither fits the call returns KJIT_ENOMEM and
 * the context keeps its buffer). n = 0: a forward writes nothing; a backward
 * writes the table and weight gradients, zeros (sums over no rows), and no
 * row gradient. At n = 0 the operands of n rows and the index's pointer
 * are neither read nor checked (NULL passes; index.dtype and index.rows
 * are checked); the tables, the weight and their gradients are checked as
 * at any n. Once an
 * op's kernels are loaded, calls allocate, synchronize and read back nothing
 * (index checking SYNC aside), so they can be captured in CUDA graphs. */

#define KJIT_MAX_TABLES 8

typedef struct kjit_index {
    const void *ptr;   /* [n] int32 or int64 */
    kjit_dtype dtype;  /* KJIT_I32 or KJIT_I64 */
    int64_t rows;      /* R: table rows, 1..65535 */
} kjit_index;

/* adaln_row_gather: out_k[n] = table_k[index[n]] for k < num_tables;
 * backward dtable_k[r] = sum over index[n] == r of dout_k[n]. The
 * backward's partition (so the bits of dtable) depends on num_tables as on
 * n, hidden, rows and the index: a table's gradient from a call with six
 * tables may differ in its last bits from one with that table alone. n = 0:
 * the forward writes nothing, the backward writes zeros to every dtable. */
typedef struct kjit_row_gather_args {
    int64_t n;
    int hidden;
    int num_tables;    /* 1..8 */
    kjit_dtype dtype;  /* tables, outputs and their gradients: bf16 or fp32 */
    kjit_index index;
    const void *table[KJIT_MAX_TABLES];  int64_t table_stride[KJIT_MAX_TABLES];
    void *out[KJIT_MAX_TABLES];          int64_t out_stride[KJIT_MAX_TABLES];
    const void *dout[KJIT_MAX_TABLES];   int64_t dout_stride[KJIT_MAX_TABLES];
    void *dtable[KJIT_MAX_TABLES];       int64_t dtable_stride[KJIT_MAX_TABLES];
} kjit_row_gather_args;

KJIT_API int kjit_adaln_row_gather_fwd(kjit_ctx *ctx, const kjit_row_gather_args *a, CUstream stream);
KJIT_API int kjit_adaln_row_gather_bwd(kjit_ctx *ctx, const kjit_row_gather_args *a, void *workspace,
                                       size_t workspace_bytes, CUstream stream);
KJIT_API int kjit_adaln_row_gather_workspace(int64_t n, int hidden, int num_tables, int64_t rows,
                                             size_t *bytes);

/* norm_modulate, gated_residual and gated_residual_norm_modulate share one
 * argument block; each op reads the fields its comment names.
 *   norm_modulate:      out = norm(x) * w * (1 + scale[i]) + shift[i]
 *   gated_residual:     out = res + gate[i] * y
 *   gated_residual_norm_modulate: h = res + gate[i] * y; out = norm_modulate(h),
 *                       of h as returned (rounded once to the activation dtype)
 * Backward: norm_modulate reads x, dout -> dx, dweight, dshift, dscale;
 * gated_residual reads y, dout -> dx (= dres, may be NULL: it equals dout),
 * dy, dgate; the fused op reads x (= the h its forward returned), y, dh
 * (may be NULL: zeros), dout -> dx (= dres), dy, dgate, dweight, dshift,
 * dscale. dweight may be NULL (not computed) and must be NULL when weight is.
 * The row gradients alone (tables and weight frozen): every parameter
 * gradient NULL (norm_modulate: dshift, dscale, dweight; gated_residual:
 * dgate; fused: all four) computes dx (gated_residual: dy and, when given,
 * dx; fused: dx and dy) with one row-parallel kernel: no partition, no
 * workspace (the workspace and, for kjit_adaln_train_bwd, the partition
 * arguments are not used; gated_residual and the fused op read no y), the
 * same bits as the full backward's row gradients (a row with an index
 * outside [0, R) is skipped, as there), n = 0 writes nothing.
 * Some of them NULL and others given is refused (KJIT_EINVAL naming the
 * first missing). */
typedef struct kjit_adaln_args {
    int64_t n;
    int hidden;
    float eps;               /* norm ops: finite, >= 0, e.g. 1e-6; with 0 an all-zero
                                row gives inf * 0 = NaN, as the formula does */
    kjit_dtype act_dtype;    /* x, res, y, out, h and their gradients */
    kjit_dtype param_dtype;  /* weight, shift, scale, gate and their gradients: bf16 or fp32 */
    kjit_index index;
    const void *x;      int64_t x_stride;
    const void *res;    int64_t res_stride;
    const void *y;      int64_t y_stride;
    const void *weight;                     /* [hidden] or NULL */
    const void *shift;  int64_t shift_stride;
    const void *scale;  int64_t scale_stride;
    const void *gate;   int64_t gate_stride;
    void *out;          int64_t out_stride;
    void *h;            int64_t h_stride;   /* fused forward: the new residual stream */
    const void *dout;   int64_t dout_stride;
    const void *dh;     int64_t dh_stride;
    void *dx;           int64_t dx_stride;
    void *dy;           int64_t dy_stride;
    void *dweight;
    void *dshift;       int64_t dshift_stride;
    void *dscale;       int64_t dscale_stride;
    void *dgate;        int64_t dgate_stride;
} kjit_adaln_args;

typedef enum kjit_adaln_op {
    KJIT_NORM_MODULATE = 1,
    KJIT_GATED_RESIDUAL = 2,
    KJIT_GATED_RESIDUAL_NORM_MODULATE = 3
} kjit_adaln_op;

KJIT_API int kjit_norm_modulate_fwd(kjit_ctx *ctx, const kjit_adaln_args *a, CUstream stream);
KJIT_API int kjit_norm_modulate_bwd(kjit_ctx *ctx, const kjit_adaln_args *a, void *workspace,
                                    size_t workspace_bytes, CUstream stream);
KJIT_API int kjit_gated_residual_fwd(kjit_ctx *ctx, const kjit_adaln_args *a, CUstream stream);
KJIT_API int kjit_gated_residual_bwd(kjit_ctx *ctx, const kjit_adaln_args *a, void *workspace,
                                     size_t workspace_bytes, CUstream stream);
KJIT_API int kjit_gated_residual_norm_modulate_fwd(kjit_ctx *ctx, const kjit_adaln_args *a,
                                                   CUstream stream);
KJIT_API int kjit_gated_residual_norm_modulate_bwd(kjit_ctx *ctx, const kjit_adaln_args *a,
                                                   void *workspace, size_t workspace_bytes,
                                                   CUstream stream);
/* Backward workspace bytes of an op for n rows, hidden, R table rows. */
KJIT_API int kjit_adaln_workspace(kjit_adaln_op op, int64_t n, int hidden, int64_t rows, size_t *bytes);

/* Training pair. The backward's row partition is a function of the op, n,
 * hidden, R and the index values, none of which the backward's other
 * inputs change, so a training forward can build it: kjit_adaln_train_fwd
 * computes op's forward exactly as kjit_*_fwd and writes the partition
 * into `partition` (the caller's, 256-byte aligned, partition_bytes >=
 * kjit_adaln_partition_bytes: 4 bytes per row plus the sort's counters, 4
 * per (table row, tile of 256+ rows); ~4 bytes per row at small R). Where
 * it pays (measured at H = 5376; partition.c says when) one block of the
 * forward's launch (one more, or one of a full persistent grid's) builds it
 * beside the rows, or, for a persistent grid with programmatic dependent
 * launch (sm_90+), a one-block build launched after the forward runs
 * beside it on the SM the grid leaves free (same stream order for what
 * follows: it completes after the forward); otherwise the usual build (one
 * launch, or three past its one-block limits) runs before the forward. kjit_adaln_train_bwd computes the
 * backward exactly as kjit_*_bwd from that partition, without building it
 * (workspace as there: kjit_adaln_workspace bytes, or NULL for the
 * context's; the partition buffer may be the first bytes of that same
 * workspace, which the backward does not otherwise use). The caller must
 * pass the same op, n, hidden, index.rows and index values to both, order
 * the backward after a successful training forward on its stream, and
 * leave the partition buffer unchanged in between: a partition of another
 * op or shape passes the size check and gives wrong gradients (or faults).
 * The partition buffer is checked for any n (except by a backward asked for
 * the row gradients alone, which does not use it); with n = 0 the forward
 * writes nothing, and the backward writes zero gradients and does not read
 * it. Bitwise the same outputs and gradients as the plain calls. */
KJIT_API int kjit_adaln_partition_bytes(kjit_adaln_op op, int64_t n, int hidden, int64_t rows, size_t *bytes);
KJIT_API int kjit_adaln_train_fwd(kjit_ctx *ctx, kjit_adaln_op op, const kjit_adaln_args *a, void *partition,
                                  size_t partition_bytes, CUstream stream);
KJIT_API int kjit_adaln_train_bwd(kjit_ctx *ctx, kjit_adaln_op op, const kjit_adaln_args *a, const void *partition,
                                  size_t partition_bytes, void *workspace, size_t workspace_bytes,
                                  CUstream stream);

/* ---- Launch configurations and the tuner -------------------------------- *
 * norm_modulate, gated_residual and gated_residual_norm_modulate launch with
 * a config per (op, hidden, activation dtype) that changes speed only: every
 * config gives bitwise the same outputs and gradients (docs/SPEC.md contract 3).
 * What fixes the arithmetic (threads per row, the backward's partition)
 * depends on hidden and dtype alone and is not tunable. The config in use is,
 * in order: a tuned one (kjit_tune, or the context's tune option on first
 * use), one stored for this device and kjit version in the tuning file
 * <cache dir>/tune.json (read at kjit_ctx_create), the built-in default.
 * Only the vector fast path (hidden a multiple of 8 up to 16384) is tuned. */
typedef enum kjit_config_source {
    KJIT_CONFIG_DEFAULT = 0, /* built in */
    KJIT_CONFIG_STORED = 1,  /* from the tuning file */
    KJIT_CONFIG_TUNED = 2,   /* tuned by this context */
    KJIT_CONFIG_FORCED = 3   /* set by a test hook */
} kjit_config_source;

typedef struct kjit_op_config {
    int rpc;         /* forward: rows per CTA (1, 2, 4) */
    int pf;          /* forward: rows loaded ahead into shared memory (0..3) */
    int grid_per_sm; /* forward: CTAs per SM of a persistent grid; 0 = one CTA per row group */
    int bwd_pf;      /* backward: rows loaded ahead into shared memory (0..3) */
    int accs;        /* backward: per-column state 0 in registers, 1 tables in shared
                        memory, 2 tables and accumulators in shared memory */
    kjit_config_source source;
} kjit_op_config;

/* The config ops on ctx launch with for (op, hidden, activation dtype); op
 * is an AdaLN op name. For hidden sizes off the fast path: the generic
 * path's (pf = bwd_pf = accs = 0). Starts no tuner. */
KJIT_API int kjit_op_config_get(kjit_ctx *ctx, const char *op, int hidden, kjit_dtype dtype, kjit_op_config *out);

#define KJIT_TUNE_MAX_ROW_COUNTS 4

typedef struct kjit_tune_result {
    kjit_op_config config;         /* chosen (source KJIT_CONFIG_TUNED) */
    kjit_op_config default_config; /* the built-in default */
    /* Sums over the row counts of the median time per call (us), forward and
     * backward op calls (the backward's partition and finishing kernels
     * included), of the chosen and of the default config. */
    double fwd_us, bwd_us, default_fwd_us, default_bwd_us;
    int n_rows;
    int64_t rows[KJIT_TUNE_MAX_ROW_COUNTS];
    double fwd_us_rows[KJIT_TUNE_MAX_ROW_COUNTS], bwd_us_rows[KJIT_TUNE_MAX_ROW_COUNTS];
    double default_fwd_us_rows[KJIT_TUNE_MAX_ROW_COUNTS], default_bwd_us_rows[KJIT_TUNE_MAX_ROW_COUNTS];
    int fwd_candidates, bwd_candidates; /* configs in the space */
    double seconds;                     /* the whole call */
    double compile_seconds;             /* of it, building the candidates' kernels */
    int saved;                          /* 1: written to the tuning file */
} kjit_tune_result;

/* Times every config of (op, hidden, dtype)'s space on this context's device
 * (CUDA events; scratch buffers of its own, never the caller's; several row
 * counts; buffers rotated beyond the L2), picks the fastest forward and the
 * fastest backward (kept only when its sum over the row counts is at least
 * 1% under the default's and it is at most 2% + 0.3 us slower at any one
 * row count), uses it on ctx from now on and merges it into the tuning file
 * (unless the cache is memory-only). Waits for the device to be idle first;
 * allocates several GB for a while; takes a few seconds. KJIT_EUNSUPPORTED
 * for hidden sizes off the fast path; KJIT_ENODRIVER without a GPU;
 * KJIT_EIO when tuned (out filled, out->config.source KJIT_CONFIG_TUNED, ctx
 * uses it) but the file could not be written; a failure before the tuning
 * ended (an unreadable template directory is KJIT_EIO too) leaves out
 * zeroed, so out->config.source tells the two apart. out may be NULL. */
KJIT_API int kjit_tune(kjit_ctx *ctx, const char *op, int hidden, kjit_dtype dtype, kjit_tune_result *out);

#ifdef __cplusplus
}
#endif
#endif
