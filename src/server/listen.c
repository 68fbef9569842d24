/* The listening socket: where it lives, who may use it, and taking over
 * from a dead server without stealing from a live one.
 *
 * <path>.lock is held (flock) for the server's lifetime; the kernel drops
 * it when the process dies, so a second server that gets the lock knows any
 * socket file at <path> is stale and replaces it, and one that does not get
 * it leaves the live server alone. The lock file itself stays: unlinking a
 * held lock lets two later servers lock two different inodes. A socket
 * file without a lock holder is also probed by connecting, so a server
 * that does not use the lock (another build) is not stolen from either. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/error.h"
#include "kjit_client.h"
#include "server/server_internal.h"

#define LISTEN_BACKLOG 511
/* How long the listener pauses when the server is out of descriptors. */
#define RELISTEN_MS 50

/* With allow lists other users must reach the socket: the directory gets
 * search permission and the socket is writable by all, and SO_PEERCRED
 * decides. Without them the file system already keeps everyone else out. */
static int shared(const kjit_server *s) { return s->cfg.n_allow_uid || s->cfg.n_allow_gid; }

/* A directory the server creates gets exactly 0700 (0711 when shared). One
 * that exists keeps its mode (it may be /tmp or a home directory): it must
 * be the server's user's, not writable by others unless sticky (nobody else
 * can then replace the socket), and searchable by others when shared. */
static int prepare_dir(const kjit_server *s, const char *dir)
{
    const mode_t mode = shared(s) ? 0711 : 0700;
    const int created = mkdir(dir, mode) == 0;
    if (!created && errno != EEXIST)
        return kjit__fail(KJIT_EIO, "cannot create socket directory %s: %s", dir, strerror(errno));
    struct stat st;
    if (lstat(dir, &st)) return kjit__fail(KJIT_EIO, "socket directory %s: %s", dir, strerror(errno));
    if (S_ISLNK(st.st_mode)) {
        /* Not followed: the checks below are of the directory the socket
         * is in, and a link could be pointed elsewhere after them. */
        char *real = realpath(dir, NULL);
        int rc = kjit__fail(KJIT_EPERM, "socket directory %s is a symbolic link%s%s%s: name the real directory", dir,
                            real ? " (to " : "", real ? real : "", real ? ")" : "");
        free(real);
        return rc;
    }
    if (!S_ISDIR(st.st_mode)) return kjit__fail(KJIT_EPERM, "socket directory %s is not a directory", dir);
    if (st.st_uid != geteuid())
        return kjit__fail(KJIT_EPERM, "socket directory %s belongs to uid %u, not to this user (uid %u): "
                                      "refusing to serve from it", dir, (unsigned)st.st_uid, (unsigned)geteuid());
    if (created) {
        /* mkdir's mode went through the umask. */
        if ((st.st_mode & 0777) != mode && chmod(dir, mode))
            return kjit__fail(KJIT_EPERM, "cannot set socket directory %s to mode %o: %s", dir, (unsigned)mode,
                              strerror(errno));
        return KJIT_OK;
    }
    if ((st.st_mode & 0022) && !(st.st_mode & S_ISVTX))
        return kjit__fail(KJIT_EPERM, "socket directory %s is writable by its group or others (mode %o) without "
                                      "the sticky bit: another user could replace the socket; fix: chmod go-w %s",
                          dir, (unsigned)(st.st_mode & 07777), dir);
    if (shared(s) && !(st.st_mode & 0001))
        return kjit__fail(KJIT_EPERM, "socket directory %s (mode %o) does not let the allowed users reach the "
                                      "socket; fix: chmod o+x %s, or name a socket in a directory kjit creates",
                          dir, (unsigned)(st.st_mode & 07777), dir);
    return KJIT_OK;
}

/* 1 when something accepts connections on path. */
static int live(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    int err = errno;
    close(fd);
    /* EAGAIN: a full backlog, still a live server. */
    return rc == 0 || err == EAGAIN || err == EINPROGRESS;
}

