/* The tuning file (tune_file.h): parse, validate, print, merge-and-publish. */
#include "tune/tune_file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/file_read.h"
#include "core/file_write.h"

/* An entry is ~0.5 KB: 4 MiB holds thousands of (device, op, hidden,
 * dtype) results, and bounds what a damaged or hostile file costs (the
 * whole JSON tree is built before any check: ~40x its size). */
#define MAX_FILE_BYTES (4u << 20)

static const char *dtype_name(kjit_dtype dt) { return kjit_dtype_name(dt); }

static int dtype_from(const char *s, kjit_dtype *out)
{
    static const kjit_dtype dts[] = {KJIT_F32, KJIT_BF16, KJIT_F16};
    for (int i = 0; i < 3; ++i)
        if (!strcmp(s, kjit_dtype_name(dts[i]))) return *out = dts[i], 0;
    return -1;
}

int kjit__tune_entry_same_key(const kjit_tune_entry *a, const kjit_tune_entry *b)
{
    return a->mode == b->mode && a->hidden == b->hidden && a->dtype == b->dtype && !strcmp(a->device, b->device);
}

int kjit__tune_entry_check(const kjit_tune_entry *e, char *why, size_t why_len)
{
    char dummy[8];
    if (!why || !why_len) why = dummy, why_len = sizeof dummy;
    if (!e->device[0] || memchr(e->device, '\0', sizeof e->device) == NULL)
        return snprintf(why, why_len, "empty device name"), KJIT_EINVAL;
    return kjit__adaln_config_check(e->mode, e->hidden, e->dtype, &e->cfg, 0, why, why_len);
}

static size_t key_hash(const kjit_tune_entry *e)
{
    const unsigned long long seed = ((unsigned long long)e->mode << 40) ^ ((unsigned long long)e->hidden << 8) ^
                                    (unsigned long long)e->dtype;
    return (size_t)XXH3_64bits_withSeed(e->device, strnlen(e->device, sizeof e->device), seed);
}

static size_t entry_hash(const void *set, size_t k) { return key_hash((const kjit_tune_entry *)set + k); }

static int entry_is(const void *set, size_t k, const void *key)
{
    return kjit__tune_entry_same_key((const kjit_tune_entry *)set + k, key);
}

/* Linear in the entries (a file of many was quadratic to read: over 30 s
 * for 100,000 entries), through an index of them by key. */
int kjit__tune_list_put(kjit_tune_list *l, const kjit_tune_entry *e)
{
    if (kjit__slot_index_reserve(&l->index, l->n + 1, l->n, l->v, entry_hash))
        return kjit__fail(KJIT_ENOMEM, "tuning file: out of memory");
    size_t *sl = kjit__slot_index_find(&l->index, key_hash(e), l->v, e, entry_is);
    if (*sl) return l->v[*sl - 1] = *e, KJIT_OK;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        kjit_tune_entry *v = realloc(l->v, cap * sizeof *v);
        if (!v) return kjit__fail(KJIT_ENOMEM, "tuning file: out of memory");
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = *e;
    *sl = l->n;
    return KJIT_OK;
}

void kjit__tune_list_free(kjit_tune_list *l)
{
    if (!l) return;
    free(l->v);
    kjit__slot_index_free(&l->index);
    for (size_t i = 0; i < l->n_other; ++i) free(l->other[i]);
    free(l->other);
    l->v = NULL, l->n = l->cap = 0;
    l->other = NULL, l->n_other = 0;
}

/* Keeps another version's entry o (its "kjit" set to ver) as JSON text.
 * Every "kjit" member goes, not only the first: with a second one left
 * before the new one, the next read took the entry for this version's,
 * skipped it for the field given twice, and the save after dropped it. */
