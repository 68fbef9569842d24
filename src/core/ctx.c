#include "ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/env.h"
#include "core/error.h"
#include "core/fork_gen.h"
#include "core/remote.h"
#include "core/spin.h"
#include "jit/compile.h"
#include "jit/nvrtc_api.h"
#include "jit/templates.h"
#include "ops/op.h"
#include "tune/tune.h"

void kjit_ctx_options_init(kjit_ctx_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->device = 0;
    o->index_check = KJIT_INDEX_CHECK_OFF;
}

static int open_device(kjit_ctx *ctx)
{
    const kjit_cu_api *cu = kjit__cu();
    if (!cu) return KJIT_ENODRIVER;
    int count = 0;
    KJIT_CU_TRY(cu, DeviceGetCount(&count), "cuDeviceGetCount");
    if (ctx->device >= count)
        return kjit__fail(KJIT_EINVAL, "device %d: only %d CUDA device(s) present", ctx->device, count);
    KJIT_CU_TRY(cu, DeviceGet(&ctx->dev, ctx->device), "cuDeviceGet");
    int major = 0, minor = 0;
    KJIT_CU_TRY(cu, DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ctx->dev),
                "cuDeviceGetAttribute");
    KJIT_CU_TRY(cu, DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ctx->dev),
                "cuDeviceGetAttribute");
    KJIT_CU_TRY(cu, DeviceGetAttribute(&ctx->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ctx->dev),
                "cuDeviceGetAttribute");
    const int dev_sm = major * 10 + minor;
    if (ctx->sm && !kjit__arch_runs_on(ctx->sm, dev_sm))
        /* Every op would fail at its first launch (no binary for the GPU),
         * naming a kernel rather than the option. */
        return kjit__fail(KJIT_EINVAL,
                          "arch sm_%d: device %d is sm_%d, which cannot run sm_%d cubins (a cubin runs only on "
                          "devices of its major version, at its minor or later); leave arch unset for the "
                          "device's own, or compile for sm_%d without a device",
                          ctx->sm, ctx->device, dev_sm, ctx->sm, ctx->sm);
    if (!ctx->sm) {
        /* A device newer than NVRTC (sm_121 with a list ending at sm_120):
         * the newest arch NVRTC has whose cubins run on it. Only a nonzero
         * minor can have one, so only then is NVRTC loaded here (35 ms; a
         * process served from its cache or a kjit server may never need
         * it). Without NVRTC, the device's own (an op still needs NVRTC
         * loadable, since its version is part of every kernel's cache
         * key). */
        ctx->sm = dev_sm;
        const kjit_nvrtc_api *nv = dev_sm % 10 ? kjit__nvrtc() : NULL;
        if (nv) ctx->sm = kjit__arch_for_device(dev_sm, nv->archs, nv->n_archs);
        else if (dev_sm % 10) kjit__clear_error();
    }
    {
        /* On by default where it ran (sm_90) and for sm_100, with a driver
         * that captures it into graphs (12.3+); KJIT_PDL=0 turns it off,
         * KJIT_PDL=1 on for any sm_90+ device and target. */
        /* (Both switches were checked when the context was created.) */
        const int able = major >= 9 && ctx->sm >= 90 && cu->LaunchKernelEx;
        const int dflt = (major == 9 || major == 10) && cu->driver_version >= 12030;
        int pdl = dflt, small = 1;
        (void)kjit__env_switch_parse("KJIT_PDL", dflt, &pdl);
        (void)kjit__env_switch_parse("KJIT_PART_SMALL", 1, &small);
        ctx->pdl = able && pdl;
        ctx->part_small = small;
    }
    KJIT_CU_TRY(cu, DevicePrimaryCtxRetain(&ctx->cuctx, ctx->dev), "cuDevicePrimaryCtxRetain");
    ctx->has_gpu = 1;
    /* Like the CUDA runtime: a thread with no current context gets the
     * device's primary one, so a plain driver-API caller can allocate. */
    CUcontext cur = NULL;
    if (cu->CtxGetCurrent(&cur) == CUDA_SUCCESS && !cur)
        (void)cu->CtxSetCurrent(ctx->cuctx);
    int pushed = 0;
    int rc = kjit__ctx_enter(ctx, &pushed);
    if (rc) return rc;
    CUresult r = cu->MemAlloc(&ctx->err_flag, sizeof(kjit_index_report));
    if (r == CUDA_SUCCESS) r = cu->MemsetD8(ctx->err_flag, 0, sizeof(kjit_index_report));
    /* Page-locked: its read back is an asynchronous copy, not the staged
     * one a pageable destination takes. */
    if (r == CUDA_SUCCESS) r = cu->MemHostAlloc((void **)&ctx->err_host, sizeof(int) * KJIT_ERR_HOST_WORDS, 0);
    kjit__ctx_leave(ctx, pushed);
    if (r != CUDA_SUCCESS) return kjit__cu_fail(r, "allocating the index-error flag");
    return KJIT_OK;
}

