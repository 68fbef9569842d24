/* compile and prewarm: a memo in front, single-flight jobs behind it.
 *
 * Every (op, hidden, dtype, arch) the server has seen has one entry in a
 * map owned by the loop thread. While its kernels are being fetched the
 * entry holds the job, and every request for it (compile or prewarm, from
 * any client) waits on that job: one kjit_kernel_fetch per kernel however
 * many ask. (The library cache also merges concurrent builds of one kernel
 * key, which covers tuples that share kernels.) Once done the entry keeps
 * the reply text and the cubin addresses, so later requests are answered
 * on the loop thread with no copy of the cubins: they stay owned by the
 * library cache, valid until kjit_ctx_destroy, which comes after the loop
 * ends. A failed job leaves the map, so the next request tries again. The
 * done entries are kept up to a count (least recently used dropped first:
 * KJIT_SERVE_MEMO_MAX, default 8192), so no client can grow the map without
 * bound by asking for ever new tuples that share kernels.
 *
 * A prewarm hands out its combinations a few at a time (until
 * PREWARM_WINDOW kernels wait on jobs), so one large prewarm does not fill libuv's
 * work queue ahead of every other client's compile; it stops handing them
 * out when its client leaves or the server stops. On stop, parts still
 * queued are cancelled (their waiters get "shutting_down"); only the ones
 * already compiling are waited for (and `kernel` requests, one kernel each:
 * kernel.c). The cap bounds the memo's own entries; the library's cache
 * keeps every cubin it has built in memory (tens of KB each) until the
 * server ends. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "server/server_internal.h"

#define MAX_FAILURES_LISTED 16
/* Progress events are advisory: skipped while a client has this much unread. */
#define EVENT_BACKLOG (1u << 20)
/* Kernels of one prewarm queued or compiling at once: twice libuv's
 * default pool, so the pool stays busy and another client's compile
 * waits for at most this many kernels (and a combination's). */
#define PREWARM_WINDOW 8
/* A part's status when stopping cancelled it before it started. */
#define JOB_CANCELLED (-1000)

typedef struct prewarm {
    kjit_conn *c; /* holds a reference */
    uint64_t id;
    int total, done, submitting;
    int next, waiting; /* the next combination to hand out; kernels on jobs */
    int kernels, compiled, cached, failed, cancelled;
    int failed_other; /* a combination failed for another reason than NVRTC's (out of memory) */
    cJSON *failures;
    kjit_req_tuple t[]; /* total of them */
} prewarm;

typedef struct waiter {
    kjit_conn *c; /* a compile waiter holds a reference; a prewarm's is in pw */
    uint64_t id;
    prewarm *pw;
} waiter;

/* One kernel of a job, fetched on its own pool thread so the kernels of a
 * tuple compile in parallel. */
typedef struct part {
    kjit_pool_item item; /* item.work.data: the part */
    struct job *job;
    int i;
    int status;
    char *message;
} part;

typedef struct job {
    kjit_server *srv;
    kjit_tuple_entry *e;
    kjit_req_tuple t;
    int n;
    kjit_kernel_spec *specs;
    kjit_kernel_image *imgs;
    part *parts;
    int left;       /* parts not yet back on the loop */
    int status;     /* the first failed kernel's, in kernel order */
    const char *message;
    waiter *w;
    int n_w, cap_w;
    int orphan;     /* every waiter left and its queued parts were cancelled:
                       the entry is out of the map, owned by the job */
} job;

struct kjit_tuple_entry {
    kjit_tuple_entry *next;
    uint64_t hash;
    kjit_req_tuple t;
    job *job;         /* while fetching; NULL once the memo below is set */
    int n;
    uv_buf_t *cubins; /* the payload, in kernel order */
    char *text;       /* the reply after the id: {"ok":true,...} */
    size_t text_len;
    kjit_tuple_entry *older, *newer; /* the map's list of done entries */
    int in_lru;
};

/* ---- the map ------------------------------------------------------------ */

