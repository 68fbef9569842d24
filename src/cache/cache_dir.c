/* The cache directory: where it is, whether it can be trusted, the per-key
 * lock files, the size cap, and the `kjit cache ls|verify|clear` walks.
 * Everything after the check works relative to the checked directory's fd,
 * so a path swapped afterwards cannot redirect it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* F_OFD_SETLK, and the POSIX 2008 *at() calls under -std=c11 */
#endif
#include "cache/cache_internal.h"
#include "core/error.h"
#include "tune/tune_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int kjit__cache_resolve_dir(const char *dir, char **out)
{
    const char *base, *suffix = "";
    if (dir)
        base = dir;
    else if ((base = env("KJIT_CACHE_DIR")))
        ;
    else if ((base = env("XDG_CACHE_HOME")) && base[0] == '/') /* relative: ignored, as the XDG spec says */
        suffix = "/kjit";
    else if ((base = env("HOME")))
        suffix = "/.cache/kjit";
    else if (env("XDG_CACHE_HOME"))
        return kjit__fail(KJIT_EINVAL, "no cache directory: KJIT_CACHE_DIR and HOME are unset and "
                                       "XDG_CACHE_HOME is relative (ignored, as the XDG spec says); "
                                       "set KJIT_CACHE_DIR");
    else
        return kjit__fail(KJIT_EINVAL, "no cache directory: KJIT_CACHE_DIR, XDG_CACHE_HOME and HOME "
                                       "are all unset; set KJIT_CACHE_DIR");
    /* A trailing slash would make open() follow a final symlink despite
     * O_NOFOLLOW. */
    size_t n = strlen(base);
    while (n > 1 && base[n - 1] == '/')
        n--;
    if (n == 1 && base[0] == '/' && *suffix)
        n = 0;
    /* A relative name is made absolute against the working directory now
     * (not resolved: a symlink in it stays one), so what the context reports
     * names the same directory from any other process, e.g. to a client
     * that asks whether a server shares its cache. */
    char *cwd = NULL;
    if (base[0] != '/' && !(cwd = getcwd(NULL, 0)))
        return kjit__fail(errno == ENOMEM ? KJIT_ENOMEM : KJIT_EIO,
                          "cache directory '%s' is relative and the working directory is unknown: %s", base,
                          strerror(errno));
    const size_t nc = cwd ? strlen(cwd) + (cwd[1] != '\0') : 0; /* "/" + name, or "/dir" + "/" + name */
    char *p = malloc(nc + n + strlen(suffix) + 1);
    if (!p) {
        free(cwd);
        return kjit__fail(KJIT_ENOMEM, "no memory for the cache directory name");
    }
    if (cwd) {
        strcpy(p, cwd);
        if (cwd[1] != '\0') p[nc - 1] = '/';
    }
    memcpy(p + nc, base, n);
    strcpy(p + nc + n, suffix);
    free(cwd);
    *out = p;
    return KJIT_OK;
}

/* mkdir -p: what it creates is 0700; parents that exist are left as they
 * are. On failure the directories this call made are removed again (a path
 * too long for the system failed only after making its first 4 KB). */
static int mkdir_p(const char *path)
{
    const size_t len = strlen(path);
    char *p = strdup(path);
    unsigned char *made = calloc(len + 1, 1); /* made[i]: the component ending at i */
    if (!p || !made) {
        free(p);
        free(made);
        return kjit__fail(KJIT_ENOMEM, "no memory for the cache directory name");
    }
    int rc = KJIT_OK;
    for (size_t i = 1; i <= len; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        p[i] = '\0';
        struct stat st;
        /* mkdir's errno is the reason: the stat that follows (a directory
         * made by someone else, or a name mkdir may not see as existing,
         * such as one in a read-only parent) must not replace it. */
        made[i] = mkdir(p, 0700) == 0;
        const int e = errno;
        if (!made[i] && e != EEXIST && (stat(p, &st) < 0 || !S_ISDIR(st.st_mode))) {
            /* The component that failed, when it is not the directory itself. */
            const int whole = i == len;
            rc = kjit__fail(e == EACCES || e == EPERM || e == EROFS ? KJIT_EPERM : KJIT_EIO,
                            "cannot create cache directory %s%s%s%s: %s", path, whole ? "" : " (at ",
                            whole ? "" : p, whole ? "" : ")",
                            e == ENOTDIR ? "a directory on its path is a file" : e == ENAMETOOLONG
                                ? "the path is too long" : strerror(e));
            break;
        }
        p[i] = path[i];
    }
    /* Undo, deepest first (p is the path up to the failed component): each
     * made here is empty unless someone else has since put something in
     * it, and then rmdir leaves it. */
    for (size_t i = len; rc && i > 0; i--) {
        if (made[i]) {
            p[i] = '\0';
            (void)rmdir(p);
        }
    }
    free(made);
    free(p);
    return rc;
}

