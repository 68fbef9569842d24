/* kjit prewarm: compile every kernel of a set of ops ahead of time. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cli/cli.h"
#include "core/ctx.h"
#include "jit/compile.h"
#include "jit/templates.h"
#include "kjit.h"
#include "ops/op.h"
#include "tune/config.h"
#include "tune/tune.h"

static const char help[] =
    "usage: kjit prewarm [--ops LIST] [--hidden LIST] [--dtype LIST] [--arch LIST]\n"
    "                    [--space] [--jobs N] [--cache-dir DIR] [--list] [--json]\n"
    "\n"
    "Compiles every kernel (forward and backward) of the ops for every\n"
    "combination into the cubin cache. Needs NVRTC, not a GPU.\n"
    "\n"
    "  --ops LIST       comma list of ops ('fused' = gated_residual_norm_modulate), or 'all'\n"
    "                   (default: all)\n"
    "  --hidden LIST    hidden sizes (for timestep_sinusoid: D) (default: 256,5376)\n"
    "  --dtype LIST     activation dtypes: fp32, bf16, fp16 (default: bf16)\n"
    "  --arch LIST      target archs, e.g. sm_90,sm_100 (also 90 or sm90) (default: the GPU's,\n"
    "                   else sm_90)\n"
    "  --space          also every launch config kjit tune times (norm_modulate, gated_residual,\n"
    "                   gated_residual_norm_modulate at hidden sizes that are multiples of 8 up to\n"
    "                   16384: the sizes with a tuning space), so that tuning on the GPU only times\n"
    "  --jobs N         parallel compiles (default: the number of cores)\n"
    "  --cache-dir DIR  cache directory (default: $KJIT_CACHE_DIR, $XDG_CACHE_HOME/kjit, ~/.cache/kjit)\n"
    "  --list           print the kernels it would compile (arch, template, kernel), one a line,\n"
    "                   and stop: nothing is compiled and no directory touched\n"
    "  --json           print one JSON object: kernels, compiled, cached, failed, seconds, ...\n"
    "Each LIST holds at most 64 items (a repeated item counts).\n"
    "\n"
    "Exit status: 0 when every kernel was compiled or found and stored; 1 when any failed to\n"
    "compile or could not be stored (a full disk); 2 on bad usage. In a cache directory it\n"
    "cannot write it compiles nothing and checks that each kernel is there (1 if one is not).\n"
    "Entries the size cap evicts during the run (oldest first) are noted on stderr.\n"
    "SIGINT or SIGTERM stops it; what is already stored stays.\n";

#define MAX_LIST 64

typedef struct job {
    kjit_kernel_spec spec;
    char arch[16];
    int result; /* 0 compiled, 1 cached, <0 status */
    char *error;
    char key[33]; /* the cache key (hex) once built */
    int on_disk;  /* its entry is in the directory at the end (missing_on_disk) */
} job;

typedef struct pool {
    kjit_ctx *ctx;
    job *jobs;
    long n_jobs;
    atomic_long next, done, failed, compiled, cached;
    kjit_progress progress;
    pthread_mutex_t lock;
} pool;

static void *worker(void *arg)
{
    pool *p = arg;
    for (;;) {
        long i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n_jobs) return NULL;
        job *j = &p->jobs[i];
        kjit_kernel_image img;
        int rc = kjit_kernel_fetch(p->ctx, &j->spec, j->arch, &img);
        if (rc) {
            j->result = rc;
            j->error = strdup(kjit_last_error());
            atomic_fetch_add(&p->failed, 1);
        } else {
            j->result = img.cached;
            memcpy(j->key, img.key, sizeof j->key);
            atomic_fetch_add(img.cached ? &p->cached : &p->compiled, 1);
        }
        /* Counted under the lock that draws it: frames in order, the last
         * one total/total. */
        pthread_mutex_lock(&p->lock);
        long done = atomic_fetch_add(&p->done, 1) + 1;
        kjit_progress_update(&p->progress, done, atomic_load(&p->failed));
        pthread_mutex_unlock(&p->lock);
    }
}

