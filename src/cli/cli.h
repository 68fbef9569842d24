/* The `kjit` command: one file per subcommand, helpers here. Exit codes:
 * 0 success, 1 the work failed (a kernel, a bad cache entry), 2 bad usage. */
#ifndef KJIT_CLI_H
#define KJIT_CLI_H

#include <stdio.h>

#define KJIT_EXIT_FAIL 1
#define KJIT_EXIT_USAGE 2

int kjit_cli_info(int argc, char **argv);
int kjit_cli_prewarm(int argc, char **argv);
int kjit_cli_cache(int argc, char **argv);
int kjit_cli_serve(int argc, char **argv);
int kjit_cli_call(int argc, char **argv);
int kjit_cli_tune(int argc, char **argv);

/* Splits a comma list in place into items[]; returns the count or -1 when
 * there are more than max items or an empty item. */
int kjit_cli_split(char *list, char **items, int max);
/* kjit_cli_split of option opt's value; a bad list (empty, an empty item,
 * more than max items) prints a usage error that names the option, the item
 * or the count, and returns -1. */
int kjit_cli_split_opt(const char *cmd, const char *opt, const char *what, char *list, char **items, int max);
/* The value of the option argv[*i]: argv[*i + 1], with *i advanced. NULL,
 * after printing "kjit <cmd>: <option> needs a value", when there is none or
 * the next word is itself an option ("--..."): `--cache-dir --json` is a
 * missing value, not a directory named "--json". An option given a second
 * time is refused the same way ("<option> given twice"). */
char *kjit_cli_value(const char *cmd, int argc, char **argv, int *i);
/* kjit_cli_value for an option whose values add up (serve --allow-uid). */
char *kjit_cli_value_again(const char *cmd, int argc, char **argv, int *i);
/* Parses a decimal integer in [lo, hi] (digits, an optional leading '-');
 * -1 on error. */
int kjit_cli_int(const char *s, long lo, long hi, long *out);
/* Work that failed: prints "kjit <cmd>: <msg>" on stderr and, with json,
 * {"ok":false,"command":"<cmd>","error":"<msg>"} on stdout, so a script
 * reading the JSON gets an answer; returns KJIT_EXIT_FAIL. */
int kjit_cli_fail(const char *cmd, int json, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prints a command's JSON answer on one line of stdout and deletes it: "ok"
 * added (true) where the object has none (o NULL: its creation ran out of
 * memory, and the out-of-memory answer is printed); bytes of strings that are not
 * UTF-8 (a file name) written as \udcXX escapes (Python's surrogateescape:
 * os.fsencode gives the bytes back), so the output always parses. */
struct cJSON;
void kjit_cli_json_print(struct cJSON *o);
/* Routes cJSON's allocations through a check (once, at the start of main):
 * a tree that lost a node to a failed allocation still prints, without
 * it, so after any failed allocation kjit_cli_json_print prints the
 * out-of-memory answer instead, and kjit_cli_json_lost() (1 once it has)
 * turns the exit status into a failure. */
void kjit_cli_json_hooks(void);
int kjit_cli_json_lost(void);
/* A word a command does not take: "unknown option '--x'" (for --x=VALUE,
 * how to write it: --x VALUE) or "unexpected argument 'x'"; returns
 * KJIT_EXIT_USAGE. */
int kjit_cli_unknown(const char *cmd, const char *word);
/* Prints "kjit <cmd>: <msg>" and a hint to use --help; returns KJIT_EXIT_USAGE. */
int kjit_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* SIGINT / SIGTERM during long work (stop.c): begin before anything starts a
 * thread (the driver, NVRTC); end when the work is done. Until then either
 * signal prints a line and ends the process by that signal. */
#include <pthread.h>
#include <signal.h>
typedef struct kjit_cli_stop {
    pthread_t thread;
    sigset_t old;
    int blocked, started;
} kjit_cli_stop;
int kjit_cli_stop_begin(kjit_cli_stop *s, const char *cmd);
void kjit_cli_stop_end(kjit_cli_stop *s);

/* A progress bar on stderr when stderr is a terminal; otherwise a plain
 * "label: done/total" line every KJIT_PROGRESS_LINE_S seconds of a run,
 * except under --json (json != 0), whose callers may read stdout and
 * stderr as one stream. */
#define KJIT_PROGRESS_LINE_S 10.0
typedef struct kjit_progress {
    int enabled; /* 1: the bar (a terminal) */
    int plain;   /* 1: the plain lines */
    long total;
    const char *label;
    const char *item; /* what is under way, shown after the counts (NULL: nothing) */
    double last_line; /* monotonic seconds of the last plain line (or the start) */
} kjit_progress;
/* init draws the bar at 0 (a terminal), so work that takes a while before
 * its first item ends shows from the start; update redraws it. */
void kjit_progress_init(kjit_progress *p, const char *label, long total, int json);
void kjit_progress_update(kjit_progress *p, long done, long failed);
void kjit_progress_done(kjit_progress *p);

#endif
