/* Helpers of the tests that drive `kjit serve` ($KJIT_BIN): start and stop
 * a server, raw frames in and out, fields of a reply. */
#ifndef KJIT_SERVER_UTIL_H
#define KJIT_SERVER_UTIL_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <sys/types.h>

double kjit_test_now(void);

/* A connected Unix socket, or -1. */
int kjit_test_connect(const char *sock);

/* Starts `$KJIT_BIN serve --socket sock --cache-dir cache` with extra
 * arguments (NULL-terminated, may be NULL), its stderr in <sock>.log, and
 * waits until it accepts. -1 (and a failed check) when it does not. */
pid_t kjit_test_serve(const char *sock, const char *cache, const char *const *extra);
/* SIGTERM and the exit status (0 expected: clean, and leak-free under ASan). */
int kjit_test_serve_stop(pid_t pid);

void kjit_test_frame(int fd, const char *json, const void *payload, uint32_t payload_len);
/* The next frame's JSON header (payload skipped), or NULL at EOF/timeout. */
cJSON *kjit_test_reply(int fd, int timeout_ms);
/* 1 when the server closed fd (EOF) within timeout_ms. */
int kjit_test_closed_within(int fd, int timeout_ms);

/* A reply's error code and message ("" when none), a number field (-1 when none). */
const char *kjit_test_err_code(const cJSON *r);
const char *kjit_test_err_msg(const cJSON *r);
double kjit_test_num(const cJSON *o, const char *name);

/* A top-level number of the server's `stats` (-1 when it cannot be had). */
double kjit_test_stat(const char *sock, const char *name);

#endif
