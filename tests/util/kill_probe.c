/* A preload for test_cache_kill.sh: wraps fsync and, when $KILL_PROBE is
 * set, kills the process (SIGKILL) at its first fsync of a regular file:
 * a cache writer killed with its entry's bytes written and not yet named. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int fsync(int fd)
{
    struct stat st;
    if (getenv("KILL_PROBE") && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        raise(SIGKILL);
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real ? real(fd) : -1;
}