static int keep_other(kjit_tune_list *l, const cJSON *o, const char *ver)
{
    cJSON *c = cJSON_Duplicate(o, 1);
    if (!c) return kjit__fail(KJIT_ENOMEM, "tuning file: out of memory");
    while (cJSON_GetObjectItemCaseSensitive(c, "kjit")) cJSON_DeleteItemFromObjectCaseSensitive(c, "kjit");
    char *text = cJSON_AddStringToObject(c, "kjit", ver) ? cJSON_PrintUnformatted(c) : NULL;
    cJSON_Delete(c);
    char *copy = text ? strdup(text) : NULL;
    if (text) cJSON_free(text);
    char **v = copy ? realloc(l->other, (l->n_other + 1) * sizeof *v) : NULL;
    if (!v) {
        free(copy);
        return kjit__fail(KJIT_ENOMEM, "tuning file: out of memory");
    }
    l->other = v;
    l->other[l->n_other++] = copy;
    return KJIT_OK;
}

/* dir/name into out; -1 (nothing written that could be used) when it does
 * not fit: a cut path would name another file. */
static int join(char *out, size_t n, const char *dir, const char *name)
{
    const int w = snprintf(out, n, "%s/%s", dir, name);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

/* ---- parse -------------------------------------------------------------- */

static int get_int(const cJSON *o, const char *name, int *out, char *why, size_t why_len)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(it)) return snprintf(why, why_len, "\"%s\" is missing or not a number", name), -1;
    const double v = it->valuedouble;
    if (!isfinite(v) || v != floor(v) || v < -1e9 || v > 1e9)
        return snprintf(why, why_len, "\"%s\" = %g is not an integer in -1e9..1e9", name, v), -1;
    *out = (int)v;
    return 0;
}

/* Optional diagnostics: a finite number >= 0, else 0. */
static double opt_num(const cJSON *o, const char *name)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < 0 || it->valuedouble > 1e15) return 0;
    return it->valuedouble;
}

/* Optional arrays of the row counts and their times: all or nothing. */
static void opt_rows(const cJSON *o, kjit_tune_entry *e)
{
    static const char *const names[5] = {"rows", "fwd_us_rows", "bwd_us_rows", "default_fwd_us_rows",
                                         "default_bwd_us_rows"};
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(o, "rows");
    if (!cJSON_IsArray(rows)) return;
    const int n = cJSON_GetArraySize(rows);
    if (n < 1 || n > KJIT_TUNE_NROWS) return;
    double v[5][KJIT_TUNE_NROWS];
    for (int k = 0; k < 5; ++k) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, names[k]);
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n) return;
        for (int i = 0; i < n; ++i) {
            const cJSON *it = cJSON_GetArrayItem(a, i);
            if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < 0 || it->valuedouble > 1e15)
                return;
            v[k][i] = it->valuedouble;
        }
    }
    e->n_rows = n;
    for (int i = 0; i < n; ++i) {
        e->rows[i] = (long long)v[0][i];
        e->fwd_us_rows[i] = v[1][i], e->bwd_us_rows[i] = v[2][i];
        e->default_fwd_us_rows[i] = v[3][i], e->default_bwd_us_rows[i] = v[4][i];
    }
}

/* A key of names[] that object o holds twice, or NULL (linear in o's
 * keys). cJSON answers a lookup with the first, other readers (Python's
 * json) with the last: an object that says a used field twice means two
 * things, so it is not used. */
static const char *twice(const cJSON *o, const char *const *names, int n)
{
    int seen[8] = {0};
    for (const cJSON *a = o ? o->child : NULL; a; a = a->next)
        for (int i = 0; i < n && a->string; ++i)
            if (!strcmp(a->string, names[i]) && seen[i]++) return names[i];
    return NULL;
}

static const char *const ENTRY_KEYS[] = {"kjit", "device", "op", "hidden", "dtype", "fwd", "bwd"},
                        *const FWD_KEYS[] = {"rpc", "pf", "grid_per_sm"}, *const BWD_KEYS[] = {"bwd_pf", "accs"},
                        *const TOP_KEYS[] = {"format", "kjit", "entries"};