static int take_path(kjit_server *s)
{
    const char *path = s->socket_path;
    char lock[sizeof s->socket_path + 8];
    snprintf(lock, sizeof lock, "%s.lock", path);
    struct stat st;
    /* Refused before the lock file is made: PATH.lock beside a file that is
     * not a socket may be another program's (e.g. /etc/passwd.lock). */
    if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
        return kjit__fail(KJIT_EPERM, "%s exists and is not a socket: not replacing it", path);
    s->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (s->lock_fd < 0) return kjit__fail(KJIT_EIO, "cannot open %s: %s", lock, strerror(errno));
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB))
        return kjit__fail(KJIT_EPERM, "another kjit serve is already serving %s (it holds %s)", path, lock);
    if (lstat(path, &st)) return KJIT_OK;
    if (!S_ISSOCK(st.st_mode))
        return kjit__fail(KJIT_EPERM, "%s exists and is not a socket: not replacing it", path);
    if (live(path)) return kjit__fail(KJIT_EPERM, "a server is already listening on %s", path);
    if (unlink(path) && errno != ENOENT)
        return kjit__fail(KJIT_EIO, "cannot remove the stale socket %s: %s", path, strerror(errno));
    fprintf(stderr, "kjit serve: replaced the stale socket %s (its server is gone)\n", path);
    return KJIT_OK;
}

static void on_listener_closed(uv_handle_t *h);

/* The listener handle on a duplicate of listen_fd, accepting: 0, or a
 * libuv error: the handle then closes with on_fail (*closing = 1), or was
 * never opened (no descriptor for the duplicate; *closing = 0). */
