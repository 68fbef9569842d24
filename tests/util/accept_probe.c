/* A preload for test_server_accept.sh: makes `kjit serve`'s accepts fail on
 * cue, each cue a file the test creates while the server is stopped.
 * $ACCEPT_ARM: while that file exists, accept4 fails with ENOBUFS (the
 * connection stays in the backlog), $ACCEPT_FAILS times in all (default 2).
 * $PIPE_ARM: while that file exists, the 1st and 3rd calls of uv_pipe_init
 * fail with UV_ENOMEM and the 2nd succeeds (a connection's handle, the
 * spare that drops it, the next connection's handle: two connections out of
 * memory in one turn of the loop), then every call succeeds. Each failure
 * is logged as a line ("accept-failed", "pipe-init-failed") to $PROBE_OUT.
 * $LISTEN_DELAY_MS: listen() waits that long first (a server stopped
 * between its bind and its listen, as a loaded host may stop it).
 * $LISTEN_FAIL set: listen() fails with EADDRINUSE. $RENAME_FAIL set: a
 * rename of kjit serve's temporary socket name (".kjit-serve-*") fails with
 * EACCES. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

static void note(const char *what)
{
    const char *out = getenv("PROBE_OUT");
    FILE *f = out ? fopen(out, "a") : NULL;
    if (f) {
        fprintf(f, "%s\n", what);
        fclose(f);
    }
}

static int armed(const char *var)
{
    const char *path = getenv(var);
    return path && access(path, F_OK) == 0;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    static atomic_int failed;
    const char *n = getenv("ACCEPT_FAILS");
    if (armed("ACCEPT_ARM") && atomic_fetch_add(&failed, 1) < (n ? atoi(n) : 2)) {
        note("accept-failed");
        errno = ENOBUFS;
        return -1;
    }
    int (*real)(int, struct sockaddr *, socklen_t *, int) =
        (int (*)(int, struct sockaddr *, socklen_t *, int))dlsym(RTLD_NEXT, "accept4");
    return real ? real(fd, addr, len, flags) : -1;
}

int uv_pipe_init(uv_loop_t *loop, uv_pipe_t *handle, int ipc)
{
    static atomic_int calls;
    if (armed("PIPE_ARM")) {
        const int n = atomic_fetch_add(&calls, 1);
        if (n == 0 || n == 2) {
            note("pipe-init-failed");
            return UV_ENOMEM;
        }
    }
    int (*real)(uv_loop_t *, uv_pipe_t *, int) = (int (*)(uv_loop_t *, uv_pipe_t *, int))dlsym(RTLD_NEXT, "uv_pipe_init");
    return real ? real(loop, handle, ipc) : UV_ENOSYS;
}

int listen(int fd, int backlog)
{
    const char *ms = getenv("LISTEN_DELAY_MS");
    if (ms && atoi(ms) > 0) usleep((useconds_t)atoi(ms) * 1000);
    if (getenv("LISTEN_FAIL")) {
        errno = EADDRINUSE;
        return -1;
    }
    int (*real)(int, int) = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
    return real ? real(fd, backlog) : -1;
}

int rename(const char *from, const char *to)
{
    const char *base = strrchr(from, '/');
    if (getenv("RENAME_FAIL") && strncmp(base ? base + 1 : from, ".kjit-serve-", 12) == 0) {
        errno = EACCES;
        return -1;
    }
    int (*real)(const char *, const char *) = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    return real ? real(from, to) : -1;
}