static int parse_entry(const cJSON *o, kjit_tune_entry *e, char *why, size_t why_len)
{
    memset(e, 0, sizeof *e);
    if (!cJSON_IsObject(o)) return snprintf(why, why_len, "not an object"), -1;
    const char *dup = twice(o, ENTRY_KEYS, 7);
    if (!dup) dup = twice(cJSON_GetObjectItemCaseSensitive(o, "fwd"), FWD_KEYS, 3);
    if (!dup) dup = twice(cJSON_GetObjectItemCaseSensitive(o, "bwd"), BWD_KEYS, 2);
    if (dup) return snprintf(why, why_len, "\"%s\" given twice", dup), -1;
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(o, "device"), *op = cJSON_GetObjectItemCaseSensitive(o, "op"),
                *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype"), *f = cJSON_GetObjectItemCaseSensitive(o, "fwd"),
                *b = cJSON_GetObjectItemCaseSensitive(o, "bwd");
    if (!cJSON_IsString(dev) || !dev->valuestring[0] || strlen(dev->valuestring) >= sizeof e->device)
        return snprintf(why, why_len, "\"device\" is missing, not a string or too long"), -1;
    /* The driver's names are printable ASCII; anything else (a control
     * character, an escape sequence for the terminal --show prints to) is
     * not one of them. */
    for (const unsigned char *c = (const unsigned char *)dev->valuestring; *c; ++c)
        if (*c < 0x20 || *c > 0x7e) return snprintf(why, why_len, "\"device\" has a byte 0x%02x", *c), -1;
    snprintf(e->device, sizeof e->device, "%s", dev->valuestring);
    if (!cJSON_IsString(op) || !(e->mode = kjit__adaln_mode(op->valuestring)))
        return snprintf(why, why_len, "\"op\" is missing or not a tunable op"), -1;
    if (!cJSON_IsString(dt) || dtype_from(dt->valuestring, &e->dtype))
        return snprintf(why, why_len, "\"dtype\" is missing or not fp32, bf16 or fp16"), -1;
    if (get_int(o, "hidden", &e->hidden, why, why_len)) return -1;
    if (!cJSON_IsObject(f) || !cJSON_IsObject(b)) return snprintf(why, why_len, "\"fwd\" or \"bwd\" is not an object"), -1;
    if (get_int(f, "rpc", &e->cfg.rpc, why, why_len) || get_int(f, "pf", &e->cfg.pf, why, why_len) ||
        get_int(f, "grid_per_sm", &e->cfg.grid_per_sm, why, why_len) ||
        get_int(b, "bwd_pf", &e->cfg.bwd_pf, why, why_len) || get_int(b, "accs", &e->cfg.accs, why, why_len))
        return -1;
    if (kjit__tune_entry_check(e, why, why_len)) return -1;
    e->fwd_us = opt_num(o, "fwd_us"), e->bwd_us = opt_num(o, "bwd_us");
    e->default_fwd_us = opt_num(o, "default_fwd_us"), e->default_bwd_us = opt_num(o, "default_bwd_us");
    e->tune_seconds = opt_num(o, "tune_seconds");
    e->fwd_candidates = (int)fmin(opt_num(o, "fwd_candidates"), 1e6);
    e->bwd_candidates = (int)fmin(opt_num(o, "bwd_candidates"), 1e6);
    e->tuned_at = (long long)opt_num(o, "tuned_at");
    opt_rows(o, e);
    return 0;
}