static int accept_on(kjit_server *s, uv_close_cb on_fail, int *closing)
{
    *closing = 0;
    const int fd = fcntl(s->listen_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return uv_translate_sys_error(errno);
    uv_pipe_init(&s->loop, &s->listener, 0); /* fails only on a bad argument */
    s->listener.data = s;
    int r = uv_pipe_open(&s->listener, fd);
    if (r) close(fd);
    else r = uv_listen((uv_stream_t *)&s->listener, LISTEN_BACKLOG, kjit__conn_accept);
    if (r) {
        uv_close((uv_handle_t *)&s->listener, on_fail);
        *closing = 1;
        return r;
    }
    s->listener_open = 1;
    return 0;
}

int kjit__listen_open(kjit_server *s)
{
    s->lock_fd = -1;
    if (s->cfg.socket_path) {
        if (strlen(s->cfg.socket_path) >= sizeof s->socket_path)
            return kjit__fail(KJIT_EINVAL, "socket path %s is %zu bytes: Unix sockets take at most %zu",
                              s->cfg.socket_path, strlen(s->cfg.socket_path), sizeof s->socket_path - 1);
        snprintf(s->socket_path, sizeof s->socket_path, "%s", s->cfg.socket_path);
    } else if (kjit_client_default_socket(s->socket_path, sizeof s->socket_path)) {
        return KJIT_EINVAL;
    }
    char dir[sizeof s->socket_path];
    snprintf(dir, sizeof dir, "%s", s->socket_path);
    const char *parent = dirname(dir);
    int rc = prepare_dir(s, parent);
    if (rc || (rc = take_path(s))) return rc;

    /* Bound here, not with uv_pipe_bind: a libuv pipe bound by name unlinks
     * the name when it closes, and the listener closes and reopens when the
     * server is out of descriptors (below). The name goes in
     * kjit__listen_close alone, and only while it is still this socket. */
    if ((s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
        return kjit__fail(KJIT_EIO, "cannot create a socket: %s", strerror(errno));
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    /* Bound under a temporary name in the same directory, listening, and
     * only then renamed to the path, so that a client that sees the socket
     * can connect at once: between a bind and its listen a connect is
     * refused (ECONNREFUSED), and a loaded host can stop the server there
     * for many milliseconds. Where the temporary name does not fit a
     * socket address, the socket is bound at the path itself. */
    char tmp[sizeof sa.sun_path];
    const int fits = snprintf(tmp, sizeof tmp, "%s/.kjit-serve-%ld.sock", parent, (long)getpid()) < (int)sizeof tmp;
    const char *at = fits ? tmp : s->socket_path;
    struct stat st;
    if (fits && lstat(tmp, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(tmp); /* a killed server's, of this pid */
    memcpy(sa.sun_path, at, strlen(at) + 1); /* fits: checked above */
    /* Born 0600: no moment where the socket is open to others. */
    mode_t old = umask(0177);
    const int b = bind(s->listen_fd, (const struct sockaddr *)&sa, sizeof sa), err = errno;
    umask(old);
    if (b) return kjit__fail(KJIT_EIO, "cannot bind %s: %s", at, strerror(err));
    if (lstat(at, &st) == 0) { /* the inode keeps through the rename */
        s->sock_dev = st.st_dev;
        s->sock_ino = st.st_ino;
    }
    rc = KJIT_OK;
    if (shared(s) && chmod(at, 0666))
        rc = kjit__fail(KJIT_EIO, "cannot open %s to the allowed users: %s", s->socket_path, strerror(errno));
    else if (listen(s->listen_fd, LISTEN_BACKLOG))
        rc = kjit__fail(KJIT_EIO, "cannot listen on %s: %s", s->socket_path, strerror(errno));
    else if (fits && rename(tmp, s->socket_path))
        rc = kjit__fail(KJIT_EIO, "cannot rename %s to %s: %s", tmp, s->socket_path, strerror(errno));
    if (rc) {
        if (fits) unlink(tmp); /* the path's own is unlinked by kjit__listen_close */
        return rc;
    }
    int r = uv_timer_init(&s->loop, &s->relisten);
    if (r) return kjit__fail(KJIT_EIO, "uv_timer_init: %s", uv_strerror(r));
    s->relisten_open = 1;
    s->relisten.data = s;
    int closing;
    if ((r = accept_on(s, NULL, &closing)))
        return kjit__fail(KJIT_EIO, "cannot listen on %s: %s", s->socket_path, uv_strerror(r));
    return KJIT_OK;
}

/* Out of descriptors (EMFILE, ENFILE: a burst of connections, each held
 * until its "busy" reply is out, while the pool's compiles open cache
 * files), libuv's accept fails and libuv calls kjit__conn_accept again at
 * once, for as long as it fails: the loop never gets back to closing or
 * reading anything, and the server hangs for good. So the listener handle
 * closes, which ends that loop; the socket (listen_fd) stays listening,
 * connections wait in its backlog, and RELISTEN_MS later a new handle on a
 * duplicate of it accepts again, or waits again if no descriptor is free. */
static void on_relisten(uv_timer_t *t)
{
    kjit_server *s = t->data;
    if (!s->listen_paused) return;
    int closing;
    if (!accept_on(s, on_listener_closed, &closing))
        s->listen_paused = 0;
    else if (!closing && s->relisten_open) /* no descriptor even for the duplicate: wait again */
        uv_timer_start(&s->relisten, on_relisten, RELISTEN_MS, 0);
}

static void on_listener_closed(uv_handle_t *h)
{
    kjit_server *s = h->data;
    if (s->listen_paused && s->relisten_open) uv_timer_start(&s->relisten, on_relisten, RELISTEN_MS, 0);
}

void kjit__listen_pause(kjit_server *s, const char *why)
{
    if (!s->listener_open) return;
    if (!s->n.accept_pauses++)
        fprintf(stderr, "kjit serve: %s: not accepting for %d ms at a time, as long as it lasts (counted in "
                        "stats: accept_pauses; said once)\n", why, RELISTEN_MS);
    s->listener_open = 0;
    s->listen_paused = 1;
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}

/* Stops accepting and removes the socket file, if it is still ours. */
void kjit__listen_close(kjit_server *s)
{
    if (s->listener_open) uv_close((uv_handle_t *)&s->listener, NULL);
    s->listener_open = s->listen_paused = 0;
    if (s->relisten_open) uv_close((uv_handle_t *)&s->relisten, NULL);
    s->relisten_open = 0;
    if (s->listen_fd >= 0) close(s->listen_fd);
    s->listen_fd = -1;
    struct stat st;
    if (s->sock_ino && lstat(s->socket_path, &st) == 0 && st.st_dev == s->sock_dev && st.st_ino == s->sock_ino)
        unlink(s->socket_path);
    s->sock_ino = 0;
}

/* Drops the path lock: last, once the socket file is gone. */
void kjit__listen_release(kjit_server *s)
{
    if (s->lock_fd >= 0) close(s->lock_fd);
    s->lock_fd = -1;
}

int kjit__peer_allowed(const kjit_server *s, uid_t uid, gid_t gid, char *why, size_t why_len)
{
    if (uid == geteuid() && !s->cfg.refuse_own_uid) return 1;
    for (int i = 0; i < s->cfg.n_allow_uid; ++i)
        if (s->cfg.allow_uid[i] == uid) return 1;
    for (int i = 0; i < s->cfg.n_allow_gid; ++i)
        if (s->cfg.allow_gid[i] == gid) return 1;
    snprintf(why, why_len, "uid %u (gid %u) may not use this server (it serves uid %u%s; see --allow-uid, --allow-gid)",
             (unsigned)uid, (unsigned)gid, (unsigned)geteuid(), s->cfg.refuse_own_uid ? " only when listed" : "");
    return 0;
}
