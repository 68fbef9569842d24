#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "client/frame.h"
#include "core/spin.h"

#include <cjson/cJSON.h>

/* json_short: an allocation of cJSON's failed (a tree may lack a node);
 * json_lost: an answer was replaced by the out-of-memory one. The hooks
 * serve the whole process (the library's threads parse too), hence atomic;
 * and the flag stays set: which tree lost the node is not known, so after
 * one failure no answer is trusted (a failure the library recovered from
 * also turns a --json answer into the out-of-memory one). */
static atomic_int json_short, json_lost;

static void *json_malloc(size_t n)
{
    void *p = malloc(n);
    if (!p) atomic_store(&json_short, 1);
    return p;
}

void kjit_cli_json_hooks(void)
{
    cJSON_Hooks h = {json_malloc, free};
    cJSON_InitHooks(&h);
}

int kjit_cli_json_lost(void) { return atomic_load(&json_lost); }

void kjit_cli_json_print(cJSON *o)
{
    if (!o) atomic_store(&json_short, 1); /* the answer's own object could not be made */
    else if (!cJSON_HasObjectItem(o, "ok")) cJSON_AddTrueToObject(o, "ok");
    char *s = atomic_load(&json_short) ? NULL : cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s || atomic_load(&json_short)) {
        /* An answer missing a field would read as a whole one. */
        cJSON_free(s);
        atomic_store(&json_lost, 1);
        fputs("{\"ok\":false,\"error\":\"out of memory for the JSON answer\"}\n", stdout);
        fflush(stdout);
        return;
    }
    /* JSON's own bytes are ASCII: a byte that is not UTF-8 is in a string. */
    const char *p = s;
    size_t len = strlen(s), at;
    const char *problem;
    while (len && (problem = kjit__json_text_problem(p, len, &at))) {
        fwrite(p, 1, at, stdout);
        const unsigned char b = (unsigned char)p[at];
        if (b < 0x80) fputc(b, stdout); /* not a byte problem (cJSON writes no \u0000) */
        else printf("\\udc%02x", b);
        p += at + 1, len -= at + 1;
    }
    fwrite(p, 1, len, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    cJSON_free(s);
}

int kjit_cli_fail(const char *cmd, int json, const char *fmt, ...)
{
    /* The whole message, however long (a library error of 4 KiB and what
     * the command adds after it). */
    char small[512], *msg = small;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    const int len = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (len >= (int)sizeof small && (msg = malloc((size_t)len + 1)))
        vsnprintf(msg, (size_t)len + 1, fmt, again);
    else if (!msg)
        msg = small; /* out of memory: the start of it */
    va_end(again);
    fprintf(stderr, "kjit %s: %s\n", cmd, msg);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ok", 0);
        cJSON_AddStringToObject(o, "command", cmd);
        cJSON_AddStringToObject(o, "error", msg);
        kjit_cli_json_print(o);
    }
    if (msg != small) free(msg);
    return KJIT_EXIT_FAIL;
}

/* A comma list's shape: how many items, and the first empty one (1-based;
 * 0 when none is). "" is one empty item. */
static void list_shape(const char *list, int *count, int *empty_at)
{
    int item = 1, len = 0;
    *empty_at = 0;
    for (const char *c = list;; ++c) {
        if (*c == ',' || !*c) {
            if (!len && !*empty_at) *empty_at = item;
            if (!*c) break;
            ++item, len = 0;
        } else {
            ++len;
        }
    }
    *count = item;
}

int kjit_cli_split(char *list, char **items, int max)
{
    if (!list) return -1;
    int count, empty_at;
    list_shape(list, &count, &empty_at);
    if (empty_at || count > max) return -1;
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) items[n++] = tok;
    return n;
}

int kjit_cli_split_opt(const char *cmd, const char *opt, const char *what, char *list, char **items, int max)
{
    /* What is wrong, said before the split cuts the list up. */
    if (!list || !*list) {
        kjit_cli_usage_error(cmd, "%s '': expected a comma list of %s", opt, what);
        return -1;
    }
    int count, empty_at;
    list_shape(list, &count, &empty_at);
    if (empty_at) {
        kjit_cli_usage_error(cmd, "%s '%s': item %d of %d is empty (expected a comma list of %s)", opt, list,
                             empty_at, count, what);
        return -1;
    }
    const int n = kjit_cli_split(list, items, max);
    if (n < 0) kjit_cli_usage_error(cmd, "%s: %d items, more than %d %s", opt, count, max, what);
    return n;
}

