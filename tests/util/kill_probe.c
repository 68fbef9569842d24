/* A preload for test_cache_kill.sh. Wraps fsync: when $KILL_PROBE is set,
 * kills the process (SIGKILL) at its first fsync of a regular file (a
 * cache writer killed with its entry's bytes written and not yet named);
 * when $FSYNC_FAIL_FIRST is set, that first fsync fails with EIO instead.
 * Wraps linkat: when $LINK_FAIL is set, a link from /proc fails with
 * ENOENT (as without /proc mounted). When $PROBE_OUT is set, appends
 * "fsync" for each fsync of a regular file and "link NAME" for each
 * successful linkat, a line each, to that file: what shows that a writer
 * names its unnamed file, and writes it once. Wraps fdopendir (how the
 * cache lists its directory): logs "fdopendir" for each call; when
 * $LIST_FAIL_FROM is N, the N-th call and every later one fail with EIO (a
 * listing that fails at a chosen point, e.g. a prewarm's final check). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void note(const char *what, const char *name)
{
    const char *out = getenv("PROBE_OUT");
    FILE *f = out ? fopen(out, "a") : NULL;
    if (f) {
        fprintf(f, "%s%s%s\n", what, name ? " " : "", name ? name : "");
        fclose(f);
    }
}

int fsync(int fd)
{
    struct stat st;
    static atomic_int failed;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        if (getenv("KILL_PROBE"))
            raise(SIGKILL);
        if (getenv("FSYNC_FAIL_FIRST") && !atomic_exchange(&failed, 1)) {
            note("fsync-failed", NULL);
            errno = EIO;
            return -1;
        }
        note("fsync", NULL);
    }
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real ? real(fd) : -1;
}

int linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags)
{
    if (getenv("LINK_FAIL") && strncmp(oldpath, "/proc/", 6) == 0) {
        errno = ENOENT;
        return -1;
    }
    int (*real)(int, const char *, int, const char *, int) =
        (int (*)(int, const char *, int, const char *, int))dlsym(RTLD_NEXT, "linkat");
    const int rc = real ? real(olddirfd, oldpath, newdirfd, newpath, flags) : -1;
    if (rc == 0) {
        const char *base = strrchr(newpath, '/');
        note("link", base ? base + 1 : newpath);
    }
    return rc;
}

DIR *fdopendir(int fd)
{
    static atomic_long calls;
    const long n = atomic_fetch_add(&calls, 1) + 1;
    note("fdopendir", NULL);
    const char *from = getenv("LIST_FAIL_FROM");
    if (from && n >= atol(from)) {
        errno = EIO;
        return NULL;
    }
    DIR *(*real)(int) = (DIR * (*)(int)) dlsym(RTLD_NEXT, "fdopendir");
    return real ? real(fd) : NULL;
}
