/* The context: a device's primary CUDA context, the cubin cache and the
 * kernels loaded from it. Ops resolve kernels by name expression through a
 * per-context map (read-locked on the hot path) and launch them. */
#ifndef KJIT_CTX_H
#define KJIT_CTX_H

#include <pthread.h>
#include <stdatomic.h>

#include "cache/cache.h"
#include "gpu/cuda_api.h"
#include "kjit.h"

#define KJIT_ERR_HOST_WORDS 64
/* After a failed ask, the KJIT_SERVER server is left alone this long. */
#define KJIT_SERVER_RETRY_S 30

typedef struct kjit_kernel_slot {
    char *name;     /* name expression, NULL when the slot is free */
    uint64_t hash;
    CUmodule module;
    CUfunction fn;
    unsigned smem_max; /* dynamic shared memory the function is allowed (0: the default 48 KiB) */
} kjit_kernel_slot;

struct kjit_ctx {
    int device;
    int sm;
    char arch[16];
    int has_gpu;
    char no_gpu_reason[512];
    CUdevice dev;
    CUcontext cuctx;
    int sm_count;
    /* Launch with programmatic stream serialization (sm_90 / sm_100 device
     * and target, driver 12.3+ with cuLaunchKernelEx; KJIT_PDL=0 off,
     * KJIT_PDL=1 on for any sm_90+): each kernel
     * waits for its predecessors with griddepcontrol.wait at its top
     * (kernel_templates/common/kjit_types.cuh), so the next launch overlaps
     * the tail of the one before. */
    int pdl;
    /* Backward partitions of up to 64 tiles built by one CTA
     * (kjit_part_small, same bits as the three-launch build); KJIT_PART_SMALL=0
     * turns it off (tests compare the two). */
    int part_small;
    kjit_cache *cache;
    kjit_index_check index_check;
    CUdeviceptr err_flag; /* kjit_index_report on the device */
    /* Page-locked words kjit_ctx_index_error reads err into (one per
     * concurrent caller, claimed in err_host_busy). */
    int *err_host;
    atomic_uint_fast64_t err_host_busy;

    pthread_mutex_t ws_lock; /* the context-owned backward workspace */
    CUdeviceptr ws;
    size_t ws_bytes;
    /* Buffers a larger call replaced: a captured graph may still use them,
     * so they live until kjit_ctx_destroy, the 48 most recent (at the 49th
     * growth the oldest is freed, as kjit.h says). */
    CUdeviceptr retired[48];
    int n_retired;
    pthread_mutex_t index_lock; /* one synchronous index check at a time */

    pthread_rwlock_t lock;
    kjit_kernel_slot *slots;
    size_t n_slots, used;

    struct kjit_tune_table *tune; /* launch configs in use (src/tune/tune.h) */

    char *server; /* $KJIT_SERVER at create: asked on a miss (remote.h); NULL: none */
    atomic_uint_fast64_t server_builds; /* misses the server answered */
    atomic_int_fast64_t server_retry_us; /* kjit__now_us() before which the server is not asked */
    /* Set before any build (kjit prewarm over a cache it cannot write): a
     * kernel not in the cache fails with KJIT_ENOTFOUND instead of being
     * compiled, or asked of a server, and then not stored. */
    int lookup_only;
    /* The process that made it, and the forks counted there then
     * (fork_gen.h): a call from a forked child is refused. */
    int pid;
    unsigned fork_gen;
};

/* KJIT_EINVAL, naming both processes, when this process is a fork of the
 * one that made ctx (a CUDA context does not survive fork, and the child's
 * copies of its locks may be held by threads the child does not have).
 * Checked where a call first uses the context: kjit__ctx_enter (every op
 * and the tuner, before any kernel lookup, so not again per launch),
 * kjit__ctx_build, the counters and the configs. */
int kjit__ctx_owned(const kjit_ctx *ctx);

/* Makes ctx's CUDA context current on this thread; *pushed says whether to
 * pop it in kjit__ctx_leave. KJIT_ENODRIVER for a compile-only context. */
int kjit__ctx_enter(kjit_ctx *ctx, int *pushed);
void kjit__ctx_leave(kjit_ctx *ctx, int pushed);

/* The loaded kernel for a name expression from a template file, compiled
 * or taken from the cache on first use. Call inside enter/leave. */
int kjit__ctx_kernel(kjit_ctx *ctx, const char *template_file, const char *label,
                     const char *name_expr, CUfunction *fn);

/* kjit__ctx_kernel, and the function allowed smem bytes of dynamic shared
 * memory: all a launch of it needs but the launch
 * (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, set once per larger
 * size in the same map lookup, not per launch). kjit__ctx_kernel is this
 * with smem 0. */
int kjit__ctx_kernel_smem(kjit_ctx *ctx, const char *template_file, const char *label,
                          const char *name_expr, unsigned smem, CUfunction *fn);

/* Builds (or finds) a kernel's cubin for sm without loading it. */
int kjit__ctx_build(kjit_ctx *ctx, const char *template_file, const char *label,
                    const char *name_expr, int sm, kjit_kernel_image *out);

/* Launches fn with one params block (the kernel's only argument); with
 * ctx->pdl, as a programmatic dependent launch. */
int kjit__launch(const kjit_ctx *ctx, CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                 unsigned smem, CUstream stream, void *params, const char *what);

/* The context's own workspace of at least `bytes` (grown on demand; a
 * growth while `stream` is being captured is refused with KJIT_EINVAL,
 * before any allocation, so the capture stays valid). */
int kjit__ctx_workspace(kjit_ctx *ctx, size_t bytes, CUstream stream, CUdeviceptr *out);

/* The device record of index checking: err is the flag of asynchronous
 * checking; pos/value the first bad index found by a synchronous check. */
typedef struct kjit_index_report {
    int err;
    int pad;
    unsigned long long pos;
    long long value;
} kjit_index_report;

#endif