static char *value(const char *cmd, int argc, char **argv, int *i, int once)
{
    const char *opt = argv[*i];
    if (*i + 1 >= argc || !strncmp(argv[*i + 1], "--", 2)) {
        kjit_cli_usage_error(cmd, "%s needs a value", opt);
        return NULL;
    }
    /* An option given twice would drop the first value unsaid (one command
     * a process: the options seen so far are this command's). */
    static const char *seen[64];
    static int n_seen;
    for (int k = 0; once && k < n_seen; ++k)
        if (!strcmp(seen[k], opt)) {
            kjit_cli_usage_error(cmd, "%s given twice", opt);
            return NULL;
        }
    if (once && n_seen < 64) seen[n_seen++] = opt;
    return argv[++*i];
}

char *kjit_cli_value(const char *cmd, int argc, char **argv, int *i) { return value(cmd, argc, argv, i, 1); }

char *kjit_cli_value_again(const char *cmd, int argc, char **argv, int *i) { return value(cmd, argc, argv, i, 0); }

/* The options of any command that take no value. */
static int is_flag(const char *opt, size_t len)
{
    static const char *const flags[] = {"--json", "--help", "--show", "--space", "--list", "--events", "--version"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i)
        if (strlen(flags[i]) == len && strncmp(opt, flags[i], len) == 0) return 1;
    return 0;
}

int kjit_cli_unknown(const char *cmd, const char *word)
{
    const char *eq = strchr(word, '=');
    if (word[0] != '-') return kjit_cli_usage_error(cmd, "unexpected argument '%s'", word);
    if (eq && word[1] == '-' && eq - word > 2 && is_flag(word, (size_t)(eq - word)))
        return kjit_cli_usage_error(cmd, "unknown option '%s' (%.*s takes no value)", word, (int)(eq - word), word);
    if (eq && word[1] == '-' && eq - word > 2) /* not for "--=x": no option name to show */
        return kjit_cli_usage_error(cmd, "unknown option '%s' (an option's value follows it after a space: %.*s %s)",
                                    word, (int)(eq - word), word, eq + 1);
    return kjit_cli_usage_error(cmd, "unknown option '%s'", word);
}

int kjit_cli_int(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    /* Digits, with a '-' before them at most: strtol would also take
     * leading white space and a '+'. */
    const char *d = s[0] == '-' ? s + 1 : s;
    if (*d < '0' || *d > '9') return -1;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int kjit_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "kjit %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see kjit %s --help)\n", cmd);
    return KJIT_EXIT_USAGE;
}

void kjit_progress_init(kjit_progress *p, const char *label, long total, int json)
{
    p->enabled = isatty(STDERR_FILENO) && total > 0;
    p->plain = !p->enabled && !json;
    p->total = total;
    p->label = label;
    p->item = NULL;
    p->last_line = kjit__now_us() * 1e-6;
    if (p->enabled) kjit_progress_update(p, 0, 0);
}

void kjit_progress_update(kjit_progress *p, long done, long failed)
{
    if (!p->enabled) {
        /* Not a terminal (a pipe, a log file, CI): a plain line every
         * KJIT_PROGRESS_LINE_S while work remains, so a long run shows it
         * is moving; a run shorter than that prints none. */
        const double now = kjit__now_us() * 1e-6;
        if (!p->plain || p->total <= 0 || done >= p->total || now - p->last_line < KJIT_PROGRESS_LINE_S) return;
        p->last_line = now;
        fprintf(stderr, "%s: %ld/%ld", p->label, done, p->total);
        if (failed) fprintf(stderr, " (%ld failed)", failed);
        if (p->item) fprintf(stderr, " %s", p->item);
        fputc('\n', stderr);
        fflush(stderr);
        return;
    }
    const int width = 32;
    int fill = (int)(done * width / p->total);
    char bar[64];
    for (int i = 0; i < width; ++i) bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r%s [%s] %ld/%ld", p->label, bar, done, p->total);
    if (failed) fprintf(stderr, " (%ld failed)", failed);
    if (p->item) fprintf(stderr, " %s", p->item);
    fputs("\x1b[K", stderr); /* the rest of a longer line before */
    fflush(stderr);
}

void kjit_progress_done(kjit_progress *p)
{
    if (p->enabled) fputc('\n', stderr);
}
