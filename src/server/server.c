/* The server's life: start (context, socket, signals), serve, drain, stop.
 *
 * Stopping (SIGTERM, SIGINT, SIGHUP or `shutdown`): the listener closes and the
 * socket file goes at once, so no new client arrives; requests on open
 * connections are refused with "shutting_down"; compiles still queued are
 * cancelled (their waiters get "shutting_down"), jobs already running finish
 * and their waiters are answered; then each connection closes once its replies
 * are written (or after CLOSE_WAIT if its client stopped reading), and the
 * loop runs out of handles. A second signal ends the process at once (exit
 * status 128 + its number).
 *
 * The signals are blocked in every thread (the mask is set before the
 * server starts any) and read from a signalfd on the loop, not caught by
 * handlers: libnvrtc replaces the process's SIGINT and SIGTERM handlers
 * while a process's first compile runs (seen with strace), and its handler
 * exits the process from under the compiling worker (a crash, no reply, the
 * socket file left behind). A blocked signal waits for the loop whatever
 * handler is installed, but not through SIG_IGN, which that first compile
 * also sets for SIGINT: the server runs it at start-up. SIGHUP (its
 * terminal gone) stops it as SIGTERM does, unless the process started with
 * it ignored (nohup): then it stays ignored. SIGINT and SIGTERM stop it
 * even when ignored at start (a script's background job has SIGINT
 * ignored, and its `kill -INT` means stop). */
#include <errno.h>
#include <pthread.h>
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/error.h"
#include "core/remote.h"
#include "jit/compile.h"
#include "jit/nvrtc_api.h"
#include "server/server_internal.h"

#define SWEEP_MS 250
#define DRAIN_WRITE_MS 5000
/* How long the loop polls after a run's reply for the client's next request. */
#define LOOP_SPIN_US 1000
/* Done (op, hidden, dtype, arch) entries the compile memo keeps (jobs.c). */
#define MEMO_MAX_DEFAULT 8192

void kjit__server_config_init(kjit_server_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->max_clients = 256;
    cfg->max_pending = 64;
    cfg->idle_timeout_s = 300;
}

static void close_handle(uv_handle_t *h, int *open)
{
    if (*open) uv_close(h, NULL);
    *open = 0;
}

/* Ends the loop's last handles once nothing is in flight and no
 * connection is left. */
static void maybe_finish(kjit_server *s)
{
    if (s->draining && !s->jobs && !s->conns) {
        close_handle((uv_handle_t *)&s->sweep, &s->sweep_open);
        close_handle((uv_handle_t *)&s->sig_poll, &s->sig_open);
        kjit__gpu_close(s);
    }
}

void kjit__server_drain_check(kjit_server *s)
{
    if (!s->draining || s->jobs || s->in_drain_check) return;
    s->in_drain_check = 1;
    uint64_t now = uv_now(&s->loop);
    if (!s->drain_deadline) s->drain_deadline = now + DRAIN_WRITE_MS;
    for (kjit_conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        kjit__conn_drain(c, now >= s->drain_deadline);
    }
    s->in_drain_check = 0;
    maybe_finish(s);
}

void kjit__server_stop(kjit_server *s, const char *why)
{
    if (s->draining) return;
    s->draining = 1;
    fprintf(stderr, "kjit serve: %s: cancelling the compiles not started, finishing the %u job(s) in flight, then "
                    "exiting\n", why, s->jobs);
    kjit__jobs_cancel(s);
    kjit__kernel_cancel(s, NULL);
    kjit__listen_close(s);
    kjit__server_drain_check(s);
}

static const char *sig_name(int signum)
{
    return signum == SIGTERM ? "SIGTERM" : signum == SIGINT ? "SIGINT" : "SIGHUP";
}

/* The second signal ends the process at once, exit status 128 + its
 * number as a shell reports a death by it. Not by the signal's default
 * action: that would go through whatever handler libnvrtc has installed
 * at that moment (its handler calls exit(), which joins the compiling
 * worker's pool: a hang or a crash). _exit runs no exit handlers. */