static uint64_t tuple_hash(const kjit_req_tuple *t)
{
    uint64_t h = (uint64_t)(uintptr_t)t->op ^ (uint64_t)t->hidden << 24 ^ (uint64_t)t->dtype << 56 ^ (uint64_t)t->sm << 40;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ h >> 31;
}

static int same(const kjit_req_tuple *a, const kjit_req_tuple *b)
{
    return a->op == b->op && a->hidden == b->hidden && a->dtype == b->dtype && a->sm == b->sm;
}

static kjit_tuple_entry *map_find(kjit_server *s, const kjit_req_tuple *t, uint64_t h)
{
    if (!s->map.n_slots) return NULL;
    for (kjit_tuple_entry *e = s->map.slots[h & (s->map.n_slots - 1)]; e; e = e->next)
        if (e->hash == h && same(&e->t, t)) return e;
    return NULL;
}

static int map_add(kjit_server *s, kjit_tuple_entry *e)
{
    kjit_tuple_map *m = &s->map;
    if (m->n_entries >= m->n_slots) {
        size_t n = m->n_slots ? m->n_slots * 2 : 256;
        kjit_tuple_entry **slots = calloc(n, sizeof *slots);
        if (!slots) return -1;
        for (size_t i = 0; i < m->n_slots; ++i)
            for (kjit_tuple_entry *x = m->slots[i], *next; x; x = next) {
                next = x->next;
                x->next = slots[x->hash & (n - 1)];
                slots[x->hash & (n - 1)] = x;
            }
        free(m->slots);
        m->slots = slots;
        m->n_slots = n;
    }
    kjit_tuple_entry **head = &m->slots[e->hash & (m->n_slots - 1)];
    e->next = *head;
    *head = e;
    m->n_entries++;
    return 0;
}

static void entry_free(kjit_tuple_entry *e)
{
    free(e->cubins);
    cJSON_free(e->text);
    free(e);
}

/* The list of done entries, least recently used first. */
static void lru_unlink(kjit_tuple_map *m, kjit_tuple_entry *e)
{
    if (!e->in_lru) return;
    if (e->older) e->older->newer = e->newer;
    else m->lru_old = e->newer;
    if (e->newer) e->newer->older = e->older;
    else m->lru_new = e->older;
    e->older = e->newer = NULL;
    e->in_lru = 0;
    m->n_done--;
}

static void lru_push(kjit_tuple_map *m, kjit_tuple_entry *e)
{
    e->older = m->lru_new;
    e->newer = NULL;
    if (m->lru_new) m->lru_new->newer = e;
    else m->lru_old = e;
    m->lru_new = e;
    e->in_lru = 1;
    m->n_done++;
}

static void lru_touch(kjit_tuple_map *m, kjit_tuple_entry *e)
{
    lru_unlink(m, e);
    lru_push(m, e);
}

/* Takes e out of the map's slots (it stays allocated). */
static void map_detach(kjit_server *s, kjit_tuple_entry *e)
{
    kjit_tuple_entry **p = &s->map.slots[e->hash & (s->map.n_slots - 1)];
    while (*p != e) p = &(*p)->next;
    *p = e->next;
    s->map.n_entries--;
}

static void map_remove(kjit_server *s, kjit_tuple_entry *e)
{
    lru_unlink(&s->map, e);
    map_detach(s, e);
    entry_free(e);
}

size_t kjit__jobs_memo_count(const kjit_server *s) { return s->map.n_entries; }
uint64_t kjit__jobs_memo_evictions(const kjit_server *s) { return s->map.evictions; }

/* Drops the least recently used done entries past the cap (max_done, set
 * at start-up: server.c). */
static void memo_trim(kjit_server *s)
{
    kjit_tuple_map *m = &s->map;
    while (m->n_done > m->max_done) {
        m->evictions++;
        map_remove(s, m->lru_old);
    }
}