int kjit_ctx_create(kjit_ctx **out, const kjit_ctx_options *opts)
{
    kjit__clear_error();
    if (!out) return kjit__fail(KJIT_EINVAL, "kjit_ctx_create: out is NULL");
    *out = NULL;
    kjit_ctx_options def;
    if (!opts) {
        kjit_ctx_options_init(&def);
        opts = &def;
    }
    if (opts->device < KJIT_NO_DEVICE)
        return kjit__fail(KJIT_EINVAL, "device %d: expected an ordinal >= 0 or KJIT_NO_DEVICE", opts->device);
    if (opts->index_check < KJIT_INDEX_CHECK_OFF || opts->index_check > KJIT_INDEX_CHECK_ASYNC)
        return kjit__fail(KJIT_EINVAL, "index_check %d: expected KJIT_INDEX_CHECK_OFF, _SYNC or _ASYNC",
                          (int)opts->index_check);
    /* Any other value would turn the tuner (which allocates and
     * synchronizes) on by being non-zero. */
    if (opts->tune != 0 && opts->tune != 1)
        return kjit__fail(KJIT_EINVAL, "tune %d: expected 0 or 1", opts->tune);
    int rc0 = kjit__env_switches_check(); /* KJIT_TUNE='false' must not tune */
    if (rc0) return rc0;
    kjit_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return kjit__fail(KJIT_ENOMEM, "kjit_ctx_create: out of memory");
    kjit__fork_watch();
    ctx->pid = (int)getpid();
    ctx->fork_gen = kjit__fork_gen();
    ctx->device = opts->device;
    ctx->index_check = opts->index_check;
    pthread_rwlock_init(&ctx->lock, NULL);
    pthread_mutex_init(&ctx->ws_lock, NULL);
    pthread_mutex_init(&ctx->index_lock, NULL);
    int rc = KJIT_OK;
    if (opts->arch && (rc = kjit__arch_parse(opts->arch, &ctx->sm))) goto fail;
    if ((rc = kjit__cache_open(&ctx->cache, opts->cache_dir, 0))) goto fail;
    const char *server = getenv("KJIT_SERVER");
    if (server && *server && !(ctx->server = strdup(server))) {
        rc = kjit__fail(KJIT_ENOMEM, "kjit_ctx_create: out of memory");
        goto fail;
    }
    if (ctx->device >= 0) {
        rc = open_device(ctx);
        if (rc == KJIT_ENODRIVER) {
            /* Compile-only: keep why, ops report it. */
            snprintf(ctx->no_gpu_reason, sizeof ctx->no_gpu_reason, "%s", kjit_last_error());
            kjit__clear_error();
            rc = KJIT_OK;
        } else if (rc) {
            goto fail;
        }
    } else {
        snprintf(ctx->no_gpu_reason, sizeof ctx->no_gpu_reason,
                 "this context was created with KJIT_NO_DEVICE (compile only)");
    }
    if (!ctx->sm) ctx->sm = 90;
    snprintf(ctx->arch, sizeof ctx->arch, "sm_%d", ctx->sm);
    if ((rc = kjit__tune_attach(ctx, opts))) goto fail;
    *out = ctx;
    return KJIT_OK;
fail:
    kjit_ctx_destroy(ctx);
    return rc;
}

/* 1 in a process forked from the one that made ctx. */
static int forked(const kjit_ctx *ctx) { return ctx->fork_gen != kjit__fork_gen(); }

int kjit__ctx_owned(const kjit_ctx *ctx)
{
    if (!forked(ctx)) return KJIT_OK;
    return kjit__fail(KJIT_EINVAL, "this kjit context was made by process %d, of which this process (%d) is a fork: "
                                   "a context is not used in a forked child (CUDA's state does not survive fork): "
                                   "make one in this process", ctx->pid, (int)getpid());
}

