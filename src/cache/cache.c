/* The in-process map in front of the disk directory, and kjit__cache_get.
 *
 * Locking: c->mu guards the table, the counters and every entry's state; it
 * is never held across disk I/O or a build. The first caller for a key
 * inserts an entry in state BUILDING and does the disk lookup / lock /
 * build unlocked; callers for the same key wait on that entry's condition
 * variable; callers for other keys are not held up. A failed build leaves
 * the table at once (the next caller tries again); the threads already
 * waiting on it take its status and message, and the last one frees it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* the POSIX 2008 calls of cache_internal.h under -std=c11 */
#endif
#include "cache/cache_internal.h"
#include "core/env.h"
#include "core/error.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { E_BUILDING, E_READY, E_FAILED };

typedef struct entry {
    struct entry *next; /* hash chain */
    kjit_cache_key key;
    int state;
    int status;  /* E_FAILED: the build's status */
    char *msg;   /* E_FAILED: the build's message */
    int waiters; /* threads in pthread_cond_wait on done */
    kjit__image img;
    pthread_cond_t done;
} entry;

struct kjit_cache {
    pthread_mutex_t mu;
    entry **slots; /* chains; the count is a power of two */
    size_t n_slots, n_entries;
    char *dir;      /* "" when memory-only */
    int dfd;        /* the checked directory; -1 when memory-only */
    int lockdfd;    /* <dir>/locks; -1 when memory-only or unavailable */
    uint64_t max_bytes;
    double lock_wait_s; /* the longest wait for another process's build of a key */
    kjit_cache_stats st;
};

#define DEFAULT_MAX_MB 1024u
#define DEFAULT_LOCK_WAIT_S 60u

static int max_bytes_from_env(uint64_t *out)
{
    unsigned long long mb = DEFAULT_MAX_MB;
    if (kjit__env_whole("KJIT_CACHE_MAX_MB", 1, UINT64_MAX >> 20, &mb) < 0)
        return kjit__fail(KJIT_EINVAL, "KJIT_CACHE_MAX_MB='%s' is not a whole number of megabytes in "
                                       "1..%llu (unset it for the default, %u)",
                          getenv("KJIT_CACHE_MAX_MB"), (unsigned long long)(UINT64_MAX >> 20), DEFAULT_MAX_MB);
    *out = (uint64_t)mb << 20;
    return KJIT_OK;
}

/* KJIT_CACHE_LOCK_WAIT_S: how long a process waits for another's build of
 * the same kernel before building it too (a compile takes well under a
 * second; the wait only runs out when the builder is stopped or hung). */
static int lock_wait_from_env(double *out)
{
    unsigned long long s = DEFAULT_LOCK_WAIT_S;
    if (kjit__env_whole("KJIT_CACHE_LOCK_WAIT_S", 0, 86400, &s) < 0)
        return kjit__fail(KJIT_EINVAL, "KJIT_CACHE_LOCK_WAIT_S='%s' is not a whole number of seconds "
                                       "from 0 to 86400 (unset it for the default, %u)",
                          getenv("KJIT_CACHE_LOCK_WAIT_S"), DEFAULT_LOCK_WAIT_S);
    *out = (double)s;
    return KJIT_OK;
}

int kjit__cache_open(kjit_cache **out, const char *dir, uint64_t max_bytes)
{
    kjit__clear_error();
    if (!out)
        return kjit__fail(KJIT_EINVAL, "kjit__cache_open: out is NULL");
    int rc;
    if (!max_bytes && (rc = max_bytes_from_env(&max_bytes)) != KJIT_OK)
        return rc;
    double lock_wait_s = DEFAULT_LOCK_WAIT_S;
    if ((rc = lock_wait_from_env(&lock_wait_s)) != KJIT_OK)
        return rc;
    kjit_cache *c = calloc(1, sizeof *c);
    if (!c)
        return kjit__fail(KJIT_ENOMEM, "no memory for the cache");
    pthread_mutex_init(&c->mu, NULL);
    c->dfd = c->lockdfd = -1;
    c->max_bytes = c->st.max_bytes = max_bytes;
    c->lock_wait_s = lock_wait_s;
    c->n_slots = 64;
    c->slots = calloc(c->n_slots, sizeof *c->slots);
    if (!c->slots) {
        kjit__cache_close(c);
        return kjit__fail(KJIT_ENOMEM, "no memory for the cache");
    }
    if (dir && !*dir) {
        if (!(c->dir = strdup(""))) {
            kjit__cache_close(c);
            return kjit__fail(KJIT_ENOMEM, "no memory for the cache");
        }
    } else if ((rc = kjit__cache_resolve_dir(dir, &c->dir)) != KJIT_OK ||
               (rc = kjit__cache_dir_open(c->dir, 1, &c->dfd)) != KJIT_OK) {
        kjit__cache_close(c);
        return rc;
    } else {
        c->lockdfd = kjit__cache_locks_open(c->dfd, c->dir);
        /* Temp files a killed writer left: removed here too, not only after
         * a publish, which a warm cache may never do. Nothing is evicted. */
        kjit__scan s;
        if (kjit__cache_scan(c->dfd, c->dir, 1, UINT64_MAX, NULL, &s) == 0)
            c->st.bad_entries += s.bad;
    }
    *out = c;
    return KJIT_OK;
}