/* A cubin in the directory is code kjit will load and run: anyone who can
 * write there can run code as the user. */
static int check_dir(int fd, const char *path)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return kjit__fail(KJIT_EIO, "cannot stat cache directory %s: %s", path, strerror(errno));
    unsigned mode = (unsigned)st.st_mode & 07777;
    /* A sticky directory others can write to, owned by someone else or by
     * root, is a shared scratch space (/tmp): taking it away from the
     * others (chmod) or taking it over (chown) is not the fix, a directory
     * of one's own inside it is. (One of a user's own, e.g. a cache made
     * 1777 by mistake, gets the chmod below.) */
    if ((st.st_mode & 022) && (st.st_mode & S_ISVTX) && (st.st_uid != geteuid() || st.st_uid == 0)) {
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/') --n; /* "/tmp/" suggests /tmp/kjit-0, not /tmp//kjit-0 */
        return kjit__fail(KJIT_EPERM,
                          "cache directory %s (mode %04o, owner uid %u) is a shared directory others can "
                          "write to, who could plant code that kjit runs; name a directory of your own "
                          "inside it (--cache-dir, KJIT_CACHE_DIR or the context's cache_dir), e.g. "
                          "%.*s/kjit-%u",
                          path, mode, (unsigned)st.st_uid, (int)n, path, (unsigned)geteuid());
    }
    if (st.st_uid != geteuid())
        return kjit__fail(KJIT_EPERM,
                          "cache directory %s is owned by uid %u (mode %04o), not by you (uid %u): "
                          "kjit loads code from it, so it uses only a directory of your own; name "
                          "one (--cache-dir, KJIT_CACHE_DIR or the context's cache_dir), or chown "
                          "the directory",
                          path, (unsigned)st.st_uid, mode, (unsigned)geteuid());
    if (st.st_mode & 022)
        return kjit__fail(KJIT_EPERM,
                          "cache directory %s (owner uid %u) has mode %04o, writable by group or "
                          "others, who could plant code that kjit runs; fix: chmod go-w %s",
                          path, (unsigned)st.st_uid, mode, path);
    return KJIT_OK;
}

int kjit__cache_dir_open(const char *path, int create, int *dfd)
{
    int rc;
    if (create && (rc = mkdir_p(path)) != KJIT_OK)
        return rc;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
            return kjit__fail(KJIT_EPERM,
                              "cache directory %s is a symbolic link (owner uid %u, mode %04o): kjit "
                              "does not follow it, so the directory it checks is the one it uses; "
                              "name the real directory (--cache-dir, KJIT_CACHE_DIR or the context's "
                              "cache_dir)",
                              path, (unsigned)st.st_uid, (unsigned)st.st_mode & 07777);
        if (e == ENOENT)
            return kjit__fail(KJIT_ENOTFOUND, "cache directory %s does not exist", path);
        if (e == ENOTDIR && lstat(path, &st) != 0)
            return kjit__fail(KJIT_EPERM, "cache directory %s: a directory on its path is a file", path);
        if (e == ENOTDIR)
            return kjit__fail(KJIT_EPERM, "cache directory %s is not a directory", path);
        return kjit__fail(e == EACCES ? KJIT_EPERM : KJIT_EIO, "cannot open cache directory %s: %s",
                          path, strerror(e));
    }
    if ((rc = check_dir(fd, path)) != KJIT_OK) {
        close(fd);
        return rc;
    }
    *dfd = fd;
    return KJIT_OK;
}