void kjit_ctx_destroy(kjit_ctx *ctx)
{
    /* In a forked child: nothing (no CUDA call there; its memory is the
     * child's copy, gone at exit). */
    if (!ctx || forked(ctx)) return;
    const kjit_cu_api *cu = ctx->has_gpu ? kjit__cu() : NULL;
    int pushed = 0;
    if (cu && kjit__ctx_enter(ctx, &pushed) == KJIT_OK) {
        /* Kernels still queued may use the buffers and modules freed here
         * (cuMemFree's own wait is not promised); an error of an earlier
         * launch, returned here, changes nothing. */
        (void)cu->CtxSynchronize();
        for (size_t i = 0; i < ctx->n_slots; ++i)
            if (ctx->slots[i].name && ctx->slots[i].module) cu->ModuleUnload(ctx->slots[i].module);
        if (ctx->err_flag) cu->MemFree(ctx->err_flag);
        if (ctx->err_host) cu->MemFreeHost(ctx->err_host);
        if (ctx->ws) cu->MemFree(ctx->ws);
        for (int i = 0; i < ctx->n_retired; ++i) cu->MemFree(ctx->retired[i]);
        kjit__ctx_leave(ctx, pushed);
    }
    for (size_t i = 0; i < ctx->n_slots; ++i) free(ctx->slots[i].name);
    free(ctx->slots);
    if (cu && ctx->cuctx) {
        CUcontext cur = NULL;
        const int current = cu->CtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx->cuctx;
        cu->DevicePrimaryCtxRelease(ctx->dev);
        /* A released context is not left current on this thread, but one
         * that another kjit context or the CUDA runtime still holds is:
         * that holder's driver-API calls here would fail without it. */
        unsigned flags = 0;
        int active = 1;
        if (current && cu->DevicePrimaryCtxGetState(ctx->dev, &flags, &active) == CUDA_SUCCESS && !active)
            cu->CtxSetCurrent(NULL);
    }
    kjit__cache_close(ctx->cache);
    kjit__tune_detach(ctx);
    free(ctx->server);
    pthread_rwlock_destroy(&ctx->lock);
    pthread_mutex_destroy(&ctx->ws_lock);
    pthread_mutex_destroy(&ctx->index_lock);
    free(ctx);
}

int kjit_ctx_has_device(const kjit_ctx *ctx) { return ctx && ctx->has_gpu; }
const char *kjit_ctx_arch(const kjit_ctx *ctx) { return ctx ? ctx->arch : NULL; }
const char *kjit_ctx_cache_dir(const kjit_ctx *ctx) { return ctx ? kjit__cache_dir(ctx->cache) : NULL; }

int kjit_ctx_cache_counters(kjit_ctx *ctx, kjit_cache_counters *out)
{
    kjit__clear_error();
    if (!ctx || !out) return kjit__fail(KJIT_EINVAL, "kjit_ctx_cache_counters: %s is NULL", ctx ? "out" : "ctx");
    int rc = kjit__ctx_owned(ctx);
    if (rc) return rc;
    kjit_cache_stats s;
    kjit__cache_counters(ctx->cache, &s); /* no directory scan: called per request by kjit serve */
    out->mem_hits = s.mem_hits;
    out->disk_hits = s.disk_hits;
    out->misses = s.misses;
    out->compiles = s.compiles;
    out->bad_entries = s.bad_entries;
    out->evictions = s.evictions;
    out->store_failures = s.store_failures;
    out->server_builds = atomic_load(&ctx->server_builds);
    return KJIT_OK;
}

int kjit__ctx_enter(kjit_ctx *ctx, int *pushed)
{
    *pushed = 0;
    int rc = kjit__ctx_owned(ctx);
    if (rc) return rc;
    if (!ctx->has_gpu) return kjit__fail(KJIT_ENODRIVER, "%s", ctx->no_gpu_reason);
    const kjit_cu_api *cu = kjit__cu();
    CUcontext cur = NULL;
    KJIT_CU_TRY(cu, CtxGetCurrent(&cur), "cuCtxGetCurrent");
    if (cur == ctx->cuctx) return KJIT_OK;
    KJIT_CU_TRY(cu, CtxPushCurrent(ctx->cuctx), "cuCtxPushCurrent");
    *pushed = 1;
    return KJIT_OK;
}

