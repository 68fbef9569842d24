/* The cubin cache across processes (fork): one build per key for a crowd of
 * processes, a builder killed while holding the key lock, the size cap
 * under concurrent inserts and reads, a builder that forks (its lock is
 * released though the child shares it), and a second look at the disk
 * after a lock wait that timed out. Builds are counted in a file each
 * build appends a byte to. Children open their own cache after fork and
 * report through their exit status. */
#include "test_cache_util.h"

#include <signal.h>
#include <sys/wait.h>

static off_t file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? st.st_size : -1;
}

/* Waits for pid; 0 if it exited 0, else prints how it ended and returns 1. */
static int reap(pid_t pid, const char *who)
{
    int ws;
    while (waitpid(pid, &ws, 0) < 0)
        if (errno != EINTR)
            return 1;
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
        return 0;
    printf("  %s (pid %d) %s %d\n", who, (int)pid, WIFEXITED(ws) ? "exited" : "killed by signal",
           WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
    return 1;
}

/* In a child: gets keys[0..n) in the given order, checking each blob.
 * Returns the exit status. */
static int child_gets(const char *dir, uint64_t max_bytes, const int *order, int n, int sleep,
                      const char *counter, size_t size)
{
    kjit_cache *c;
    if (kjit__cache_open(&c, dir, max_bytes) != KJIT_OK) {
        printf("  child open: %s\n", kjit_last_error());
        return 2;
    }
    for (int i = 0; i < n; i++) {
        fake f;
        fake_init(&f, tkey(order[i]));
        f.sleep_ms = sleep;
        f.counter = counter;
        f.size = size;
        kjit_cache_blob b;
        int rc = kjit__cache_get(c, f.key, "op", "sm_90", fake_build, &f, &b, NULL);
        if (rc != KJIT_OK) {
            printf("  child get key %d: %s: %s\n", order[i], kjit_status_name(rc), kjit_last_error());
            return 3;
        }
        if (blob_ok(&b, f.key, size))
            return 4;
    }
    kjit__cache_close(c);
    return 0;
}

/* 8 processes released at once on an empty cache, each getting the same 20
 * keys (half in order, half reversed): 20 builds in all, every entry valid. */
static int test_procs_one_build_per_key(const char *dir)
{
    enum { NP = 8, NK = 20 };
    char cdir[256], counter[256], locks[300];
    snprintf(cdir, sizeof cdir, "%s/c", dir);
    snprintf(counter, sizeof counter, "%s/builds", dir);
    snprintf(locks, sizeof locks, "%s/locks", cdir);
    int go[2];
    ASSERT_EQ_INT(pipe(go), 0);
    pid_t pids[NP];
    for (int p = 0; p < NP; p++) {
        pids[p] = fork();
        ASSERT_TRUE(pids[p] >= 0);
        if (pids[p] == 0) {
            close(go[1]);
            char ch;
            /* EOF when the parent closes its end: every child starts at once. */
            if (read(go[0], &ch, 1) != 0)
                _exit(5);
            int order[NK];
            for (int i = 0; i < NK; i++)
                order[i] = p % 2 ? NK - 1 - i : i;
            _exit(child_gets(cdir, 0, order, NK, 5, counter, 1000));
        }
    }
    close(go[0]);
    close(go[1]);
    int bad = 0;
    for (int p = 0; p < NP; p++)
        bad |= reap(pids[p], "child");
    ASSERT_EQ_INT(bad, 0);
    ASSERT_EQ_INT(file_size(counter), NK);
    CHECK(verify_clean(cdir, NK));
    ASSERT_EQ_INT(count_names(cdir, ".tmp.", ""), 0);
    ASSERT_EQ_INT(count_names(locks, "", ".lock"), 0);
    return 0;
}

/* A child that enters build, says so on notify, and sleeps there. */
static pid_t spawn_stuck_builder(const char *cdir, int key, int notify)
{
    pid_t pid = fork();
    if (pid == 0) {
        kjit_cache *c;
        if (kjit__cache_open(&c, cdir, 0) != KJIT_OK)
            _exit(2);
        fake f;
        fake_init(&f, tkey(key));
        f.sleep_ms = 60000;
        f.notify_fd = notify;
        kjit_cache_blob b;
        kjit__cache_get(c, f.key, "op", "sm_90", fake_build, &f, &b, NULL);
        _exit(6); /* not reached: the parent kills it in build */
    }
    return pid;
}

/* A builder killed (SIGKILL) inside build, holding the key lock: no partial
 * entry is visible, a process waiting on the lock takes over, and a later
 * get neither hangs (alarm) nor fails. */
static int test_procs_killed_builder(const char *dir)
{
    char cdir[256], counter[256], locks[300];
    snprintf(cdir, sizeof cdir, "%s/c", dir);
    snprintf(counter, sizeof counter, "%s/builds", dir);
    snprintf(locks, sizeof locks, "%s/locks", cdir);
    kjit_cache *c;
    ASSERT_OK(kjit__cache_open(&c, cdir, 0)); /* creates the directory */
    kjit__cache_close(c);
    int note[2];
    ASSERT_EQ_INT(pipe(note), 0);
    alarm(60); /* a hang kills the test instead of the CI job */

    /* 1: a waiter is already blocked on the lock when the holder dies. */
    pid_t stuck = spawn_stuck_builder(cdir, 1, note[1]);
    ASSERT_TRUE(stuck > 0);
    char ch;
    ASSERT_EQ_INT(read(note[0], &ch, 1), 1);
    pid_t waiter = fork();
    ASSERT_TRUE(waiter >= 0);
    if (waiter == 0) {
        int order[1] = {1};
        _exit(child_gets(cdir, 0, order, 1, 0, counter, 1000));
    }
    sleep_ms(300);
    int ws;
    ASSERT_EQ_INT(waitpid(waiter, &ws, WNOHANG), 0); /* still waiting for the lock */
    ASSERT_EQ_INT(file_size(counter), -1);
    CHECK(verify_clean(cdir, 0));
    ASSERT_EQ_INT(kill(stuck, SIGKILL), 0);
    ASSERT_EQ_INT(waitpid(stuck, &ws, 0), stuck);
    ASSERT_TRUE(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
    CHECK(reap(waiter, "waiter"));
    ASSERT_EQ_INT(file_size(counter), 1);
    CHECK(verify_clean(cdir, 1));

    /* 2: nobody waiting; the next get comes after the holder died. Its lock
     * file is left behind, and must not stop anyone. */
    stuck = spawn_stuck_builder(cdir, 2, note[1]);
    ASSERT_TRUE(stuck > 0);
    ASSERT_EQ_INT(read(note[0], &ch, 1), 1);
    ASSERT_EQ_INT(kill(stuck, SIGKILL), 0);
    ASSERT_EQ_INT(waitpid(stuck, &ws, 0), stuck);
    ASSERT_EQ_INT(count_names(locks, "", ".lock"), 1);
    CHECK(verify_clean(cdir, 1));
    ASSERT_OK(kjit__cache_open(&c, cdir, 0));
    CHECK(get_expect(c, tkey(2), "op", KJIT_FROM_COMPILE));
    CHECK(get_expect(c, tkey(1), "op", KJIT_FROM_DISK));
    kjit__cache_close(c);
    alarm(0);
    close(note[0]);
    close(note[1]);
    ASSERT_EQ_INT(count_names(locks, "", ".lock"), 0);
    return verify_clean(cdir, 2);
}

/* In a child: for each key, a get through cache w (a build: w is fresh each
 * round and the cap keeps few entries) then through cache r, which reads the
 * entry back from disk unless an eviction got to it first. */
static int child_insert_read(const char *dir, uint64_t cap, const int *order, int n, int rounds,
                             const char *counter, size_t size)
{
    for (int round = 0; round < rounds; round++) {
        kjit_cache *w, *r;
        if (kjit__cache_open(&w, dir, cap) != KJIT_OK || kjit__cache_open(&r, dir, cap) != KJIT_OK) {
            printf("  child open: %s\n", kjit_last_error());
            return 2;
        }
        for (int i = 0; i < 2 * n; i++) {
            fake f;
            fake_init(&f, tkey(order[i / 2]));
            f.counter = counter;
            f.size = size;
            kjit_cache_blob b;
            int rc = kjit__cache_get(i % 2 ? r : w, f.key, "op", "sm_90", fake_build, &f, &b, NULL);
            if (rc != KJIT_OK) {
                printf("  child get key %d: %s: %s\n", order[i / 2], kjit_status_name(rc),
                       kjit_last_error());
                return 3;
            }
            if (blob_ok(&b, f.key, size))
                return 4;
        }
        kjit__cache_close(w);
        kjit__cache_close(r);
    }
    return 0;
}

/* 4 processes insert and read back 50 keys three times over, with a cap of 5
 * entries: evictions race the reads (a file that vanishes becomes a miss),
 * yet no get fails and the cap holds at the end. */
static int test_procs_size_cap(const char *dir)
{
    enum { NP = 4, NK = 50, ROUNDS = 3, SIZE = 2000 };
    const uint64_t entry = 56 + 40 + SIZE, cap = 5 * entry;
    char cdir[256], counter[256];
    snprintf(cdir, sizeof cdir, "%s/c", dir);
    snprintf(counter, sizeof counter, "%s/builds", dir);
    pid_t pids[NP];
    for (int p = 0; p < NP; p++) {
        pids[p] = fork();
        ASSERT_TRUE(pids[p] >= 0);
        if (pids[p] == 0) {
            int order[NK];
            for (int i = 0; i < NK; i++)
                order[i] = (p * 13 + i) % NK;
            _exit(child_insert_read(cdir, cap, order, NK, ROUNDS, counter, SIZE));
        }
    }
    int bad = 0;
    for (int p = 0; p < NP; p++)
        bad |= reap(pids[p], "child");
    ASSERT_EQ_INT(bad, 0);
    seen s;
    memset(&s, 0, sizeof s);
    int n_bad = -1;
    ASSERT_OK(kjit__cache_list(cdir, 1, seen_visit, &s, &n_bad));
    ASSERT_EQ_INT(n_bad, 0);
    ASSERT_EQ_INT(s.n_temp, 0);
    ASSERT_LE_U64(s.bytes, cap);
    ASSERT_TRUE(s.n >= 1);
    /* Both paths ran: entries evicted and built again, and reads from disk. */
    long long builds = file_size(counter), gets = 2LL * NP * ROUNDS * NK;
    printf("  %lld builds for %lld gets of %d keys\n", builds, gets, (int)NK);
    ASSERT_TRUE(builds > NK);
    ASSERT_TRUE(builds < gets);
    return 0;
}

/* A build that forks a process (a data loader's worker, say) which outlives
 * it by hold_ms: the child shares every descriptor the builder had open,
 * its lock on the key among them. */
typedef struct forking {
    fake f;
    int hold_ms;
} forking;

static int forking_build(void *arg, char **lowered, void **image, size_t *len)
{
    forking *k = arg;
    pid_t pid = fork();
    if (pid == 0) {
        sleep_ms(k->hold_ms);
        _exit(0);
    }
    if (pid < 0)
        return kjit__fail(KJIT_EIO, "forking build: fork: %s", strerror(errno));
    return fake_build(&k->f, lowered, image, len);
}

/* In a child: one get of key 1 after delay_ms, whose build takes build_ms
 * and fails with status fail when that is nonzero, with
 * KJIT_CACHE_LOCK_WAIT_S set to wait_s when not NULL and a build that forks
 * a holder of hold_ms when nonzero; exits 0 when the get returns fail (OK
 * when 0) with the right bytes, from the origin want (any when -1), within
 * max_ms of its start (0: any time). */
static pid_t spawn_get(const char *cdir, const char *counter, int delay_ms, int build_ms, int fail, int hold_ms,
                       const char *wait_s, int want, int max_ms)
{
    pid_t pid = fork();
    if (pid == 0) {
        sleep_ms(delay_ms);
        if (wait_s)
            setenv("KJIT_CACHE_LOCK_WAIT_S", wait_s, 1);
        kjit_cache *c;
        if (kjit__cache_open(&c, cdir, 0) != KJIT_OK)
            _exit(2);
        forking k = {.hold_ms = hold_ms};
        fake_init(&k.f, tkey(1));
        k.f.sleep_ms = build_ms;
        k.f.counter = counter;
        k.f.fail = fail;
        kjit_cache_blob b;
        kjit_cache_origin o = (kjit_cache_origin)-1;
        const double t0 = now_s();
        int rc = kjit__cache_get(c, k.f.key, "op", "sm_90", hold_ms ? forking_build : fake_build,
                                 hold_ms ? (void *)&k : (void *)&k.f, &b, &o);
        const int ms = (int)((now_s() - t0) * 1000);
        if (rc != fail) {
            printf("  getter: %s: %s\n", kjit_status_name(rc), kjit_last_error());
            _exit(3);
        }
        if (fail)
            _exit(0);
        if (blob_ok(&b, k.f.key, k.f.size))
            _exit(4);
        if ((want >= 0 && (int)o != want) || (max_ms && ms > max_ms)) {
            printf("  getter (delay %d ms): origin %d after %d ms, want origin %d within %d ms\n", delay_ms,
                   (int)o, ms, (int)want, max_ms);
            _exit(5);
        }
        _exit(0);
    }
    return pid;
}

/* dir/c made a cache directory, dir/builds the path of the build counter. */
static int cache_and_counter(const char *dir, char cdir[256], char counter[256])
{
    snprintf(cdir, 256, "%s/c", dir);
    snprintf(counter, 256, "%s/builds", dir);
    kjit_cache *c;
    ASSERT_OK(kjit__cache_open(&c, cdir, 0));
    kjit__cache_close(c);
    return 0;
}


/* A holds the lock and fails its build (so it unlinks the lock file and
 * publishes nothing); B was waiting on that file and takes over; D arrives
 * during B's build, after the unlink, so it creates a new lock file. B must
 * have noticed and moved to the new file, or B and D would both build. */
static int test_procs_lock_handoff(const char *dir)
{
    char cdir[256], counter[256];
    CHECK(cache_and_counter(dir, cdir, counter));
    alarm(60);
    pid_t a = spawn_get(cdir, counter, 0, 400, KJIT_ECOMPILE, 0, NULL, -1, 0);
    pid_t b = spawn_get(cdir, counter, 150, 600, 0, 0, NULL, -1, 0);
    pid_t d = spawn_get(cdir, counter, 700, 0, 0, 0, NULL, -1, 0);
    int bad = reap(a, "A") | reap(b, "B") | reap(d, "D");
    alarm(0);
    ASSERT_EQ_INT(bad, 0);
    ASSERT_EQ_INT(file_size(counter), 2); /* A's failed build and B's */
    return verify_clean(cdir, 1);
}

/* A builds key 1 (300 ms) and forks a process that lives 5 s on; B waits on
 * A's lock. A's release must not wait for A's child: B takes the entry from
 * disk right after A publishes, not when the child exits (a close alone
 * leaves the lock with the descriptor the child shares). */
static int test_procs_fork_in_build(const char *dir)
{
    char cdir[256], counter[256];
    CHECK(cache_and_counter(dir, cdir, counter));
    alarm(60);
    pid_t a = spawn_get(cdir, counter, 0, 300, 0, 5000, NULL, KJIT_FROM_COMPILE, 0);
    pid_t b = spawn_get(cdir, counter, 100, 0, 0, 0, NULL, KJIT_FROM_DISK, 2500);
    int bad = reap(a, "A") | reap(b, "B");
    alarm(0);
    ASSERT_EQ_INT(bad, 0);
    ASSERT_EQ_INT(file_size(counter), 1);
    return verify_clean(cdir, 1);
}

/* A holds key 1's lock in a build that never ends; C and B wait at most 3 s
 * (KJIT_CACHE_LOCK_WAIT_S). C's wait ends first and C builds unlocked and
 * publishes; B's wait ends after that: B must look at the disk again and
 * take C's entry, not build a third time. */
static int test_procs_recheck_after_wait(const char *dir)
{
    char cdir[256], counter[256];
    CHECK(cache_and_counter(dir, cdir, counter));
    int note[2];
    ASSERT_EQ_INT(pipe(note), 0);
    alarm(60);
    pid_t a = spawn_stuck_builder(cdir, 1, note[1]);
    ASSERT_TRUE(a > 0);
    char ch;
    ASSERT_EQ_INT(read(note[0], &ch, 1), 1);
    /* C: waits 0.1 + 3 s, builds 0.3 s: published at about 3.4 s. B: looks
     * at the disk first at 1.6 s (1.8 s before C's entry), then waits until
     * about 4.6 s (1.2 s after it): margins for a loaded machine. */
    pid_t cc = spawn_get(cdir, counter, 100, 300, 0, 0, "3", KJIT_FROM_COMPILE, 0);
    pid_t b = spawn_get(cdir, counter, 1600, 0, 0, 0, "3", KJIT_FROM_DISK, 0);
    int bad = reap(cc, "C") | reap(b, "B");
    int ws;
    ASSERT_EQ_INT(kill(a, SIGKILL), 0);
    ASSERT_EQ_INT(waitpid(a, &ws, 0), a);
    alarm(0);
    close(note[0]);
    close(note[1]);
    ASSERT_EQ_INT(bad, 0);
    ASSERT_EQ_INT(file_size(counter), 1); /* C's; A's stuck build counts nothing (no counter) */
    return verify_clean(cdir, 1);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"procs_one_build_per_key", test_procs_one_build_per_key},
        {"procs_killed_builder", test_procs_killed_builder},
        {"procs_size_cap", test_procs_size_cap},
        {"procs_lock_handoff", test_procs_lock_handoff},
        {"procs_fork_in_build", test_procs_fork_in_build},
        {"procs_recheck_after_wait", test_procs_recheck_after_wait},
    };
    /* Children print and _exit: line buffering gets their lines out. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    return run_tests(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
