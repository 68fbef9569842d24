/* kjit tune: time every launch config of the AdaLN ops on this GPU and store
 * the fastest in the tuning file; --show lists what is stored. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/cache.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/tune_json.h"
#include "kjit.h"
#include "ops/op.h"
#include "tune/config.h"
#include "tune/tune.h"
#include "tune/tune_file.h"

static const char help[] =
    "usage: kjit tune [--ops LIST] [--hidden LIST] [--dtype LIST] [--device N]\n"
    "                 [--cache-dir DIR] [--json]\n"
    "       kjit tune --show [--cache-dir DIR] [--json]\n"
    "\n"
    "Times every launch config of the AdaLN ops (rows per CTA, look-ahead,\n"
    "persistent grid; backward look-ahead and shared-memory state) on the GPU\n"
    "for each (op, hidden, dtype) and stores the fastest forward and backward\n"
    "in <cache dir>/tune.json, keyed by device name and kjit version; contexts\n"
    "on that device use them from then on. Every config gives bitwise the same\n"
    "results: tuning changes speed only. Needs a GPU (a few seconds per\n"
    "combination, several GB of scratch memory). --show needs none.\n"
    "\n"
    "  --ops LIST       norm_modulate, gated_residual, gated_residual_norm_modulate\n"
    "                   (or fused), or 'all' (default: all)\n"
    "  --hidden LIST    hidden sizes, multiples of 8 up to 16384 (default: 5376)\n"
    "  --dtype LIST     activation dtypes: fp32, bf16, fp16 (default: bf16)\n"
    "  --device N       CUDA device ordinal (default: 0)\n"
    "  --cache-dir DIR  cache directory (default: $KJIT_CACHE_DIR, $XDG_CACHE_HOME/kjit, ~/.cache/kjit)\n"
    "  --show           list the stored results instead of tuning\n"
    "  --json           print one JSON object\n"
    "\n"
    "Exit status: 0 when every combination was tuned and stored (or --show\n"
    "worked), 1 when any failed or there is no GPU, 2 on bad usage.\n";

#define MAX_LIST 64

static const char *state_name(kjit_tune_file_state s)
{
    return s == KJIT_TUNE_FILE_OK ? "ok" : s == KJIT_TUNE_FILE_MISSING ? "missing"
         : s == KJIT_TUNE_FILE_DAMAGED ? "damaged" : s == KJIT_TUNE_FILE_UNREADABLE ? "unreadable" : "foreign";
}

static double ratio(double a, double b) { return a > 0 && b > 0 ? b / a : 0; }

/* What a save does with a damaged file (tune_file.c's keep_damaged). */
static const char *damaged_fate(const char *path)
{
    return kjit__tune_file_keepable(path)
               ? "keeps it as " KJIT_TUNE_DAMAGED " and writes a new one (or, where it cannot, saves nothing)"
               : "replaces it (not a regular file, or empty: nothing to keep)";
}