void kjit__ctx_leave(kjit_ctx *ctx, int pushed)
{
    (void)ctx;
    if (pushed) {
        CUcontext popped;
        kjit__cu()->CtxPopCurrent(&popped);
    }
}

int kjit_ctx_index_error(kjit_ctx *ctx, CUstream stream, int *flag)
{
    kjit__clear_error();
    if (!ctx || !flag) return kjit__fail(KJIT_EINVAL, "kjit_ctx_index_error: %s is NULL", ctx ? "flag" : "ctx");
    int pushed, rc = kjit__ctx_enter(ctx, &pushed);
    if (rc) return rc;
    const kjit_cu_api *cu = kjit__cu();
    /* The read waits for the stream, which a capture does not allow (the
     * capture would be invalidated): refused before anything is recorded. */
    const char *which;
    if (kjit__cu_capturing(cu, stream, &which)) {
        kjit__ctx_leave(ctx, pushed);
        return kjit__fail(KJIT_EINVAL, "kjit_ctx_index_error: waits for the stream, which cannot happen while %s is "
                          "being captured into a CUDA graph: call it after the graph's launch", which);
    }
    /* A page-locked word of the context's own, claimed for this call (a
     * thread past the 64 concurrent readers reads into its stack). */
    int v = 0, slot = -1;
    uint_fast64_t busy = atomic_load(&ctx->err_host_busy);
    while (busy != ~(uint_fast64_t)0) {
        const int b = __builtin_ctzll(~(unsigned long long)busy);
        if (atomic_compare_exchange_weak(&ctx->err_host_busy, &busy, busy | ((uint_fast64_t)1 << b))) {
            slot = b;
            break;
        }
    }
    int *dst = slot >= 0 ? &ctx->err_host[slot] : &v;
    CUresult r = cu->MemcpyDtoHAsync(dst, ctx->err_flag, sizeof v, stream);
    const int queued = r == CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) r = cu->StreamSynchronize(stream);
    if (r == CUDA_SUCCESS) v = *dst;
    /* After a failed wait the queued copy may still land: that word stays
     * claimed. A copy that was never queued leaves it free. */
    if (slot >= 0 && (r == CUDA_SUCCESS || !queued))
        atomic_fetch_and(&ctx->err_host_busy, ~((uint_fast64_t)1 << slot));
    if (r == CUDA_SUCCESS && v) {
        r = cu->MemsetD32Async(ctx->err_flag, 0, 1, stream);
        if (r == CUDA_SUCCESS) r = cu->StreamSynchronize(stream);
    }
    kjit__ctx_leave(ctx, pushed);
    if (r != CUDA_SUCCESS) return kjit__cu_fail(r, "reading the index-error flag");
    *flag = v != 0;
    return KJIT_OK;
}

/* ---- kernel map --------------------------------------------------------- */

static kjit_kernel_slot *find_slot(kjit_kernel_slot *slots, size_t n, const char *name, uint64_t h)
{
    size_t i = (size_t)h & (n - 1);
    for (;;) {
        kjit_kernel_slot *s = &slots[i];
        if (!s->name || (s->hash == h && strcmp(s->name, name) == 0)) return s;
        i = (i + 1) & (n - 1);
    }
}

typedef struct build_arg {
    kjit_ctx *ctx;
    const char *template_file, *label, *name_expr;
    int sm;
    char key[33];
    const char *const *opts; /* the options the key hashed */
    int n_opts;
} build_arg;

/* A miss of memory and disk, under the cache's lock on the key: the server
 * named by KJIT_SERVER first (one compile per node, whatever the cache
 * directories), else NVRTC here. */
