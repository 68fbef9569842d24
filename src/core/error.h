/* Internal error reporting: every failing path sets a status and a
 * thread-local message naming the argument or file and why. */
#ifndef KJIT_ERROR_H
#define KJIT_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#include "kjit.h"

/* The thread's message buffer, terminator included: a copy of
 * kjit_last_error() in a buffer of this size is never cut. */
#define KJIT__ERROR_MAX 4096

/* Sets the thread-local message (printf format) and returns status. */
int kjit__fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Copies msg (len bytes) into dst of cap bytes (cap > 16), NUL-terminated:
 * whole where it fits, else its start and its end (the reason usually comes
 * last, after a long path) around "...", never splitting a UTF-8 sequence. */
void kjit__keep_ends(char *dst, size_t cap, const char *msg, size_t len);
/* vsnprintf into dst of cap bytes, a text too long kept by kjit__keep_ends
 * (without memory for the whole: its start, less a last UTF-8 sequence
 * the cut left incomplete). kjit__fail's formatting. */
void kjit__vformat_ends(char *dst, size_t cap, const char *fmt, va_list ap);
/* Clears the message (call at the start of every public function). */
void kjit__clear_error(void);
/* Logs to stderr when KJIT_LOG is on (1, true, yes or on; a value that is
 * no switch turns it on too, with a line saying so); silent otherwise. */
void kjit__log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* 1 when KJIT_LOG is on: callers skip work that only feeds a log line. */
int kjit__log_on(void);
/* A warning the user should see without asking: one line "kjit: warning:
 * ..." on stderr, unless KJIT_LOG is set to off (0, false, no, off). For
 * what loses the user something silently (a damaged tuning file's entries
 * not used), not for failures a status already reports. */
void kjit__warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