static int show(const char *cache_dir, int json)
{
    /* Resolved only, as kjit cache does: --show never creates the directory. */
    char *dir = NULL;
    if (kjit__cache_resolve_dir(cache_dir, &dir)) return kjit_cli_fail("tune", json, "%s", kjit_last_error());
    /* The checks every other use of the directory makes (a directory, ours,
     * not a link, not group/other-writable); one that does not exist yet
     * simply has no tuning file. */
    const int drc = dir[0] ? kjit__cache_dir_check(dir) : KJIT_OK;
    if (drc != KJIT_OK && drc != KJIT_ENOTFOUND) {
        free(dir);
        return kjit_cli_fail("tune", json, "%s", kjit_last_error());
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, KJIT_TUNE_FILE);
    kjit_tune_list l = {0};
    int n_bad = 0;
    char why[512] = "";
    kjit_tune_file_state st =
        dir[0] ? kjit__tune_file_read(dir, &l, &n_bad, why, sizeof why) : KJIT_TUNE_FILE_MISSING;
    if (st == KJIT_TUNE_FILE_MISSING && why[0]) { /* no file can be there: its path is too long */
        const int rc = kjit_cli_fail("tune", json, "no tuning file can be read under %s: %s", dir, why);
        free(dir);
        return rc;
    }
    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "file", dir[0] ? path : "");
        cJSON_AddStringToObject(root, "state", state_name(st));
        /* What was wrong: the file (damaged, foreign, unreadable) or, with
         * skipped entries, the first of them; "" when nothing was. */
        cJSON_AddStringToObject(root, "reason", why);
        cJSON_AddStringToObject(root, "kjit", KJIT_VERSION_STRING);
        cJSON_AddNumberToObject(root, "skipped_entries", n_bad);
        /* "entries" holds every version's, each with its "kjit"; this
         * version's are the ones used. */
        cJSON_AddNumberToObject(root, "other_version_entries", (double)l.n_other);
        char *text = kjit__tune_print(&l);
        cJSON *parsed = text ? cJSON_Parse(text) : NULL;
        cJSON *ents = parsed ? cJSON_DetachItemFromObject(parsed, "entries") : NULL;
        /* This version's entries come first, in the list's order: each
         * says whether some device's tuning space holds its config (false:
         * a hand edit, listed but used nowhere). */
        cJSON *it = ents ? ents->child : NULL;
        for (size_t i = 0; it && i < l.n; ++i, it = it->next) {
            const kjit_tune_entry *e = &l.v[i];
            cJSON_AddBoolToObject(it, "usable",
                                  kjit__adaln_config_usable_somewhere(e->mode, e->hidden, e->dtype, &e->cfg));
        }
        cJSON_AddItemToObject(root, "entries", ents ? ents : cJSON_CreateArray());
        cJSON_Delete(parsed);
        free(text);
        kjit_cli_json_print(root);
    } else {
        if (st == KJIT_TUNE_FILE_MISSING) {
            printf("no tuning file at %s (run kjit tune on a GPU)\n", dir[0] ? path : "(memory-only cache)");
        } else if (st == KJIT_TUNE_FILE_DAMAGED) {
            printf("tuning file %s is damaged (%s): ignored; the next save %s\n", path, why, damaged_fate(path));
        } else if (st == KJIT_TUNE_FILE_UNREADABLE) {
            printf("tuning file %s could not be read (%s): ignored, and left as it is (kjit tune will not save "
                   "into it)\n", path, why);
        } else if (st != KJIT_TUNE_FILE_OK) {
            printf("tuning file %s is of a format this kjit does not read (%s): ignored, and left as it is (kjit "
                   "tune will not save into it)\n", path, why);
        } else {
            printf("tuning file %s (kjit %s): %zu entr%s", path, KJIT_VERSION_STRING, l.n, l.n == 1 ? "y" : "ies");
            if (n_bad) printf(", %d invalid skipped (the first: %s)", n_bad, why);
            if (l.n_other) printf("; %zu of other kjit versions, kept, not used", l.n_other);
            printf("\n");
            /* The device column as wide as its longest name: names that
             * differ only at their end (an "RTX 4090" and an "RTX 4090 D")
             * stay apart. */
            int dw = 6;
            for (size_t i = 0; i < l.n; ++i)
                if ((int)strlen(l.v[i].device) > dw) dw = (int)strlen(l.v[i].device);
            if (l.n)
                printf("%-*s %-29s %6s %-5s  %-16s %-10s %-20s %-20s %6s\n", dw, "device", "op", "hidden", "dtype",
                       "fwd rpc/pf/grid", "bwd pf/accs", "fwd us (default)", "bwd us (default)", "tune s");
            for (size_t i = 0; i < l.n; ++i) {
                const kjit_tune_entry *e = &l.v[i];
                char f[32], b[32], fu[48], bu[48];
                snprintf(f, sizeof f, "%d / %d / %d", e->cfg.rpc, e->cfg.pf, e->cfg.grid_per_sm);
                snprintf(b, sizeof b, "%d / %d", e->cfg.bwd_pf, e->cfg.accs);
                snprintf(fu, sizeof fu, "%.1f (%.1f)", e->fwd_us, e->default_fwd_us);
                snprintf(bu, sizeof bu, "%.1f (%.1f)", e->bwd_us, e->default_bwd_us);
                printf("%-*s %-29s %6d %-5s  %-16s %-10s %-20s %-20s %6.2f%s\n", dw, e->device,
                       kjit__adaln_mode_name(e->mode), e->hidden, kjit_dtype_name(e->dtype), f, b, fu, bu,
                       e->tune_seconds,
                       kjit__adaln_config_usable_somewhere(e->mode, e->hidden, e->dtype, &e->cfg)
                           ? ""
                           : "  (not used: outside the tuning space)");
            }
        }
    }
    kjit__tune_list_free(&l);
    free(dir);
    return 0;
}

typedef struct job {
    const char *op;
    int hidden;
    kjit_dtype dtype;
    int rc;
    char *error;
    kjit_tune_result r;
} job;