kjit_tune_file_state kjit__tune_parse(const char *text, size_t len, kjit_tune_list *out, int *n_bad, char *why,
                                      size_t why_len)
{
    char dummy[8];
    if (!why || !why_len) why = dummy, why_len = sizeof dummy;
    why[0] = '\0';
    int bad = 0;
    kjit_tune_file_state st = KJIT_TUNE_FILE_OK;
    /* Only white space may follow the object: two files run together are
     * damaged, not the first alone. */
    const char *end = NULL;
    /* kjit writes no \u0000 and no raw NUL: a string holding either would
     * be cut at it (a device "NAME\u0000junk" read as NAME). */
    cJSON *root = memmem(text, len, "\\u0000", 6) || memchr(text, '\0', len)
                      ? NULL
                      : cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (root && end) {
        while (end < text + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) ++end;
        if (end < text + len) { /* a NUL after the object too */
            cJSON_Delete(root);
            root = NULL;
        }
    }
    const char *dup;
    const cJSON *fmt = root ? cJSON_GetObjectItemCaseSensitive(root, "format") : NULL;
    const cJSON *ver = root ? cJSON_GetObjectItemCaseSensitive(root, "kjit") : NULL;
    const cJSON *ents = root ? cJSON_GetObjectItemCaseSensitive(root, "entries") : NULL;
    if (!root || !cJSON_IsObject(root)) {
        snprintf(why, why_len, "not one JSON object");
        st = KJIT_TUNE_FILE_DAMAGED;
    } else if ((dup = twice(root, TOP_KEYS, 3))) {
        snprintf(why, why_len, "\"%s\" given twice", dup);
        st = KJIT_TUNE_FILE_DAMAGED;
    } else if (!cJSON_IsNumber(fmt) || (fmt->valuedouble == 1 && !cJSON_IsString(ver))) {
        snprintf(why, why_len, "\"format\" (or a format 1 file's \"kjit\") is missing or of the wrong type");
        st = KJIT_TUNE_FILE_DAMAGED;
    } else if (fmt->valuedouble != 1 && fmt->valuedouble != KJIT_TUNE_FORMAT &&
               !(fmt->valuedouble > KJIT_TUNE_FORMAT && fmt->valuedouble <= 1e6 &&
                 fmt->valuedouble == floor(fmt->valuedouble))) {
        /* Not a format any kjit writes (0, negative, a fraction, huge):
         * damaged, not a newer kjit's file to be left alone for good. */
        snprintf(why, why_len, "format %g is not a format number", fmt->valuedouble);
        st = KJIT_TUNE_FILE_DAMAGED;
    } else if (fmt->valuedouble != 1 && fmt->valuedouble != KJIT_TUNE_FORMAT) {
        snprintf(why, why_len, "format %g, this kjit (%s) reads formats 1 and %d", fmt->valuedouble,
                 KJIT_VERSION_STRING, KJIT_TUNE_FORMAT);
        st = KJIT_TUNE_FILE_FOREIGN;
    } else if (!cJSON_IsArray(ents)) {
        snprintf(why, why_len, "\"entries\" is missing or not an array");
        st = KJIT_TUNE_FILE_DAMAGED;
    } else {
        /* Format 1: the file's "kjit" is every entry's. */
        const char *file_ver = fmt->valuedouble == 1 ? ver->valuestring : NULL;
        const cJSON *it;
        int i = 0;
        cJSON_ArrayForEach(it, ents) {
            kjit_tune_entry e;
            char w[256];
            const cJSON *ev = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "kjit") : NULL;
            const char *v = file_ver ? file_ver : cJSON_IsString(ev) ? ev->valuestring : NULL;
            int skip = 0;
            if (!cJSON_IsObject(it)) { /* in a format 1 file too, whose version is the file's */
                snprintf(w, sizeof w, "not an object");
                skip = 1;
            } else if (!v || !v[0] || strlen(v) >= KJIT_TUNE_VERSION_MAX) {
                snprintf(w, sizeof w, "\"kjit\" is missing, not a string or too long");
                skip = 1;
            } else if (strcmp(v, KJIT_VERSION_STRING)) {
                /* Another version's: kept as it is, judged by that version. */
                if (keep_other(out, it, v)) {
                    st = KJIT_TUNE_FILE_UNREADABLE;
                    break;
                }
            } else if (parse_entry(it, &e, w, sizeof w)) {
                skip = 1;
            } else if (kjit__tune_list_put(out, &e)) {
                /* Out of memory: a save from this list would drop entries. */
                st = KJIT_TUNE_FILE_UNREADABLE;
                break;
            }
            if (skip) {
                kjit__log("tuning file: entry %d skipped: %s", i, w);
                if (!bad) snprintf(why, why_len, "entry %d: %s", i, w);
                bad++;
            }
            ++i;
        }
    }
    cJSON_Delete(root);
    if (n_bad) *n_bad = bad;
    return st;
}

