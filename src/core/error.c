#include "error.h"

#include "core/env.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[KJIT__ERROR_MAX];

#define KJIT_NAME_CASE(name, code, msg) case KJIT_##name: return "KJIT_" #name;
#define KJIT_STR_CASE(name, code, msg) case KJIT_##name: return msg;

const char *kjit_status_name(int status)
{
    switch (status) {
        KJIT_ERROR_MAP(KJIT_NAME_CASE)
    }
    return "KJIT_UNKNOWN";
}

const char *kjit_status_string(int status)
{
    switch (status) {
        KJIT_ERROR_MAP(KJIT_STR_CASE)
    }
    return "unknown status";
}

const char *kjit_last_error(void) { return last_error; }

void kjit__clear_error(void) { last_error[0] = '\0'; }

void kjit__keep_ends(char *dst, size_t cap, const char *msg, size_t len)
{
    const size_t room = cap - 1;
    if (len <= room) {
        memmove(dst, msg, len);
        dst[len] = '\0';
        return;
    }
    const size_t head_want = room / 4, dots = 3;
    size_t head = head_want, tail = len - (room - dots - head_want);
    while (head > 0 && ((unsigned char)msg[head] & 0xC0) == 0x80) --head;
    while (tail < len && ((unsigned char)msg[tail] & 0xC0) == 0x80) ++tail;
    memmove(dst, msg, head);
    memcpy(dst + head, "...", dots);
    memmove(dst + head + dots, msg + tail, len - tail);
    dst[head + dots + (len - tail)] = '\0';
}

void kjit__vformat_ends(char *dst, size_t cap, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    const int len = vsnprintf(dst, cap, fmt, ap);
    if (len >= 0 && (size_t)len >= cap) {
        char *whole = malloc((size_t)len + 1);
        if (whole) {
            vsnprintf(whole, (size_t)len + 1, fmt, again);
            kjit__keep_ends(dst, cap, whole, (size_t)len);
            free(whole);
        } else { /* the start, less a last sequence that the cut left incomplete */
            size_t j = cap - 1; /* the text's length as cut */
            while (j > 0 && ((unsigned char)dst[j - 1] & 0xC0) == 0x80) --j;
            if (j > 0) {
                const unsigned char lead = (unsigned char)dst[j - 1];
                const size_t want = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
                if (cap - 1 - (j - 1) < want) dst[j - 1] = '\0';
            }
        }
    }
    va_end(again);
}

int kjit__fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kjit__vformat_ends(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    kjit__log("%s: %s", kjit_status_name(status), last_error);
    return status;
}

static int log_level, log_off; /* log_off: KJIT_LOG set to a switch's off */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_init(void)
{
    /* A value that is not a switch turns logging on, and says so: logging
     * cannot fail a call, and whoever set it wanted to see something. */
    int on = 0;
    const int bad = kjit__env_switch_parse("KJIT_LOG", 0, &on) < 0;
    log_level = bad || on;
    const char *v = getenv("KJIT_LOG");
    log_off = !bad && !on && v && *v; /* empty: as unset */
    if (bad)
        fprintf(stderr, "kjit: KJIT_LOG='%s' is not a switch (1 or 0, true or false, ...): logging is on\n",
                getenv("KJIT_LOG"));
}

int kjit__log_on(void)
{
    pthread_once(&log_once, log_init);
    return log_level;
}

static void put_line(const char *prefix, const char *fmt, va_list ap)
{
    /* One line at a time: threads (prewarm's workers) log together. */
    flockfile(stderr);
    fputs(prefix, stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    funlockfile(stderr);
}

void kjit__warn(const char *fmt, ...)
{
    pthread_once(&log_once, log_init);
    if (log_off) return;
    va_list ap;
    va_start(ap, fmt);
    put_line("kjit: warning: ", fmt, ap);
    va_end(ap);
}

void kjit__log(const char *fmt, ...)
{
    pthread_once(&log_once, log_init);
    if (!log_level) return;
    va_list ap;
    va_start(ap, fmt);
    put_line("kjit: ", fmt, ap);
    va_end(ap);
}
