/* The per-context table of launch configs (tune.h) and the public
 * kjit_op_config_get. */
#include "tune/tune.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/error.h"
#include "core/slot_index.h"
#include "gpu/cuda_api.h"
#include "tune/tune_file.h"

typedef struct slot {
    int mode, h;
    kjit_dtype act;
    int source; /* KJIT_CONFIG_STORED or _TUNED when cfg is set, else _DEFAULT */
    kjit_adaln_config cfg;
    int forced;
    kjit_adaln_config force;
    int tried; /* the on-use tuner ran for this key */
} slot;

struct kjit_tune_table {
    char device[128];
    size_t smem_max;
    int on_use;
    pthread_rwlock_t lock; /* slots */
    pthread_mutex_t tune_lock; /* one tuner at a time per context */
    slot *v;
    size_t n, cap;
    kjit_slot_index index; /* of v by key: a launch's lookup does not scan a long table */
};

kjit_tune_table *kjit__tune_table_new(const char *device, size_t smem_max, int on_use)
{
    kjit_tune_table *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    snprintf(t->device, sizeof t->device, "%s", device ? device : "");
    t->smem_max = smem_max;
    t->on_use = on_use;
    pthread_rwlock_init(&t->lock, NULL);
    pthread_mutex_init(&t->tune_lock, NULL);
    return t;
}

void kjit__tune_table_free(kjit_tune_table *t)
{
    if (!t) return;
    pthread_rwlock_destroy(&t->lock);
    pthread_mutex_destroy(&t->tune_lock);
    free(t->v);
    kjit__slot_index_free(&t->index);
    free(t);
}

const char *kjit__tune_table_device(const kjit_tune_table *t) { return t ? t->device : ""; }
size_t kjit__tune_table_smem_max(const kjit_tune_table *t) { return t ? t->smem_max : 0; }

static size_t key_hash(int mode, int h, kjit_dtype act)
{
    uint64_t x = ((uint64_t)(unsigned)mode << 40) ^ ((uint64_t)(unsigned)act << 32) ^ (uint32_t)h;
    x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ULL, x ^= x >> 33;
    return (size_t)x;
}

static size_t slot_hash(const void *set, size_t k)
{
    const slot *s = (const slot *)set + k;
    return key_hash(s->mode, s->h, s->act);
}

static int slot_is(const void *set, size_t k, const void *key)
{
    const slot *s = (const slot *)set + k, *q = key;
    return s->mode == q->mode && s->h == q->h && s->act == q->act;
}

static slot *find(kjit_tune_table *t, int mode, int h, kjit_dtype act)
{
    const slot q = {.mode = mode, .h = h, .act = act};
    const size_t *i = kjit__slot_index_find(&t->index, key_hash(mode, h, act), t->v, &q, slot_is);
    return i && *i ? &t->v[*i - 1] : NULL;
}

/* The key's slot, created when missing; NULL when out of memory. Write-locked. */
static slot *find_or_add(kjit_tune_table *t, int mode, int h, kjit_dtype act)
{
    slot *s = find(t, mode, h, act);
    if (s) return s;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        slot *v = realloc(t->v, cap * sizeof *v);
        if (!v) return NULL;
        t->v = v, t->cap = cap;
    }
    if (kjit__slot_index_reserve(&t->index, t->n + 1, t->n, t->v, slot_hash)) return NULL;
    s = &t->v[t->n];
    memset(s, 0, sizeof *s);
    s->mode = mode, s->h = h, s->act = act, s->source = KJIT_CONFIG_DEFAULT;
    *kjit__slot_index_find(&t->index, key_hash(mode, h, act), t->v, s, slot_is) = ++t->n;
    return s;
}