void kjit__jobs_free(kjit_server *s)
{
    for (size_t i = 0; i < s->map.n_slots; ++i)
        for (kjit_tuple_entry *e = s->map.slots[i], *next; e; e = next) {
            next = e->next;
            entry_free(e);
        }
    free(s->map.slots);
    memset(&s->map, 0, sizeof s->map);
}

/* ---- replies ------------------------------------------------------------ */

/* The compile reply for a fetched tuple, as {"ok":true,...}: the caller
 * splices the id in after the brace. all_cached: the memo's version. */
static char *reply_text(const job *j, int all_cached, size_t *len)
{
    cJSON *o = cJSON_CreateObject(), *ks;
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d", j->t.sm);
    int cached = 1;
    for (int i = 0; i < j->n; ++i) cached &= all_cached || j->imgs[i].cached;
    cJSON_AddTrueToObject(o, "ok");
    cJSON_AddStringToObject(o, "op", j->t.op);
    cJSON_AddNumberToObject(o, "hidden", j->t.hidden);
    cJSON_AddStringToObject(o, "dtype", kjit_dtype_name(j->t.dtype));
    cJSON_AddStringToObject(o, "arch", arch);
    cJSON_AddBoolToObject(o, "cached", cached);
    cJSON_AddNullToObject(o, "config");
    cJSON_AddItemToObject(o, "kernels", ks = cJSON_CreateArray());
    size_t off = 0;
    for (int i = 0; i < j->n; ++i) {
        cJSON *k = cJSON_CreateObject();
        cJSON_AddStringToObject(k, "name_expr", j->specs[i].name_expr);
        cJSON_AddStringToObject(k, "lowered", j->imgs[i].lowered_name);
        cJSON_AddStringToObject(k, "key", j->imgs[i].key);
        cJSON_AddStringToObject(k, "template", j->specs[i].template_file);
        cJSON_AddNumberToObject(k, "offset", (double)off);
        cJSON_AddNumberToObject(k, "size", (double)j->imgs[i].cubin_len);
        cJSON_AddBoolToObject(k, "cached", all_cached || j->imgs[i].cached);
        cJSON_AddItemToArray(ks, k);
        off += j->imgs[i].cubin_len;
    }
    cJSON_AddNumberToObject(o, "payload_bytes", (double)off);
    char *text = kjit__reply_text(o, -1); /* NULL: out of memory */
    *len = text ? strlen(text) : 0;
    return text;
}

static void send_compiled(kjit_conn *c, uint64_t id, const char *text, size_t len, const uv_buf_t *cubins, int n)
{
    char head[32];
    int hn = snprintf(head, sizeof head, "{\"id\":%llu,", (unsigned long long)id);
    kjit__conn_send(c, head, (size_t)hn, text + 1, len - 1, cubins, n, 1);
}

/* ---- prewarm ------------------------------------------------------------ */

static void prewarm_finish(prewarm *pw)
{
    if (pw->submitting || pw->done < pw->total) return;
    kjit_conn *c = pw->c;
    cJSON *o = cJSON_CreateObject();
    kjit__json_add_id(o, pw->id);
    cJSON_AddBoolToObject(o, "ok", !pw->failed);
    if (pw->failed) {
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        /* compile_failed only where NVRTC failed: out of memory, say, is internal. */
        cJSON_AddStringToObject(e, "code", pw->cancelled ? "shutting_down" : pw->failed_other ? "internal" : "compile_failed");
        char msg[160];
        if (pw->cancelled)
            snprintf(msg, sizeof msg, "%d of %d combinations failed, %d of them not started: the server is shutting "
                     "down (see failures)", pw->failed, pw->total, pw->cancelled);
        else snprintf(msg, sizeof msg, "%d of %d combinations failed (see failures)", pw->failed, pw->total);
        cJSON_AddStringToObject(e, "message", msg);
    }
    cJSON_AddNumberToObject(o, "combinations", pw->total);
    cJSON_AddNumberToObject(o, "kernels", pw->kernels);
    cJSON_AddNumberToObject(o, "compiled", pw->compiled);
    cJSON_AddNumberToObject(o, "cached", pw->cached);
    cJSON_AddNumberToObject(o, "failed", pw->failed);
    cJSON_AddItemToObject(o, "failures", pw->failures);
    char *text = kjit__reply_print(o, 1, pw->id);
    /* A client that left gets no reply: its cancelled jobs are no error. */
    if (pw->failed && !c->closing) c->srv->n.errors++;
    if (text) kjit__conn_send(c, text, strlen(text), NULL, 0, NULL, 0, 1);
    else kjit__conn_close(c);
    cJSON_free(text);
    if (!c->closing) kjit__conn_unpark(c, pw->id);
    free(pw);
    kjit__conn_unref(c);
}

