/* A preload for test_cli_oom.sh: fails one chosen memory allocation that
 * kjit's own code asks for, to run the out-of-memory paths no other test
 * reaches. Only allocations called from kjit (the `kjit` binary, libkjit)
 * or from libcjson (the JSON trees kjit builds) are counted and may fail;
 * libc's, the loader's, NVRTC's and libuv's own are passed through, so the
 * probe tests kjit's handling, not theirs.
 *   $OOM_PROBE_FAIL=N  the N-th counted allocation returns NULL (ENOMEM),
 *                      once; 0 or unset: none fails
 *   $OOM_PROBE_TRACE   set: the failing allocation's call stack on stderr
 *                      (to find it when a test names it)
 *   $OOM_PROBE_OUT=F   at exit, "count C" (the counted allocations) and,
 *                      when the N-th was reached, "failed N" are written
 *                      to F
 * malloc, calloc and realloc are wrapped (free needs no wrapping); the
 * real ones are glibc's __libc_* entry points, so no dlsym (which itself
 * allocates) is needed for them. The libc calls that allocate for kjit
 * (strdup, strndup, realpath and getcwd with a NULL buffer) are wrapped
 * too, counted by their caller: inside libc their malloc's caller is libc.
 * Needs glibc; not for sanitizer builds, whose runtime owns the
 * allocator. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);

static atomic_long counted;
static atomic_long failed_at;
static long fail_n = -1; /* -1: $OOM_PROBE_FAIL not read yet */
static __thread int inside; /* dladdr or getenv called from inside a wrapper */

static long want_fail(void)
{
    if (fail_n < 0) {
        const char *s = getenv("OOM_PROBE_FAIL");
        fail_n = s ? atol(s) : 0;
    }
    return fail_n;
}

/* 1 when the allocation's caller is kjit's code or libcjson. */
static int counted_caller(const void *ret)
{
    Dl_info info;
    if (!dladdr(ret, &info) || !info.dli_fname) return 0;
    const char *name = info.dli_fname, *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    return !strcmp(base, "kjit") || !strncmp(base, "libkjit", 7) || !strncmp(base, "libcjson", 8);
}

/* 1 when this allocation must fail. */
static int fail_now(const void *ret)
{
    if (inside) return 0;
    inside = 1;
    int fail = 0;
    if (counted_caller(ret)) {
        const long n = atomic_fetch_add(&counted, 1) + 1;
        if (n == want_fail()) {
            atomic_store(&failed_at, n);
            fail = 1;
            if (getenv("OOM_PROBE_TRACE")) {
                void *frames[32];
                backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
            }
        }
    }
    inside = 0;
    return fail;
}

void *malloc(size_t size)
{
    if (fail_now(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    if (fail_now(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    if (fail_now(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_realloc(p, size);
}

char *strdup(const char *str)
{
    if (fail_now(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    const size_t n = strlen(str) + 1;
    char *p = __libc_malloc(n);
    if (p) memcpy(p, str, n);
    return p;
}

char *strndup(const char *str, size_t max)
{
    if (fail_now(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    const size_t n = strnlen(str, max);
    char *p = __libc_malloc(n + 1);
    if (p) {
        memcpy(p, str, n);
        p[n] = '\0';
    }
    return p;
}

/* The allocating forms only (a NULL buffer); the others pass through. */
char *realpath(const char *path, char *resolved)
{
    static char *(*real)(const char *, char *);
    if (!resolved && fail_now(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    if (!real) real = (char *(*)(const char *, char *))dlsym(RTLD_NEXT, "realpath");
    return real(path, resolved);
}

char *getcwd(char *buf, size_t size)
{
    static char *(*real)(char *, size_t);
    if (!buf && fail_now(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    if (!real) real = (char *(*)(char *, size_t))dlsym(RTLD_NEXT, "getcwd");
    return real(buf, size);
}

__attribute__((destructor)) static void report(void)
{
    const char *out = getenv("OOM_PROBE_OUT");
    if (!out) return;
    const int fd = open(out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return;
    char line[96];
    int n = snprintf(line, sizeof line, "count %ld\n", atomic_load(&counted));
    if (atomic_load(&failed_at)) n += snprintf(line + n, sizeof line - (size_t)n, "failed %ld\n", atomic_load(&failed_at));
    if (write(fd, line, (size_t)n) < 0) { /* the script then finds no line */ }
    close(fd);
}
