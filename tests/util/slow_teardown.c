/* A preload for test_server.sh: `kjit serve`'s teardown (after its loop has
 * ended) made long enough for a test to send it signals there. It wraps
 * uv_loop_close, which the server calls only then: a line on stderr, then
 * a pause of SLOW_TEARDOWN_MS (default 2000) before the real call. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

int uv_loop_close(uv_loop_t *loop)
{
    static const char line[] = "slow_teardown: in the teardown\n";
    (void)!write(2, line, sizeof line - 1);
    const char *ms = getenv("SLOW_TEARDOWN_MS");
    const long n = ms ? atol(ms) : 2000;
    struct timespec ts = {n / 1000, (n % 1000) * 1000000L};
    while (nanosleep(&ts, &ts)) {
    }
    int (*real)(uv_loop_t *) = (int (*)(uv_loop_t *))dlsym(RTLD_NEXT, "uv_loop_close");
    return real ? real(loop) : UV_ENOSYS;
}
