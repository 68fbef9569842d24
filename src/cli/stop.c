/* SIGINT and SIGTERM during a command's long work (prewarm, tune). libnvrtc
 * installs handlers of its own that call exit(4) from whichever thread the
 * signal lands on while other threads are inside nvrtcCompileProgram: the
 * process then ended with status 4 and no message, or crashed. Here both
 * signals are blocked in the calling thread before any other thread exists
 * (every thread it, the driver and NVRTC start inherits the mask), and one
 * thread waits for them: it says what happened and ends the process by the
 * signal itself (default action), so the parent sees 128 + the number.
 * Cache entries are published by an atomic rename, so nothing half-written
 * is left. A signal the process ignored at start stays ignored. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static sigset_t watched;
static const char *watched_cmd;

static void *waiter(void *arg)
{
    (void)arg;
    int sig = 0;
    if (sigwait(&watched, &sig) != 0) return NULL;
    /* Past here a cancel (kjit_cli_stop_end) must not swallow the signal:
     * the join then waits for the process to end by it. */
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    /* On a terminal the line starts below the progress bar; in a log no
     * blank line. */
    fprintf(stderr, "%skjit %s: %s: stopping; what is already in the cache stays there\n",
            isatty(STDERR_FILENO) ? "\n" : "", watched_cmd, sig == SIGINT ? "SIGINT" : "SIGTERM");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
    _exit(128 + sig); /* not reached: the default action ends the process */
}

int kjit_cli_stop_begin(kjit_cli_stop *s, const char *cmd)
{
    static const int sigs[2] = {SIGINT, SIGTERM};
    memset(s, 0, sizeof *s);
    sigemptyset(&watched);
    for (int i = 0; i < 2; ++i) {
        struct sigaction cur;
        if (sigaction(sigs[i], NULL, &cur) == 0 && cur.sa_handler == SIG_IGN) continue;
        sigaddset(&watched, sigs[i]);
    }
    watched_cmd = cmd;
    if (pthread_sigmask(SIG_BLOCK, &watched, &s->old)) return -1;
    s->blocked = 1;
    if (pthread_create(&s->thread, NULL, waiter, NULL)) return -1;
    s->started = 1;
    return 0;
}

void kjit_cli_stop_end(kjit_cli_stop *s)
{
    if (s->started) {
        pthread_cancel(s->thread); /* sigwait is a cancellation point */
        pthread_join(s->thread, NULL);
    }
    if (s->blocked) pthread_sigmask(SIG_SETMASK, &s->old, NULL);
    s->started = s->blocked = 0;
}