static void entry_free(entry *e)
{
    pthread_cond_destroy(&e->done);
    free(e->msg);
    free(e->img.lowered);
    free(e->img.image);
    free(e);
}

void kjit__cache_close(kjit_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; c->slots && i < c->n_slots; i++)
        for (entry *e = c->slots[i], *next; e; e = next) {
            next = e->next;
            entry_free(e);
        }
    pthread_mutex_destroy(&c->mu);
    if (c->dfd >= 0)
        close(c->dfd);
    if (c->lockdfd >= 0)
        close(c->lockdfd);
    free(c->slots);
    free(c->dir);
    free(c);
}

const char *kjit__cache_dir(const kjit_cache *c)
{
    return c ? c->dir : NULL;
}

int kjit__cache_locks_usable(const kjit_cache *c)
{
    return !c || c->dfd < 0 || c->lockdfd >= 0;
}

/* The key is already a strong hash: its low bits are the bucket. */
static entry **chain(kjit_cache *c, kjit_cache_key key)
{
    return &c->slots[key.lo & (c->n_slots - 1)];
}

static entry *find(kjit_cache *c, kjit_cache_key key)
{
    for (entry *e = *chain(c, key); e; e = e->next)
        if (e->key.lo == key.lo && e->key.hi == key.hi)
            return e;
    return NULL;
}

/* Doubles the table when it averages more than one entry per chain. A failed
 * allocation keeps the old table: longer chains, still correct. */
static void maybe_grow(kjit_cache *c)
{
    if (c->n_entries <= c->n_slots)
        return;
    size_t n = c->n_slots * 2;
    entry **slots = calloc(n, sizeof *slots);
    if (!slots)
        return;
    for (size_t i = 0; i < c->n_slots; i++)
        for (entry *e = c->slots[i], *next; e; e = next) {
            next = e->next;
            e->next = slots[e->key.lo & (n - 1)];
            slots[e->key.lo & (n - 1)] = e;
        }
    free(c->slots);
    c->slots = slots;
    c->n_slots = n;
}

static void unlink_entry(kjit_cache *c, entry *e)
{
    entry **p = chain(c, e->key);
    while (*p != e)
        p = &(*p)->next;
    *p = e->next;
    c->n_entries--;
}

static void add_counts(kjit_cache_stats *to, const kjit_cache_stats *d)
{
    to->disk_hits += d->disk_hits;
    to->misses += d->misses;
    to->compiles += d->compiles;
    to->bad_entries += d->bad_entries;
    to->evictions += d->evictions;
    to->store_failures += d->store_failures;
}

/* Calls build and checks what it hands over. */
static int run_build(kjit_cache_build_fn build, void *arg, const char *label, const char *hex,
                     kjit__image *img)
{
    char *lowered = NULL;
    void *image = NULL;
    size_t len = 0;
    int rc = build(arg, &lowered, &image, &len);
    if (rc != KJIT_OK) {
        if (!*kjit_last_error())
            kjit__fail(rc, "build of %s (key %s) failed with %s and gave no message", label, hex,
                       kjit_status_name(rc));
        return rc;
    }
    if (!lowered || !*lowered || !image || !len) {
        free(lowered);
        free(image);
        return kjit__fail(KJIT_EINVAL, "build of %s (key %s) reported success without a lowered "
                                       "name and a non-empty image", label, hex);
    }
    img->lowered = lowered;
    img->image = image;
    img->image_len = len;
    return KJIT_OK;
}