static void die_by(int signum)
{
    fprintf(stderr, "kjit serve: %s while stopping: exiting now\n", sig_name(signum));
    _exit(128 + signum);
}

/* The number of a signal waiting in fd (read: taken), else 0. */
static int signal_pending(int fd)
{
    struct signalfd_siginfo si;
    return fd >= 0 && read(fd, &si, sizeof si) == (ssize_t)sizeof si ? (int)si.ssi_signo : 0;
}

/* The first signal after a `shutdown` request, in the loop or after it
 * (written from a signal handler too: whole lines, no formatting). */
static const char already_term[] =
    "kjit serve: SIGTERM: already stopping (a shutdown request); a second signal exits at once\n";
static const char already_intr[] =
    "kjit serve: SIGINT: already stopping (a shutdown request); a second signal exits at once\n";
static const char already_hup[] =
    "kjit serve: SIGHUP: already stopping (a shutdown request); a second signal exits at once\n";

static const char *already_of(int signum)
{
    return signum == SIGTERM ? already_term : signum == SIGINT ? already_intr : already_hup;
}

static void on_signal(uv_poll_t *h, int status, int events)
{
    kjit_server *s = h->data;
    (void)events;
    if (status < 0) return;
    for (int signum; (signum = signal_pending(s->sig_fd));) {
        /* A second signal: at once. The first after a `shutdown` request
         * (a service manager's stop) lets the drain go on. */
        if (s->signals++) die_by(signum);
        if (s->draining) fputs(already_of(signum), stderr);
        kjit__server_stop(s, sig_name(signum));
    }
}

/* The signals that stop the server, and which of them the process had
 * ignored when it started (e.g. SIGINT in a job a script runs in the
 * background, SIGHUP under nohup): left ignored in the teardown, where the
 * server's own handler takes the others. SIGHUP ignored at start is not
 * read at all. */
enum { N_STOP_SIGS = 3 };
static const int stop_sigs[N_STOP_SIGS] = {SIGTERM, SIGINT, SIGHUP};
static int ignored_at_start[N_STOP_SIGS];

/* The stop signals blocked in this thread (and so in every thread it
 * starts), *old the mask before; the fd that reads them. */