int kjit__tune_table_get(kjit_tune_table *t, int mode, int h, kjit_dtype act, kjit_adaln_config *c, int *tried)
{
    int source = KJIT_CONFIG_DEFAULT;
    if (tried) *tried = 0;
    kjit__adaln_config_default(mode, h, act, c);
    if (!t) return source;
    if (t->smem_max) kjit__adaln_config_fit(mode, h, act, c, t->smem_max);
    pthread_rwlock_rdlock(&t->lock);
    const slot *s = find(t, mode, h, act);
    if (s) {
        if (s->forced) *c = s->force, source = KJIT_CONFIG_FORCED;
        else if (s->source != KJIT_CONFIG_DEFAULT) *c = s->cfg, source = s->source;
        if (tried) *tried = s->tried;
    }
    pthread_rwlock_unlock(&t->lock);
    return source;
}

int kjit__tune_table_set(kjit_tune_table *t, int mode, int h, kjit_dtype act, const kjit_adaln_config *c, int source)
{
    char why[256];
    if (c && kjit__adaln_config_check(mode, h, act, c, t->smem_max, why, sizeof why))
        return kjit__fail(KJIT_EINVAL, "launch config for %s hidden %d %s: %s", kjit__adaln_mode_name(mode), h,
                          kjit_dtype_name(act), why);
    if (!c && source != KJIT_CONFIG_FORCED) return kjit__fail(KJIT_EINVAL, "launch config: NULL");
    pthread_rwlock_wrlock(&t->lock);
    slot *s = find_or_add(t, mode, h, act);
    if (s) {
        if (source == KJIT_CONFIG_FORCED) {
            s->forced = c != NULL;
            if (c) s->force = *c;
        } else {
            s->cfg = *c, s->source = source;
        }
    }
    pthread_rwlock_unlock(&t->lock);
    return s ? KJIT_OK : kjit__fail(KJIT_ENOMEM, "launch config table: out of memory");
}

void kjit__tune_lock(kjit_tune_table *t, int lock)
{
    if (lock) pthread_mutex_lock(&t->tune_lock);
    else pthread_mutex_unlock(&t->tune_lock);
}

static void mark_tried(kjit_tune_table *t, int mode, int h, kjit_dtype act)
{
    pthread_rwlock_wrlock(&t->lock);
    slot *s = find_or_add(t, mode, h, act);
    if (s) s->tried = 1;
    pthread_rwlock_unlock(&t->lock);
}

static atomic_int damaged_said;

void kjit__tune_damaged_said(void)
{
    atomic_store(&damaged_said, 1);
}

int kjit__tune_table_load(kjit_tune_table *t, const char *dir)
{
    if (!t || !t->device[0]) return 0;
    kjit_tune_list l = {0};
    int n_bad = 0, n = 0;
    char fwhy[256] = "";
    /* A damaged file's entries are not used: every tuned op falls back to
     * its default, which nothing else would say unless KJIT_LOG=1. Once a
     * process (kjit tune says it itself before its context). */
    if (kjit__tune_file_read(dir, &l, &n_bad, fwhy, sizeof fwhy) == KJIT_TUNE_FILE_DAMAGED &&
        !atomic_exchange(&damaged_said, 1)) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, KJIT_TUNE_FILE);
        const int kept = kjit__tune_file_keepable(path);
        kjit__warn("the tuning file %s is damaged (%s): its entries are not used; the next save (kjit tune, or "
                   "KJIT_TUNE=1) replaces it%s%s", path, fwhy, kept ? ", keeping it as " : "",
                   kept ? KJIT_TUNE_DAMAGED : "");
    }
    for (size_t i = 0; i < l.n; ++i) {
        const kjit_tune_entry *e = &l.v[i];
        if (strcmp(e->device, t->device)) continue;
        char why[256];
        if (!kjit__adaln_config_usable(e->mode, e->hidden, e->dtype, &e->cfg, t->smem_max, why, sizeof why)) {
            kjit__log("tuning file: %s hidden %d %s on %s ignored: %s", kjit__adaln_mode_name(e->mode), e->hidden,
                      kjit_dtype_name(e->dtype), e->device, why);
            continue;
        }
        pthread_rwlock_wrlock(&t->lock);
        slot *s = find_or_add(t, e->mode, e->hidden, e->dtype);
        if (s) s->cfg = e->cfg, s->source = KJIT_CONFIG_STORED, ++n;
        pthread_rwlock_unlock(&t->lock);
    }
    kjit__tune_list_free(&l);
    return n;
}