/* A disk lookup: 1 and *img filled on a valid entry, else 0 (absent,
 * unreadable, or bad: then reported and removed). */
static int disk_load(kjit_cache *c, const char *name, kjit_cache_key key, kjit__image *img,
                     kjit_cache_stats *d)
{
    struct stat st;
    char why[256];
    int rc = kjit__entry_load(c->dfd, name, key, 1, img, &st, why, sizeof why);
    if (rc == KJIT_OK) {
        d->disk_hits++;
        return 1;
    }
    if (rc == KJIT_EBADENTRY && S_ISDIR(st.st_mode)) {
        /* Not kjit's to remove (clear leaves it too): the kernel is built
         * and used, and its store fails on the rename, until someone
         * removes the directory. */
        kjit__log("cache: %s/%s %s; left alone, so this kernel cannot be stored until it is removed; "
                  "rebuilding", c->dir, name, why);
    } else if (rc == KJIT_EBADENTRY) {
        /* Counted once removed: one that stays (a directory this process may
         * not write) would be met again by the lookup under the lock, and
         * was not replaced. */
        if (kjit__unlink_same(c->dfd, name, &st)) {
            kjit__log("cache: bad entry %s/%s %s; removed it, rebuilding", c->dir, name, why);
            d->bad_entries++;
        } else {
            kjit__log("cache: bad entry %s/%s %s; cannot remove it (%s), rebuilding", c->dir, name, why,
                      strerror(errno));
        }
    } else if (rc != KJIT_ENOTFOUND) {
        kjit__log("cache: entry %s/%s: %s; rebuilding", c->dir, name, why);
    }
    return 0;
}

/* Disk, then build under the key's cross-process lock, then publish and
 * enforce the cap. Runs with c->mu released; counts into *d. */
static int fetch(kjit_cache *c, kjit_cache_key key, const char *label, const char *arch,
                 kjit_cache_build_fn build, void *arg, kjit__image *img, kjit_cache_origin *from,
                 kjit_cache_stats *d)
{
    char hex[33], name[KJIT__FILE_NAME_MAX];
    kjit__cache_key_hex(key, hex);
    *from = KJIT_FROM_COMPILE;
    if (c->dfd < 0) {
        d->misses++;
        d->compiles++;
        return run_build(build, arg, label, hex, img);
    }
    kjit__cache_entry_name(name, label, key, arch);
    if (disk_load(c, name, key, img, d)) {
        *from = KJIT_FROM_DISK;
        return KJIT_OK;
    }
    d->misses++;
    int lk = c->lockdfd >= 0 ? kjit__cache_lock(c->lockdfd, c->dir, hex, c->lock_wait_s) : -1;
    /* Another process may have published while we waited for the lock,
     * also where the wait ended without it (a holder stopped past the
     * bound, or one whose lock a forked child of its kept). */
    if (c->lockdfd >= 0 && disk_load(c, name, key, img, d)) {
        if (lk >= 0) kjit__cache_unlock(c->lockdfd, hex, lk);
        *from = KJIT_FROM_DISK;
        return KJIT_OK;
    }
    d->compiles++;
    int rc = run_build(build, arg, label, hex, img);
    int published = rc == KJIT_OK && kjit__entry_publish(c->dfd, c->dir, name, label, key, img) == 0;
    /* The kernel is still returned; the count lets kjit prewarm say that
     * it is not in the cache (KJIT_LOG=1 has the reason). */
    if (rc == KJIT_OK && !published) d->store_failures++;
    if (lk >= 0)
        kjit__cache_unlock(c->lockdfd, hex, lk);
    /* After the unlock: the scan is for the whole directory, not this key.
     * Every publisher scans after its rename, so the last one to publish
     * leaves the directory under the cap. A scan is a readdir and an lstat
     * per entry, small next to the compile that came before it. */
    kjit__scan s;
    if (published && kjit__cache_scan(c->dfd, c->dir, 1, c->max_bytes, name, &s) == 0)
        d->evictions += s.evicted, d->bad_entries += s.bad;
    return rc;
}