static int signals_block(sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    for (int i = 0; i < N_STOP_SIGS; ++i) {
        struct sigaction cur;
        ignored_at_start[i] = sigaction(stop_sigs[i], NULL, &cur) == 0 && cur.sa_handler == SIG_IGN;
        if (stop_sigs[i] != SIGHUP || !ignored_at_start[i]) sigaddset(&set, stop_sigs[i]);
    }
    pthread_sigmask(SIG_SETMASK, NULL, old); /* *old is valid even if blocking fails */
    if (pthread_sigmask(SIG_BLOCK, &set, old)) return -1;
    return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

/* Whether a signal in the teardown is the first after a `shutdown`
 * request (the stop goes on, as in the loop) or a second one (exit now). */
static volatile sig_atomic_t late_grace;

/* A signal during the teardown, with only async-signal-safe calls: as in
 * the loop, the first after a `shutdown` request lets the stop go on, a
 * second ends the process at once (die_by). */
static void on_late_signal(int signum)
{
    static const char term[] = "kjit serve: SIGTERM during the teardown: exiting now\n";
    static const char intr[] = "kjit serve: SIGINT during the teardown: exiting now\n";
    static const char hup[] = "kjit serve: SIGHUP during the teardown: exiting now\n";
    if (late_grace) { /* the other stop signals are blocked here (sa_mask) */
        const int saved = errno;
        late_grace = 0;
        const char *m = already_of(signum);
        (void)!write(2, m, strlen(m)); /* strlen is async-signal-safe */
        errno = saved;
        return;
    }
    if (signum == SIGTERM) (void)!write(2, term, sizeof term - 1);
    else if (signum == SIGINT) (void)!write(2, intr, sizeof intr - 1);
    else (void)!write(2, hup, sizeof hup - 1);
    _exit(128 + signum);
}

/* The loop has ended: the signals that came since count as in the loop
 * (grace: the stop came from a `shutdown` request and no signal has come
 * yet, so the first is let go); else the fd closes and the caller's mask
 * comes back, before the teardown (joining the lane, the context), so a
 * hung teardown can still be stopped: by our handler, exit status 128 +
 * the signal's number as for a second signal, not by the handler libnvrtc
 * may have left (it calls exit(), which runs the exit handlers from inside
 * the signal). A signal the process ignored at start stays ignored. */
static void signals_restore(int fd, const sigset_t *old, int grace)
{
    if (fd >= 0) {
        for (int signum; (signum = signal_pending(fd));) {
            if (!grace) die_by(signum);
            grace = 0;
            fputs(already_of(signum), stderr);
        }
        close(fd);
    }
    late_grace = grace;
    for (int i = 0; i < N_STOP_SIGS; ++i) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = ignored_at_start[i] ? SIG_IGN : on_late_signal;
        /* No stop signal interrupts the handler (two signals must not
         * both take the grace), and the teardown's calls resume after it. */
        sigemptyset(&sa.sa_mask);
        for (int k = 0; k < N_STOP_SIGS; ++k) sigaddset(&sa.sa_mask, stop_sigs[k]);
        sa.sa_flags = SA_RESTART;
        sigaction(stop_sigs[i], &sa, NULL);
    }
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

static void on_sweep(uv_timer_t *t)
{
    kjit_server *s = t->data;
    kjit__conn_sweep(s);
    kjit__server_drain_check(s);
}

static int start(kjit_server *s)
{
    kjit_ctx_options o;
    kjit_ctx_options_init(&o);
    o.cache_dir = s->cfg.cache_dir;
    /* A run's bad index skips its rows and fails the run (a flag read
     * after it), instead of reading outside a client's table. */
    o.index_check = KJIT_INDEX_CHECK_ASYNC;
    /* Device 0 when there is one (run and tune need it); compile-only otherwise. */
    int rc = kjit_ctx_create(&s->ctx, &o);
    if (rc) return rc;
    /* This is where compiles happen, even with KJIT_SERVER set (perhaps to
     * this very socket). */
    kjit__remote_off(s->ctx);
    if ((rc = kjit__arch_parse(kjit_ctx_arch(s->ctx), &s->default_sm))) return rc;
    if ((rc = kjit__listen_open(s))) return rc;
    if (s->sig_fd < 0) return kjit__fail(KJIT_EIO, "signalfd for SIGTERM, SIGINT and SIGHUP failed");
    int r = uv_poll_init(&s->loop, &s->sig_poll, s->sig_fd);
    if (r) return kjit__fail(KJIT_EIO, "uv_poll_init (signals): %s", uv_strerror(r));
    s->sig_open = 1;
    s->sig_poll.data = s;
    if ((r = uv_poll_start(&s->sig_poll, UV_READABLE, on_signal)))
        return kjit__fail(KJIT_EIO, "uv_poll_start (signals): %s", uv_strerror(r));
    if ((r = uv_timer_init(&s->loop, &s->sweep))) return kjit__fail(KJIT_EIO, "uv_timer_init: %s", uv_strerror(r));
    s->sweep_open = 1;
    s->sweep.data = s;
    if ((r = uv_timer_start(&s->sweep, on_sweep, SWEEP_MS, SWEEP_MS)))
        return kjit__fail(KJIT_EIO, "uv_timer_start: %s", uv_strerror(r));
    return kjit_ctx_has_device(s->ctx) ? kjit__gpu_start(s) : KJIT_OK;
}

/* The loop: blocking in epoll, or polling around runs (server_internal.h). */
static void run_loop(kjit_server *s)
{
    for (;;) {
        const int hot = s->spin_us > 0 && kjit__now_us() < s->spin_until;
        if (!uv_run(&s->loop, hot ? UV_RUN_NOWAIT : UV_RUN_ONCE)) break;
    }
}

/* Descriptors the pool's compiles may open on top of those the started
 * server holds (the cache's entry, temp and lock files, NVRTC's own): a
 * floor, and 4 a thread beyond 8 threads. */
static long files_spare(unsigned long long pool)
{
    return 32 + (pool > 8 ? 4 * (long)(pool - 8) : 0);
}

/* The descriptors open now (/proc/self/fd), or 64 where it cannot be read. */
static long fds_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 64;
    long n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own */
}

