/* The cubin cache in one process: the key, arguments, directory resolution
 * and trust checks, hit/miss accounting, every kind of bad entry, temp-file
 * leftovers, list/verify/clear, LRU eviction, and threads sharing a build.
 * Multi-process behaviour is in test_cache_procs.c. No NVRTC: a fake build
 * returns bytes derived from the key. Run with a test name to run only it. */
#include "test_cache_util.h"

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- key ---- */

static kjit_cache_key key_of(const char *src, const char *name, const char *const *opts, int n,
                             const char *arch, int maj, int min, unsigned format)
{
    kjit_cache_fields f = {src, strlen(src), name, opts, n, arch, maj, min, format};
    return kjit__cache_key(&f);
}

#define ASSERT_KEY_NE(a, b)                                                                        \
    do {                                                                                           \
        kjit_cache_key a_ = (a), b_ = (b);                                                         \
        if (a_.lo == b_.lo && a_.hi == b_.hi) {                                                    \
            char h_[33];                                                                           \
            kjit__cache_key_hex(a_, h_);                                                           \
            FAIL_AT();                                                                             \
            printf("%s and %s are both %s\n", #a, #b, h_);                                         \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define ASSERT_KEY_EQ(a, b)                                                                        \
    do {                                                                                           \
        kjit_cache_key a_ = (a), b_ = (b);                                                         \
        if (a_.lo != b_.lo || a_.hi != b_.hi) {                                                    \
            char ha_[33], hb_[33];                                                                 \
            kjit__cache_key_hex(a_, ha_);                                                          \
            kjit__cache_key_hex(b_, hb_);                                                          \
            FAIL_AT();                                                                             \
            printf("%s == %s: got %s, want %s\n", #a, #b, ha_, hb_);                               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* Appends one field as the key encodes it: u64 LE length, then the bytes. */
static size_t put_field(unsigned char *buf, size_t at, const void *p, size_t n)
{
    for (int i = 0; i < 8; i++)
        buf[at + i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + at + 8, p, n);
    return at + 8 + n;
}

static size_t put_int(unsigned char *buf, size_t at, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return put_field(buf, at, b, 8);
}

static int test_key(const char *dir)
{
    (void)dir;
    const char *o[] = {"-DA=1", "--fmad=false", "-std=c++17"};
    const char *o_reordered[] = {"-std=c++17", "-DA=1", "--fmad=false"};
    const char *o_changed[] = {"-DA=2", "--fmad=false", "-std=c++17"};
    const char *o_more[] = {"-DA=1", "--fmad=false", "-std=c++17", "-lineinfo"};
    kjit_cache_key base = key_of("src", "k<1>", o, 3, "sm_90", 12, 4, 1);

    ASSERT_KEY_EQ(key_of("src", "k<1>", o_reordered, 3, "sm_90", 12, 4, 1), base);
    ASSERT_KEY_NE(key_of("src", "k<1>", o, 3, "sm_100", 12, 4, 1), base);
    ASSERT_KEY_NE(key_of("src", "k<1>", o, 3, "sm_90", 12, 5, 1), base);
    ASSERT_KEY_NE(key_of("src", "k<1>", o, 3, "sm_90", 13, 4, 1), base);
    ASSERT_KEY_NE(key_of("src", "k<1>", o_changed, 3, "sm_90", 12, 4, 1), base);
    ASSERT_KEY_NE(key_of("src", "k<1>", o_more, 4, "sm_90", 12, 4, 1), base);
    ASSERT_KEY_NE(key_of("src", "k<1>", o, 2, "sm_90", 12, 4, 1), base);
    ASSERT_KEY_NE(key_of("srC", "k<1>", o, 3, "sm_90", 12, 4, 1), base);
    ASSERT_KEY_NE(key_of("src", "k<2>", o, 3, "sm_90", 12, 4, 1), base);
    ASSERT_KEY_NE(key_of("src", "k<1>", o, 3, "sm_90", 12, 4, 2), base);
    /* The source is hashed by its length, not up to a NUL. */
    kjit_cache_fields f = {"src\0tail", 8, "k<1>", o, 3, "sm_90", 12, 4, 1};
    ASSERT_KEY_NE(kjit__cache_key(&f), base);
    /* Length prefixes keep field boundaries: ("ab","c") != ("a","bc"). */
    const char *ab_c[] = {"ab", "c"}, *a_bc[] = {"a", "bc"};
    ASSERT_KEY_NE(key_of("s", "k", ab_c, 2, "sm_90", 1, 0, 1), key_of("s", "k", a_bc, 2, "sm_90", 1, 0, 1));
    ASSERT_KEY_NE(key_of("ab", "c", NULL, 0, "sm_90", 1, 0, 1), key_of("a", "bc", NULL, 0, "sm_90", 1, 0, 1));
    const char *x[] = {"x"};
    ASSERT_KEY_NE(key_of("s", "k", x, 1, "sm_90", 1, 0, 1), key_of("s", "k", NULL, 0, "x", 1, 0, 1));

    /* The encoding, spelled out: format, source, name, option count, the
     * options sorted by strcmp, arch, NVRTC major, minor. */
    unsigned char buf[512];
    size_t n = put_int(buf, 0, 1);
    n = put_field(buf, n, "src", 3);
    n = put_field(buf, n, "k<1>", 4);
    n = put_int(buf, n, 3);
    n = put_field(buf, n, "--fmad=false", 12);
    n = put_field(buf, n, "-DA=1", 5);
    n = put_field(buf, n, "-std=c++17", 10);
    n = put_field(buf, n, "sm_90", 5);
    n = put_int(buf, n, 12);
    n = put_int(buf, n, 4);
    XXH128_hash_t h = XXH3_128bits(buf, n);
    ASSERT_KEY_EQ(base, ((kjit_cache_key){h.low64, h.high64}));
    /* Pinned: a change to the encoding must come with a new KJIT_CACHE_FORMAT,
     * or old entries would be read under new meanings. */
    char hex[33];
    kjit__cache_key_hex(base, hex);
    ASSERT_STR_EQ(hex, "35aea3f6cf3cef7568a1801311681f82");
    kjit__cache_key_hex((kjit_cache_key){0x0123456789abcdefull, 0xfedcba9876543210ull}, hex);
    ASSERT_STR_EQ(hex, "fedcba98765432100123456789abcdef");
    return 0;
}

/* ---- arguments ---- */

static int test_bad_args(const char *dir)
{
    char cdir[256];
    snprintf(cdir, sizeof cdir, "%s/c", dir);
    kjit_cache *c = (kjit_cache *)0x1;
    ASSERT_STATUS(kjit__cache_open(NULL, cdir, 0), KJIT_EINVAL);
    ASSERT_CONTAINS(kjit_last_error(), "out is NULL");
    ASSERT_TRUE(!path_exists(cdir));

    /* make_key: every field, and nothing written on failure. */
    const char *opts[] = {"-a", NULL};
    kjit_cache_fields good = {"s", 1, "k", opts, 1, "sm_90", 12, 4, KJIT_CACHE_FORMAT};
    kjit_cache_key k = {7, 7};
    ASSERT_STATUS(kjit__cache_make_key(NULL, &k), KJIT_EINVAL);
    ASSERT_STATUS(kjit__cache_make_key(&good, NULL), KJIT_EINVAL);
    kjit_cache_fields bad[9];
    const char *what[9] = {"source", "name_expr", "name_expr", "n_options", "options[1]",
                           "arch", "arch", "negative", "format"};
    for (int i = 0; i < 9; i++)
        bad[i] = good;
    bad[0].source = NULL;
    bad[1].name_expr = NULL;
    bad[2].name_expr = "";
    bad[3].options = NULL;
    bad[4].n_options = 2;
    bad[5].arch = NULL;
    bad[6].arch = "";
    bad[7].nvrtc_minor = -1;
    bad[8].format = 0;
    for (int i = 0; i < 9; i++) {
        ASSERT_STATUS(kjit__cache_make_key(&bad[i], &k), KJIT_EINVAL);
        ASSERT_CONTAINS(kjit_last_error(), what[i]);
        ASSERT_EQ_U64(k.lo, 7);
        ASSERT_EQ_U64(k.hi, 7);
        kjit_cache_key z = kjit__cache_key(&bad[i]);
        ASSERT_EQ_U64(z.lo | z.hi, 0);
    }
    bad[3].n_options = -1;
    ASSERT_STATUS(kjit__cache_make_key(&bad[3], &k), KJIT_EINVAL);
    ASSERT_OK(kjit__cache_make_key(&good, &k));

    ASSERT_OK(kjit__cache_open(&c, cdir, 0));
    fake f;
    fake_init(&f, k);
    kjit_cache_blob blob = {"sentinel", NULL, 99};
    kjit_cache_origin o = (kjit_cache_origin)42;
    kjit_cache_key zero = {0, 0};
    char long_arch[40];
    memset(long_arch, 'a', 33);
    long_arch[33] = '\0';
    struct {
        kjit_cache *c;
        kjit_cache_key key;
        const char *label, *arch;
        kjit_cache_build_fn build;
        kjit_cache_blob *out;
        const char *msg;
    } calls[] = {
        {NULL, k, "op", "sm_90", fake_build, &blob, "cache is NULL"},
        {c, k, "op", "sm_90", NULL, &blob, "build is NULL"},
        {c, k, "op", "sm_90", fake_build, NULL, "out is NULL"},
        {c, zero, "op", "sm_90", fake_build, &blob, "key is zero"},
        {c, k, NULL, "sm_90", fake_build, &blob, "label is NULL"},
        {c, k, "", "sm_90", fake_build, &blob, "label is empty"},
        {c, k, "op", NULL, fake_build, &blob, "arch '(null)'"},
        {c, k, "op", "", fake_build, &blob, "arch ''"},
        {c, k, "op", "sm 90", fake_build, &blob, "arch 'sm 90'"},
        {c, k, "op", "../x", fake_build, &blob, "arch '../x'"},
        {c, k, "op", long_arch, fake_build, &blob, "1-32 characters"},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        ASSERT_STATUS(kjit__cache_get(calls[i].c, calls[i].key, calls[i].label, calls[i].arch,
                                      calls[i].build, &f, calls[i].out, &o),
                      KJIT_EINVAL);
        ASSERT_CONTAINS(kjit_last_error(), calls[i].msg);
    }
    ASSERT_STR_EQ(blob.lowered_name, "sentinel");
    ASSERT_EQ_U64(blob.image_len, 99);
    ASSERT_EQ_INT(o, 42);
    ASSERT_EQ_INT(atomic_load(&f.calls), 0);
    ASSERT_EQ_INT(count_names(cdir, "", ".cubin"), 0);

    kjit_cache_stats st;
    ASSERT_STATUS(kjit__cache_stats(NULL, &st), KJIT_EINVAL);
    ASSERT_STATUS(kjit__cache_stats(c, NULL), KJIT_EINVAL);
    ASSERT_TRUE(kjit__cache_dir(NULL) == NULL);

    seen s;
    memset(&s, 0, sizeof s);
    int n_bad = 5;
    uint64_t removed = 5;
    ASSERT_STATUS(kjit__cache_list(cdir, 1, NULL, &s, &n_bad), KJIT_EINVAL);
    ASSERT_STATUS(kjit__cache_list(cdir, 1, seen_visit, &s, NULL), KJIT_EINVAL);
    ASSERT_STATUS(kjit__cache_list("", 1, seen_visit, &s, &n_bad), KJIT_EINVAL);
    ASSERT_CONTAINS(kjit_last_error(), "memory-only");
    ASSERT_STATUS(kjit__cache_clear(cdir, NULL, NULL), KJIT_EINVAL);
    ASSERT_STATUS(kjit__cache_clear("", &removed, NULL), KJIT_EINVAL);
    ASSERT_EQ_INT(n_bad, 5);
    ASSERT_EQ_U64(removed, 5);
    ASSERT_EQ_INT(s.n, 0);

    /* Walks never create the directory they are asked about. */
    char missing[256];
    snprintf(missing, sizeof missing, "%s/missing", dir);
    ASSERT_STATUS(kjit__cache_list(missing, 0, seen_visit, &s, &n_bad), KJIT_ENOTFOUND);
    ASSERT_CONTAINS(kjit_last_error(), missing);
    ASSERT_STATUS(kjit__cache_clear(missing, &removed, NULL), KJIT_ENOTFOUND);
    ASSERT_TRUE(!path_exists(missing));

    kjit__cache_close(c);
    kjit__cache_close(NULL);
    return 0;
}

/* A build that breaks its contract fails the get, and nothing is cached. */
static int test_build_contract(const char *dir)
{
    kjit_cache *c;
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    kjit_cache_key k = tkey(1);
    fake f;
    fake_init(&f, k);
    kjit_cache_blob b;
    f.bogus = 1;
    ASSERT_STATUS(kjit__cache_get(c, k, "op", "sm_90", fake_build, &f, &b, NULL), KJIT_EINVAL);
    ASSERT_CONTAINS(kjit_last_error(), "without a lowered name");
    f.bogus = 0;
    f.fail_silent = KJIT_ECOMPILE;
    ASSERT_STATUS(kjit__cache_get(c, k, "op", "sm_90", fake_build, &f, &b, NULL), KJIT_ECOMPILE);
    ASSERT_CONTAINS(kjit_last_error(), "gave no message");
    f.fail_silent = 0;
    ASSERT_EQ_INT(count_names(dir, "", ".cubin"), 0);
    kjit_cache_origin o;
    ASSERT_OK(kjit__cache_get(c, k, "op", "sm_90", fake_build, &f, &b, &o));
    ASSERT_EQ_INT(o, KJIT_FROM_COMPILE);
    ASSERT_EQ_INT(atomic_load(&f.calls), 3);
    CHECK(blob_ok(&b, k, f.size));
    kjit__cache_close(c);
    return 0;
}

/* ---- directory ---- */

static int dir_mode(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0 && S_ISDIR(st.st_mode) ? (int)(st.st_mode & 07777) : -1;
}

static int test_dir_resolution(const char *dir)
{
    char p[256], want[256];
    kjit_cache *c;
    setenv("KJIT_CACHE_DIR", "", 1);
    unsetenv("KJIT_CACHE_MAX_MB");

    /* $HOME/.cache/kjit, every created level 0700. */
    unsetenv("XDG_CACHE_HOME");
    snprintf(p, sizeof p, "%s/home", dir);
    setenv("HOME", p, 1);
    ASSERT_OK(kjit__cache_open(&c, NULL, 0));
    snprintf(want, sizeof want, "%s/home/.cache/kjit", dir);
    ASSERT_STR_EQ(kjit__cache_dir(c), want);
    kjit__cache_close(c);
    ASSERT_EQ_INT(dir_mode(p), 0700);
    snprintf(p, sizeof p, "%s/home/.cache", dir);
    ASSERT_EQ_INT(dir_mode(p), 0700);
    ASSERT_EQ_INT(dir_mode(want), 0700);
    snprintf(p, sizeof p, "%s/home/.cache/kjit/locks", dir);
    ASSERT_EQ_INT(dir_mode(p), 0700);

    /* $XDG_CACHE_HOME/kjit, trailing slash dropped. */
    snprintf(p, sizeof p, "%s/xdg/", dir);
    setenv("XDG_CACHE_HOME", p, 1);
    ASSERT_OK(kjit__cache_open(&c, NULL, 0));
    snprintf(want, sizeof want, "%s/xdg/kjit", dir);
    ASSERT_STR_EQ(kjit__cache_dir(c), want);
    kjit__cache_close(c);
    /* A relative one is ignored (the XDG spec's rule): $HOME's, not one
     * under the working directory. */
    setenv("XDG_CACHE_HOME", "relxdg", 1);
    ASSERT_OK(kjit__cache_open(&c, NULL, 0));
    snprintf(want, sizeof want, "%s/home/.cache/kjit", dir);
    ASSERT_STR_EQ(kjit__cache_dir(c), want);
    kjit__cache_close(c);
    ASSERT_TRUE(access("relxdg", F_OK) != 0);

    /* $KJIT_CACHE_DIR, then the argument above all. */
    snprintf(p, sizeof p, "%s/env", dir);
    setenv("KJIT_CACHE_DIR", p, 1);
    ASSERT_OK(kjit__cache_open(&c, NULL, 0));
    ASSERT_STR_EQ(kjit__cache_dir(c), p);
    kjit__cache_close(c);
    snprintf(p, sizeof p, "%s/arg/a/b//", dir);
    ASSERT_OK(kjit__cache_open(&c, p, 0));
    snprintf(want, sizeof want, "%s/arg/a/b", dir);
    ASSERT_STR_EQ(kjit__cache_dir(c), want);
    kjit__cache_close(c);
    ASSERT_EQ_INT(dir_mode(want), 0700);

    /* A relative name: absolute against the working directory, so that it
     * names the same directory to another process (a server's hello). */
    char *back = getcwd(NULL, 0), *here;
    ASSERT_TRUE(back != NULL);
    ASSERT_TRUE(chdir(dir) == 0);
    ASSERT_TRUE((here = getcwd(NULL, 0)) != NULL);
    ASSERT_OK(kjit__cache_open(&c, "rel/c//", 0));
    snprintf(want, sizeof want, "%s/rel/c", here);
    ASSERT_STR_EQ(kjit__cache_dir(c), want);
    kjit__cache_close(c);
    ASSERT_EQ_INT(dir_mode(want), 0700);
    char *r = NULL;
    ASSERT_TRUE(chdir("/") == 0);
    ASSERT_OK(kjit__cache_resolve_dir("x/y", &r));
    ASSERT_STR_EQ(r, "/x/y");
    free(r), free(here);
    ASSERT_TRUE(chdir(back) == 0);
    free(back);

    unsetenv("KJIT_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    c = NULL;
    ASSERT_STATUS(kjit__cache_open(&c, NULL, 0), KJIT_EINVAL);
    ASSERT_CONTAINS(kjit_last_error(), "KJIT_CACHE_DIR");
    ASSERT_CONTAINS(kjit_last_error(), "are all unset");
    ASSERT_TRUE(c == NULL);
    /* A relative XDG_CACHE_HOME is set, only ignored: said so (the message
     * called all three unset). */
    setenv("XDG_CACHE_HOME", "relxdg", 1);
    ASSERT_STATUS(kjit__cache_open(&c, NULL, 0), KJIT_EINVAL);
    ASSERT_CONTAINS(kjit_last_error(), "XDG_CACHE_HOME is relative");
    ASSERT_TRUE(c == NULL);
    ASSERT_TRUE(access("relxdg", F_OK) != 0); /* nothing made */
    unsetenv("XDG_CACHE_HOME");

    /* The size cap. */
    kjit_cache_stats st;
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    ASSERT_OK(kjit__cache_stats(c, &st));
    ASSERT_EQ_U64(st.max_bytes, 1024ull << 20);
    kjit__cache_close(c);
    const char *bad[] = {"abc", "0", "-5", " 5", "+5", "12x", "1.5", "99999999999999999999",
                         "18446744073709551615"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("KJIT_CACHE_MAX_MB", bad[i], 1);
        c = NULL;
        ASSERT_STATUS(kjit__cache_open(&c, dir, 0), KJIT_EINVAL);
        ASSERT_CONTAINS(kjit_last_error(), "KJIT_CACHE_MAX_MB");
        ASSERT_CONTAINS(kjit_last_error(), bad[i]);
        ASSERT_TRUE(c == NULL);
    }
    /* An explicit cap does not read the variable. */
    ASSERT_OK(kjit__cache_open(&c, dir, 12345));
    ASSERT_OK(kjit__cache_stats(c, &st));
    ASSERT_EQ_U64(st.max_bytes, 12345);
    kjit__cache_close(c);
    setenv("KJIT_CACHE_MAX_MB", "7", 1);
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    ASSERT_OK(kjit__cache_stats(c, &st));
    ASSERT_EQ_U64(st.max_bytes, 7ull << 20);
    kjit__cache_close(c);
    unsetenv("KJIT_CACHE_MAX_MB");
    /* The wait for another process's build. */
    const char *bad_wait[] = {"abc", "-1", " 5", "1.5", "86401", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_wait / sizeof bad_wait[0]; i++) {
        setenv("KJIT_CACHE_LOCK_WAIT_S", bad_wait[i], 1);
        c = NULL;
        ASSERT_STATUS(kjit__cache_open(&c, dir, 0), KJIT_EINVAL);
        ASSERT_CONTAINS(kjit_last_error(), "KJIT_CACHE_LOCK_WAIT_S");
        ASSERT_CONTAINS(kjit_last_error(), bad_wait[i]);
        ASSERT_TRUE(c == NULL);
    }
    setenv("KJIT_CACHE_LOCK_WAIT_S", "0", 1);
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    kjit__cache_close(c);
    unsetenv("KJIT_CACHE_LOCK_WAIT_S");
    return 0;
}

/* open, list and clear all refuse the directory with KJIT_EPERM, naming it. */
static int expect_refused(const char *path, const char *why)
{
    kjit_cache *c = NULL;
    ASSERT_STATUS(kjit__cache_open(&c, path, 0), KJIT_EPERM);
    ASSERT_CONTAINS(kjit_last_error(), path);
    ASSERT_CONTAINS(kjit_last_error(), why);
    ASSERT_TRUE(c == NULL);
    seen s;
    int n_bad;
    uint64_t removed;
    ASSERT_STATUS(kjit__cache_list(path, 1, seen_visit, &s, &n_bad), KJIT_EPERM);
    ASSERT_CONTAINS(kjit_last_error(), path);
    ASSERT_STATUS(kjit__cache_clear(path, &removed, NULL), KJIT_EPERM);
    ASSERT_CONTAINS(kjit_last_error(), path);
    return 0;
}

static int test_dir_trust(const char *dir)
{
    char p[256], link[256], file[256];
    snprintf(p, sizeof p, "%s/c", dir);
    ASSERT_EQ_INT(mkdir(p, 0700), 0);
    /* chmod, not mkdir's mode, which the umask would trim. */
    ASSERT_EQ_INT(chmod(p, 0777), 0);
    CHECK(expect_refused(p, "mode 0777"));
    CHECK(expect_refused(p, "chmod go-w"));
    /* Sticky too: refused. Root's (a shared scratch space such as /tmp)
     * with a directory of one's own inside it as the way out, not a chmod
     * or a chown; a user's own (made 1777 by mistake) with the chmod. */
    ASSERT_EQ_INT(chmod(p, 01777), 0);
    CHECK(expect_refused(p, "mode 1777"));
    if (geteuid() == 0) {
        CHECK(expect_refused(p, "name a directory of your own inside it"));
        ASSERT_TRUE(strstr(kjit_last_error(), "chmod") == NULL);
    } else {
        CHECK(expect_refused(p, "chmod go-w"));
    }
    ASSERT_EQ_INT(chmod(p, 0770), 0);
    CHECK(expect_refused(p, "mode 0770"));
    ASSERT_EQ_INT(chmod(p, 0702), 0);
    CHECK(expect_refused(p, "mode 0702"));
    /* Readable by others is fine: only writing plants code. */
    ASSERT_EQ_INT(chmod(p, 0755), 0);
    kjit_cache *c;
    ASSERT_OK(kjit__cache_open(&c, p, 0));
    CHECK(get_expect(c, tkey(1), "op", KJIT_FROM_COMPILE));
    kjit__cache_close(c);
    ASSERT_EQ_INT(chmod(p, 0700), 0);

    /* A symlinked cache directory, with and without a trailing slash. */
    snprintf(link, sizeof link, "%s/link", dir);
    ASSERT_EQ_INT(symlink(p, link), 0);
    CHECK(expect_refused(link, "symbolic link"));
    snprintf(link, sizeof link, "%s/link/", dir);
    kjit_cache *c2 = NULL;
    ASSERT_STATUS(kjit__cache_open(&c2, link, 0), KJIT_EPERM);
    ASSERT_CONTAINS(kjit_last_error(), "symbolic link");

    snprintf(file, sizeof file, "%s/file", dir);
    int fd = open(file, O_WRONLY | O_CREAT, 0600);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    CHECK(expect_refused(file, "not a directory"));

    if (geteuid() != 0) {
        printf("  (owned-by-another-user check skipped: needs root to chown)\n");
        return 0;
    }
    ASSERT_EQ_INT(chown(p, 65534, 65534), 0);
    CHECK(expect_refused(p, "owned by uid 65534"));
    return 0;
}

/* ---- hits and misses ---- */

static int test_hit_miss(const char *dir)
{
    kjit_cache *c;
    kjit_cache_stats st;
    kjit_cache_key k = tkey(1);
    char path[512];
    /* Characters outside [A-Za-z0-9_-] in the label become '_'. */
    entry_path(path, sizeof path, dir, "norm_mod_x", k);

    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    ASSERT_STR_EQ(kjit__cache_dir(c), dir);
    CHECK(get_expect(c, k, "norm/mod.x", KJIT_FROM_COMPILE));
    CHECK(get_expect(c, k, "norm/mod.x", KJIT_FROM_MEMORY));
    ASSERT_OK(kjit__cache_stats(c, &st));
    ASSERT_EQ_U64(st.mem_hits, 1);
    ASSERT_EQ_U64(st.disk_hits, 0);
    ASSERT_EQ_U64(st.misses, 1);
    ASSERT_EQ_U64(st.compiles, 1);
    ASSERT_EQ_U64(st.bad_entries, 0);
    ASSERT_EQ_U64(st.entries, 1);
    ASSERT_EQ_U64(st.bytes, 56 + 40 + 1000);
    kjit__cache_close(c);

    struct stat sb;
    ASSERT_EQ_INT(lstat(path, &sb), 0);
    ASSERT_TRUE(S_ISREG(sb.st_mode));
    ASSERT_EQ_INT(sb.st_mode & 0777, 0600);
    ASSERT_EQ_U64(sb.st_size, 56 + 40 + 1000);
    char locks[512];
    snprintf(locks, sizeof locks, "%s/locks", dir);
    ASSERT_EQ_INT(count_names(locks, "", ".lock"), 0);

    /* A disk hit refreshes the mtime, the LRU stamp. */
    struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
    ASSERT_EQ_INT(utimensat(AT_FDCWD, path, old, 0), 0);
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    CHECK(get_expect(c, k, "norm/mod.x", KJIT_FROM_DISK));
    CHECK(get_expect(c, k, "norm/mod.x", KJIT_FROM_MEMORY));
    ASSERT_EQ_INT(lstat(path, &sb), 0);
    ASSERT_TRUE(sb.st_mtime > time(NULL) - 60);
    CHECK(get_expect(c, tkey(2), "other", KJIT_FROM_COMPILE));
    ASSERT_OK(kjit__cache_stats(c, &st));
    ASSERT_EQ_U64(st.mem_hits, 1);
    ASSERT_EQ_U64(st.disk_hits, 1);
    ASSERT_EQ_U64(st.misses, 1);
    ASSERT_EQ_U64(st.compiles, 1);
    ASSERT_EQ_U64(st.entries, 2);
    kjit__cache_close(c);
    return verify_clean(dir, 2);
}

static int test_memory_only(const char *dir)
{
    ASSERT_EQ_INT(chdir(dir), 0);
    kjit_cache *c;
    kjit_cache_stats st;
    ASSERT_OK(kjit__cache_open(&c, "", 0));
    ASSERT_STR_EQ(kjit__cache_dir(c), "");
    for (int i = 0; i < 200; i++) /* enough to grow the table */
        CHECK(get_expect(c, tkey(i), "op", KJIT_FROM_COMPILE));
    for (int i = 0; i < 200; i++)
        CHECK(get_expect(c, tkey(i), "op", KJIT_FROM_MEMORY));
    ASSERT_OK(kjit__cache_stats(c, &st));
    ASSERT_EQ_U64(st.compiles, 200);
    ASSERT_EQ_U64(st.misses, 200);
    ASSERT_EQ_U64(st.mem_hits, 200);
    ASSERT_EQ_U64(st.entries, 0);
    kjit__cache_close(c);
    /* "" is no directory at all, not the current one. */
    ASSERT_EQ_INT(count_names(".", "", ""), 0);
    return chdir("/") != 0;
}

/* ---- bad entries ---- */

/* Publishes key 1 under dir, lets corrupt() damage the file, then checks that
 * a fresh cache neither loads it nor fails: it reports it, rebuilds and
 * republishes a valid entry. */
static int bad_entry_case(const char *dir, int (*corrupt)(const char *path, const char *dir, void *),
                          void *ctx)
{
    kjit_cache *c;
    kjit_cache_key k = tkey(1);
    char path[512];
    entry_path(path, sizeof path, dir, "op", k);
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    CHECK(get_expect(c, k, "op", KJIT_FROM_COMPILE));
    kjit__cache_close(c);
    CHECK(corrupt(path, dir, ctx));

    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    CHECK(get_expect(c, k, "op", KJIT_FROM_COMPILE));
    kjit_cache_stats st;
    ASSERT_OK(kjit__cache_stats(c, &st));
    ASSERT_EQ_U64(st.bad_entries, 1);
    ASSERT_EQ_U64(st.disk_hits, 0);
    kjit__cache_close(c);
    struct stat sb;
    ASSERT_EQ_INT(lstat(path, &sb), 0);
    ASSERT_TRUE(S_ISREG(sb.st_mode));
    return verify_clean(dir, -1);
}

static int truncate_by(const char *path, const char *dir, void *ctx)
{
    (void)dir;
    struct stat sb;
    if (stat(path, &sb) < 0)
        return 1;
    off_t to = ctx ? 0 : sb.st_size - 1;
    return truncate(path, to) != 0;
}

static int test_bad_truncated(const char *dir) { return bad_entry_case(dir, truncate_by, NULL); }

/* Bytes after the image: the checksum still matches, only the exact size
 * check catches it. */
static int append_bytes(const char *path, const char *dir, void *ctx)
{
    (void)dir, (void)ctx;
    int fd = open(path, O_WRONLY | O_APPEND);
    int bad = fd < 0 || write(fd, "extra", 5) != 5;
    if (fd >= 0)
        close(fd);
    return bad;
}

static int test_bad_appended(const char *dir) { return bad_entry_case(dir, append_bytes, NULL); }

static int test_bad_zero_length(const char *dir)
{
    return bad_entry_case(dir, truncate_by, (void *)1);
}

static int flip_at(const char *path, const char *dir, void *ctx)
{
    (void)dir;
    long at = *(long *)ctx;
    if (at < 0) {
        struct stat sb;
        if (stat(path, &sb) < 0)
            return 1;
        at += sb.st_size;
    }
    return flip_byte(path, at);
}

/* Every header byte, each on its own: none may slip through. */
static int test_bad_header_byte(const char *dir)
{
    for (long at = 0; at < 56; at++) {
        uint64_t removed;
        ASSERT_OK(kjit__cache_clear(dir, &removed, NULL));
        if (bad_entry_case(dir, flip_at, &at)) {
            printf("  with header byte %ld flipped\n", at);
            return 1;
        }
    }
    return 0;
}

static int test_bad_payload_byte(const char *dir)
{
    /* First name byte, last name byte, first and middle image bytes, last byte. */
    long where[] = {56, 56 + 39, 56 + 40, 56 + 40 + 500, -1};
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
        uint64_t removed;
        ASSERT_OK(kjit__cache_clear(dir, &removed, NULL));
        if (bad_entry_case(dir, flip_at, &where[i])) {
            printf("  with payload byte %ld flipped\n", where[i]);
            return 1;
        }
    }
    return 0;
}

/* A whole valid entry of key 2 under key 1's name. */
static int copy_other(const char *path, const char *dir, void *ctx)
{
    (void)ctx;
    kjit_cache *c;
    char other[512];
    if (kjit__cache_open(&c, dir, 0) != KJIT_OK || get_expect(c, tkey(2), "op", KJIT_FROM_COMPILE))
        return 1;
    kjit__cache_close(c);
    entry_path(other, sizeof other, dir, "op", tkey(2));
    return copy_file(other, path);
}

static int test_bad_other_key(const char *dir)
{
    CHECK(bad_entry_case(dir, copy_other, NULL));
    return 0;
}

/* A symlink to a valid entry of the same key in another directory. */
static int symlink_elsewhere(const char *path, const char *dir, void *ctx)
{
    const char *elsewhere = ctx;
    kjit_cache *c;
    char target[512];
    (void)dir;
    if (kjit__cache_open(&c, elsewhere, 0) != KJIT_OK ||
        get_expect(c, tkey(1), "op", KJIT_FROM_COMPILE))
        return 1;
    kjit__cache_close(c);
    entry_path(target, sizeof target, elsewhere, "op", tkey(1));
    return unlink(path) != 0 || symlink(target, path) != 0;
}

static int test_bad_symlink(const char *dir)
{
    char cdir[256], elsewhere[256];
    snprintf(cdir, sizeof cdir, "%s/c", dir);
    snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", dir);
    CHECK(bad_entry_case(cdir, symlink_elsewhere, elsewhere));
    /* The link was removed, not what it pointed at. */
    CHECK(verify_clean(elsewhere, 1));
    return 0;
}

/* A FIFO must not hang the reader, and is named for what it is. */
static int make_fifo(const char *path, const char *dir, void *ctx)
{
    (void)ctx;
    if (unlink(path) != 0 || mkfifo(path, 0600) != 0)
        return 1;
    seen s;
    memset(&s, 0, sizeof s);
    int n_bad;
    ASSERT_OK(kjit__cache_list(dir, 1, seen_visit, &s, &n_bad));
    ASSERT_EQ_INT(n_bad, 1);
    ASSERT_CONTAINS(s.problems[0], "not a regular file");
    return 0;
}

static int test_bad_fifo(const char *dir)
{
    alarm(20);
    CHECK(bad_entry_case(dir, make_fifo, NULL));
    alarm(0);
    return 0;
}

/* ---- temp files, list, verify, clear ---- */

static int make_temp_file(const char *dir, const char *name, time_t mtime, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", dir, name);
    int fd = open(out, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || write(fd, "KJITCBN\0partial", 15) != 15)
        return 1;
    close(fd);
    struct timespec t[2] = {{mtime, 0}, {mtime, 0}};
    return mtime && utimensat(AT_FDCWD, out, t, 0) != 0;
}

static int test_temp_leftover(const char *dir)
{
    kjit_cache *c;
    char fresh[512], old[512];
    /* A writer killed mid-write leaves its temp file, never an entry. */
    CHECK(make_temp_file(dir, ".tmp.op.AbC123", 0, fresh, sizeof fresh));
    CHECK(make_temp_file(dir, ".tmp.op.Old999", time(NULL) - 11 * 60, old, sizeof old));
    seen s;
    memset(&s, 0, sizeof s);
    int n_bad = -1;
    ASSERT_OK(kjit__cache_list(dir, 0, seen_visit, &s, &n_bad));
    ASSERT_EQ_INT(s.n, 2);
    ASSERT_EQ_INT(s.n_temp, 2);
    ASSERT_EQ_INT(n_bad, 0);
    /* verify: a recent one may be a live write; an old one is a leftover. */
    memset(&s, 0, sizeof s);
    ASSERT_OK(kjit__cache_list(dir, 1, seen_visit, &s, &n_bad));
    ASSERT_EQ_INT(n_bad, 1);
    ASSERT_STR_EQ(s.files[0], ".tmp.op.AbC123");
    ASSERT_EQ_INT(s.ok[0], 1);
    ASSERT_STR_EQ(s.files[1], ".tmp.op.Old999");
    ASSERT_EQ_INT(s.ok[1], 0);
    ASSERT_CONTAINS(s.problems[1], "older than 10 minutes");
    /* One dated ahead of the clock is not called older (it was). */
    char ahead[512];
    CHECK(make_temp_file(dir, ".tmp.op.Fut777", time(NULL) + 11 * 60, ahead, sizeof ahead));
    memset(&s, 0, sizeof s);
    ASSERT_OK(kjit__cache_list(dir, 1, seen_visit, &s, &n_bad));
    ASSERT_EQ_INT(n_bad, 2);
    ASSERT_STR_EQ(s.files[1], ".tmp.op.Fut777");
    ASSERT_EQ_INT(s.ok[1], 0);
    ASSERT_CONTAINS(s.problems[1], "in the future");
    ASSERT_EQ_INT(unlink(ahead), 0);

    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    CHECK(get_expect(c, tkey(1), "op", KJIT_FROM_COMPILE));
    kjit__cache_close(c);
    /* The publish's scan removed the old leftover and kept the recent one. */
    ASSERT_TRUE(path_exists(fresh));
    ASSERT_TRUE(!path_exists(old));
    memset(&s, 0, sizeof s);
    ASSERT_OK(kjit__cache_list(dir, 1, seen_visit, &s, &n_bad));
    ASSERT_EQ_INT(n_bad, 0);
    ASSERT_EQ_INT(s.n - s.n_temp, 1);
    return 0;
}

/* A warm cache publishes nothing, so its open removes what a killed writer
 * left (and keeps a temp file young enough to be a write in progress). */
static int test_temp_leftover_warm(const char *dir)
{
    kjit_cache *c;
    char fresh[512], old[512];
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    CHECK(get_expect(c, tkey(1), "op", KJIT_FROM_COMPILE));
    kjit__cache_close(c);
    CHECK(make_temp_file(dir, ".tmp.op.Young1", 0, fresh, sizeof fresh));
    CHECK(make_temp_file(dir, ".tmp.op.Old111", time(NULL) - 11 * 60, old, sizeof old));
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    ASSERT_TRUE(path_exists(fresh));
    ASSERT_TRUE(!path_exists(old));
    CHECK(get_expect(c, tkey(1), "op", KJIT_FROM_DISK));
    kjit__cache_close(c);
    ASSERT_EQ_INT(unlink(fresh), 0);
    return verify_clean(dir, 1);
}

/* A temp file its writer holds (an OFD lock from create to rename) is a
 * write in progress however old its mtime says it is (a stopped writer, a
 * file system clock behind ours): verify, a cache's open and clear leave
 * it. Once no one holds it, it is a leftover, and so is an unheld one
 * whose mtime lies far in the future. */
static int test_temp_held(const char *dir)
{
    char held[512], future[512], link[512];
    CHECK(make_temp_file(dir, ".tmp.op.Held01", time(NULL) - 11 * 60, held, sizeof held));
    CHECK(make_temp_file(dir, ".tmp.op.Futur1", time(NULL) + 3600, future, sizeof future));
    /* A link under a temp name is no writer's (they make regular files):
     * an old one is a leftover too, though the lock probe cannot open it. */
    snprintf(link, sizeof link, "%s/.tmp.op.Link01", dir);
    ASSERT_EQ_INT(symlink("/nonexistent-kjit-target", link), 0);
    struct timespec lt[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    ASSERT_EQ_INT(utimensat(AT_FDCWD, link, lt, AT_SYMLINK_NOFOLLOW), 0);
    int hfd = open(held, O_WRONLY);
    ASSERT_TRUE(hfd >= 0);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    ASSERT_EQ_INT(fcntl(hfd, F_OFD_SETLK, &fl), 0);
    seen s;
    memset(&s, 0, sizeof s);
    int n_bad = -1;
    ASSERT_OK(kjit__cache_list(dir, 1, seen_visit, &s, &n_bad));
    ASSERT_EQ_INT(n_bad, 2);
    ASSERT_STR_EQ(s.files[0], ".tmp.op.Futur1");
    ASSERT_EQ_INT(s.ok[0], 0);
    ASSERT_STR_EQ(s.files[1], ".tmp.op.Held01");
    ASSERT_EQ_INT(s.ok[1], 1);
    ASSERT_STR_EQ(s.files[2], ".tmp.op.Link01");
    ASSERT_EQ_INT(s.ok[2], 0);
    kjit_cache *c;
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    kjit__cache_close(c);
    ASSERT_TRUE(path_exists(held));
    ASSERT_TRUE(!path_exists(future));
    uint64_t removed = 0, spared = 0;
    ASSERT_OK(kjit__cache_clear(dir, &removed, &spared)); /* the link goes */
    ASSERT_EQ_U64(removed, 1);
    ASSERT_EQ_U64(spared, 1);
    struct stat lst;
    ASSERT_TRUE(lstat(link, &lst) != 0);
    ASSERT_TRUE(path_exists(held));
    close(hfd); /* the writer is gone */
    ASSERT_OK(kjit__cache_clear(dir, &removed, &spared));
    ASSERT_EQ_U64(removed, 1);
    ASSERT_EQ_U64(spared, 0);
    ASSERT_TRUE(!path_exists(held));
    return verify_clean(dir, 0);
}

static int test_list_verify_clear(const char *dir)
{
    kjit_cache *c;
    char p[6][512], elsewhere[256], target[512], tmp[512], junk[512], lock[512];
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    for (int i = 1; i <= 5; i++) {
        CHECK(get_expect(c, tkey(i), "op", KJIT_FROM_COMPILE));
        entry_path(p[i], sizeof p[i], dir, "op", tkey(i));
    }
    kjit__cache_close(c);
    snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", dir);
    ASSERT_OK(kjit__cache_open(&c, elsewhere, 0));
    CHECK(get_expect(c, tkey(5), "op", KJIT_FROM_COMPILE));
    kjit__cache_close(c);
    entry_path(target, sizeof target, elsewhere, "op", tkey(5));

    seen s;
    memset(&s, 0, sizeof s);
    int n_bad = -1;
    ASSERT_OK(kjit__cache_list(dir, 1, seen_visit, &s, &n_bad));
    ASSERT_EQ_INT(n_bad, 0);
    ASSERT_EQ_INT(s.n, 5);
    ASSERT_EQ_U64(s.bytes, 5 * (56 + 40 + 1000));

    CHECK(flip_byte(p[2], 56 + 40 + 10));   /* payload */
    ASSERT_EQ_INT(truncate(p[3], 100), 0);  /* short */
    CHECK(copy_file(p[1], p[4]));           /* key 1's entry under key 4's name */
    ASSERT_EQ_INT(unlink(p[5]), 0);
    ASSERT_EQ_INT(symlink(target, p[5]), 0);
    CHECK(make_temp_file(dir, ".tmp.op.zzzzzz", time(NULL) - 3600, tmp, sizeof tmp));
    snprintf(junk, sizeof junk, "%s/junk.cubin", dir);
    CHECK(copy_file(p[1], junk));
    /* A near miss of an entry's name (no arch, no format): not kjit's either. */
    char near[512];
    snprintf(near, sizeof near, "%s/op.0123456789abcdef0123456789abcdef.cubin", dir);
    CHECK(copy_file(p[1], near));

    memset(&s, 0, sizeof s);
    ASSERT_OK(kjit__cache_list(dir, 0, seen_visit, &s, &n_bad));
    ASSERT_EQ_INT(s.n, 8);
    ASSERT_EQ_INT(n_bad, 0); /* without verify nothing is judged */

    memset(&s, 0, sizeof s);
    ASSERT_OK(kjit__cache_list(dir, 1, seen_visit, &s, &n_bad));
    ASSERT_EQ_INT(s.n, 8);
    ASSERT_EQ_INT(n_bad, 7);
    struct {
        const char *path, *problem;
    } want[] = {{p[1], NULL},           {p[2], "checksum"},     {p[3], "header says"},
                {p[4], "another key"},  {p[5], "symbolic link"}, {tmp, "older than 10 minutes"},
                {junk, "file name is not"},  {near, "not kjit's"}};
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        const char *name = strrchr(want[w].path, '/') + 1;
        int found = 0;
        for (int i = 0; i < s.n; i++) {
            if (strcmp(s.files[i], name) != 0)
                continue;
            found = 1;
            ASSERT_EQ_INT(s.ok[i], want[w].problem == NULL);
            if (want[w].problem)
                ASSERT_CONTAINS(s.problems[i], want[w].problem);
        }
        if (!found) {
            FAIL_AT();
            printf("verify did not visit %s\n", name);
            return 1;
        }
    }
    /* verify judges, it does not repair. */
    ASSERT_TRUE(path_exists(p[2]) && path_exists(p[5]) && path_exists(tmp));

    /* clear: entries, temp files, and lock files nobody holds, counted; a
     * held lock (a build in progress) stays, and so does a file of a name
     * kjit does not give its locks. */
    snprintf(lock, sizeof lock, "%s/locks/0123456789abcdef0123456789abcdef.lock", dir);
    int fd = open(lock, O_RDWR | O_CREAT, 0600);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    char held[512];
    snprintf(held, sizeof held, "%s/locks/4567456745674567456745674567abcd.lock", dir);
    int hfd = open(held, O_RDWR | O_CREAT, 0600);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    ASSERT_EQ_INT(fcntl(hfd, F_OFD_SETLK, &fl), 0);
    char other[512];
    snprintf(other, sizeof other, "%s/locks/0123.lock", dir);
    fd = open(other, O_RDWR | O_CREAT, 0600);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    uint64_t removed = 0;
    ASSERT_OK(kjit__cache_clear(dir, &removed, NULL));
    ASSERT_EQ_U64(removed, 7); /* six in the directory, one lock */
    ASSERT_TRUE(!path_exists(lock));
    ASSERT_TRUE(path_exists(held));
    ASSERT_TRUE(path_exists(other));
    ASSERT_EQ_INT(unlink(other), 0);
    close(hfd);
    /* Files of names kjit does not write are someone else's: left alone
     * (a mistyped --cache-dir must not cost a user their own *.cubin). */
    ASSERT_TRUE(path_exists(junk) && path_exists(near));
    ASSERT_EQ_INT(unlink(junk), 0);
    ASSERT_EQ_INT(unlink(near), 0);
    ASSERT_EQ_INT(count_names(dir, "", ".cubin"), 0);
    ASSERT_EQ_INT(count_names(dir, ".tmp.", ""), 0);
    CHECK(verify_clean(elsewhere, 1)); /* the symlink's target is untouched */
    ASSERT_OK(kjit__cache_clear(dir, &removed, NULL));
    ASSERT_EQ_U64(removed, 1); /* the lock no longer held */
    ASSERT_TRUE(!path_exists(held));
    CHECK(verify_clean(dir, 0));

    /* A directory named like an entry is not kjit's: listed as no regular
     * file, judged bad by verify, left alone by clear, which still clears
     * the rest and says so. */
    char sub[512];
    snprintf(sub, sizeof sub, "%s/dir.cubin", dir);
    ASSERT_EQ_INT(mkdir(sub, 0700), 0);
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    CHECK(get_expect(c, tkey(1), "op", KJIT_FROM_COMPILE));
    kjit__cache_close(c);
    memset(&s, 0, sizeof s);
    ASSERT_OK(kjit__cache_list(dir, 1, seen_visit, &s, &n_bad));
    ASSERT_EQ_INT(s.n, 2);
    ASSERT_EQ_INT(n_bad, 1);
    ASSERT_STR_EQ(s.files[0], "dir.cubin");
    ASSERT_EQ_INT(s.regular[0], 0);
    ASSERT_EQ_INT(s.regular[1], 1);
    removed = 99;
    ASSERT_OK(kjit__cache_clear(dir, &removed, NULL));
    ASSERT_EQ_U64(removed, 1);
    ASSERT_TRUE(path_exists(sub));
    ASSERT_EQ_INT(rmdir(sub), 0);
    return verify_clean(dir, 0);
}

/* ---- eviction ---- */

static int set_mtime(const char *path, time_t t)
{
    struct timespec ts[2] = {{t, 0}, {t, 0}};
    return utimensat(AT_FDCWD, path, ts, 0);
}

static int test_evict_lru(const char *dir)
{
    const uint64_t entry = 56 + 40 + 1000;
    kjit_cache *c;
    kjit_cache_stats st;
    char p[5][512];
    ASSERT_OK(kjit__cache_open(&c, dir, 3 * entry + 100));
    for (int i = 1; i <= 3; i++) {
        CHECK(get_expect(c, tkey(i), "op", KJIT_FROM_COMPILE));
        entry_path(p[i], sizeof p[i], dir, "op", tkey(i));
        ASSERT_EQ_INT(set_mtime(p[i], 1000000000 + i), 0);
    }
    kjit__cache_close(c);
    /* Someone else's *.cubin, older and larger than any entry: neither
     * counted against the cap nor evicted. */
    char mine[512];
    snprintf(mine, sizeof mine, "%s/mine.cubin", dir);
    {
        FILE *f = fopen(mine, "wb");
        ASSERT_TRUE(f != NULL);
        for (uint64_t b = 0; b < 2 * entry; b++)
            fputc(0x5a, f);
        fclose(f);
    }
    ASSERT_EQ_INT(set_mtime(mine, 1000000000), 0);
    ASSERT_OK(kjit__cache_open(&c, dir, 3 * entry + 100));
    CHECK(get_expect(c, tkey(1), "op", KJIT_FROM_DISK)); /* now the newest */
    CHECK(get_expect(c, tkey(4), "op", KJIT_FROM_COMPILE));
    entry_path(p[4], sizeof p[4], dir, "op", tkey(4));
    ASSERT_TRUE(path_exists(p[1]));
    ASSERT_TRUE(!path_exists(p[2]));
    ASSERT_TRUE(path_exists(p[3]));
    ASSERT_TRUE(path_exists(p[4]));
    ASSERT_OK(kjit__cache_stats(c, &st));
    ASSERT_EQ_U64(st.evictions, 1);
    ASSERT_EQ_U64(st.entries, 3);
    ASSERT_EQ_U64(st.bytes, 3 * entry);
    /* Evicted from disk, still served from memory. */
    CHECK(get_expect(c, tkey(2), "op", KJIT_FROM_COMPILE));
    kjit__cache_close(c);
    ASSERT_TRUE(!path_exists(p[3]));
    ASSERT_TRUE(path_exists(mine));
    ASSERT_EQ_INT(unlink(mine), 0);
    return verify_clean(dir, 3);
}

/* One entry larger than the whole cap: stored and kept (it would otherwise be
 * written and evicted at once, every process compiling it again); the next
 * publish evicts it as the oldest. */
static int test_evict_larger_than_cap(const char *dir)
{
    kjit_cache *c;
    kjit_cache_stats st;
    char p1[512], p2[512];
    ASSERT_OK(kjit__cache_open(&c, dir, 500));
    CHECK(get_expect(c, tkey(1), "op", KJIT_FROM_COMPILE));
    entry_path(p1, sizeof p1, dir, "op", tkey(1));
    ASSERT_TRUE(path_exists(p1));
    ASSERT_OK(kjit__cache_stats(c, &st));
    ASSERT_EQ_U64(st.evictions, 0);
    ASSERT_EQ_U64(st.store_failures, 0);
    ASSERT_EQ_U64(st.entries, 1);
    ASSERT_EQ_INT(set_mtime(p1, 1000000000), 0);
    CHECK(get_expect(c, tkey(2), "op", KJIT_FROM_COMPILE));
    entry_path(p2, sizeof p2, dir, "op", tkey(2));
    ASSERT_TRUE(!path_exists(p1));
    ASSERT_TRUE(path_exists(p2));
    ASSERT_OK(kjit__cache_stats(c, &st));
    ASSERT_EQ_U64(st.evictions, 1);
    kjit__cache_close(c);
    return verify_clean(dir, 1);
}

/* Another process's build that never ends (stopped, hung) holds the key's
 * lock: a get waits KJIT_CACHE_LOCK_WAIT_S, then builds and stores it. */
static int test_lock_wait_bounded(const char *dir)
{
    kjit_cache *c;
    char hex[33], lock[512];
    kjit__cache_key_hex(tkey(1), hex);
    setenv("KJIT_CACHE_LOCK_WAIT_S", "1", 1);
    int rc = kjit__cache_open(&c, dir, 0);
    unsetenv("KJIT_CACHE_LOCK_WAIT_S");
    ASSERT_OK(rc);
    snprintf(lock, sizeof lock, "%s/locks/%s.lock", dir, hex);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_TRUE(fd >= 0);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    ASSERT_EQ_INT(fcntl(fd, F_OFD_SETLK, &fl), 0);
    const double t0 = now_s();
    CHECK(get_expect(c, tkey(1), "op", KJIT_FROM_COMPILE));
    const double waited = now_s() - t0;
    if (waited < 0.9 || waited > 10) {
        FAIL_AT();
        printf("waited %.2f s for a held lock, want about 1\n", waited);
        return 1;
    }
    close(fd);
    /* A free lock is taken at once. */
    const double t1 = now_s();
    CHECK(get_expect(c, tkey(2), "op", KJIT_FROM_COMPILE));
    ASSERT_TRUE(now_s() - t1 < 0.5);
    kjit__cache_close(c);
    unlink(lock);
    return verify_clean(dir, 2);
}

/* Not writable at publish time: the get still succeeds, nothing is stored. */
static int test_unwritable(const char *dir)
{
    if (geteuid() == 0) {
        printf("  (needs a non-root user: root writes through mode bits)\n");
        return 77;
    }
    kjit_cache *c;
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    ASSERT_EQ_INT(chmod(dir, 0500), 0);
    CHECK(get_expect(c, tkey(1), "op", KJIT_FROM_COMPILE));
    CHECK(get_expect(c, tkey(1), "op", KJIT_FROM_MEMORY));
    kjit__cache_close(c);
    ASSERT_EQ_INT(chmod(dir, 0700), 0);
    ASSERT_EQ_INT(count_names(dir, "", ".cubin"), 0);
    ASSERT_EQ_INT(count_names(dir, ".tmp.", ""), 0);
    return 0;
}

/* ---- threads ---- */

typedef struct tjob {
    kjit_cache *c;
    kjit_cache_key key;
    fake *f;
    pthread_barrier_t *go;
    int rc;
    kjit_cache_origin origin;
    kjit_cache_blob blob;
    char err[256];
} tjob;

static void *tjob_run(void *arg)
{
    tjob *j = arg;
    if (j->go)
        pthread_barrier_wait(j->go);
    j->rc = kjit__cache_get(j->c, j->key, "op", "sm_90", fake_build, j->f, &j->blob, &j->origin);
    snprintf(j->err, sizeof j->err, "%s", kjit_last_error());
    return NULL;
}

#define NT 8

static int run_threads(tjob *jobs, kjit_cache *c[2], kjit_cache_key k, fake *f)
{
    pthread_t t[NT];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, NT);
    for (int i = 0; i < NT; i++) {
        jobs[i] = (tjob){c[i % 2], k, f, &go, -99, (kjit_cache_origin)-1, {0}, {0}};
        pthread_create(&t[i], NULL, tjob_run, &jobs[i]);
    }
    for (int i = 0; i < NT; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&go);
    return 0;
}

static int test_threads_one_build(const char *dir)
{
    kjit_cache *c;
    kjit_cache_key k = tkey(1);
    fake f;
    fake_init(&f, k);
    f.sleep_ms = 200;
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    tjob jobs[NT];
    kjit_cache *cc[2] = {c, c};
    run_threads(jobs, cc, k, &f);
    ASSERT_EQ_INT(atomic_load(&f.calls), 1);
    int compiled = 0;
    for (int i = 0; i < NT; i++) {
        ASSERT_STATUS(jobs[i].rc, KJIT_OK);
        compiled += jobs[i].origin == KJIT_FROM_COMPILE;
        ASSERT_TRUE(jobs[i].origin == KJIT_FROM_COMPILE || jobs[i].origin == KJIT_FROM_MEMORY);
        ASSERT_TRUE(jobs[i].blob.image == jobs[0].blob.image);
        CHECK(blob_ok(&jobs[i].blob, k, f.size));
    }
    ASSERT_EQ_INT(compiled, 1);
    kjit_cache_stats st;
    ASSERT_OK(kjit__cache_stats(c, &st));
    ASSERT_EQ_U64(st.compiles, 1);
    ASSERT_EQ_U64(st.mem_hits, NT - 1);
    kjit__cache_close(c);
    return verify_clean(dir, 1);
}

/* Two caches of one process on one directory: the OFD lock is per open file,
 * so it excludes threads of one process too. */
static int test_threads_two_caches(const char *dir)
{
    kjit_cache *cc[2];
    kjit_cache_key k = tkey(1);
    fake f;
    fake_init(&f, k);
    f.sleep_ms = 200;
    ASSERT_OK(kjit__cache_open(&cc[0], dir, 0));
    ASSERT_OK(kjit__cache_open(&cc[1], dir, 0));
    tjob jobs[NT];
    run_threads(jobs, cc, k, &f);
    ASSERT_EQ_INT(atomic_load(&f.calls), 1);
    int from[3] = {0, 0, 0};
    for (int i = 0; i < NT; i++) {
        ASSERT_STATUS(jobs[i].rc, KJIT_OK);
        from[jobs[i].origin]++;
        CHECK(blob_ok(&jobs[i].blob, k, f.size));
    }
    ASSERT_EQ_INT(from[KJIT_FROM_COMPILE], 1);
    ASSERT_EQ_INT(from[KJIT_FROM_DISK], 1);
    ASSERT_EQ_INT(from[KJIT_FROM_MEMORY], NT - 2);
    kjit__cache_close(cc[0]);
    kjit__cache_close(cc[1]);
    return verify_clean(dir, 1);
}

static int test_threads_failed_build(const char *dir)
{
    kjit_cache *c;
    kjit_cache_key k = tkey(1);
    fake f;
    fake_init(&f, k);
    f.sleep_ms = 300;
    f.fail = KJIT_ECOMPILE;
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    tjob jobs[NT];
    kjit_cache *cc[2] = {c, c};
    run_threads(jobs, cc, k, &f);
    ASSERT_EQ_INT(atomic_load(&f.calls), 1);
    for (int i = 0; i < NT; i++) {
        ASSERT_STATUS(jobs[i].rc, KJIT_ECOMPILE);
        ASSERT_STR_EQ(jobs[i].err, "fake compile error (call 1)");
    }
    ASSERT_EQ_INT(count_names(dir, "", ".cubin"), 0);
    /* Not cached: the next caller builds again. */
    f.fail = 0;
    f.sleep_ms = 0;
    kjit_cache_blob b;
    kjit_cache_origin o;
    ASSERT_OK(kjit__cache_get(c, k, "op", "sm_90", fake_build, &f, &b, &o));
    ASSERT_EQ_INT(o, KJIT_FROM_COMPILE);
    ASSERT_EQ_INT(atomic_load(&f.calls), 2);
    CHECK(blob_ok(&b, k, f.size));
    kjit__cache_close(c);
    return verify_clean(dir, 1);
}

/* A slow build of one key holds up no other key. */
static int test_threads_other_keys(const char *dir)
{
    kjit_cache *c;
    fake slow;
    fake_init(&slow, tkey(1));
    slow.sleep_ms = 1000;
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    tjob j = {c, tkey(1), &slow, NULL, -99, (kjit_cache_origin)-1, {0}, {0}};
    pthread_t t;
    pthread_create(&t, NULL, tjob_run, &j);
    while (!atomic_load(&slow.started))
        sleep_ms(1);
    double t0 = now_s();
    for (int i = 2; i < 6; i++)
        CHECK(get_expect(c, tkey(i), "op", KJIT_FROM_COMPILE));
    double took = now_s() - t0;
    int slow_done = atomic_load(&slow.finished);
    pthread_join(t, NULL);
    ASSERT_STATUS(j.rc, KJIT_OK);
    if (slow_done || took > 0.5) {
        FAIL_AT();
        printf("4 fast gets took %.3f s, slow build finished before them: %d\n", took, slow_done);
        return 1;
    }
    kjit__cache_close(c);
    return verify_clean(dir, 5);
}

/* A memory hit: a hash lookup under the mutex, no syscall. */
static int test_memory_hit_speed(const char *dir)
{
    kjit_cache *c;
    kjit_cache_key k[16];
    ASSERT_OK(kjit__cache_open(&c, dir, 0));
    for (int i = 0; i < 16; i++) {
        k[i] = tkey(i);
        CHECK(get_expect(c, k[i], "op", KJIT_FROM_COMPILE));
    }
    fake f;
    fake_init(&f, k[0]);
    kjit_cache_blob b;
    const int n = 1000000;
    double t0 = now_s();
    for (int i = 0; i < n; i++)
        if (kjit__cache_get(c, k[i & 15], "op", "sm_90", fake_build, &f, &b, NULL) != KJIT_OK)
            return 1;
    double ns = (now_s() - t0) / n * 1e9;
    printf("  memory hit: %.0f ns\n", ns);
    ASSERT_EQ_INT(atomic_load(&f.calls), 0);
    ASSERT_TRUE(ns < 1000);
    kjit__cache_close(c);
    return 0;
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"key", test_key},
        {"bad_args", test_bad_args},
        {"build_contract", test_build_contract},
        {"dir_resolution", test_dir_resolution},
        {"dir_trust", test_dir_trust},
        {"hit_miss", test_hit_miss},
        {"memory_only", test_memory_only},
        {"bad_truncated", test_bad_truncated},
        {"bad_zero_length", test_bad_zero_length},
        {"bad_appended", test_bad_appended},
        {"bad_header_byte", test_bad_header_byte},
        {"bad_payload_byte", test_bad_payload_byte},
        {"bad_other_key", test_bad_other_key},
        {"bad_symlink", test_bad_symlink},
        {"bad_fifo", test_bad_fifo},
        {"temp_leftover", test_temp_leftover},
        {"temp_leftover_warm", test_temp_leftover_warm},
        {"temp_held", test_temp_held},
        {"list_verify_clear", test_list_verify_clear},
        {"evict_lru", test_evict_lru},
        {"evict_larger_than_cap", test_evict_larger_than_cap},
        {"lock_wait_bounded", test_lock_wait_bounded},
        {"unwritable", test_unwritable},
        {"threads_one_build", test_threads_one_build},
        {"threads_two_caches", test_threads_two_caches},
        {"threads_failed_build", test_threads_failed_build},
        {"threads_other_keys", test_threads_other_keys},
        {"memory_hit_speed", test_memory_hit_speed},
    };
    return run_tests(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
