/* Shared by tests/test_cache*.c: typed asserts that print both values, a fake
 * build function (no NVRTC), file helpers, and a runner that gives each test
 * a fresh mkdtemp directory and removes it afterwards.
 * A test returns 0 (pass), 1 (fail) or 77 (skip). */
#ifndef KJIT_TEST_CACHE_UTIL_H
#define KJIT_TEST_CACHE_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cache/cache.h"
#include "core/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FAIL_AT() printf("  FAIL %s:%d: ", __FILE__, __LINE__)

#define ASSERT_TRUE(c)                                                                             \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            FAIL_AT();                                                                             \
            printf("%s is false (last error: %s)\n", #c, kjit_last_error());                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define ASSERT_EQ_INT(a, b)                                                                        \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) {                                                                            \
            FAIL_AT();                                                                             \
            printf("%s == %s: got %lld, want %lld\n", #a, #b, a_, b_);                             \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define ASSERT_EQ_U64(a, b)                                                                        \
    do {                                                                                           \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);             \
        if (a_ != b_) {                                                                            \
            FAIL_AT();                                                                             \
            printf("%s == %s: got %llu, want %llu\n", #a, #b, a_, b_);                             \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define ASSERT_LE_U64(a, b)                                                                        \
    do {                                                                                           \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);             \
        if (a_ > b_) {                                                                             \
            FAIL_AT();                                                                             \
            printf("%s <= %s: got %llu > %llu\n", #a, #b, a_, b_);                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* A kjit status, printed by name with the thread's message. */
#define ASSERT_STATUS(rc, want)                                                                    \
    do {                                                                                           \
        int r_ = (rc), w_ = (want);                                                                \
        if (r_ != w_) {                                                                            \
            FAIL_AT();                                                                             \
            printf("%s: got %s, want %s (last error: %s)\n", #rc, kjit_status_name(r_),            \
                   kjit_status_name(w_), kjit_last_error());                                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define ASSERT_STR_EQ(a, b)                                                                        \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                                   \
            FAIL_AT();                                                                             \
            printf("%s == %s: got \"%s\", want \"%s\"\n", #a, #b, a_ ? a_ : "(null)",              \
                   b_ ? b_ : "(null)");                                                            \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define ASSERT_CONTAINS(hay, needle)                                                               \
    do {                                                                                           \
        const char *h_ = (hay), *n_ = (needle);                                                    \
        if (!h_ || !strstr(h_, n_)) {                                                              \
            FAIL_AT();                                                                             \
            printf("%s does not contain \"%s\": got \"%s\"\n", #hay, n_, h_ ? h_ : "(null)");      \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define ASSERT_OK(rc) ASSERT_STATUS(rc, KJIT_OK)

/* Checks a helper that returns 0 or 1, so that its own message stands. */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != 0) {                                                                         \
            FAIL_AT();                                                                             \
            printf("from %s\n", #call);                                                            \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* ---- keys and the fake build ---- */

static inline kjit_cache_key tkey(int i)
{
    char src[64];
    snprintf(src, sizeof src, "template source %d", i);
    const char *opts[] = {"-std=c++17", "--use_fast_math"};
    kjit_cache_fields f = {src, strlen(src), "kern<1>", opts, 2, "sm_90", 12, 4, KJIT_CACHE_FORMAT};
    return kjit__cache_key(&f);
}

typedef struct fake {
    kjit_cache_key key;
    size_t size;         /* image bytes */
    int fail;            /* nonzero: fail with this status via kjit__fail */
    int fail_silent;     /* nonzero: fail with this status, no message */
    int bogus;           /* report success but hand over nothing */
    int sleep_ms;
    int notify_fd;       /* >= 0: write a byte here on entering build */
    const char *counter; /* non-NULL: append a byte per call (counts across processes) */
    atomic_int calls, started, finished;
} fake;

static inline void fake_init(fake *f, kjit_cache_key key)
{
    memset(f, 0, sizeof *f);
    f->key = key;
    f->size = 1000;
    f->notify_fd = -1;
}

static inline void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The bytes a fake build produces for key: different for every key. */
static inline void fake_bytes(kjit_cache_key k, unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((k.lo >> (8 * (i % 8))) ^ (k.hi >> (8 * (i % 7))) ^ (i * 31));
}

static inline void fake_lowered(kjit_cache_key k, char out[64])
{
    char hex[33];
    kjit__cache_key_hex(k, hex);
    snprintf(out, 64, "lowered_%s", hex);
}

static inline int fake_build(void *arg, char **lowered, void **image, size_t *len)
{
    fake *f = arg;
    int n = atomic_fetch_add(&f->calls, 1) + 1;
    atomic_store(&f->started, 1);
    if (f->notify_fd >= 0 && write(f->notify_fd, "b", 1) != 1)
        return kjit__fail(KJIT_EIO, "fake build: notify write failed");
    if (f->counter) {
        int fd = open(f->counter, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, "x", 1) != 1)
            return kjit__fail(KJIT_EIO, "fake build: counter %s: %s", f->counter, strerror(errno));
        close(fd);
    }
    if (f->sleep_ms)
        sleep_ms(f->sleep_ms);
    atomic_store(&f->finished, 1);
    if (f->fail)
        return kjit__fail(f->fail, "fake compile error (call %d)", n);
    if (f->fail_silent)
        return f->fail_silent;
    if (f->bogus)
        return KJIT_OK;
    char name[64];
    fake_lowered(f->key, name);
    *lowered = strdup(name);
    *image = malloc(f->size);
    fake_bytes(f->key, *image, f->size);
    *len = f->size;
    return KJIT_OK;
}

/* 0 if blob is what the fake build makes for key with size bytes. */
static inline int blob_ok(const kjit_cache_blob *b, kjit_cache_key key, size_t size)
{
    char name[64];
    fake_lowered(key, name);
    if (!b->lowered_name || strcmp(b->lowered_name, name) != 0) {
        printf("  lowered name \"%s\", want \"%s\"\n", b->lowered_name ? b->lowered_name : "(null)",
               name);
        return 1;
    }
    unsigned char *want = malloc(size);
    fake_bytes(key, want, size);
    int bad = b->image_len != size || memcmp(b->image, want, size) != 0;
    if (bad)
        printf("  image of %zu bytes differs from the %zu bytes built for this key\n", b->image_len,
               size);
    free(want);
    return bad;
}

/* One get with a fresh fake; checks status OK, the origin, the bytes and the
 * number of build calls (0 or 1, following the origin). */
static inline int get_expect(kjit_cache *c, kjit_cache_key key, const char *label,
                             kjit_cache_origin want)
{
    fake f;
    fake_init(&f, key);
    kjit_cache_blob b;
    kjit_cache_origin o = (kjit_cache_origin)-1;
    int rc = kjit__cache_get(c, key, label, "sm_90", fake_build, &f, &b, &o);
    if (rc != KJIT_OK) {
        printf("  get: %s: %s\n", kjit_status_name(rc), kjit_last_error());
        return 1;
    }
    if (o != want || atomic_load(&f.calls) != (want == KJIT_FROM_COMPILE)) {
        printf("  origin %d with %d builds, want origin %d\n", (int)o, atomic_load(&f.calls),
               (int)want);
        return 1;
    }
    return blob_ok(&b, key, f.size);
}

/* ---- files ---- */

static inline void entry_path(char *out, size_t n, const char *dir, const char *label,
                              kjit_cache_key key)
{
    char hex[33];
    kjit__cache_key_hex(key, hex);
    snprintf(out, n, "%s/%s.%s.sm_90.v%u.cubin", dir, label, hex, KJIT_CACHE_FORMAT);
}

static inline int path_exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

/* Counts the names in dir with that prefix and suffix ("no temp file left"). */
static inline int count_names(const char *dir, const char *prefix, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name), sl = strlen(suffix);
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0 && l >= sl &&
            strcmp(de->d_name + l - sl, suffix) == 0 && strcmp(de->d_name, ".") != 0 &&
            strcmp(de->d_name, "..") != 0)
            n++;
    }
    closedir(d);
    return n;
}

static inline int flip_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    unsigned char ch;
    if (fd < 0 || pread(fd, &ch, 1, at) != 1) {
        printf("  cannot read %s at %lld\n", path, (long long)at);
        return 1;
    }
    ch ^= 0x5a;
    int bad = pwrite(fd, &ch, 1, at) != 1;
    close(fd);
    return bad;
}

static inline int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char buf[65536];
    ssize_t n;
    int bad = in < 0 || out < 0;
    while (!bad && (n = read(in, buf, sizeof buf)) > 0)
        bad = write(out, buf, (size_t)n) != n;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return bad;
}

/* What a list/verify walk saw. */
typedef struct seen {
    int n, n_temp;
    uint64_t bytes;
    char files[64][160];
    char problems[64][256];
    int ok[64];
    int temp[64];
    int regular[64];
} seen;

static inline void seen_visit(void *arg, const kjit_cache_entry_info *e)
{
    seen *s = arg;
    if (s->n < 64) {
        snprintf(s->files[s->n], sizeof s->files[0], "%s", e->file);
        snprintf(s->problems[s->n], sizeof s->problems[0], "%s", e->problem ? e->problem : "");
        s->ok[s->n] = e->ok;
        s->temp[s->n] = e->temp;
        s->regular[s->n] = e->regular;
    }
    s->n++;
    s->n_temp += e->temp;
    if (!e->temp)
        s->bytes += e->bytes;
}

/* verify must pass: every entry valid, n_entries of them, no temp file. */
static inline int verify_clean(const char *dir, int n_entries)
{
    seen s;
    memset(&s, 0, sizeof s);
    int n_bad = -1;
    int rc = kjit__cache_list(dir, 1, seen_visit, &s, &n_bad);
    if (rc != KJIT_OK) {
        printf("  verify %s: %s: %s\n", dir, kjit_status_name(rc), kjit_last_error());
        return 1;
    }
    for (int i = 0; i < s.n && i < 64; i++)
        if (!s.ok[i])
            printf("  bad: %s: %s\n", s.files[i], s.problems[i]);
    if (n_bad != 0 || s.n_temp != 0 || (n_entries >= 0 && s.n != n_entries)) {
        printf("  verify %s: %d bad, %d temp files, %d entries (want 0, 0, %d)\n", dir, n_bad,
               s.n_temp, s.n - s.n_temp, n_entries);
        return 1;
    }
    return 0;
}

/* ---- runner ---- */

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

static int chmod_dirs(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (flag == FTW_D)
        chmod(p, (st->st_mode & 07777) | 0700);
    return 0;
}

static inline void remove_tree(const char *dir)
{
    /* Tests leave directories unwritable on purpose. */
    nftw(dir, chmod_dirs, 16, FTW_PHYS);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

typedef struct test_case {
    const char *name;
    int (*fn)(const char *dir);
} test_case;

static inline int run_tests(const test_case *tests, int n, int argc, char **argv)
{
    int failed = 0, ran = 0, skipped = 0;
    for (int i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], tests[i].name) != 0)
            continue;
        char dir[] = "/tmp/kjit_test_cache_XXXXXX";
        if (!mkdtemp(dir)) {
            printf("FAIL %s: mkdtemp: %s\n", tests[i].name, strerror(errno));
            return 1;
        }
        double t0 = now_s();
        int r = tests[i].fn(dir);
        remove_tree(dir);
        ran++;
        if (r == 77) {
            skipped++;
            printf("skip %s\n", tests[i].name);
        } else if (r) {
            failed++;
            printf("FAIL %s\n", tests[i].name);
        } else {
            printf("ok   %s (%.2f s)\n", tests[i].name, now_s() - t0);
        }
        fflush(stdout);
    }
    if (!ran) {
        printf("no test named %s\n", argc > 1 ? argv[1] : "(none)");
        return 1;
    }
    printf("%d tests, %d failed, %d skipped\n", ran, failed, skipped);
    return failed ? 1 : skipped == ran ? 77 : 0;
}

#endif