/* ---- context hooks ------------------------------------------------------ */

int kjit__tune_attach(kjit_ctx *ctx, const kjit_ctx_options *opts)
{
    char name[128] = "";
    size_t smem = 0;
    if (ctx->has_gpu) {
        const kjit_cu_api *cu = kjit__cu();
        if (cu->DeviceGetName(name, (int)sizeof name, ctx->dev) != CUDA_SUCCESS) name[0] = '\0';
        name[sizeof name - 1] = '\0';
        int v = 0;
        /* The kernels' static shared memory comes on top. */
        if (cu->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, ctx->dev) ==
                CUDA_SUCCESS &&
            v > 8192)
            smem = (size_t)v - KJIT_TUNE_STATIC_SMEM;
        else
            smem = 48 * 1024 - KJIT_TUNE_STATIC_SMEM;
    }
    int env_on = 0; /* (checked when the context was created) */
    (void)kjit__env_switch_parse("KJIT_TUNE", 0, &env_on);
    const int on_use = (opts && opts->tune) || env_on;
    ctx->tune = kjit__tune_table_new(name, smem, on_use);
    if (!ctx->tune) return kjit__fail(KJIT_ENOMEM, "kjit_ctx_create: out of memory");
    if (ctx->has_gpu && name[0]) kjit__tune_table_load(ctx->tune, kjit_ctx_cache_dir(ctx));
    return KJIT_OK;
}

void kjit__tune_detach(kjit_ctx *ctx)
{
    if (!ctx) return;
    kjit__tune_table_free(ctx->tune);
    ctx->tune = NULL;
}

/* ---- lookups ------------------------------------------------------------ */

static _Thread_local struct {
    int active, mode, h;
    kjit_dtype act;
    kjit_adaln_config c;
} tl;

void kjit__tune_override(int mode, int h, kjit_dtype act, const kjit_adaln_config *c)
{
    tl.active = c != NULL;
    tl.mode = mode, tl.h = h, tl.act = act;
    if (c) tl.c = *c;
}

/* The on-use tuner, once per key: not while the stream is being captured
 * (the tuner synchronizes), and failures fall back to the default. */
static void tune_on_use(kjit_ctx *ctx, int mode, int h, kjit_dtype act, CUstream stream)
{
    const kjit_cu_api *cu = kjit__cu();
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!cu || cu->StreamIsCapturing(stream, &cs) != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE) return;
    kjit_tune_table *t = ctx->tune;
    pthread_mutex_lock(&t->tune_lock);
    kjit_adaln_config c;
    int tried = 0;
    if (kjit__tune_table_get(t, mode, h, act, &c, &tried) == KJIT_CONFIG_DEFAULT && !tried) {
        mark_tried(t, mode, h, act);
        kjit_tune_result r;
        int rc = kjit__tune_run(ctx, mode, h, act, &r);
        if (rc == KJIT_OK)
            kjit__log("tuned %s hidden %d %s on first use in %.2f s", kjit__adaln_mode_name(mode), h,
                      kjit_dtype_name(act), r.seconds);
        else
            kjit__log("tuning %s hidden %d %s on first use: %s (%s)", kjit__adaln_mode_name(mode), h,
                      kjit_dtype_name(act), kjit_status_name(rc), kjit_last_error());
        kjit__clear_error();
    }
    pthread_mutex_unlock(&t->tune_lock);
}

