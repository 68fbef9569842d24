/* The tuning file: <cache dir>/tune.json, the tuner's results per kjit
 * version and device.
 *
 *   {"format": 2, "entries": [
 *     {"kjit": "0.1.0", "device": "NVIDIA H200", "op": "norm_modulate", "hidden": 5376, "dtype": "bf16",
 *      "fwd": {"rpc": 1, "pf": 1, "grid_per_sm": 2}, "bwd": {"bwd_pf": 1, "accs": 0},
 *      "fwd_us": ..., "bwd_us": ..., "default_fwd_us": ..., "default_bwd_us": ...,
 *      "tune_seconds": ..., "rows": [32768, 4097, 1024], "fwd_us_rows": [...], ...}]}
 *
 * One entry per (kjit version, device, op, hidden, dtype); fwd_us / bwd_us
 * are sums of per-row-count medians (the tuner's objective). Only this
 * version's entries are read and used: another version's kernels may differ,
 * so its timings say nothing of these. Other versions' entries are kept as
 * they are through every save, so two kjit versions sharing a cache keep
 * each other's results. A format 1 file (one "kjit" for the whole file) is
 * read as if each entry carried it. A file of another format, or one that
 * does not parse, is ignored (logged) and replaced whole by the next save.
 * This version's entries are validated one by one: a bad one (wrong type,
 * value out of the template's range) is skipped (logged) and dropped by the
 * next save. Saves merge with what is on disk under an flock on
 * <dir>/tune.lock and publish by temp file + fsync + rename, so concurrent
 * tuners (threads or processes) lose no entry and readers never see half a
 * file. */
#ifndef KJIT_TUNE_FILE_H
#define KJIT_TUNE_FILE_H

#include <stddef.h>

#include "core/slot_index.h"
#include "tune/config.h"

#define KJIT_TUNE_FILE "tune.json"
#define KJIT_TUNE_LOCK "tune.lock"
/* A damaged tuning file, kept by the save that replaces it (the last one
 * only): its entries are not lost to a hand edit's slip. */
#define KJIT_TUNE_DAMAGED "tune.json.damaged"
#define KJIT_TUNE_FORMAT 2
#define KJIT_TUNE_VERSION_MAX 32 /* a "kjit" value's bytes, NUL included */
#define KJIT_TUNE_NROWS 4

typedef struct kjit_tune_entry {
    char device[128];
    int mode, hidden;
    kjit_dtype dtype;
    kjit_adaln_config cfg;
    /* Diagnostics (0 when absent). */
    double fwd_us, bwd_us, default_fwd_us, default_bwd_us, tune_seconds;
    int n_rows;
    long long rows[KJIT_TUNE_NROWS];
    double fwd_us_rows[KJIT_TUNE_NROWS], bwd_us_rows[KJIT_TUNE_NROWS];
    double default_fwd_us_rows[KJIT_TUNE_NROWS], default_bwd_us_rows[KJIT_TUNE_NROWS];
    int fwd_candidates, bwd_candidates;
    long long tuned_at; /* unix seconds */
} kjit_tune_entry;

typedef struct kjit_tune_list {
    kjit_tune_entry *v; /* this kjit version's entries */
    size_t n, cap;
    kjit_slot_index index; /* of v by key */
    char **other; /* other versions' entries: JSON text as read, each with its "kjit" */
    size_t n_other;
} kjit_tune_list;

typedef enum kjit_tune_file_state {
    KJIT_TUNE_FILE_OK = 0,      /* read (some entries may have been skipped: n_bad) */
    KJIT_TUNE_FILE_MISSING = 1, /* no file (or memory-only cache) */
    KJIT_TUNE_FILE_DAMAGED = 2, /* unreadable, not JSON, wrong shape: ignored */
    KJIT_TUNE_FILE_FOREIGN = 3, /* another format (a newer kjit's): ignored, never overwritten */
    KJIT_TUNE_FILE_UNREADABLE = 4 /* could not be read whole (permissions, I/O, memory): ignored,
                                     never overwritten (its entries may be fine) */
} kjit_tune_file_state;

/* Parses a file's text into out (appending valid entries; a later entry
 * with the key of an earlier one replaces it). Returns the state; *n_bad
 * counts skipped entries; why (may be NULL) says what was wrong. */
kjit_tune_file_state kjit__tune_parse(const char *text, size_t len, kjit_tune_list *out, int *n_bad, char *why,
                                      size_t why_len);
/* Reads <dir>/tune.json (dir "" or NULL: MISSING). Never fails on the file's
 * content: problems are logged and give DAMAGED / FOREIGN with no entries.
 * why (may be NULL) says what was wrong (DAMAGED, FOREIGN, UNREADABLE; with
 * OK and *n_bad > 0, the first skipped entry); "" when nothing was. */
kjit_tune_file_state kjit__tune_file_read(const char *dir, kjit_tune_list *out, int *n_bad, char *why,
                                          size_t why_len);
/* Merges entries into <dir>/tune.json (same key: replaced) as described
 * above; a damaged file is replaced. KJIT_EINVAL for an empty dir, KJIT_EIO
 * (message) when the file cannot be written or is of a format this kjit
 * does not read (FOREIGN); the old file is then unchanged. */
int kjit__tune_file_update(const char *dir, const kjit_tune_entry *add, size_t n_add);
/* 1 when a save keeps the damaged file at path as KJIT_TUNE_DAMAGED before
 * replacing it: a regular file with content (a link, or an empty file, has
 * nothing to keep). */
int kjit__tune_file_keepable(const char *path);
/* The file's JSON text of a list (malloc'd; NULL when out of memory). */
char *kjit__tune_print(const kjit_tune_list *l);

/* 0 when e's key and config are valid (kjit__adaln_config_check with no
 * shared-memory bound), else KJIT_EINVAL with why. */
int kjit__tune_entry_check(const kjit_tune_entry *e, char *why, size_t why_len);
int kjit__tune_entry_same_key(const kjit_tune_entry *a, const kjit_tune_entry *b);
/* Adds or replaces (same key); KJIT_ENOMEM. */
int kjit__tune_list_put(kjit_tune_list *l, const kjit_tune_entry *e);
void kjit__tune_list_free(kjit_tune_list *l);

#endif