/* Every client costs a descriptor: once started (listener, driver, NVRTC
 * and libuv open), raises the soft open-file limit to fit max_clients, and
 * where the hard limit does not allow it, serves fewer (and says so). Past
 * the limit an accept failed and the client saw a reset connection, with
 * nothing logged and no "busy" reply. */
static void fit_fd_limit(kjit_server *s, unsigned long long pool)
{
    kjit_server_config *cfg = &s->cfg;
    s->max_pipes = cfg->max_clients + BUSY_SLOTS;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY) return;
    const long held = fds_open() + files_spare(pool);
    const rlim_t want = (rlim_t)s->max_pipes + (rlim_t)held;
    if (rl.rlim_cur >= want) return;
    struct rlimit up = rl;
    up.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &up) == 0) rl = up;
    if (rl.rlim_cur >= want) return;
    /* The connections' room: clients first, then as many busy slots as
     * fit; at least one of each, past which the listener pauses (the
     * backlog waits) rather than meet EMFILE. */
    const long room = (long)rl.rlim_cur - held;
    const int fit = room > BUSY_SLOTS + 1 ? (int)(room - BUSY_SLOTS) : 1;
    s->max_pipes = room > fit + 1 ? (int)room : fit + 1;
    fprintf(stderr,
            "kjit serve: the open-file limit (%llu, ulimit -n) leaves room for %d clients, not --max-clients %d: "
            "serving %d at once (the rest are answered busy, %d at a time; more wait to be accepted)\n",
            (unsigned long long)rl.rlim_cur, fit, cfg->max_clients, fit, s->max_pipes - fit);
    cfg->max_clients = fit;
}