kjit_tune_file_state kjit__tune_file_read(const char *dir, kjit_tune_list *out, int *n_bad, char *why,
                                          size_t why_len)
{
    char dummy[8];
    if (!why || !why_len) why = dummy, why_len = sizeof dummy;
    why[0] = '\0';
    if (n_bad) *n_bad = 0;
    if (!dir || !dir[0]) return KJIT_TUNE_FILE_MISSING;
    char path[4096];
    if (join(path, sizeof path, dir, KJIT_TUNE_FILE)) {
        /* No file can have that name (PATH_MAX). */
        snprintf(why, why_len, "the path is longer than %zu bytes", sizeof path - 1);
        kjit__log("tuning file: the path %.64s.../%s is longer than %zu bytes: none read", dir, KJIT_TUNE_FILE,
                  sizeof path - 1);
        return KJIT_TUNE_FILE_MISSING;
    }
    char *buf = NULL;
    size_t got = 0;
    char why_read[256];
    int err = 0;
    const kjit_file_read_state rs =
        kjit__file_read(path, O_NOFOLLOW, MAX_FILE_BYTES, &buf, &got, why_read, sizeof why_read, &err);
    if (rs == KJIT_FILE_READ_NOT_OPENED) {
        if (err == ENOENT) return KJIT_TUNE_FILE_MISSING;
        /* A symbolic link in its place (ELOOP) is damaged: a save replaces
         * the link. Anything else (permissions, too many open files, I/O)
         * says nothing of the file's content: it is left as it is. */
        snprintf(why, why_len, "cannot open: %s", err == ELOOP ? "a symbolic link" : why_read);
        kjit__log("tuning file %s: cannot open (%s): ignored", path, why_read);
        return err == ELOOP ? KJIT_TUNE_FILE_DAMAGED : KJIT_TUNE_FILE_UNREADABLE;
    }
    const char *failure = rs == KJIT_FILE_READ_FAILED ? why_read : NULL;
    const char *problem = rs == KJIT_FILE_READ_BAD ? why_read : NULL;
    struct stat dst;
    if (problem && lstat(path, &dst) == 0 && S_ISDIR(dst.st_mode)) {
        /* A save renames over the name, which a directory refuses: no save
         * could rebuild it, so it is left as it is, not called damaged. */
        snprintf(why_read, sizeof why_read, "a directory");
        failure = why_read, problem = NULL;
    }
    kjit_tune_file_state s;
    if (failure) {
        snprintf(why, why_len, "%s", failure);
        kjit__log("tuning file %s: cannot be read (%s): ignored, left as it is", path, failure);
        s = KJIT_TUNE_FILE_UNREADABLE;
    } else if (problem) {
        snprintf(why, why_len, "%s", problem);
        kjit__log("tuning file %s: %s: ignored, rebuilt on the next save", path, problem);
        s = KJIT_TUNE_FILE_DAMAGED;
    } else {
        s = kjit__tune_parse(buf, got, out, n_bad, why, why_len);
        if (s == KJIT_TUNE_FILE_DAMAGED)
            kjit__log("tuning file %s is damaged (%s): ignored, rebuilt on the next save", path, why);
        else if (s == KJIT_TUNE_FILE_FOREIGN)
            kjit__log("tuning file %s is of another format (%s): ignored, and left as it is by saves", path, why);
        else if (s == KJIT_TUNE_FILE_UNREADABLE) {
            snprintf(why, why_len, "out of memory while reading it");
            kjit__log("tuning file %s: out of memory while reading it: ignored, left as it is", path);
        }
    }
    if (s == KJIT_TUNE_FILE_UNREADABLE) { /* ignored: none of what was read before the failure is used */
        kjit__tune_list_free(out);
        memset(out, 0, sizeof *out);
    }
    free(buf);
    return s;
}