int kjit__cache_dir_check(const char *path)
{
    int dfd, rc = kjit__cache_dir_open(path, 0, &dfd);
    if (rc == KJIT_OK)
        close(dfd);
    return rc;
}

/* No ownership check here: inside the checked 0700 directory only its owner
 * can have made "locks"; O_NOFOLLOW still refuses a link. */
int kjit__cache_locks_open(int dfd, const char *path)
{
    if (mkdirat(dfd, "locks", 0700) < 0 && errno != EEXIST) {
        kjit__log("cache: cannot create %s/locks: %s; builds will not be shared between processes",
                  path, strerror(errno));
        return -1;
    }
    int fd = openat(dfd, "locks", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        kjit__log("cache: cannot open %s/locks: %s; builds will not be shared between processes", path,
                  strerror(errno));
        return -1;
    }
    return fd;
}

/* Seconds on CLOCK_MONOTONIC. */
static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Releases fd's OFD lock, then closes fd. A close alone does not release
 * it while a copy of the descriptor lives on: a child forked meanwhile
 * (O_CLOEXEC acts at exec, not at fork) shares the open file and its lock
 * until it exits, and a waiter would poll until its deadline. */
int kjit__ofd_unlock_close(int fd)
{
    struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET};
    (void)fcntl(fd, F_OFD_SETLK, &fl);
    return close(fd);
}

/* Takes fd's write lock, polling until deadline (CLOCK_MONOTONIC seconds):
 * 0, or an errno value (EAGAIN once the deadline has passed). F_OFD_SETLKW
 * would wait without a bound. The poll starts at 0.5 ms and doubles to 20
 * ms: a waiter sees the holder's entry at most that late. */
static int lock_until(int fd, double deadline)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    long pause_ns = 500000;
    for (;;) {
        if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
            return 0;
        if (errno != EAGAIN && errno != EACCES && errno != EINTR)
            return errno;
        if (mono_s() >= deadline)
            return EAGAIN;
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        pause_ns = pause_ns < 10000000 ? 2 * pause_ns : 20000000;
    }
}