int kjit__server_run(const kjit_server_config *cfg)
{
    kjit__clear_error();
    if (!cfg || cfg->max_clients < 1 || cfg->max_pending < 1)
        return kjit__fail(KJIT_EINVAL, "kjit__server_run: bad config");
    if (!(cfg->idle_timeout_s == 0 || (cfg->idle_timeout_s >= 0.001 && cfg->idle_timeout_s <= 86400)))
        return kjit__fail(KJIT_EINVAL, "kjit__server_run: idle_timeout_s %g is not 0 or 0.001..86400 seconds",
                          cfg->idle_timeout_s);
    /* The environment's settings, refused by name before anything starts. */
    int run_graph;
    if (kjit__env_switch("KJIT_RUN_GRAPH", 1, &run_graph)) return KJIT_EINVAL;
    unsigned long long memo_max = MEMO_MAX_DEFAULT;
    if (kjit__env_whole("KJIT_SERVE_MEMO_MAX", 1, 1ULL << 30, &memo_max) < 0)
        return kjit__fail(KJIT_EINVAL,
                          "KJIT_SERVE_MEMO_MAX='%s' is not a whole number from 1 to %llu (unset it for the default, %d)",
                          getenv("KJIT_SERVE_MEMO_MAX"), 1ULL << 30, MEMO_MAX_DEFAULT);
    /* Read by the run loop's spin (clients fall back to their default on a
     * bad value; a server says so) and by libuv's pool, whose own reading
     * (atoi, 0 as 1, a cap) the server's window must match: only values
     * both read alike are taken. */
    unsigned long long spin = 0, pool = 0;
    if (kjit__env_whole("KJIT_SPIN_US", 0, 1000000, &spin) < 0)
        return kjit__fail(KJIT_EINVAL, "KJIT_SPIN_US='%s' is not a whole number of microseconds from 0 to 1000000 "
                          "(unset it for the default)", getenv("KJIT_SPIN_US"));
    if (kjit__env_whole("UV_THREADPOOL_SIZE", 1, 1024, &pool) < 0)
        return kjit__fail(KJIT_EINVAL, "UV_THREADPOOL_SIZE='%s' is not a whole number from 1 to 1024 (unset it for "
                          "libuv's default, 4)", getenv("UV_THREADPOOL_SIZE"));
    kjit_server *s = calloc(1, sizeof *s);
    if (!s) return kjit__fail(KJIT_ENOMEM, "out of memory");
    s->cfg = *cfg;
    s->listen_fd = -1;
    s->lock_fd = -1;
    /* Before any thread of the server exists (the context's, the pool's,
     * the lane, libnvrtc's own). */
    sigset_t old_mask;
    s->sig_fd = signals_block(&old_mask);
    /* libnvrtc's first compile sets SIGINT to SIG_IGN for a moment, which
     * discards a pending SIGINT: that compile happens now, before the
     * socket exists, instead of during a client's request. Not before the
     * signals are blocked: libnvrtc may start threads there, which would
     * take the signals. A signal that came before it (loading libnvrtc
     * takes ms) stops the server here; one inside the compile's first ms is
     * lost. A failure shows again, and is reported, at the first real
     * compile. */
    const int early = kjit__nvrtc() ? signal_pending(s->sig_fd) : 0;
    if (!early) (void)kjit__nvrtc_warm();
    kjit__clear_error();
    if (early) {
        fprintf(stderr, "kjit serve: %s during start-up: exiting\n", sig_name(early));
        signals_restore(s->sig_fd, &old_mask, 0);
        free(s);
        return KJIT_OK;
    }
    s->spin_us = kjit__spin_us(LOOP_SPIN_US);
    s->run_graph = run_graph;
    s->map.max_done = (size_t)memo_max;
    int r = uv_loop_init(&s->loop);
    if (r) {
        signals_restore(s->sig_fd, &old_mask, 0);
        free(s);
        return kjit__fail(KJIT_EIO, "uv_loop_init: %s", uv_strerror(r));
    }
    pthread_mutex_init(&s->snap_mu, NULL);
    s->start_ms = uv_now(&s->loop);
    /* A client that vanishes mid-write must cost an EPIPE, not the process. */
    signal(SIGPIPE, SIG_IGN);
    int rc = start(s);
    if (rc == KJIT_OK) {
        fit_fd_limit(s, pool ? pool : 4); /* before the loop accepts anyone */
        const char *cdir = kjit_ctx_cache_dir(s->ctx);
        fprintf(stderr, "kjit serve: listening on %s (pid %d, arch %s%s, cache %s)\n", s->socket_path, (int)getpid(),
                kjit_ctx_arch(s->ctx), kjit_ctx_has_device(s->ctx) ? ", GPU" : ", no GPU: compile only",
                cdir && cdir[0] ? cdir : "in memory only");
        run_loop(s);
    } else {
        /* Keep the message: closing below must not overwrite it. */
        char msg[KJIT__ERROR_MAX];
        snprintf(msg, sizeof msg, "%s", kjit_last_error());
        kjit__listen_close(s);
        close_handle((uv_handle_t *)&s->sig_poll, &s->sig_open);
        close_handle((uv_handle_t *)&s->sweep, &s->sweep_open);
        kjit__gpu_close(s);
        uv_run(&s->loop, UV_RUN_DEFAULT);
        kjit__fail(rc, "%s", msg);
    }
    signals_restore(s->sig_fd, &old_mask, rc == KJIT_OK && s->draining && !s->signals);
    /* Before the context goes: the lane closes the IPC handles still open. */
    kjit__gpu_stop(s);
    kjit__listen_release(s);
    r = uv_loop_close(&s->loop);
    if (r && rc == KJIT_OK) rc = kjit__fail(KJIT_EIO, "the event loop still had handles at exit: %s", uv_strerror(r));
    kjit__jobs_free(s);
    kjit_ctx_destroy(s->ctx);
    pthread_mutex_destroy(&s->snap_mu);
    free(s);
    if (rc == KJIT_OK) fprintf(stderr, "kjit serve: stopped\n");
    return rc;
}