static void prewarm_pump(prewarm *pw);

/* One combination of a prewarm is done. imgs NULL: all from the memo. */
static void prewarm_step(prewarm *pw, const kjit_req_tuple *t, int n, const kjit_kernel_image *imgs, int status,
                         const char *message)
{
    kjit_conn *c = pw->c;
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d", t->sm);
    int compiled = 0;
    pw->done++;
    if (status) {
        pw->failed++;
        pw->cancelled += status == JOB_CANCELLED;
        pw->failed_other |= status != JOB_CANCELLED && status != KJIT_ECOMPILE;
        if (cJSON_GetArraySize(pw->failures) < MAX_FAILURES_LISTED) {
            cJSON *f = cJSON_CreateObject();
            cJSON_AddStringToObject(f, "op", t->op);
            cJSON_AddNumberToObject(f, "hidden", t->hidden);
            cJSON_AddStringToObject(f, "dtype", kjit_dtype_name(t->dtype));
            cJSON_AddStringToObject(f, "arch", arch);
            cJSON_AddStringToObject(f, "error", message);
            cJSON_AddItemToArray(pw->failures, f);
        }
    } else {
        for (int i = 0; i < n; ++i) compiled += imgs && !imgs[i].cached;
        pw->kernels += n;
        pw->compiled += compiled;
        pw->cached += n - compiled;
    }
    if (!c->closing && kjit__conn_backlog(c) < EVENT_BACKLOG) {
        char text[512];
        int len = snprintf(text, sizeof text,
                           "{\"id\":%llu,\"event\":\"progress\",\"done\":%d,\"total\":%d,\"op\":\"%s\",\"hidden\":%d,"
                           "\"dtype\":\"%s\",\"arch\":\"%s\",\"ok\":%s,\"kernels\":%d,\"compiled\":%d}",
                           (unsigned long long)pw->id, pw->done, pw->total, t->op, t->hidden,
                           kjit_dtype_name(t->dtype), arch, status ? "false" : "true", n, compiled);
        kjit__conn_send(c, text, (size_t)len, NULL, 0, NULL, 0, 0);
    }
}

/* ---- jobs --------------------------------------------------------------- */

/* On a pool thread: touches only its part of the job and the (thread-safe) context. */
static void work_cb(uv_work_t *req)
{
    part *p = req->data;
    job *j = p->job;
    kjit_server *s = j->srv;
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d", j->t.sm);
    if ((p->status = kjit_kernel_fetch(s->ctx, &j->specs[p->i], arch, &j->imgs[p->i])))
        p->message = strdup(kjit_last_error());
    kjit__jobs_snapshot(s);
}

/* The library's counters move only inside jobs, so a snapshot taken by each
 * (monotonic: keep the larger) is current once they are done; `stats` then
 * reads it without touching the cache or the disk. */