static int add_jobs(job **jobs, long *n, long *cap, const kjit_kernel_spec *specs, int n_specs, const char *arch)
{
    for (int s = 0; s < n_specs; ++s) {
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 64;
            job *nj = realloc(*jobs, sizeof *nj * (size_t)*cap);
            if (!nj) return -1;
            *jobs = nj;
        }
        job *j = &(*jobs)[(*n)++];
        memset(j, 0, sizeof *j);
        j->spec = specs[s];
        snprintf(j->arch, sizeof j->arch, "%s", arch);
    }
    return 0;
}

/* The built jobs whose entry is missing from the cache directory at the
 * end. The size cap evicts the oldest entries first, other processes'
 * publishes included, so a run whose set (or whose set with a concurrent
 * run's) is larger than the cap can end with some of its own kernels
 * gone. -1: the directory could not be listed. */
static int by_key(const void *a, const void *b)
{
    return strcmp((*(job *const *)a)->key, (*(job *const *)b)->key);
}
typedef struct { job **sorted; long n; } present_arg;
static void present_visit(void *arg, const kjit_cache_entry_info *e)
{
    present_arg *a = arg;
    kjit_cache_key key;
    if (e->temp || !e->regular || !e->owned || !kjit__cache_parse_name(e->file, &key)) return;
    job probe, *pp = &probe;
    kjit__cache_key_hex(key, probe.key);
    job **hit = bsearch(&pp, a->sorted, (size_t)a->n, sizeof *a->sorted, by_key);
    if (!hit) return;
    for (job **q = hit; q >= a->sorted && !strcmp((*q)->key, probe.key); --q) (*q)->on_disk = 1;
    for (job **q = hit + 1; q < a->sorted + a->n && !strcmp((*q)->key, probe.key); ++q) (*q)->on_disk = 1;
}
static long missing_on_disk(const char *dir, job *jobs, long n, char *why, size_t why_size)
{
    job **sorted = malloc(sizeof *sorted * (size_t)(n ? n : 1));
    snprintf(why, why_size, "out of memory");
    if (!sorted) return -1;
    long m = 0;
    for (long i = 0; i < n; ++i)
        if (jobs[i].result >= 0) sorted[m++] = &jobs[i];
    qsort(sorted, (size_t)m, sizeof *sorted, by_key);
    present_arg a = {sorted, m};
    int n_bad = 0;
    const int rc = kjit__cache_list(dir, 0, present_visit, &a, &n_bad);
    free(sorted);
    snprintf(why, why_size, "%s", kjit_last_error());
    if (rc != KJIT_OK) return -1;
    long missing = 0;
    for (long i = 0; i < n; ++i) missing += jobs[i].result >= 0 && !jobs[i].on_disk;
    return missing;
}

/* The compiled image a job makes: 0 when two jobs make the same one. */
static int image_cmp(const job *x, const job *y)
{
    int c = strcmp(x->spec.name_expr, y->spec.name_expr);
    if (!c) c = strcmp(x->arch, y->arch);
    if (!c) c = strcmp(x->spec.template_file, y->spec.template_file);
    return c;
}

typedef struct { const job *j; long i; } job_ref;

