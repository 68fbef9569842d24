/* A preload for test_cache_lock.sh: wraps renameat, and before the real
 * call probes whether a kjit temp file (".tmp.*") being renamed is held
 * under an OFD write lock, from an open file description of its own (OFD
 * locks conflict across descriptions, also within one process). Appends
 * "held" or "unheld" and the name, a line each, to $RENAME_PROBE_OUT. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
    const char *base = strrchr(oldpath, '/');
    base = base ? base + 1 : oldpath;
    const char *out = getenv("RENAME_PROBE_OUT");
    if (out && strncmp(base, ".tmp.", 5) == 0) {
        int held = 0;
        const int fd = openat(olddirfd, oldpath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
            held = fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
            close(fd);
        }
        FILE *f = fopen(out, "a");
        if (f) {
            fprintf(f, "%s %s\n", held ? "held" : "unheld", base);
            fclose(f);
        }
    }
    int (*real)(int, const char *, int, const char *) =
        (int (*)(int, const char *, int, const char *))dlsym(RTLD_NEXT, "renameat");
    return real ? real(olddirfd, oldpath, newdirfd, newpath) : -1;
}
