/* kjit cache stats|ls|verify|clear */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cache/cache.h"
#include "cli/cli.h"
#include "kjit.h"

static const char help[] =
    "usage: kjit cache stats|ls|verify|clear [--cache-dir DIR] [--json]\n"
    "\n"
    "  stats    number of entries and bytes on disk\n"
    "  ls       every entry: file, bytes, last use (temp files and non-files marked)\n"
    "  verify   check every entry's header and checksum; exit 1 naming each bad one\n"
    "  clear    remove every entry, and the temp files and locks of no write in\n"
    "           progress (temp files a writer holds or younger than 10 minutes\n"
    "           are spared); files of names kjit does not write are left alone;\n"
    "           a directory that does not exist has nothing to clear (exit 0,\n"
    "           said on stdout)\n"
    "\n"
    "  --cache-dir DIR  default: $KJIT_CACHE_DIR, $XDG_CACHE_HOME/kjit, ~/.cache/kjit\n"
    "  --json           machine-readable output\n";

typedef struct visit {
    cJSON *list;
    int json, verify, print_each;
    uint64_t entries, bytes, others; /* others: temp files and non-files */
} visit;

/* A file name on one line of text: printable ASCII as it is, a backslash
 * doubled, any other byte (a newline, an escape, non-ASCII) as \xNN, so a
 * name cannot split a line or reach the terminal as a control sequence
 * (--json escapes them its own way). */
static void put_name(const char *name)
{
    for (const unsigned char *c = (const unsigned char *)name; *c; ++c) {
        if (*c == '\\') fputs("\\\\", stdout);
        else if (*c >= 0x20 && *c < 0x7f) putchar(*c);
        else printf("\\x%02x", *c);
    }
}

static void on_entry(void *arg, const kjit_cache_entry_info *e)
{
    visit *v = arg;
    /* Entries are what lookups can take and what the size cap counts. */
    const int entry = !e->temp && e->regular && e->owned && !e->oversized;
    if (entry) {
        v->entries++;
        v->bytes += e->bytes;
    } else {
        v->others++;
    }
    const char *kind = e->temp      ? "temp file"
                     : !e->regular ? "not a regular file"
                     : !e->owned   ? "not kjit's (name)"
                     : e->oversized ? "larger than an entry can be (damaged)"
                                   : NULL;
    if (v->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "file", e->file);
        cJSON_AddNumberToObject(o, "bytes", (double)e->bytes);
        cJSON_AddNumberToObject(o, "mtime", (double)e->mtime);
        if (kind) cJSON_AddStringToObject(o, "kind", kind);
        if (v->verify) {
            cJSON_AddBoolToObject(o, "ok", e->ok);
            if (!e->ok) cJSON_AddStringToObject(o, "problem", e->problem ? e->problem : "");
        }
        cJSON_AddItemToArray(v->list, o);
    } else if (v->verify) {
        if (!e->ok) {
            fputs("BAD  ", stdout);
            put_name(e->file);
            printf(": %s\n", e->problem ? e->problem : "invalid");
        }
    } else if (v->print_each) {
        char when[32];
        time_t t = (time_t)e->mtime;
        struct tm tm;
        /* An mtime localtime cannot convert (a year past its range) prints
         * as seconds. */
        if (!localtime_r(&t, &tm) || !strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm))
            snprintf(when, sizeof when, "@%lld", (long long)e->mtime);
        printf("%10llu  %s  ", (unsigned long long)e->bytes, when);
        put_name(e->file);
        printf("%s%s\n", kind ? "  # " : "", kind ? kind : "");
    }
}

static int cache_run(const char *path, const char *sub, int json, int is_stats, int is_ls, int is_verify, int is_clear);