int kjit__cache_get(kjit_cache *c, kjit_cache_key key, const char *label, const char *arch,
                    kjit_cache_build_fn build, void *arg, kjit_cache_blob *out,
                    kjit_cache_origin *origin)
{
    kjit__clear_error();
    if (!c || !build || !out)
        return kjit__fail(KJIT_EINVAL, "kjit__cache_get: %s is NULL",
                          !c ? "cache" : !build ? "build" : "out");
    if (!key.lo && !key.hi)
        return kjit__fail(KJIT_EINVAL, "kjit__cache_get: the key is zero, which kjit__cache_key "
                                       "returns for invalid fields (kjit__cache_make_key says why)");
    if (!label || !*label)
        return kjit__fail(KJIT_EINVAL, "kjit__cache_get: label is %s", label ? "empty" : "NULL");
    if (!kjit__cache_arch_ok(arch))
        return kjit__fail(KJIT_EINVAL, "kjit__cache_get: arch '%s' is not 1-%d characters of "
                                       "[A-Za-z0-9_] (e.g. sm_90)",
                          arch ? arch : "(null)", KJIT__ARCH_MAX);

    pthread_mutex_lock(&c->mu);
    entry *e = find(c, key);
    if (e) {
        if (e->state == E_BUILDING) {
            e->waiters++;
            while (e->state == E_BUILDING)
                pthread_cond_wait(&e->done, &c->mu);
            e->waiters--;
        }
        if (e->state == E_READY) {
            c->st.mem_hits++;
            *out = (kjit_cache_blob){e->img.lowered, e->img.image, e->img.image_len};
            pthread_mutex_unlock(&c->mu);
            if (origin)
                *origin = KJIT_FROM_MEMORY;
            return KJIT_OK;
        }
        /* The build this thread waited for failed. Copy its message out so
         * that kjit__fail (which may log) runs without the mutex. */
        int status = e->status;
        char msg[4096];
        snprintf(msg, sizeof msg, "%s", e->msg ? e->msg : kjit_status_string(status));
        if (!e->waiters)
            entry_free(e);
        pthread_mutex_unlock(&c->mu);
        return kjit__fail(status, "%s", msg);
    }
    e = calloc(1, sizeof *e);
    if (!e) {
        pthread_mutex_unlock(&c->mu);
        return kjit__fail(KJIT_ENOMEM, "no memory for a cache entry");
    }
    e->key = key;
    e->state = E_BUILDING;
    pthread_cond_init(&e->done, NULL);
    entry **head = chain(c, key);
    e->next = *head;
    *head = e;
    c->n_entries++;
    maybe_grow(c);
    pthread_mutex_unlock(&c->mu);

    kjit__image img = {NULL, NULL, 0};
    kjit_cache_origin from;
    kjit_cache_stats d = {0};
    int rc = fetch(c, key, label, arch, build, arg, &img, &from, &d);

    pthread_mutex_lock(&c->mu);
    add_counts(&c->st, &d);
    if (rc == KJIT_OK) {
        e->img = img;
        e->state = E_READY;
        *out = (kjit_cache_blob){img.lowered, img.image, img.image_len};
    } else {
        unlink_entry(c, e);
        e->state = E_FAILED;
        e->status = rc;
        e->msg = strdup(kjit_last_error()); /* NULL: waiters fall back to the status text */
    }
    pthread_cond_broadcast(&e->done);
    if (rc != KJIT_OK && !e->waiters)
        entry_free(e);
    pthread_mutex_unlock(&c->mu);
    if (rc == KJIT_OK && origin)
        *origin = from;
    return rc;
}

void kjit__cache_counters(kjit_cache *c, kjit_cache_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}

int kjit__cache_stats(kjit_cache *c, kjit_cache_stats *out)
{
    kjit__clear_error();
    if (!c || !out)
        return kjit__fail(KJIT_EINVAL, "kjit__cache_stats: %s is NULL", c ? "out" : "cache");
    kjit__scan s = {0, 0, 0, 0};
    int rc = KJIT_OK;
    if (c->dfd >= 0 && kjit__cache_scan(c->dfd, c->dir, 0, 0, NULL, &s) < 0)
        rc = kjit__fail(KJIT_EIO, "cannot scan cache directory %s (KJIT_LOG=1 says why)", c->dir);
    pthread_mutex_lock(&c->mu);
    if (rc == KJIT_OK) {
        c->st.entries = s.entries;
        c->st.bytes = s.bytes;
    }
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
    return rc;
}