static int tune(const char **op_names, int n_op_names, const long *hidden, int n_hidden, const kjit_dtype *dts,
                int n_dtype, long device, const char *cache_dir, int json);

int kjit_cli_tune(int argc, char **argv)
{
    char *ops_arg = NULL, *hidden_arg = NULL, *dtype_arg = NULL, *cache_dir = NULL;
    long device = 0;
    int json = 0, do_show = 0, device_given = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        char **target = !strcmp(a, "--ops") ? &ops_arg : !strcmp(a, "--hidden") ? &hidden_arg
                      : !strcmp(a, "--dtype") ? &dtype_arg : !strcmp(a, "--cache-dir") ? &cache_dir : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--show")) {
            do_show = 1;
        } else if (!strcmp(a, "--device")) {
            const char *v = kjit_cli_value("tune", argc, argv, &i);
            if (!v) return KJIT_EXIT_USAGE;
            if (kjit_cli_int(v, 0, 1024, &device))
                return kjit_cli_usage_error("tune", "--device '%s': expected an ordinal in 0..1024", v);
            device_given = 1;
        } else if (target) {
            /* A list option given twice would drop the first list unsaid. */
            if (*target && target != &cache_dir)
                return kjit_cli_usage_error("tune", "%s given twice: give one comma list", a);
            if (!(*target = kjit_cli_value("tune", argc, argv, &i))) return KJIT_EXIT_USAGE;
        } else {
            return kjit_cli_unknown("tune", a);
        }
    }
    /* As prewarm and cache: a memory-only cache has no tuning file to show
     * or save into (the library reads "" as memory-only). */
    if (cache_dir && !cache_dir[0])
        return kjit_cli_usage_error("tune", "--cache-dir '': a memory-only cache keeps no tuning file");
    if (do_show) {
        if (ops_arg || hidden_arg || dtype_arg || device_given)
            return kjit_cli_usage_error("tune", "--show takes no --ops, --hidden, --dtype or --device");
        return show(cache_dir, json);
    }

    char ops_default[] = "all", hidden_default[] = "5376", dtype_default[] = "bf16";
    char *ops[MAX_LIST], *hiddens[MAX_LIST], *dtypes[MAX_LIST];
    const int n_ops = kjit_cli_split_opt("tune", "--ops", "op names, or 'all'", ops_arg ? ops_arg : ops_default, ops,
                                         MAX_LIST);
    if (n_ops < 0) return KJIT_EXIT_USAGE;
    const int n_hidden =
        kjit_cli_split_opt("tune", "--hidden", "sizes", hidden_arg ? hidden_arg : hidden_default, hiddens, MAX_LIST);
    if (n_hidden < 0) return KJIT_EXIT_USAGE;
    const int n_dtype =
        kjit_cli_split_opt("tune", "--dtype", "dtypes", dtype_arg ? dtype_arg : dtype_default, dtypes, MAX_LIST);
    if (n_dtype < 0) return KJIT_EXIT_USAGE;
    /* Each tunable op once, in the order first named ("all" and "fused"
     * repeat others), so the list never holds more than the three. */
    const char *op_names[3];
    int n_op_names = 0, seen = 0;
    for (int i = 0; i < n_ops; ++i) {
        const int all = !strcmp(ops[i], "all"), m = all ? 0 : kjit__adaln_mode(ops[i]);
        if (!all && !m) {
            const int known = kjit__op_find(ops[i]) != NULL;
            return kjit_cli_usage_error("tune",
                                        "--ops: %s '%s'%s (tunable: norm_modulate, gated_residual, "
                                        "gated_residual_norm_modulate or fused, or all)",
                                        known ? "the op" : "unknown op", ops[i],
                                        known ? " has no launch config to tune" : "");
        }
        for (int k = all ? 1 : m; k <= (all ? 3 : m); ++k)
            if (!(seen & (1 << k))) seen |= 1 << k, op_names[n_op_names++] = kjit__adaln_mode_name(k);
    }
    long hidden[MAX_LIST];
    for (int i = 0; i < n_hidden; ++i)
        if (kjit_cli_int(hiddens[i], 1, 65536, &hidden[i]))
            return kjit_cli_usage_error("tune", "--hidden: '%s' is not a size (tuned: multiples of 8 up to %d)",
                                        hiddens[i], KJIT_TUNE_FAST_MAX_HIDDEN);
        else if (!kjit__adaln_fast_hidden((int)hidden[i]))
            return kjit_cli_usage_error("tune",
                                        "--hidden: '%s' is not tuned (multiples of 8 up to %d are; other sizes "
                                        "always use the generic path's config)",
                                        hiddens[i], KJIT_TUNE_FAST_MAX_HIDDEN);
    kjit_dtype dts[MAX_LIST];
    for (int i = 0; i < n_dtype; ++i)
        if (kjit_dtype_parse(dtypes[i], &dts[i]) || dts[i] == KJIT_I32 || dts[i] == KJIT_I64)
            return kjit_cli_usage_error("tune", "--dtype: '%s' is not one of fp32, bf16, fp16", dtypes[i]);

    /* A SIGINT or SIGTERM from here on ends the process cleanly (stop.c). */
    kjit_cli_stop stop;
    if (kjit_cli_stop_begin(&stop, "tune")) kjit_cli_stop_end(&stop);
    const int rc = tune(op_names, n_op_names, hidden, n_hidden, dts, n_dtype, device, cache_dir, json);
    kjit_cli_stop_end(&stop);
    return rc;
}

