/* Test helpers: typed checks that print both values, temp directories. */
#ifndef KJIT_TEST_UTIL_H
#define KJIT_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>

extern int kjit_test_failures;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            kjit_test_failures++;                                                   \
        }                                                                           \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                    \
    do {                                                                                      \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                 \
        if (va_ != vb_) {                                                                     \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld vs %lld\n", __FILE__, __LINE__, #a, #b, \
                    va_, vb_);                                                                \
            kjit_test_failures++;                                                             \
        }                                                                                     \
    } while (0)

/* A kjit call expected to return `status`, with a non-empty message. */
#define CHECK_STATUS(call, status)                                                           \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != (status)) {                                                               \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__, \
                    #call, kjit_status_name(rc_), kjit_status_name(status), kjit_last_error()); \
            kjit_test_failures++;                                                            \
        } else if ((status) != 0 && !kjit_last_error()[0]) {                                 \
            fprintf(stderr, "%s:%d: %s gave no message\n", __FILE__, __LINE__, #call);       \
            kjit_test_failures++;                                                            \
        }                                                                                    \
    } while (0)

#define CHECK_LE(a, b)                                                                           \
    do {                                                                                         \
        double va_ = (double)(a), vb_ = (double)(b);                                             \
        if (!(va_ <= vb_)) {                                                                     \
            fprintf(stderr, "%s:%d: %s <= %s failed: %g vs %g\n", __FILE__, __LINE__, #a, #b, va_, vb_); \
            kjit_test_failures++;                                                                \
        }                                                                                        \
    } while (0)

/* Returns 0 if no check failed, else 1 (the test's exit status). */
int kjit_test_result(const char *name);

/* A fresh 0700 directory under $TMPDIR; removed (recursively) by rmtree. */
char *kjit_test_tmpdir(void);
void kjit_test_rmtree(const char *path);

/* A seed from the clock unless KJIT_TEST_SEED is set; printed for replay. */
uint64_t kjit_test_seed(const char *name);

/* A check run in a forked child: the child ends with
 * kjit_test_child_exit(w, ok), writing its verdict to the pipe's write end
 * w; the parent calls kjit_test_child_passed(pid, r, w), which closes w
 * (so that a child dead before it wrote ends the read), reads the verdict
 * from r, reaps the child and returns 1 when it passed and exited 0. */
void kjit_test_child_exit(int w, int ok) __attribute__((noreturn));
int kjit_test_child_passed(int pid, int r, int w);

#endif