static int build_cb(void *arg, char **lowered, void **image, size_t *len)
{
    build_arg *b = arg;
    kjit_ctx *ctx = b->ctx;
    if (ctx->lookup_only)
        return kjit__fail(KJIT_ENOTFOUND, "%s: not in the cache directory %s, which cannot be written: not compiled",
                          b->name_expr, kjit__cache_dir(ctx->cache));
    /* A kernel request names a registered op; the library's own helpers
     * (index checks) are built here. A server that is gone, hung, busy,
     * refusing or not this library's is left alone for KJIT_SERVER_RETRY_S
     * (else each kernel waited its 2 s connect timeout); one that refused
     * this kernel alone (its compile failed, a template it lacks) is asked
     * for the next. */
    if (ctx->server && kjit__op_find(b->label) && kjit__now_us() >= (double)atomic_load(&ctx->server_retry_us)) {
        kjit_remote_kernel k = {ctx->server, kjit__cache_dir(ctx->cache), b->label, b->template_file,
                                b->name_expr, b->sm, b->key};
        const int rc = kjit__remote_build(&k, lowered, image, len);
        if (rc == KJIT_OK) {
            atomic_fetch_add(&ctx->server_builds, 1);
            return KJIT_OK;
        }
        const int this_kernel = rc == KJIT_ECOMPILE || rc == KJIT_EINVAL;
        if (!this_kernel)
            atomic_store(&ctx->server_retry_us,
                         (int_fast64_t)kjit__now_us() + (int_fast64_t)KJIT_SERVER_RETRY_S * 1000000);
        kjit__log("%s for sm_%d: compiling here, not with the kjit server at %s%s: %s", b->name_expr, b->sm,
                  ctx->server, this_kernel ? "" : " (not asked again for a while)", kjit_last_error());
        kjit__clear_error();
    }
    return kjit__jit_compile_with(b->template_file, b->name_expr, b->sm, b->opts, b->n_opts, lowered, image, len);
}

/* "adaln" for "adaln.cuh" or "dir/adaln.cuh". */
static void template_stem(const char *template_file, char *out, size_t n)
{
    const char *base = strrchr(template_file, '/');
    base = base ? base + 1 : template_file;
    size_t len = strcspn(base, ".");
    snprintf(out, n, "%.*s", (int)(len ? len : strlen(base)), base);
}

static int cache_fetch(kjit_ctx *ctx, const char *template_file, const char *label,
                       const char *name_expr, int sm, kjit_cache_blob *blob, kjit_cache_origin *origin,
                       kjit_cache_key *key_out)
{
    const kjit_nvrtc_api *nv = kjit__nvrtc();
    if (!nv) return KJIT_ENONVRTC;
    const char *bundle;
    size_t bundle_len;
    int rc = kjit__templates_bundle(&bundle, &bundle_len);
    if (rc) return rc;
    char arch_buf[64], arch[16];
    const char *opts[KJIT_MAX_OPTIONS];
    int n_opts = kjit__jit_options(sm, arch_buf, opts);
    snprintf(arch, sizeof arch, "sm_%d", sm);
    /* The main file is part of what is compiled, so part of the key. */
    char keyed_name[512];
    snprintf(keyed_name, sizeof keyed_name, "%s:%s", template_file, name_expr);
    kjit_cache_fields f = {
        .source = bundle, .source_len = bundle_len, .name_expr = keyed_name,
        .options = opts, .n_options = n_opts, .arch = arch,
        .nvrtc_major = nv->major, .nvrtc_minor = nv->minor, .format = KJIT_CACHE_FORMAT,
    };
    build_arg b = {ctx, template_file, label, name_expr, sm, "", opts, n_opts};
    kjit_cache_key key;
    /* Its own error (out of memory for the hash state), not the zero key's. */
    if ((rc = kjit__cache_make_key(&f, &key)) != KJIT_OK) return rc;
    kjit__cache_key_hex(key, b.key);
    if (key_out) *key_out = key;
    /* The entry's file is named after its template ("adaln", "partition"),
     * not the op asking: ops share kernels (the partition's), so a key has
     * one file, which every op's lookup and a prewarm of any of them find.
     * The op (label) still picks the server a miss is sent to. */
    char file_label[64];
    template_stem(template_file, file_label, sizeof file_label);
    return kjit__cache_get(ctx->cache, key, file_label, arch, build_cb, &b, blob, origin);
}

int kjit__ctx_build(kjit_ctx *ctx, const char *template_file, const char *label,
                    const char *name_expr, int sm, kjit_kernel_image *out)
{
    int rc = kjit__ctx_owned(ctx);
    if (rc) return rc;
    kjit_cache_blob blob;
    kjit_cache_origin origin;
    kjit_cache_key key;
    rc = cache_fetch(ctx, template_file, label, name_expr, sm, &blob, &origin, &key);
    if (rc == KJIT_OK && out) {
        out->lowered_name = blob.lowered_name;
        out->cubin = blob.image;
        out->cubin_len = blob.image_len;
        kjit__cache_key_hex(key, out->key);
        out->cached = origin != KJIT_FROM_COMPILE;
    }
    return rc;
}

