/* A preload for test_cache_nolock.sh: a file system without OFD locks.
 * fcntl's F_OFD_GETLK and F_OFD_SETLK fail with EINVAL, as on a file system
 * that has none; every other command goes to the real fcntl. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>

static int pass(const char *sym, int fd, int cmd, void *arg)
{
    if (cmd == F_OFD_GETLK || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW) {
        errno = EINVAL;
        return -1;
    }
    int (*real)(int, int, ...) = (int (*)(int, int, ...))dlsym(RTLD_NEXT, sym);
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    return real(fd, cmd, arg);
}

int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return pass("fcntl", fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return pass("fcntl64", fd, cmd, arg);
}