/* ---- print -------------------------------------------------------------- */

static cJSON *entry_json(const kjit_tune_entry *e)
{
    cJSON *o = cJSON_CreateObject(), *f, *b;
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "kjit", KJIT_VERSION_STRING);
    cJSON_AddStringToObject(o, "device", e->device);
    cJSON_AddStringToObject(o, "op", kjit__adaln_mode_name(e->mode));
    cJSON_AddNumberToObject(o, "hidden", e->hidden);
    cJSON_AddStringToObject(o, "dtype", dtype_name(e->dtype));
    if ((f = cJSON_AddObjectToObject(o, "fwd"))) {
        cJSON_AddNumberToObject(f, "rpc", e->cfg.rpc);
        cJSON_AddNumberToObject(f, "pf", e->cfg.pf);
        cJSON_AddNumberToObject(f, "grid_per_sm", e->cfg.grid_per_sm);
    }
    if ((b = cJSON_AddObjectToObject(o, "bwd"))) {
        cJSON_AddNumberToObject(b, "bwd_pf", e->cfg.bwd_pf);
        cJSON_AddNumberToObject(b, "accs", e->cfg.accs);
    }
    cJSON_AddNumberToObject(o, "fwd_us", e->fwd_us);
    cJSON_AddNumberToObject(o, "bwd_us", e->bwd_us);
    cJSON_AddNumberToObject(o, "default_fwd_us", e->default_fwd_us);
    cJSON_AddNumberToObject(o, "default_bwd_us", e->default_bwd_us);
    cJSON_AddNumberToObject(o, "tune_seconds", e->tune_seconds);
    if (e->n_rows > 0 && e->n_rows <= KJIT_TUNE_NROWS) {
        double r[KJIT_TUNE_NROWS];
        for (int i = 0; i < e->n_rows; ++i) r[i] = (double)e->rows[i];
        cJSON_AddItemToObject(o, "rows", cJSON_CreateDoubleArray(r, e->n_rows));
        cJSON_AddItemToObject(o, "fwd_us_rows", cJSON_CreateDoubleArray(e->fwd_us_rows, e->n_rows));
        cJSON_AddItemToObject(o, "bwd_us_rows", cJSON_CreateDoubleArray(e->bwd_us_rows, e->n_rows));
        cJSON_AddItemToObject(o, "default_fwd_us_rows", cJSON_CreateDoubleArray(e->default_fwd_us_rows, e->n_rows));
        cJSON_AddItemToObject(o, "default_bwd_us_rows", cJSON_CreateDoubleArray(e->default_bwd_us_rows, e->n_rows));
    }
    cJSON_AddNumberToObject(o, "fwd_candidates", e->fwd_candidates);
    cJSON_AddNumberToObject(o, "bwd_candidates", e->bwd_candidates);
    cJSON_AddNumberToObject(o, "tuned_at", (double)e->tuned_at);
    return o;
}