int kjit__cache_lock(int lockdfd, const char *dir, const char *hex, double wait_s)
{
    const double deadline = mono_s() + wait_s;
    char name[48];
    snprintf(name, sizeof name, "%s.lock", hex);
    /* Each pass that fails the inode check saw a holder remove the file; the
     * bound only guards against a directory that keeps changing under us. */
    for (int attempt = 0; attempt < 1000; attempt++) {
        int fd = openat(lockdfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            kjit__log("cache: cannot open lock %s/locks/%s: %s; building unlocked", dir, name,
                      strerror(errno));
            return -1;
        }
        /* OFD locks belong to this open file, not to the process: two threads
         * (or two caches) of one process exclude each other too, and the
         * kernel drops the lock when a killed holder's files are closed. */
        int r = lock_until(fd, deadline);
        if (r == EAGAIN) {
            kjit__log("cache: %s/locks/%s still held after %.0f s (a build stopped or hung in another "
                      "process?); building unlocked", dir, name, wait_s);
            close(fd);
            return -1;
        }
        if (r) {
            kjit__log("cache: cannot lock %s/locks/%s: %s; building unlocked", dir, name, strerror(r));
            close(fd);
            return -1;
        }
        struct stat held, named;
        if (fstat(fd, &held) == 0 && fstatat(lockdfd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
            held.st_dev == named.st_dev && held.st_ino == named.st_ino)
            return fd;
        kjit__ofd_unlock_close(fd);
    }
    kjit__log("cache: lock %s/locks/%s keeps being replaced; building unlocked", dir, name);
    return -1;
}

void kjit__cache_unlock(int lockdfd, const char *hex, int fd)
{
    char name[48];
    snprintf(name, sizeof name, "%s.lock", hex);
    /* Unlink before unlocking: whoever locks the old inode next sees the
     * name gone (kjit__cache_lock's inode check) and retries. */
    unlinkat(lockdfd, name, 0);
    kjit__ofd_unlock_close(fd);
}

/* ---- walks ---- */

typedef struct item {
    char *name;
    struct stat st;
    int temp;
    int owned; /* a temp file or a name kjit writes (not just any *.cubin) */
} item;

static int is_entry_name(const char *name)
{
    size_t n = strlen(name);
    return name[0] != '.' && n > 6 && strcmp(name + n - 6, ".cubin") == 0;
}

/* The names kjit's writers give their temp files, and no others (a file of
 * the user's that happens to start with ".tmp." is not kjit's to remove):
 * ".tmp.<label>.<6 letters or digits>", the label an entry's (letters,
 * digits, '_' and '-', at most KJIT__LABEL_MAX: cache_file.c's temp_name)
 * or the tuning file's (tune_file.c, mkstemp's suffix). */
static int is_temp_name(const char *name)
{
    const size_t np = strlen(KJIT__TMP_PREFIX), n = strlen(name);
    if (n < np + 7 || strncmp(name, KJIT__TMP_PREFIX, np) != 0 || name[n - 7] != '.')
        return 0;
    for (size_t i = n - 6; i < n; i++)
        if (!kjit__cache_label_char(name[i]) || name[i] == '_' || name[i] == '-')
            return 0;
    const char *lab = name + np;
    const size_t ln = n - 7 - np;
    if ((ln == strlen(KJIT_TUNE_FILE) && strncmp(lab, KJIT_TUNE_FILE, ln) == 0) ||
        (ln == strlen(KJIT_TUNE_DAMAGED) && strncmp(lab, KJIT_TUNE_DAMAGED, ln) == 0))
        return 1;
    if (ln > KJIT__LABEL_MAX)
        return 0;
    for (size_t i = 0; i < ln; i++)
        if (!kjit__cache_label_char(lab[i]))
            return 0;
    return 1;
}

/* A lock file's name: "<32 hex>.lock" (kjit__cache_lock). */
static int is_lock_name(const char *name)
{
    kjit_cache_key key;
    return strlen(name) == 37 && strcmp(name + 32, ".lock") == 0 && kjit__cache_parse_hex(name, &key);
}

/* A temp file left by a writer that is gone: no one holds its lock (every
 * writer holds one from its create to its rename, kjit__entry_publish), and
 * its mtime is more than KJIT__TMP_STALE_S from now either way. The age
 * alone would take a stopped writer's file, or a live one's on a file
 * system whose clock runs behind; the lock alone, a file whose writer has
 * created it and not yet locked it. */
static int stale(int dfd, const char *name, const struct stat *st, time_t now)
{
    if (st->st_mtime >= now - KJIT__TMP_STALE_S && st->st_mtime <= now + KJIT__TMP_STALE_S)
        return 0;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) /* gone; else a link or a file we cannot read: no writer's (they make regular 0600 files) */
        return errno != ENOENT;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) {
        /* No OFD locks on this file system: its writers hold none either,
         * so the age alone, and only a past one (a clock ahead of the file
         * system's would take live writes). */
        close(fd);
        return st->st_mtime < now - KJIT__TMP_STALE_S;
    }
    close(fd);
    return fl.l_type == F_UNLCK;
}

static void free_items(item *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].name);
    free(v);
}

/* Collects the entries and temp files of dfd with their lstat. Files that
 * vanish meanwhile (another process evicting or clearing) are skipped.
 * Returns 0, or an errno value. */