/* Before tuning: a damaged file is said (a save replaces it, keeping it as
 * KJIT_TUNE_DAMAGED; its entries are not used, and nothing else says so
 * unless KJIT_LOG=1); one no save may replace (of a newer format, or
 * unreadable: a directory in its place, permissions) refuses the run, whose
 * results every save would refuse after minutes of tuning. Returns 0 or
 * the exit status. */
static int check_file(const char *cache_dir, int json)
{
    char *dir = NULL;
    if (kjit__cache_resolve_dir(cache_dir, &dir)) {
        kjit__clear_error();
        return 0;
    }
    kjit_tune_list l = {0};
    int n_bad = 0, rc = 0;
    char path[4200], why[512] = "";
    snprintf(path, sizeof path, "%.4000s/%s", dir, KJIT_TUNE_FILE);
    const kjit_tune_file_state st =
        dir[0] ? kjit__tune_file_read(dir, &l, &n_bad, why, sizeof why) : KJIT_TUNE_FILE_MISSING;
    if (st == KJIT_TUNE_FILE_DAMAGED) {
        fprintf(stderr, "kjit tune: warning: the tuning file %s is damaged (%s): its entries are not used; the first "
                "save %s\n", path, why, damaged_fate(path));
        kjit__tune_damaged_said();
    }
    else if (st == KJIT_TUNE_FILE_FOREIGN || st == KJIT_TUNE_FILE_UNREADABLE)
        rc = kjit_cli_fail("tune", json, "the tuning file %s %s (%s): no result could be saved into it; nothing "
                           "tuned (move it away, or give another --cache-dir)", path,
                           st == KJIT_TUNE_FILE_FOREIGN ? "is of a format this kjit does not read"
                                                        : "could not be read",
                           why);
    kjit__tune_list_free(&l);
    free(dir);
    return rc;
}