static int job_ref_cmp(const void *a, const void *b)
{
    const job_ref *x = a, *y = b;
    const int c = image_cmp(x->j, y->j);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* Ops share kernels (the partition's), and --space repeats the defaults:
 * one job per compiled image, the first of each kept in order. Sorted, not
 * compared pair by pair (a wide --space prewarm holds 10^5 jobs). 0, or -1
 * out of memory. */
static int dedup_jobs(job *jobs, long *n)
{
    if (*n < 2) return 0;
    job_ref *r = malloc(sizeof *r * (size_t)*n);
    unsigned char *keep = calloc((size_t)*n, 1);
    if (!r || !keep) {
        free(r), free(keep);
        return -1;
    }
    for (long i = 0; i < *n; ++i) r[i] = (job_ref){&jobs[i], i};
    qsort(r, (size_t)*n, sizeof *r, job_ref_cmp);
    for (long i = 0; i < *n; ++i)
        keep[r[i].i] = i == 0 || image_cmp(r[i].j, r[i - 1].j) != 0;
    long m = 0;
    for (long i = 0; i < *n; ++i)
        if (keep[i]) jobs[m++] = jobs[i];
    *n = m;
    free(r), free(keep);
    return 0;
}

static int prewarm(const char **op_names, int n_op_names, const long *hidden, int n_hidden, const kjit_dtype *dts,
                   int n_dtype, char *arch_arg, const char *cache_dir, long jobs_n, int json, int space, int list);

int kjit_cli_prewarm(int argc, char **argv)
{
    char *ops_arg = NULL, *hidden_arg = NULL, *dtype_arg = NULL, *arch_arg = NULL, *cache_dir = NULL;
    long jobs_n = sysconf(_SC_NPROCESSORS_ONLN);
    int json = 0, space = 0, list = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        char **target = !strcmp(a, "--ops") ? &ops_arg : !strcmp(a, "--hidden") ? &hidden_arg
                      : !strcmp(a, "--dtype") ? &dtype_arg : !strcmp(a, "--arch") ? &arch_arg
                      : !strcmp(a, "--cache-dir") ? &cache_dir : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--space")) {
            space = 1;
        } else if (!strcmp(a, "--list")) {
            list = 1;
        } else if (!strcmp(a, "--jobs")) {
            const char *v = kjit_cli_value("prewarm", argc, argv, &i);
            if (!v) return KJIT_EXIT_USAGE;
            if (kjit_cli_int(v, 1, 1024, &jobs_n))
                return kjit_cli_usage_error("prewarm", "--jobs '%s': expected an integer in 1..1024", v);
        } else if (target) {
            /* A list option given twice would drop the first list unsaid. */
            if (*target && target != &cache_dir)
                return kjit_cli_usage_error("prewarm", "%s given twice: give one comma list", a);
            if (!(*target = kjit_cli_value("prewarm", argc, argv, &i))) return KJIT_EXIT_USAGE;
        } else {
            return kjit_cli_unknown("prewarm", a);
        }
    }
    if (jobs_n < 1) jobs_n = 1;

    char ops_default[] = "all", hidden_default[] = "256,5376", dtype_default[] = "bf16";
    char *ops[MAX_LIST], *hiddens[MAX_LIST], *dtypes[MAX_LIST];
    const int n_ops = kjit_cli_split_opt("prewarm", "--ops", "op names, or 'all'", ops_arg ? ops_arg : ops_default, ops,
                                         MAX_LIST);
    if (n_ops < 0) return KJIT_EXIT_USAGE;
    const int n_hidden =
        kjit_cli_split_opt("prewarm", "--hidden", "sizes", hidden_arg ? hidden_arg : hidden_default, hiddens, MAX_LIST);
    if (n_hidden < 0) return KJIT_EXIT_USAGE;
    const int n_dtype =
        kjit_cli_split_opt("prewarm", "--dtype", "dtypes", dtype_arg ? dtype_arg : dtype_default, dtypes, MAX_LIST);
    if (n_dtype < 0) return KJIT_EXIT_USAGE;

    /* Each op once, in the order first named ("all" repeats the others). */
    const char *op_names[MAX_LIST];
    int n_op_names = 0;
    for (int i = 0; i < n_ops; ++i) {
        const int all = !strcmp(ops[i], "all");
        /* "fused": kjit tune's name for the fused op too. */
        const char *name = !strcmp(ops[i], "fused") ? "gated_residual_norm_modulate" : ops[i];
        int known = all;
        for (int k = 0; k < kjit_op_count(); ++k) known |= !strcmp(name, kjit_op_name(k));
        if (!known) {
            char names[512] = "";
            for (int k = 0; k < kjit_op_count(); ++k)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "", kjit_op_name(k));
            return kjit_cli_usage_error("prewarm", "--ops: unknown op '%s' (known: %s, fused = gated_residual_norm_modulate, or all)",
                                        ops[i], names);
        }
        for (int k = 0; k < kjit_op_count() && n_op_names < MAX_LIST; ++k) {
            if (!all && strcmp(name, kjit_op_name(k))) continue;
            int dup = 0;
            for (int j = 0; j < n_op_names; ++j) dup |= !strcmp(op_names[j], kjit_op_name(k));
            if (!dup) op_names[n_op_names++] = kjit_op_name(k);
        }
    }
    long hidden[MAX_LIST];
    for (int i = 0; i < n_hidden; ++i)
        if (kjit_cli_int(hiddens[i], 1, 65536, &hidden[i]))
            return kjit_cli_usage_error("prewarm", "--hidden: '%s' is not a size in 1..65536", hiddens[i]);
    kjit_dtype dts[MAX_LIST];
    for (int i = 0; i < n_dtype; ++i)
        if (kjit_dtype_parse(dtypes[i], &dts[i]) || dts[i] == KJIT_I32 || dts[i] == KJIT_I64)
            return kjit_cli_usage_error("prewarm", "--dtype: '%s' is not one of fp32, bf16, fp16", dtypes[i]);

    if (cache_dir && !*cache_dir)
        return kjit_cli_usage_error("prewarm", "--cache-dir '': a memory-only cache keeps nothing to prewarm");

    /* From here on a SIGINT or SIGTERM ends the process cleanly (stop.c),
     * not through libnvrtc's handler; before the driver starts threads. */
    kjit_cli_stop stop;
    if (kjit_cli_stop_begin(&stop, "prewarm")) kjit_cli_stop_end(&stop);
    const int rc =
        prewarm(op_names, n_op_names, hidden, n_hidden, dts, n_dtype, arch_arg, cache_dir, jobs_n, json, space, list);
    kjit_cli_stop_end(&stop);
    return rc;
}