static int read_items(int dfd, item **out, size_t *n_out)
{
    /* A fresh open file description: a dup would share dfd's offset. */
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return e;
    }
    item *v = NULL;
    size_t n = 0, cap = 0;
    int err = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            err = errno;
            break;
        }
        int temp = is_temp_name(de->d_name);
        if (!temp && !is_entry_name(de->d_name))
            continue;
        struct stat st;
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        /* A directory of a temp file's name is no writer's and cannot be
         * removed like one: listed as not kjit's and left alone (a file or
         * link of such a name that no writer holds is a leftover). */
        temp = temp && !S_ISDIR(st.st_mode);
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            item *nv = realloc(v, ncap * sizeof *nv);
            if (!nv) {
                err = ENOMEM;
                break;
            }
            v = nv;
            cap = ncap;
        }
        if (!(v[n].name = strdup(de->d_name))) {
            err = ENOMEM;
            break;
        }
        v[n].st = st;
        v[n].temp = temp;
        v[n].owned = temp || kjit__cache_is_entry_name(de->d_name);
        n++;
    }
    closedir(d);
    if (err) {
        free_items(v, n);
        return err;
    }
    *out = v;
    *n_out = n;
    return 0;
}

static int by_mtime(const void *a, const void *b)
{
    const item *x = a, *y = b;
    if (x->st.st_mtim.tv_sec != y->st.st_mtim.tv_sec)
        return x->st.st_mtim.tv_sec < y->st.st_mtim.tv_sec ? -1 : 1;
    if (x->st.st_mtim.tv_nsec != y->st.st_mtim.tv_nsec)
        return x->st.st_mtim.tv_nsec < y->st.st_mtim.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const item *)a)->name, ((const item *)b)->name);
}

int kjit__cache_scan(int dfd, const char *dir, int tidy, uint64_t max_bytes, const char *keep, kjit__scan *out)
{
    item *v;
    size_t n;
    int err = read_items(dfd, &v, &n);
    if (err) {
        kjit__log("cache: cannot scan %s: %s", dir, strerror(err));
        return -1;
    }
    time_t now = time(NULL);
    kjit__scan s = {0, 0, 0, 0};
    size_t m = 0; /* regular entries, compacted to the front of v */
    for (size_t i = 0; i < n; i++) {
        if (v[i].temp) {
            if (tidy && S_ISREG(v[i].st.st_mode) && stale(dfd, v[i].name, &v[i].st, now) &&
                unlinkat(dfd, v[i].name, 0) == 0)
                kjit__log("cache: removed %s/%s, left by a writer killed mid-write", dir, v[i].name);
            free(v[i].name);
        } else if (!S_ISREG(v[i].st.st_mode) || !v[i].owned) {
            free(v[i].name);
        } else if ((uint64_t)v[i].st.st_size > KJIT__ENTRY_MAX) {
            /* Larger than any entry the format allows: damaged. Its bytes
             * must not push good entries out under the cap; a tidying scan
             * removes it (a reader would refuse it anyway). */
            if (tidy && kjit__unlink_same(dfd, v[i].name, &v[i].st)) { /* not a good entry renamed over it since */
                s.bad++;
                kjit__log("cache: removed %s/%s: %lld bytes, more than an entry can hold", dir, v[i].name,
                          (long long)v[i].st.st_size);
            }
            free(v[i].name);
        } else {
            s.entries++;
            s.bytes += (uint64_t)v[i].st.st_size;
            v[m++] = v[i];
        }
    }
    if (tidy && s.bytes > max_bytes) {
        /* Least recently used first: a disk hit refreshes the mtime. */
        qsort(v, m, sizeof *v, by_mtime);
        for (size_t i = 0; i < m && s.bytes > max_bytes; i++) {
            if (keep && strcmp(v[i].name, keep) == 0)
                continue;
            int r = unlinkat(dfd, v[i].name, 0);
            /* ENOENT: another process evicted it first; it is gone either way. */
            if (r == 0 || errno == ENOENT) {
                s.entries--;
                s.bytes -= (uint64_t)v[i].st.st_size;
                s.evicted += r == 0;
            } else {
                kjit__log("cache: cannot evict %s/%s: %s", dir, v[i].name, strerror(errno));
            }
        }
    }
    free_items(v, m);
    *out = s;
    return 0;
}