/* Lets the loaded function take smem bytes of dynamic shared memory, once
 * per larger size (the write lock orders concurrent callers). */
static int allow_smem(kjit_ctx *ctx, const char *name_expr, uint64_t h, unsigned smem)
{
    pthread_rwlock_wrlock(&ctx->lock);
    kjit_kernel_slot *s = find_slot(ctx->slots, ctx->n_slots, name_expr, h);
    if (s->smem_max < smem) {
        const CUresult r =
            kjit__cu()->FuncSetAttribute(s->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem);
        if (r != CUDA_SUCCESS) {
            pthread_rwlock_unlock(&ctx->lock);
            return kjit__cu_fail(r, name_expr);
        }
        s->smem_max = smem;
    }
    pthread_rwlock_unlock(&ctx->lock);
    return KJIT_OK;
}

int kjit__ctx_kernel(kjit_ctx *ctx, const char *template_file, const char *label,
                     const char *name_expr, CUfunction *fn)
{
    return kjit__ctx_kernel_smem(ctx, template_file, label, name_expr, 0, fn);
}

int kjit__ctx_kernel_smem(kjit_ctx *ctx, const char *template_file, const char *label,
                          const char *name_expr, unsigned smem, CUfunction *fn)
{
    /* 48 KiB of static + dynamic shared memory need no attribute; the
     * kernels' static part is under 8 KiB where they take dynamic shared
     * memory (the finisher's 14 KiB is all static). */
    const unsigned need = smem > 40 * 1024 ? smem : 0;
    const uint64_t h = XXH3_64bits(name_expr, strlen(name_expr));
    pthread_rwlock_rdlock(&ctx->lock);
    if (ctx->n_slots) {
        kjit_kernel_slot *s = find_slot(ctx->slots, ctx->n_slots, name_expr, h);
        if (s->name) {
            *fn = s->fn;
            const int ready = s->smem_max >= need;
            pthread_rwlock_unlock(&ctx->lock);
            return ready ? KJIT_OK : allow_smem(ctx, name_expr, h, need);
        }
    }
    pthread_rwlock_unlock(&ctx->lock);

    kjit_cache_blob blob;
    kjit_cache_origin origin;
    int rc = cache_fetch(ctx, template_file, label, name_expr, ctx->sm, &blob, &origin, NULL);
    if (rc) return rc;
    const kjit_cu_api *cu = kjit__cu();
    CUmodule mod = NULL;
    CUfunction f = NULL;
    CUresult r = cu->ModuleLoadData(&mod, blob.image);
    if (r != CUDA_SUCCESS) return kjit__cu_fail(r, name_expr);
    r = cu->ModuleGetFunction(&f, mod, blob.lowered_name);
    if (r != CUDA_SUCCESS) {
        cu->ModuleUnload(mod);
        return kjit__cu_fail(r, name_expr);
    }

    pthread_rwlock_wrlock(&ctx->lock);
    if (ctx->used * 2 >= ctx->n_slots) {
        size_t n = ctx->n_slots ? ctx->n_slots * 2 : 64;
        kjit_kernel_slot *slots = calloc(n, sizeof *slots);
        if (!slots) {
            pthread_rwlock_unlock(&ctx->lock);
            cu->ModuleUnload(mod);
            return kjit__fail(KJIT_ENOMEM, "out of memory for the kernel map");
        }
        for (size_t i = 0; i < ctx->n_slots; ++i)
            if (ctx->slots[i].name) *find_slot(slots, n, ctx->slots[i].name, ctx->slots[i].hash) = ctx->slots[i];
        free(ctx->slots);
        ctx->slots = slots;
        ctx->n_slots = n;
    }
    kjit_kernel_slot *s = find_slot(ctx->slots, ctx->n_slots, name_expr, h);
    if (s->name) { /* another thread loaded it meanwhile */
        cu->ModuleUnload(mod);
    } else {
        s->name = strdup(name_expr);
        if (!s->name) {
            pthread_rwlock_unlock(&ctx->lock);
            cu->ModuleUnload(mod);
            return kjit__fail(KJIT_ENOMEM, "out of memory for the kernel map");
        }
        s->hash = h;
        s->module = mod;
        s->fn = f;
        ctx->used++;
    }
    *fn = s->fn;
    const int ready = s->smem_max >= need;
    pthread_rwlock_unlock(&ctx->lock);
    return ready ? KJIT_OK : allow_smem(ctx, name_expr, h, need);
}