char *kjit__tune_print(const kjit_tune_list *l)
{
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON_AddNumberToObject(root, "format", KJIT_TUNE_FORMAT);
    cJSON *arr = cJSON_AddArrayToObject(root, "entries");
    int ok = arr != NULL;
    for (size_t i = 0; ok && i < l->n; ++i) {
        cJSON *e = entry_json(&l->v[i]);
        ok = e && cJSON_AddItemToArray(arr, e);
    }
    for (size_t i = 0; ok && i < l->n_other; ++i) {
        cJSON *e = cJSON_Parse(l->other[i]);
        ok = e && cJSON_AddItemToArray(arr, e);
    }
    char *s = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!s) return NULL;
    /* cJSON_Print's buffer comes from cJSON's allocator: hand back a malloc'd copy. */
    char *copy = strdup(s);
    cJSON_free(s);
    return copy;
}

/* ---- publish ------------------------------------------------------------ */

/* Copies the file at path into the new file fd, whole. */
static int copy_into(const char *path, int fd)
{
    int in = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0) return -1;
    char buf[65536];
    int rc = 0;
    for (;;) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            rc = r < 0 ? -1 : 0;
            break;
        }
        if ((rc = kjit__write_full(fd, buf, (size_t)r)) != 0) break;
    }
    const int err = errno;
    close(in);
    errno = err;
    return rc;
}

/* Keeps a damaged tuning file (a regular file with content; a link in its
 * place points at something else, an empty one holds nothing) as kept: a
 * second name made under a temp name (a hard link, or a copy where the
 * file system has none) and renamed over kept, so the kept file before it
 * stays until this one is whole. 0: kept, or nothing to keep; -1: not
 * (errno). */
int kjit__tune_file_keepable(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

static int keep_damaged(const char *dir, const char *path, const char *kept)
{
    if (!kjit__tune_file_keepable(path)) return 0;
    char tmp[4096];
    if (join(tmp, sizeof tmp, dir, ".tmp." KJIT_TUNE_DAMAGED ".XXXXXX")) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) return -1;
    int rc;
    if (unlink(tmp) == 0 && link(path, tmp) == 0) {
        close(fd);
        fd = -1;
        rc = 0;
    } else {
        /* No hard links here: the name is free again; a copy in it. */
        close(fd);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        rc = fd < 0 || copy_into(path, fd) || fsync(fd) ? -1 : 0;
    }
    if (fd >= 0 && close(fd) && !rc) rc = -1;
    if (!rc && rename(tmp, kept) == 0) return 0;
    const int err = errno;
    unlink(tmp);
    errno = err;
    return -1;
}

/* Publishes text as path through a temp file from the template tmp
 * (rewritten in place by mkostemp). */
static int publish(const char *dir, const char *path, char *tmp, const char *text)
{
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) return kjit__fail(KJIT_EIO, "tuning file: cannot create a temp file in %s: %s", dir, strerror(errno));
    const char *step = "write";
    if (kjit__write_full(fd, text, strlen(text)) == 0 && kjit__write_full(fd, "\n", 1) == 0) {
        step = "fsync";
        if (fsync(fd) == 0) {
            step = "close";
            int c = close(fd);
            fd = -1;
            if (c == 0) {
                step = "rename";
                if (rename(tmp, path) == 0) {
                    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                    if (dfd >= 0) fsync(dfd), close(dfd);
                    return KJIT_OK;
                }
            }
        }
    }
    const int err = errno;
    if (fd >= 0) close(fd);
    unlink(tmp);
    return kjit__fail(KJIT_EIO, "tuning file %s: %s failed: %s", path, step, strerror(err));
}

/* Releases the save's flock, then closes its descriptor. The close alone
 * would not release it while a copy of the descriptor lives on: a child
 * forked meanwhile (a data loader's worker; O_CLOEXEC acts at exec, not at
 * fork) shares the open file and its lock until it exits, and every later
 * save would wait that long. */
static void unlock_close(int lfd)
{
    (void)flock(lfd, LOCK_UN);
    close(lfd);
}