/* Opens an existing cache directory and reads its items: what listing and
 * clearing share. On success the caller frees path, closes dfd and frees the
 * items; on failure nothing is left open and the message names fname. */
static int open_items(const char *fname, const char *dir, char **path, int *dfd, item **v, size_t *n)
{
    if (dir && !*dir)
        return kjit__fail(KJIT_EINVAL, "%s: dir is \"\" (a memory-only cache has no directory)", fname);
    int rc = kjit__cache_resolve_dir(dir, path);
    if (rc != KJIT_OK)
        return rc;
    if ((rc = kjit__cache_dir_open(*path, 0, dfd)) != KJIT_OK) {
        free(*path);
        return rc;
    }
    int err = read_items(*dfd, v, n);
    if (err) {
        rc = kjit__fail(err == ENOMEM ? KJIT_ENOMEM : KJIT_EIO, "cannot list cache directory %s: %s", *path,
                        strerror(err));
        close(*dfd);
        free(*path);
        return rc;
    }
    return KJIT_OK;
}

int kjit__cache_list(const char *dir, int verify, kjit_cache_visit_fn fn, void *arg, int *n_bad)
{
    kjit__clear_error();
    if (!fn || !n_bad)
        return kjit__fail(KJIT_EINVAL, "kjit__cache_list: %s is NULL", fn ? "n_bad" : "fn");
    char *path;
    int dfd;
    item *v;
    size_t n;
    int rc = open_items("kjit__cache_list", dir, &path, &dfd, &v, &n);
    if (rc != KJIT_OK)
        return rc;
    if (n) /* v is NULL for an empty directory */
        qsort(v, n, sizeof *v, by_name);
    time_t now = time(NULL);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        kjit_cache_entry_info e = {v[i].name, (uint64_t)v[i].st.st_size, (int64_t)v[i].st.st_mtime,
                                   1, NULL, v[i].temp, S_ISREG(v[i].st.st_mode), v[i].owned,
                                   !v[i].temp && (uint64_t)v[i].st.st_size > KJIT__ENTRY_MAX};
        char why[256];
        kjit_cache_key key;
        if (verify && v[i].temp) {
            if (stale(dfd, v[i].name, &v[i].st, now)) {
                e.ok = 0;
                e.problem = v[i].st.st_mtime > now
                                ? "temp file dated more than 10 minutes in the future that no writer holds, left "
                                  "by a writer killed mid-write (or a clock set back)"
                                : "temp file older than 10 minutes that no writer holds, left by a writer killed "
                                  "mid-write";
            }
        } else if (verify && is_temp_name(v[i].name)) {
            e.ok = 0; /* named like a temp file, and a directory */
            e.problem = "a directory, so not a temp file of kjit's: left alone by clear and eviction (remove it "
                        "by hand if nothing else needs it: verify fails while it is there)";
        } else if (verify && (!v[i].owned || !kjit__cache_parse_name(v[i].name, &key))) {
            e.ok = 0;
            e.problem = "file name is not <label>.<32 hex key>.<arch>.v<format>.cubin: not kjit's, left alone by "
                        "clear and eviction (remove it by hand if nothing else needs it: verify fails while it "
                        "is there)";
        } else if (verify) {
            kjit__image img = {NULL, NULL, 0};
            struct stat st;
            int r = kjit__entry_load(dfd, v[i].name, key, 0, &img, &st, why, sizeof why);
            free(img.lowered);
            free(img.image);
            if (r == KJIT_ENOTFOUND) /* evicted or cleared since the walk */
                continue;
            if (r == KJIT_ENOMEM) {
                /* Not the entry's fault: the check could not be made, so
                 * the verify fails as a whole rather than call it bad. */
                rc = kjit__fail(KJIT_ENOMEM, "cannot verify %s/%s: %s", path, v[i].name, why);
                break;
            }
            if (r != KJIT_OK) {
                e.ok = 0;
                e.problem = why;
            }
        }
        bad += !e.ok;
        fn(arg, &e);
    }
    /* The lock directory: something else in its place leaves builds
     * unshared between processes. */
    struct stat ls;
    if (verify && rc == KJIT_OK && fstatat(dfd, "locks", &ls, AT_SYMLINK_NOFOLLOW) == 0) {
        int lfd = S_ISDIR(ls.st_mode) ? openat(dfd, "locks", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        if (lfd >= 0) {
            close(lfd);
        } else {
            kjit_cache_entry_info e = {"locks", (uint64_t)ls.st_size, (int64_t)ls.st_mtime, 0,
                                       S_ISDIR(ls.st_mode)
                                           ? "the lock directory cannot be opened: builds are not shared between "
                                             "processes (each may compile the same kernel)"
                                           : "not a directory where kjit keeps its build locks: builds are not "
                                             "shared between processes (each may compile the same kernel); "
                                             "kjit cache clear removes it",
                                       0, S_ISREG(ls.st_mode), 1, 0}; /* kjit's name, though not its kind */
            bad++;
            fn(arg, &e);
        }
    }
    free_items(v, n);
    close(dfd);
    free(path);
    *n_bad = bad;
    return rc;
}