void kjit__jobs_snapshot(kjit_server *s)
{
    kjit_cache_counters cc;
    if (kjit_ctx_cache_counters(s->ctx, &cc) == KJIT_OK) {
        pthread_mutex_lock(&s->snap_mu);
        kjit_cache_counters *m = &s->snap;
        /* A kernel the disk cache could not store is served from memory
         * until the server stops, then lost: say so when it happens. */
        const uint64_t new_fails = cc.store_failures > m->store_failures ? cc.store_failures - m->store_failures : 0;
#define KJIT_MAX_INTO(f) m->f = cc.f > m->f ? cc.f : m->f
        KJIT_MAX_INTO(mem_hits); KJIT_MAX_INTO(disk_hits); KJIT_MAX_INTO(misses);
        KJIT_MAX_INTO(compiles); KJIT_MAX_INTO(bad_entries); KJIT_MAX_INTO(evictions);
        KJIT_MAX_INTO(store_failures);
#undef KJIT_MAX_INTO
        pthread_mutex_unlock(&s->snap_mu);
        if (new_fails)
            fprintf(stderr,
                    "kjit serve: %llu compiled kernel(s) could not be written to the cache %s (full disk? "
                    "permission? KJIT_LOG=1 says why); served from memory until the server stops\n",
                    (unsigned long long)new_fails, kjit_ctx_cache_dir(s->ctx));
    }
}

static void job_free(job *j)
{
    for (int i = 0; j->parts && i < j->n; ++i) free(j->parts[i].message);
    free(j->parts);
    free(j->specs);
    free(j->imgs);
    free(j->w);
    free(j);
}

/* Back on the loop: keep the memo, answer every waiter, drop the job. */
static void done_cb(uv_work_t *req, int status)
{
    part *p = req->data;
    job *j = p->job;
    if (status == UV_ECANCELED) p->status = JOB_CANCELLED;
    if (--j->left) return;
    kjit_server *s = j->srv;
    kjit_tuple_entry *e = j->e;
    s->jobs--;
    e->job = NULL;
    for (int i = 0; i < j->n && !j->status; ++i) {
        j->status = j->parts[i].status;
        j->message = j->parts[i].message;
    }
    size_t fresh_len = 0;
    char *fresh = NULL;
    if (!j->status) {
        e->n = j->n;
        e->cubins = malloc((size_t)j->n * sizeof *e->cubins);
        e->text = reply_text(j, 1, &e->text_len);
        fresh = reply_text(j, 0, &fresh_len);
        if (!e->cubins || !e->text || !fresh) {
            j->status = KJIT_ENOMEM;
            j->message = "out of memory for the reply";
        } else {
            for (int i = 0; i < j->n; ++i)
                e->cubins[i] = uv_buf_init((char *)j->imgs[i].cubin, (unsigned)j->imgs[i].cubin_len);
        }
    }
    int all_cached = 1;
    for (int i = 0; i < j->n; ++i) all_cached &= j->imgs[i].cached;
    /* The first failed kernel's cause, in kernel order: a compile error
     * before a cancelled kernel is reported as such. */
    const int cancelled = j->status == JOB_CANCELLED;
    const char *why = j->message ? j->message : kjit_status_string(j->status);
    char stopped[128];
    if (cancelled) {
        /* Stopping cancels the kernels not yet begun; others may have run. */
        int n_cancelled = 0;
        for (int i = 0; i < j->n; ++i) n_cancelled += j->parts[i].status == JOB_CANCELLED;
        if (n_cancelled == j->n) {
            why = "the server is shutting down: this compile had not started";
        } else {
            snprintf(stopped, sizeof stopped,
                     "the server is shutting down: %d of this compile's %d kernels had not started", n_cancelled,
                     j->n);
            why = stopped;
        }
    }
    /* The entry's fate first: a prewarm below may ask for this tuple again
     * (a failed one then starts anew; a done one is a memo hit). An orphan's
     * entry is already out of the map (a new request started a new job). */
    if (j->orphan) entry_free(e);
    else if (j->status) map_remove(s, e);
    else lru_push(&s->map, e);
    for (int i = 0; i < j->n_w; ++i) {
        waiter *w = &j->w[i];
        if (w->pw) {
            w->pw->waiting -= j->n;
            prewarm_step(w->pw, &j->t, j->n, j->imgs, j->status, why);
            prewarm_pump(w->pw);
            continue;
        }
        kjit_conn *c = w->c;
        if (!c->closing) {
            kjit__conn_unpark(c, w->id);
            if (j->status) {
                kjit__conn_error(c, 1, w->id,
                                 cancelled ? "shutting_down"
                                 : j->status == KJIT_ECOMPILE ? "compile_failed" : "internal", "%s", why);
            } else {
                ++*(all_cached ? &s->n.hits : &s->n.misses);
                send_compiled(c, w->id, fresh, fresh_len, e->cubins, e->n);
            }
        }
        kjit__conn_unref(c);
    }
    if (!j->status) memo_trim(s);
    cJSON_free(fresh);
    job_free(j);
    kjit__server_drain_check(s);
}