int kjit_cli_cache(int argc, char **argv)
{
    const char *sub = NULL, *dir = NULL;
    int json = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--cache-dir")) {
            if (!(dir = kjit_cli_value("cache", argc, argv, &i))) return KJIT_EXIT_USAGE;
        } else if (!sub && argv[i][0] != '-') {
            sub = argv[i];
        } else {
            return kjit_cli_unknown("cache", argv[i]);
        }
    }
    if (!sub) return kjit_cli_usage_error("cache", "missing subcommand: stats, ls, verify or clear");
    int is_stats = !strcmp(sub, "stats"), is_ls = !strcmp(sub, "ls"), is_verify = !strcmp(sub, "verify"),
        is_clear = !strcmp(sub, "clear");
    if (!is_stats && !is_ls && !is_verify && !is_clear)
        return kjit_cli_usage_error("cache", "unknown subcommand '%s' (expected stats, ls, verify or clear)", sub);

    if (dir && !*dir) return kjit_cli_usage_error("cache", "--cache-dir '': a memory-only cache has no directory");
    /* Resolved only: these commands never create the directory (a mistyped
     * path must not pass verify as an empty cache) and do not need the
     * size cap. */
    char *resolved = NULL;
    if (kjit__cache_resolve_dir(dir, &resolved)) {
        char cmd[32];
        snprintf(cmd, sizeof cmd, "cache %s", sub);
        return kjit_cli_fail(cmd, json, "%s", kjit_last_error());
    }
    /* The whole path, however long: a shortened copy would name another
     * directory (clear would empty it). */
    const int rc = cache_run(resolved, sub, json, is_stats, is_ls, is_verify, is_clear);
    free(resolved);
    return rc;
}

/* The subcommand on the resolved cache directory path. */
static int cache_run(const char *path, const char *sub, int json, int is_stats, int is_ls, int is_verify, int is_clear)
{
    if (is_clear) {
        uint64_t removed = 0, spared = 0;
        struct stat st;
        /* Idempotent: a cache that was never created has nothing to clear. */
        const int absent = lstat(path, &st) != 0 && errno == ENOENT;
        if (!absent && kjit__cache_clear(path, &removed, &spared)) {
            char extra[64] = "";
            if (removed) snprintf(extra, sizeof extra, " (%llu other files were removed)", (unsigned long long)removed);
            return kjit_cli_fail("cache clear", json, "%s%s", kjit_last_error(), extra);
        }
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "cache_dir", path);
            cJSON_AddBoolToObject(o, "exists", !absent);
            cJSON_AddNumberToObject(o, "removed", (double)removed);
            cJSON_AddNumberToObject(o, "spared_in_progress", (double)spared);
            kjit_cli_json_print(o);
        } else if (absent) {
            printf("nothing to clear: %s does not exist\n", path);
        } else {
            printf("removed %llu files from %s", (unsigned long long)removed, path);
            if (spared)
                printf(" (spared %llu temp file%s of writes in progress)",
                       (unsigned long long)spared, spared == 1 ? "" : "s");
            putchar('\n');
        }
        return 0;
    }
    visit v = {.json = json, .verify = is_verify};
    if (json) v.list = cJSON_CreateArray();
    v.print_each = !json && is_ls;
    int n_bad = 0;
    if (kjit__cache_list(path, is_verify, on_entry, &v, &n_bad)) {
        if (json) cJSON_Delete(v.list);
        char cmd[32];
        snprintf(cmd, sizeof cmd, "cache %s", sub);
        return kjit_cli_fail(cmd, json, "%s", kjit_last_error());
    }
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "cache_dir", path);
        cJSON_AddNumberToObject(o, "entries", (double)v.entries);
        cJSON_AddNumberToObject(o, "bytes", (double)v.bytes);
        cJSON_AddNumberToObject(o, "other_files", (double)v.others);
        if (is_verify) cJSON_AddNumberToObject(o, "bad", n_bad);
        cJSON_AddBoolToObject(o, "ok", !(is_verify && n_bad)); /* the exit status's answer */
        if (is_stats) cJSON_Delete(v.list);
        else cJSON_AddItemToObject(o, "entries_list", v.list);
        kjit_cli_json_print(o);
    } else if (is_ls && !v.entries && !v.others) {
        /* Nothing on stdout (a script reads no lines); a person is told. */
        fprintf(stderr, "cache %s: no entries\n", path);
    } else if (is_verify) {
        printf("verify: %llu entr%s, %d bad (%s)\n", (unsigned long long)v.entries, v.entries == 1 ? "y" : "ies",
               n_bad, path);
    } else if (is_stats) {
        printf("cache %s: %llu entr%s, ", path, (unsigned long long)v.entries, v.entries == 1 ? "y" : "ies");
        if (v.bytes < (1u << 20)) printf("%.1f KiB", (double)v.bytes / 1024);
        else printf("%.1f MiB", (double)v.bytes / (1 << 20));
        if (v.others)
            printf(" (and %llu temp or other file%s, not counted)", (unsigned long long)v.others,
                   v.others == 1 ? "" : "s");
        putchar('\n');
    }
    return is_verify && n_bad ? KJIT_EXIT_FAIL : 0;
}