void kjit__tune_config(kjit_ctx *ctx, int mode, int h, kjit_dtype act, int vec, CUstream stream, kjit_adaln_config *c)
{
    if (!vec || !kjit__adaln_fast_hidden(h)) {
        kjit__adaln_config_default(mode, h, act, c);
        return;
    }
    if (tl.active) {
        if (tl.mode == mode && tl.h == h && tl.act == act) *c = tl.c;
        else kjit__adaln_config_default(mode, h, act, c);
        return;
    }
    int tried = 0;
    const int source = kjit__tune_table_get(ctx->tune, mode, h, act, c, &tried);
    if (source != KJIT_CONFIG_DEFAULT || !ctx->tune || !ctx->tune->on_use || tried || !ctx->has_gpu) return;
    tune_on_use(ctx, mode, h, act, stream);
    kjit__tune_table_get(ctx->tune, mode, h, act, c, NULL);
}

int kjit__tune_force(kjit_ctx *ctx, const char *op, int h, kjit_dtype act, const kjit_adaln_config *c)
{
    const int mode = kjit__adaln_mode(op);
    if (!ctx || !ctx->tune) return kjit__fail(KJIT_EINVAL, "kjit__tune_force: ctx is NULL");
    if (!mode) return kjit__fail(KJIT_EINVAL, "kjit__tune_force: '%s' is not a tunable op", op ? op : "(null)");
    if (!kjit__adaln_fast_hidden(h) || (act != KJIT_F32 && act != KJIT_BF16 && act != KJIT_F16))
        return kjit__fail(KJIT_EINVAL, "kjit__tune_force: hidden %d %s is not tuned", h, kjit_dtype_name(act));
    return kjit__tune_table_set(ctx->tune, mode, h, act, c, KJIT_CONFIG_FORCED);
}

int kjit__tune_key_check(const char *fn, const char *op, int hidden, kjit_dtype dtype, int *mode)
{
    if (!op) return kjit__fail(KJIT_EINVAL, "%s: op is NULL", fn);
    if (!(*mode = kjit__adaln_mode(op)))
        return kjit__fail(KJIT_EINVAL,
                          "%s: op '%s' has no launch config (tunable: norm_modulate, gated_residual, "
                          "gated_residual_norm_modulate)",
                          fn, op);
    if (dtype != KJIT_F32 && dtype != KJIT_BF16 && dtype != KJIT_F16)
        return kjit__fail(KJIT_EINVAL, "%s: dtype %s: activations are fp32, bf16 or fp16", fn, kjit_dtype_name(dtype));
    if (hidden < 1 || hidden > 65536) return kjit__fail(KJIT_EINVAL, "%s: hidden %d outside 1..65536", fn, hidden);
    return KJIT_OK;
}

int kjit_op_config_get(kjit_ctx *ctx, const char *op, int hidden, kjit_dtype dtype, kjit_op_config *out)
{
    kjit__clear_error();
    if (!ctx || !out) return kjit__fail(KJIT_EINVAL, "kjit_op_config_get: %s is NULL", ctx ? "out" : "ctx");
    int mode, rc = kjit__ctx_owned(ctx);
    if (rc) return rc;
    if ((rc = kjit__tune_key_check("kjit_op_config_get", op, hidden, dtype, &mode))) return rc;
    kjit_adaln_config c;
    int source = KJIT_CONFIG_DEFAULT;
    if (kjit__adaln_fast_hidden(hidden)) {
        source = kjit__tune_table_get(ctx->tune, mode, hidden, dtype, &c, NULL);
    } else {
        /* The generic path: the default's rows per CTA and grid, no look-ahead, registers. */
        kjit__adaln_config_default(mode, hidden, dtype, &c);
        c.pf = c.bwd_pf = c.accs = 0;
    }
    out->rpc = c.rpc, out->pf = c.pf, out->grid_per_sm = c.grid_per_sm;
    out->bwd_pf = c.bwd_pf, out->accs = c.accs;
    out->source = (kjit_config_source)source;
    return KJIT_OK;
}