void kjit__jobs_cancel(kjit_server *s)
{
    for (size_t i = 0; i < s->map.n_slots; ++i)
        for (kjit_tuple_entry *e = s->map.slots[i]; e; e = e->next)
            for (int k = 0; e->job && k < e->job->n; ++k)
                kjit__pool_cancel(&e->job->parts[k].item); /* UV_EBUSY once it runs */
}

/* The client of waiter w has left (or is leaving). */
static int waiter_gone(const waiter *w) { return (w->pw ? w->pw->c : w->c)->closing; }

void kjit__jobs_abandon(kjit_server *s)
{
    for (size_t i = 0; i < s->map.n_slots; ++i)
        for (kjit_tuple_entry *e = s->map.slots[i], *next; e; e = next) {
            next = e->next;
            job *j = e->job;
            if (!j || j->orphan || !j->n_w) continue;
            int gone = 1;
            for (int k = 0; k < j->n_w && gone; ++k) gone = waiter_gone(&j->w[k]);
            if (!gone) continue;
            int cancelled = 0;
            for (int k = 0; k < j->n; ++k)
                cancelled += kjit__pool_cancel(&j->parts[k].item) == 0; /* UV_EBUSY once it runs */
            /* With a part cancelled the job fails: out of the map now, so
             * that a request for the tuple before its parts are back
             * starts a new job instead of waiting on this one. */
            if (cancelled) {
                map_detach(s, e);
                j->orphan = 1;
            }
        }
}

/* The entry for t, starting its job (owner's pool work) when it has none.
 * NULL: out of memory. */
static kjit_tuple_entry *entry_for(kjit_server *s, const kjit_req_tuple *t, kjit_conn *owner)
{
    uint64_t h = tuple_hash(t);
    kjit_tuple_entry *e = map_find(s, t, h);
    if (e) return e;
    int n = 0;
    if (kjit_op_kernels(t->op, t->hidden, t->dtype, NULL, 0, &n) || n < 1) return NULL;
    e = calloc(1, sizeof *e);
    job *j = calloc(1, sizeof *j);
    if (!e || !j || !(j->specs = calloc((size_t)n, sizeof *j->specs)) || !(j->imgs = calloc((size_t)n, sizeof *j->imgs)) ||
        !(j->parts = calloc((size_t)n, sizeof *j->parts)) || kjit__op_kernels_arch(t->op, t->hidden, t->dtype, t->sm, j->specs, n, &n)) {
        free(e);
        if (j) job_free(j);
        return NULL;
    }
    e->hash = h;
    e->t = *t;
    e->job = j;
    j->srv = s;
    j->e = e;
    j->t = *t;
    j->n = n;
    if (map_add(s, e)) {
        job_free(j);
        free(e);
        return NULL;
    }
    s->jobs++;
    for (int i = 0; i < n; ++i) {
        j->parts[i] = (part){.job = j, .i = i};
        j->parts[i].item.work.data = &j->parts[i];
        j->left++;
        kjit__pool_submit(owner, &j->parts[i].item, work_cb, done_cb);
    }
    return e;
}

static int add_waiter(job *j, waiter w)
{
    if (j->n_w == j->cap_w) {
        int cap = j->cap_w ? j->cap_w * 2 : 4;
        waiter *nw = realloc(j->w, (size_t)cap * sizeof *nw);
        if (!nw) return -1;
        j->w = nw;
        j->cap_w = cap;
    }
    j->w[j->n_w++] = w;
    return 0;
}