/* Removes the lock files no one holds, and returns how many files it
 * removed. One that is held belongs to a build in progress; removing it
 * would let a second builder in. Only kjit's lock names are touched. */
static uint64_t clear_locks(int dfd, const char *path)
{
    uint64_t count = 0;
    int lfd = openat(dfd, "locks", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (lfd < 0) {
        struct stat st;
        /* A file, FIFO or link in the lock directory's place: removed, so
         * the next open makes the directory again (a directory it cannot
         * open is left to its owner). */
        if (errno != ENOENT && fstatat(dfd, "locks", &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) &&
            kjit__unlink_same(dfd, "locks", &st)) {
            kjit__log("cache: removed %s/locks, which was not a directory", path);
            count++;
        } else if (errno != ENOENT) {
            kjit__log("cache: cannot open %s/locks: %s", path, strerror(errno));
        }
        return count;
    }
    DIR *d = fdopendir(lfd);
    if (!d) {
        close(lfd);
        return count;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!is_lock_name(de->d_name))
            continue;
        int fd = openat(lfd, de->d_name, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
            continue;
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        struct stat held;
        if (fcntl(fd, F_OFD_SETLK, &fl) == 0 && fstat(fd, &held) == 0 && kjit__unlink_same(lfd, de->d_name, &held))
            count++;
        kjit__ofd_unlock_close(fd);
    }
    closedir(d);
    return count;
}

int kjit__cache_clear(const char *dir, uint64_t *removed, uint64_t *spared)
{
    kjit__clear_error();
    if (!removed)
        return kjit__fail(KJIT_EINVAL, "kjit__cache_clear: removed is NULL");
    char *path;
    int dfd;
    item *v;
    size_t n;
    int rc = open_items("kjit__cache_clear", dir, &path, &dfd, &v, &n);
    if (rc != KJIT_OK)
        return rc;
    uint64_t count = 0, kept = 0;
    const time_t now = time(NULL);
    for (size_t i = 0; i < n; i++) {
        /* A directory named like an entry, or a *.cubin of a name kjit
         * does not write, is not kjit's: left alone. A temp file its
         * writer holds, or younger than the stale age, is a write in
         * progress (its writer renames it next, and would fail): spared,
         * as held locks are. */
        if (S_ISDIR(v[i].st.st_mode) || !v[i].owned)
            continue;
        if (v[i].temp && !stale(dfd, v[i].name, &v[i].st, now)) {
            kept++;
            continue;
        }
        if (unlinkat(dfd, v[i].name, 0) == 0)
            count++;
        else if (errno != ENOENT && rc == KJIT_OK)
            rc = kjit__fail(KJIT_EIO, "cannot remove %s/%s: %s", path, v[i].name, strerror(errno));
    }
    count += clear_locks(dfd, path);
    free_items(v, n);
    close(dfd);
    free(path);
    *removed = count; /* what was removed, also when something could not be */
    if (spared)
        *spared = kept;
    return rc;
}