static int prewarm(const char **op_names, int n_op_names, const long *hidden, int n_hidden, const kjit_dtype *dts,
                   int n_dtype, char *arch_arg, const char *cache_dir, long jobs_n, int json, int space, int list)
{
    char *archs[MAX_LIST];
    kjit_ctx_options o;
    kjit_ctx_options_init(&o);
    o.device = KJIT_NO_DEVICE;
    o.cache_dir = list ? "" : cache_dir; /* --list: no directory made or read */
    kjit_ctx *ctx = NULL;
    if (!arch_arg) {
        /* The GPU's own arch when there is one (where NVRTC does not list
         * it, the newest listed arch whose cubins run there: what a
         * context on it compiles for). */
        kjit_device_info d;
        static char own[16];
        if (kjit_device_info_get(0, &d) == KJIT_OK) {
            kjit_runtime_info ri;
            kjit_runtime_info_get(&ri);
            snprintf(own, sizeof own, "sm_%d", kjit__arch_for_device(d.sm, ri.archs, ri.n_archs));
            arch_arg = own;
        } else {
            arch_arg = "sm_90";
        }
    }
    /* A copy to split; a list longer than it is refused (it was cut
     * silently, dropping the archs past the end). */
    char arch_copy[1024];
    if (strlen(arch_arg) >= sizeof arch_copy)
        return kjit_cli_usage_error("prewarm", "--arch: a list of %zu characters (at most %zu)", strlen(arch_arg),
                                    sizeof arch_copy - 1);
    snprintf(arch_copy, sizeof arch_copy, "%s", arch_arg);
    const int n_arch_arg =
        kjit_cli_split_opt("prewarm", "--arch", "archs, e.g. sm_90,sm_100", arch_copy, archs, MAX_LIST);
    if (n_arch_arg < 0) return KJIT_EXIT_USAGE;
    /* Each arch once however it is spelled (sm90, sm_90, 90), and named
     * sm_<n> from here on (--list, failures, the report). */
    int sms[MAX_LIST], n_arch = 0;
    char arch_names[MAX_LIST][16];
    for (int i = 0; i < n_arch_arg; ++i) {
        int sm = 0;
        const int rc = kjit__arch_parse(archs[i], &sm);
        if (rc == KJIT_ENONVRTC) /* not the argument's fault: no NVRTC to ask */
            return kjit_cli_fail("prewarm", json, "%s", kjit_last_error());
        if (rc) {
            fprintf(stderr, "kjit prewarm: --arch: %s (see kjit prewarm --help)\n", kjit_last_error());
            return KJIT_EXIT_USAGE;
        }
        int dup = 0;
        for (int k = 0; k < n_arch; ++k) dup |= sms[k] == sm;
        if (!dup) {
            snprintf(arch_names[n_arch], sizeof arch_names[n_arch], "sm_%d", sm);
            archs[n_arch] = arch_names[n_arch], sms[n_arch++] = sm;
        }
    }
    if (kjit_ctx_create(&ctx, &o)) return kjit_cli_fail("prewarm", json, "%s", kjit_last_error());

    job *jobs = NULL;
    long n_jobs = 0, cap = 0;
    int usage_rc = 0;
    for (int a = 0; a < n_arch && !usage_rc; ++a)
        for (int oi = 0; oi < n_op_names && !usage_rc; ++oi)
            for (int h = 0; h < n_hidden && !usage_rc; ++h)
                for (int d = 0; d < n_dtype && !usage_rc; ++d) {
                    kjit_kernel_spec specs[64 + KJIT_TUNE_MAX_SPECS];
                    int n = 0;
                    /* As that arch's devices launch them (fitted configs). */
                    if (kjit__op_kernels_arch(op_names[oi], (int)hidden[h], dts[d], sms[a], specs, 64, &n)) {
                        usage_rc = kjit_cli_usage_error("prewarm", "%s", kjit_last_error());
                        break;
                    }
                    if (n > 64) n = 64;
                    /* The tuner's candidates (--space), for the shared
                     * memory that arch's devices allow (other shapes are
                     * not tuned); dedup_jobs drops the kernels listed twice. */
                    const int mode = kjit__adaln_mode(op_names[oi]);
                    if (space && mode && kjit__adaln_fast_hidden((int)hidden[h]))
                        n += kjit__tune_space_specs(mode, (int)hidden[h], dts[d], kjit__arch_tune_smem(sms[a]),
                                                    specs + n, KJIT_TUNE_MAX_SPECS);
                    if (add_jobs(&jobs, &n_jobs, &cap, specs, n, archs[a]))
                        usage_rc = kjit_cli_fail("prewarm", json, "out of memory for the list of kernels");
                }
    if (!usage_rc && dedup_jobs(jobs, &n_jobs))
        usage_rc = kjit_cli_fail("prewarm", json, "out of memory for the list of kernels");
    if (usage_rc) {
        free(jobs);
        kjit_ctx_destroy(ctx);
        return usage_rc;
    }
    if (list) {
        if (json) {
            cJSON *o_ = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o_, "kernels");
            for (long i = 0; i < n_jobs; ++i) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "arch", jobs[i].arch);
                cJSON_AddStringToObject(e, "op", jobs[i].spec.op);
                cJSON_AddStringToObject(e, "template", jobs[i].spec.template_file);
                cJSON_AddStringToObject(e, "kernel", jobs[i].spec.name_expr);
                cJSON_AddItemToArray(arr, e);
            }
            kjit_cli_json_print(o_);
        } else {
            for (long i = 0; i < n_jobs; ++i)
                printf("%s %s %s\n", jobs[i].arch, jobs[i].spec.template_file, jobs[i].spec.name_expr);
        }
        free(jobs);
        kjit_ctx_destroy(ctx);
        return 0;
    }
    /* Templates that cannot be read (KJIT_TEMPLATE_DIR) fail every job with
     * the same message: said once, before any compile. */
    const kjit_template_file *tfiles;
    int n_tfiles;
    if (kjit__templates(&tfiles, &n_tfiles)) {
        const int rc = kjit_cli_fail("prewarm", json, "%s (nothing compiled)", kjit_last_error());
        free(jobs);
        kjit_ctx_destroy(ctx);
        return rc;
    }
    /* In a directory this process cannot write to, a compiled kernel would
     * be thrown away: the run only checks that each kernel is there (a
     * read-only cache that holds them all passes), and one that is not
     * fails at once, not after its compile. */
    const char *wdir = kjit_ctx_cache_dir(ctx);
    if (wdir && *wdir && faccessat(AT_FDCWD, wdir, W_OK | X_OK, AT_EACCESS)) {
        fprintf(stderr, "kjit prewarm: cannot write to the cache directory %s (%s): checking that the kernels are "
                "there, compiling none\n", wdir, strerror(errno));
        ctx->lookup_only = 1;
    } else if (!kjit__cache_locks_usable(ctx->cache)) {
        fprintf(stderr, "kjit prewarm: warning: %s/locks is not a directory kjit can use: builds are not shared "
                "with other processes (each may compile the same kernel); kjit cache clear removes a file or link "
                "there\n", wdir);
    }

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pool p = {.ctx = ctx, .jobs = jobs, .n_jobs = n_jobs};
    pthread_mutex_init(&p.lock, NULL);
    kjit_progress_init(&p.progress, "prewarm", n_jobs, json);
    if (jobs_n > n_jobs) jobs_n = n_jobs ? n_jobs : 1;
    pthread_t *threads = calloc((size_t)jobs_n, sizeof *threads);
    long started = 0;
    for (; threads && started < jobs_n; ++started)
        if (pthread_create(&threads[started], NULL, worker, &p)) break;
    if (!started) worker(&p);
    for (long i = 0; i < started; ++i) pthread_join(threads[i], NULL);
    free(threads);
    kjit_progress_done(&p.progress);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;

    long failed = atomic_load(&p.failed);
    /* Compiled but not stored (a full disk, an unwritable directory): a
     * failure. Evictions by the size cap: a note (below). */
    kjit_cache_counters cc;
    memset(&cc, 0, sizeof cc);
    kjit_ctx_cache_counters(ctx, &cc);
    /* Built, yet not in the directory at the end: not stored, or evicted
     * by the size cap (this run's publishes or a concurrent run's). */
    const char *cdir = kjit_ctx_cache_dir(ctx);
    char list_why[512] = "";
    const long missing = cdir && *cdir ? missing_on_disk(cdir, jobs, n_jobs, list_why, sizeof list_why) : 0;
    const int ok = !failed && !cc.store_failures && missing == 0;
    if (json) {
        cJSON *o_ = cJSON_CreateObject();
        /* ok: the exit status's answer (a failed compile or a kernel not
         * stored), as the objects of a command that fails early have it. */
        cJSON_AddBoolToObject(o_, "ok", ok);
        cJSON_AddNumberToObject(o_, "kernels", (double)n_jobs);
        cJSON_AddNumberToObject(o_, "compiled", (double)atomic_load(&p.compiled));
        cJSON_AddNumberToObject(o_, "cached", (double)atomic_load(&p.cached));
        cJSON_AddNumberToObject(o_, "failed", (double)failed);
        cJSON_AddNumberToObject(o_, "not_stored", (double)cc.store_failures);
        cJSON_AddNumberToObject(o_, "bad_entries", (double)cc.bad_entries);
        cJSON_AddNumberToObject(o_, "evicted", (double)cc.evictions);
        cJSON_AddNumberToObject(o_, "missing", (double)missing); /* -1: the directory could not be listed */
        if (missing < 0) cJSON_AddStringToObject(o_, "list_error", list_why);
        cJSON_AddNumberToObject(o_, "seconds", secs);
        cJSON_AddNumberToObject(o_, "jobs", (double)jobs_n);
        cJSON_AddStringToObject(o_, "cache_dir", kjit_ctx_cache_dir(ctx));
        cJSON *f = cJSON_AddArrayToObject(o_, "failures");
        for (long i = 0; i < n_jobs; ++i)
            if (jobs[i].result < 0) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "op", jobs[i].spec.op);
                cJSON_AddStringToObject(e, "kernel", jobs[i].spec.name_expr);
                cJSON_AddStringToObject(e, "arch", jobs[i].arch);
                cJSON_AddStringToObject(e, "error", jobs[i].error ? jobs[i].error : "");
                cJSON_AddItemToArray(f, e);
            }
        kjit_cli_json_print(o_);
    } else {
        for (long i = 0; i < n_jobs; ++i)
            if (jobs[i].result < 0)
                fprintf(stderr, "kjit prewarm: FAILED %s (%s): %s\n", jobs[i].spec.name_expr, jobs[i].arch,
                        jobs[i].error ? jobs[i].error : "");
        printf("prewarm: %ld kernel%s, %ld compiled, %ld cached, %ld failed in %.2f s (%ld job%s, cache %s)\n",
               n_jobs, n_jobs == 1 ? "" : "s", atomic_load(&p.compiled), atomic_load(&p.cached), failed, secs,
               jobs_n, jobs_n == 1 ? "" : "s", kjit_ctx_cache_dir(ctx));
    }
    if (cc.store_failures)
        fprintf(stderr, "kjit prewarm: %llu compiled kernel(s) could not be written to %s (a full disk, a file-size "
                "limit, no write permission, or a directory under an entry's name, which kjit cache verify names; "
                "KJIT_LOG=1 says why)\n", (unsigned long long)cc.store_failures, kjit_ctx_cache_dir(ctx));
    /* A note, not a failure: each damaged entry was replaced by a fresh
     * compile; the count says the disk or another writer damaged some. */
    if (cc.bad_entries)
        fprintf(stderr, "kjit prewarm: note: %llu damaged cache entr%s removed, and compiled again where this run "
                "needs %s (KJIT_LOG=1 names them)\n", (unsigned long long)cc.bad_entries,
                cc.bad_entries == 1 ? "y was" : "ies were", cc.bad_entries == 1 ? "it" : "them");
    /* Evictions of other entries are a note; this run's own kernels gone
     * from the directory at its end are a failure: the cache does not
     * hold what was asked for. */
    if (missing < 0)
        fprintf(stderr, "kjit prewarm: cannot list %s to check that this run's kernels are there: %s\n", cdir,
                list_why);
    else if (missing > 0 && (unsigned long long)missing <= cc.store_failures)
        fprintf(stderr, "kjit prewarm: %ld of this run's kernels are not in %s at its end: not stored (above)\n",
                missing, cdir);
    else if (missing > 0)
        fprintf(stderr, "kjit prewarm: %ld of this run's kernels are not in %s at its end%s: removed after they "
                "were stored, by the cache's size cap (KJIT_CACHE_MAX_MB; this run evicted %llu entr%s) or by "
                "another process (a concurrent prewarm's cap, kjit cache clear); if it is the cap, raise it or "
                "prewarm fewer kernels at once\n", missing, cdir, cc.store_failures ? " (some not stored, above)" : "",
                (unsigned long long)cc.evictions, cc.evictions == 1 ? "y" : "ies");
    else if (cc.evictions)
        fprintf(stderr, "kjit prewarm: note: the cache's size cap (KJIT_CACHE_MAX_MB) evicted %llu older entr%s "
                "during the run (none of this run's)\n",
                (unsigned long long)cc.evictions, cc.evictions == 1 ? "y" : "ies");
    for (long i = 0; i < n_jobs; ++i) free(jobs[i].error);
    free(jobs);
    pthread_mutex_destroy(&p.lock);
    kjit_ctx_destroy(ctx);
    return ok && missing >= 0 ? 0 : KJIT_EXIT_FAIL;
}