int kjit__launch(const kjit_ctx *ctx, CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                 unsigned smem, CUstream stream, void *params, const char *what)
{
    void *args[] = {params};
    const kjit_cu_api *cu = kjit__cu();
    if (ctx->pdl) {
        CUlaunchAttribute at;
        memset(&at, 0, sizeof at);
        at.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        at.value.programmaticStreamSerializationAllowed = 1;
        CUlaunchConfig lc;
        memset(&lc, 0, sizeof lc);
        lc.gridDimX = gx, lc.gridDimY = gy, lc.gridDimZ = gz;
        lc.blockDimX = bx, lc.blockDimY = 1, lc.blockDimZ = 1;
        lc.sharedMemBytes = smem;
        lc.hStream = stream;
        lc.attrs = &at;
        lc.numAttrs = 1;
        KJIT_CU_TRY(cu, LaunchKernelEx(&lc, fn, args, NULL), what);
        return KJIT_OK;
    }
    KJIT_CU_TRY(cu, LaunchKernel(fn, gx, gy, gz, bx, 1, 1, smem, stream, args, NULL), what);
    return KJIT_OK;
}

int kjit__ctx_workspace(kjit_ctx *ctx, size_t bytes, CUstream stream, CUdeviceptr *out)
{
    pthread_mutex_lock(&ctx->ws_lock);
    CUresult r = CUDA_SUCCESS;
    if (ctx->ws_bytes < bytes) {
        const kjit_cu_api *cu = kjit__cu();
        /* cuMemAlloc is not allowed while the stream is captured: it would
         * fail and invalidate the caller's capture. Refuse first. (A
         * legacy stream reports CUDA_ERROR_STREAM_CAPTURE_IMPLICIT while
         * another blocking stream captures.) */
        const char *which;
        if (kjit__cu_capturing(cu, stream, &which)) {
            const size_t have = ctx->ws_bytes;
            pthread_mutex_unlock(&ctx->ws_lock);
            return kjit__fail(KJIT_EINVAL, "the context's backward workspace (%zu bytes) must grow to %zu bytes, "
                              "which cannot happen while %s is being captured into a CUDA graph: make the same "
                              "call once before capturing, or pass a workspace of the op's kjit_*_workspace size",
                              have, bytes, which);
        }
        /* 1.5x the need keeps the growths few; if that does not fit, the
         * need alone. The old buffer stays the context's until a new one
         * is allocated, so a failed growth leaves the context as it was. */
        CUdeviceptr fresh = 0;
        size_t want = bytes + bytes / 2;
        r = cu->MemAlloc(&fresh, want);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            want = bytes;
            r = cu->MemAlloc(&fresh, want);
        }
        /* The old buffer may be in a captured graph or in another thread's
         * launch: retire it (freed at destroy). When the list is full the
         * oldest is freed once the device is idle (not left to cuMemFree's
         * own wait, which the driver does not promise); if the context
         * cannot be synchronized (another stream of it being captured), the
         * growth is undone and the call fails: nothing is dropped unfreed. */
        const int full = ctx->ws && ctx->n_retired == (int)(sizeof ctx->retired / sizeof ctx->retired[0]);
        if (r == CUDA_SUCCESS && full && (r = cu->CtxSynchronize()) != CUDA_SUCCESS) {
            cu->MemFree(fresh);
            pthread_mutex_unlock(&ctx->ws_lock);
            return kjit__cu_fail(r, "synchronizing the context to free its oldest retired backward workspace (the "
                                 "49th growth; the workspace kept as it was)");
        }
        if (r == CUDA_SUCCESS) {
            if (full) {
                cu->MemFree(ctx->retired[0]);
                memmove(ctx->retired, ctx->retired + 1, sizeof ctx->retired - sizeof ctx->retired[0]);
                ctx->n_retired--;
            }
            if (ctx->ws) ctx->retired[ctx->n_retired++] = ctx->ws;
            ctx->ws = fresh;
            ctx->ws_bytes = want;
        }
    }
    *out = ctx->ws;
    pthread_mutex_unlock(&ctx->ws_lock);
    if (r != CUDA_SUCCESS) return kjit__cu_fail(r, "allocating the context's backward workspace");
    return KJIT_OK;
}