int kjit__tune_file_update(const char *dir, const kjit_tune_entry *add, size_t n_add)
{
    if (!dir || !dir[0]) return kjit__fail(KJIT_EINVAL, "tuning file: no cache directory (memory-only cache)");
    char lock[4096], tmp[4096], path[4096], kept[4096];
    /* Every name this save makes must fit, before anything is created. The
     * temp file has the cache's prefix: `kjit cache clear` removes a killed
     * writer's leftover. */
    if (join(lock, sizeof lock, dir, KJIT_TUNE_LOCK) || join(path, sizeof path, dir, KJIT_TUNE_FILE) ||
        join(tmp, sizeof tmp, dir, ".tmp." KJIT_TUNE_FILE ".XXXXXX") || join(kept, sizeof kept, dir, KJIT_TUNE_DAMAGED))
        return kjit__fail(KJIT_EINVAL, "tuning file: the directory's path (%zu bytes) is too long", strlen(dir));
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lfd < 0) return kjit__fail(KJIT_EIO, "tuning file: cannot open the lock %s: %s", lock, strerror(errno));
    while (flock(lfd, LOCK_EX) < 0) {
        if (errno != EINTR) {
            const int err = errno;
            close(lfd);
            return kjit__fail(KJIT_EIO, "tuning file: cannot lock %s: %s", lock, strerror(err));
        }
    }
    kjit_tune_list l = {0};
    int n_bad = 0;
    /* Damaged: start afresh. Of a format this kjit does not read (a newer
     * kjit's): left as it is, since rewriting it would drop every entry of
     * the kjit that wrote it. Unreadable (permissions, I/O, memory): left
     * as it is too, since its entries may be fine. */
    char fwhy[512];
    const kjit_tune_file_state fst = kjit__tune_file_read(dir, &l, &n_bad, fwhy, sizeof fwhy);
    if (fst == KJIT_TUNE_FILE_FOREIGN || fst == KJIT_TUNE_FILE_UNREADABLE) {
        kjit__tune_list_free(&l);
        unlock_close(lfd);
        if (fst == KJIT_TUNE_FILE_UNREADABLE)
            return kjit__fail(KJIT_EIO, "tuning file %s could not be read (%s): left as it is, this result not saved",
                              path, fwhy);
        return kjit__fail(KJIT_EIO,
                          "tuning file %s is of a format this kjit (%s) does not read (%s): left as it is, this "
                          "result not saved (move the file away, or tune into another cache directory)",
                          path, KJIT_VERSION_STRING, fwhy);
    }
    int rc = KJIT_OK;
    for (size_t i = 0; !rc && i < n_add; ++i) {
        char why[256];
        if (kjit__tune_entry_check(&add[i], why, sizeof why))
            rc = kjit__fail(KJIT_EINVAL, "tuning file: refusing to save an invalid entry: %s", why);
        else
            rc = kjit__tune_list_put(&l, &add[i]);
    }
    if (!rc) {
        char *text = kjit__tune_print(&l);
        /* A file the reader would take for damaged (and the next save then
         * empty) is not written: the old one stays. */
        if (text && strlen(text) + 1 > MAX_FILE_BYTES) /* publish adds a newline */
            rc = kjit__fail(KJIT_EIO, "tuning file %s would grow to %zu bytes, more than the %u a reader takes: "
                            "this result not saved (move the file away)", path, strlen(text) + 1, MAX_FILE_BYTES);
        else if (!text)
            rc = kjit__fail(KJIT_ENOMEM, "tuning file: out of memory");
        else if (fst == KJIT_TUNE_FILE_DAMAGED && keep_damaged(dir, path, kept))
            /* Replacing it unkept would lose every entry a hand edit's slip
             * made unreadable. */
            rc = kjit__fail(KJIT_EIO, "tuning file %s is damaged and could not be kept as %s (%s): left as it "
                            "is, this result not saved (move the file away)", path, kept, strerror(errno));
        else
            rc = publish(dir, path, tmp, text);
        free(text);
    }
    kjit__tune_list_free(&l);
    unlock_close(lfd);
    return rc;
}