static int tune(const char **op_names, int n_op_names, const long *hidden, int n_hidden, const kjit_dtype *dts,
                int n_dtype, long device, const char *cache_dir, int json)
{
    const int frc = check_file(cache_dir, json);
    if (frc) return frc;
    /* The GPU first: without one nothing is created (not even the cache
     * directory). */
    kjit_device_info di;
    memset(&di, 0, sizeof di);
    const int dev_rc = kjit_device_info_get((int)device, &di);
    if (dev_rc) {
        const char *why = kjit_last_error();
        return kjit_cli_fail("tune", json, "needs a GPU: %s", why && *why ? why : kjit_status_string(dev_rc));
    }
    kjit_ctx_options o;
    kjit_ctx_options_init(&o);
    o.device = (int)device;
    o.cache_dir = cache_dir;
    kjit_ctx *ctx = NULL;
    if (kjit_ctx_create(&ctx, &o)) return kjit_cli_fail("tune", json, "%s", kjit_last_error());

    const long n_jobs = (long)n_op_names * n_hidden * n_dtype;
    job *jobs = calloc((size_t)n_jobs, sizeof *jobs);
    if (!jobs) {
        kjit_ctx_destroy(ctx);
        return kjit_cli_fail("tune", json, "out of memory");
    }
    long k = 0;
    for (int oi = 0; oi < n_op_names; ++oi)
        for (int h = 0; h < n_hidden; ++h)
            for (int d = 0; d < n_dtype; ++d, ++k) {
                int dup = 0;
                for (long j = 0; j < k; ++j)
                    dup |= jobs[j].op == op_names[oi] && jobs[j].hidden == (int)hidden[h] && jobs[j].dtype == dts[d];
                if (dup) {
                    --k;
                    continue;
                }
                jobs[k].op = op_names[oi], jobs[k].hidden = (int)hidden[h], jobs[k].dtype = dts[d];
            }
    const long n_run = k;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kjit_progress progress;
    kjit_progress_init(&progress, "tune", n_run, json);
    long failed = 0;
    char item[96];
    for (long i = 0; i < n_run; ++i) {
        job *j = &jobs[i];
        snprintf(item, sizeof item, "%s %d %s", j->op, j->hidden, kjit_dtype_name(j->dtype));
        progress.item = item;
        kjit_progress_update(&progress, i, failed);
        j->rc = kjit_tune(ctx, j->op, j->hidden, j->dtype, &j->r);
        if (j->rc) {
            j->error = strdup(kjit_last_error());
            ++failed;
        }
    }
    progress.item = NULL;
    kjit_progress_update(&progress, n_run, failed);
    kjit_progress_done(&progress);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    const char *dir = kjit_ctx_cache_dir(ctx);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, KJIT_TUNE_FILE);

    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "device", di.name);
        cJSON_AddStringToObject(root, "kjit", KJIT_VERSION_STRING);
        cJSON_AddStringToObject(root, "cache_dir", dir);
        cJSON_AddStringToObject(root, "file", dir[0] ? path : "");
        cJSON *arr = cJSON_AddArrayToObject(root, "results");
        for (long i = 0; i < n_run; ++i) {
            const job *j = &jobs[i];
            const kjit_tune_result *r = &j->r;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "op", j->op);
            cJSON_AddNumberToObject(e, "hidden", j->hidden);
            cJSON_AddStringToObject(e, "dtype", kjit_dtype_name(j->dtype));
            cJSON_AddBoolToObject(e, "ok", j->rc == 0);
            if (j->rc) cJSON_AddStringToObject(e, "error", j->error ? j->error : kjit_status_name(j->rc));
            if (kjit__tune_result_tuned(j->rc, r)) kjit__tune_result_json(e, r);
            cJSON_AddItemToArray(arr, e);
        }
        cJSON_AddNumberToObject(root, "failed", (double)failed);
        cJSON_AddNumberToObject(root, "seconds", secs);
        cJSON_AddBoolToObject(root, "ok", !failed); /* the exit status's answer */
        kjit_cli_json_print(root);
    } else {
        printf("tuning on %s (kjit %s)\n", di.name, KJIT_VERSION_STRING);
        for (long i = 0; i < n_run; ++i) {
            const job *j = &jobs[i];
            const kjit_tune_result *r = &j->r;
            if (!kjit__tune_result_tuned(j->rc, r)) {
                printf("  %-29s %5d %-4s  FAILED: %s\n", j->op, j->hidden, kjit_dtype_name(j->dtype),
                       j->error ? j->error : kjit_status_name(j->rc));
                continue;
            }
            printf("  %-29s %5d %-4s  fwd rpc %d pf %d grid %d/SM %8.1f us (default %8.1f, x%.3f)"
                   "  bwd pf %d accs %d %8.1f us (default %8.1f, x%.3f)  %.2f s%s\n",
                   j->op, j->hidden, kjit_dtype_name(j->dtype), r->config.rpc, r->config.pf, r->config.grid_per_sm,
                   r->fwd_us, r->default_fwd_us, ratio(r->fwd_us, r->default_fwd_us), r->config.bwd_pf,
                   r->config.accs, r->bwd_us, r->default_bwd_us, ratio(r->bwd_us, r->default_bwd_us), r->seconds,
                   j->rc ? "  NOT SAVED" : "");
            if (j->rc) printf("    %s\n", j->error ? j->error : "");
        }
        printf("tune: %ld tuned, %ld failed in %.2f s; us are sums over rows", n_run - failed, failed, secs);
        for (long i = 0; i < n_run; ++i)
            if (jobs[i].r.n_rows) {
                for (int q = 0; q < jobs[i].r.n_rows; ++q)
                    printf("%s%lld", q ? "+" : " ", (long long)jobs[i].r.rows[q]);
                break;
            }
        printf("; %s\n", dir[0] ? path : "memory-only cache: nothing stored");
    }
    for (long i = 0; i < n_run; ++i) free(jobs[i].error);
    free(jobs);
    kjit_ctx_destroy(ctx);
    return failed ? KJIT_EXIT_FAIL : 0;
}