/* Client c now waits on job j too: if another client started it, its
 * parts still in that client's FIFO go to the front (in order), so c waits
 * for one turn of the starter's, not for its whole queue (pool.c). */
static void joined(job *j, const kjit_conn *c)
{
    for (int i = j->n - 1; i >= 0; --i)
        if (j->parts[i].item.owner != c) kjit__pool_expedite(&j->parts[i].item);
}

void kjit__jobs_compile(kjit_conn *c, uint64_t id, const kjit_req_tuple *t)
{
    kjit_server *s = c->srv;
    s->n.compile_requests++;
    kjit_tuple_entry *e = map_find(s, t, tuple_hash(t));
    if (e && !e->job) {
        s->n.hits++;
        lru_touch(&s->map, e);
        send_compiled(c, id, e->text, e->text_len, e->cubins, e->n);
        return;
    }
    kjit__conn_park(c, id);
    if (!(e = entry_for(s, t, c)) || add_waiter(e->job, (waiter){c, id, NULL})) {
        kjit__conn_unpark(c, id);
        kjit__conn_error(c, 1, id, "internal", "out of memory for a compile job");
        return;
    }
    joined(e->job, c);
    kjit__conn_ref(c);
}

/* Hands out combinations until PREWARM_WINDOW kernels wait on jobs or none
 * is left; those found in the memo (or that cannot start) finish at once.
 * `submitting` holds the final reply until the loop is over. */
static void prewarm_pump(prewarm *pw)
{
    if (pw->submitting) return;
    kjit_server *s = pw->c->srv;
    pw->submitting = 1;
    while (pw->next < pw->total && pw->waiting < PREWARM_WINDOW) {
        if (pw->c->closing) { /* nobody to answer: the rest is dropped, not failed */
            pw->done += pw->total - pw->next;
            pw->next = pw->total;
            break;
        }
        const kjit_req_tuple *t = &pw->t[pw->next++];
        if (s->draining) {
            prewarm_step(pw, t, 0, NULL, JOB_CANCELLED, "the server is shutting down");
            continue;
        }
        kjit_tuple_entry *e = entry_for(s, t, pw->c);
        if (e && !e->job) {
            lru_touch(&s->map, e);
            prewarm_step(pw, t, e->n, NULL, 0, NULL);
        } else if (!e || add_waiter(e->job, (waiter){pw->c, pw->id, pw})) {
            prewarm_step(pw, t, 0, NULL, KJIT_ENOMEM, "out of memory for a compile job");
        } else {
            joined(e->job, pw->c);
            pw->waiting += e->job->n;
        }
    }
    pw->submitting = 0;
    prewarm_finish(pw);
}

void kjit__jobs_prewarm(kjit_conn *c, uint64_t id, const kjit_req *r)
{
    kjit_server *s = c->srv;
    s->n.prewarm_requests++;
    const int total = r->n_ops * r->n_hidden * r->n_dtypes * r->n_sms;
    prewarm *pw = calloc(1, sizeof *pw + (size_t)total * sizeof pw->t[0]);
    if (!pw || !(pw->failures = cJSON_CreateArray())) {
        free(pw);
        kjit__conn_error(c, 1, id, "internal", "out of memory for a prewarm");
        return;
    }
    kjit__conn_park(c, id);
    kjit__conn_ref(c);
    pw->c = c;
    pw->id = id;
    pw->total = total;
    int k = 0;
    for (int a = 0; a < r->n_sms; ++a)
        for (int o = 0; o < r->n_ops; ++o)
            for (int h = 0; h < r->n_hidden; ++h)
                for (int d = 0; d < r->n_dtypes; ++d)
                    pw->t[k++] = (kjit_req_tuple){r->ops[o], r->hidden[h], r->dtypes[d], r->sms[a]};
    prewarm_pump(pw);
}
