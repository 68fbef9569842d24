/* loadgen: closed-loop load on a running `kjit serve`.
 *
 *   loadgen [--socket PATH] [--clients N] [--requests N] [--mix ping:1,stats:0,compile:1]
 *           [--pipeline D] [--threads T] [--op OP --hidden H --dtype DT --arch SM] [--json]
 *
 * Each client is one connection (hello first) keeping `pipeline` requests
 * outstanding until it has had `requests` replies; the mix picks each
 * request's type by weight. The compile tuple is fetched once before the
 * clock starts, so compile requests measure the cached path. Prints
 * requests/s and the p50/p99/max latency of one request (send to reply). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client/frame.h"
#include "kjit_client.h"

enum { PING, STATS, COMPILE, N_KINDS };
static const char *kind_names[N_KINDS] = {"ping", "stats", "compile"};

typedef struct opts {
    const char *socket;
    int clients, requests, pipeline, threads, json;
    int weight[N_KINDS];
    char compile[256]; /* the compile request's fields after the id */
} opts;

typedef struct conn {
    int fd;
    uint64_t next_id, replies, sent;
    double *sent_at; /* by id % pipeline */
    char *rbuf;
    size_t rlen, rcap;
    char wbuf[512];
    size_t wlen, woff;
    uint64_t rng;
} conn;

typedef struct worker {
    const opts *o;
    conn *conns;
    int n;
    float *lat; /* seconds, one per reply */
    size_t n_lat;
    uint64_t errors;
    int failed;
} worker;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int pick(const opts *o, uint64_t *rng)
{
    int total = o->weight[PING] + o->weight[STATS] + o->weight[COMPILE];
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    int r = (int)((*rng >> 33) % (uint64_t)total);
    for (int k = 0; k < N_KINDS; ++k)
        if ((r -= o->weight[k]) < 0) return k;
    return PING;
}

/* Queues the next request's frame in c->wbuf (empty before the call). */
static void build(const opts *o, conn *c)
{
    int k = pick(o, &c->rng);
    char *json = c->wbuf + KJIT_FRAME_HEADER;
    int n = k == COMPILE ? snprintf(json, sizeof c->wbuf - KJIT_FRAME_HEADER, "{\"id\":%llu,%s}",
                                    (unsigned long long)c->next_id, o->compile)
                         : snprintf(json, sizeof c->wbuf - KJIT_FRAME_HEADER, "{\"id\":%llu,\"type\":\"%s\"}",
                                    (unsigned long long)c->next_id, kind_names[k]);
    kjit__frame_encode((uint8_t *)c->wbuf, (uint32_t)n, 0);
    c->sent_at[c->next_id % (uint64_t)o->pipeline] = now_s();
    c->next_id++;
    c->sent++;
    c->wlen = KJIT_FRAME_HEADER + (size_t)n;
    c->woff = 0;
}

static int flush(conn *c)
{
    while (c->woff < c->wlen) {
        ssize_t w = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
        if (w < 0) return errno == EAGAIN ? 0 : -1;
        c->woff += (size_t)w;
    }
    c->wlen = c->woff = 0;
    return 0;
}

/* Sends requests while this client may have more outstanding. */
static int pump(const opts *o, conn *c)
{
    for (;;) {
        if (c->wlen && (flush(c) || c->wlen)) return c->wlen ? 0 : -1;
        if (c->sent >= (uint64_t)o->requests || c->sent - c->replies >= (uint64_t)o->pipeline) return 0;
        build(o, c);
    }
}

/* Takes every complete reply out of the read buffer. */
static void replies(worker *w, conn *c)
{
    size_t off = 0;
    while (c->rlen - off >= KJIT_FRAME_HEADER) {
        kjit_frame_header h;
        char why[256];
        if (kjit__frame_decode((uint8_t *)c->rbuf + off, KJIT_MAX_REPLY_JSON, KJIT_MAX_REPLY_PAYLOAD, &h, why, sizeof why)) {
            fprintf(stderr, "loadgen: %s\n", why);
            w->failed = 1;
            return;
        }
        size_t total = KJIT_FRAME_HEADER + (size_t)h.json_len + h.payload_len;
        if (c->rlen - off < total) break;
        const char *json = c->rbuf + off + KJIT_FRAME_HEADER;
        unsigned long long id = strtoull(json + 6, NULL, 10); /* replies start {"id":N */
        double t = now_s() - c->sent_at[id % (unsigned long long)w->o->pipeline];
        if (!memmem(json, h.json_len, "\"ok\":true", 9)) w->errors++;
        w->lat[w->n_lat++] = (float)t;
        c->replies++;
        off += total;
    }
    memmove(c->rbuf, c->rbuf + off, c->rlen - off);
    c->rlen -= off;
}

static void *run_worker(void *arg)
{
    worker *w = arg;
    const opts *o = w->o;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < w->n; ++i) {
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = &w->conns[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, w->conns[i].fd, &ev);
        if (pump(o, &w->conns[i])) w->failed = 1;
    }
    int done = 0;
    struct epoll_event evs[64];
    while (done < w->n && !w->failed) {
        int n = epoll_wait(ep, evs, 64, 30000);
        if (n <= 0) {
            fprintf(stderr, "loadgen: no reply for 30 s\n");
            w->failed = 1;
            break;
        }
        for (int i = 0; i < n; ++i) {
            conn *c = evs[i].data.ptr;
            if (c->replies >= (uint64_t)o->requests) continue;
            for (;;) {
                if (c->rcap - c->rlen < 65536) {
                    c->rcap = c->rcap * 2 + 65536;
                    c->rbuf = realloc(c->rbuf, c->rcap);
                }
                ssize_t r = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
                if (r > 0) {
                    c->rlen += (size_t)r;
                    continue;
                }
                if (r == 0 || errno != EAGAIN) {
                    fprintf(stderr, "loadgen: the server closed a connection\n");
                    w->failed = 1;
                }
                break;
            }
            replies(w, c);
            if (pump(o, c)) w->failed = 1;
            if (c->replies >= (uint64_t)o->requests) done++;
        }
    }
    close(ep);
    return NULL;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int connect_client(const char *path, conn *c)
{
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof a)) return -1;
    /* hello first: queued ahead of the first request, its reply counted out below. */
    char hello[64];
    int n = snprintf(hello + KJIT_FRAME_HEADER, sizeof hello - KJIT_FRAME_HEADER, "{\"id\":0,\"type\":\"hello\"}");
    kjit__frame_encode((uint8_t *)hello, (uint32_t)n, 0);
    if (send(c->fd, hello, KJIT_FRAME_HEADER + (size_t)n, MSG_NOSIGNAL) != KJIT_FRAME_HEADER + n) return -1;
    return 0;
}

static const char usage[] =
    "usage: loadgen [--socket PATH] [--clients N] [--requests N] [--mix ping:1,stats:0,compile:1]\n"
    "               [--pipeline D] [--threads T] [--op OP] [--hidden H] [--dtype DT] [--arch SM] [--json]\n";

int main(int argc, char **argv)
{
    opts o = {.clients = 64, .requests = 1000, .pipeline = 1, .threads = 1, .weight = {1, 0, 1}};
    const char *op = "timestep_sinusoid", *dtype = "bf16", *arch = "sm_90", *mix = NULL;
    int hidden = 256;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) { o.json = 1; continue; }
        if (!strcmp(a, "--help") || !v) { fputs(usage, v ? stdout : stderr); return v ? 0 : 2; }
        ++i;
        if (!strcmp(a, "--socket")) o.socket = v;
        else if (!strcmp(a, "--clients")) o.clients = atoi(v);
        else if (!strcmp(a, "--requests")) o.requests = atoi(v);
        else if (!strcmp(a, "--pipeline")) o.pipeline = atoi(v);
        else if (!strcmp(a, "--threads")) o.threads = atoi(v);
        else if (!strcmp(a, "--mix")) mix = v;
        else if (!strcmp(a, "--op")) op = v;
        else if (!strcmp(a, "--hidden")) hidden = atoi(v);
        else if (!strcmp(a, "--dtype")) dtype = v;
        else if (!strcmp(a, "--arch")) arch = v;
        else { fprintf(stderr, "loadgen: unknown option %s\n%s", a, usage); return 2; }
    }
    if (mix) {
        memset(o.weight, 0, sizeof o.weight);
        char buf[256];
        snprintf(buf, sizeof buf, "%s", mix);
        for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *colon = strchr(t, ':');
            int k = 0;
            if (colon) *colon = '\0';
            while (k < N_KINDS && strcmp(t, kind_names[k])) ++k;
            if (k == N_KINDS) { fprintf(stderr, "loadgen: --mix: unknown kind '%s'\n", t); return 2; }
            o.weight[k] = colon ? atoi(colon + 1) : 1;
        }
    }
    if (o.clients < 1 || o.requests < 1 || o.pipeline < 1 || o.threads < 1 || o.threads > o.clients ||
        o.weight[PING] + o.weight[STATS] + o.weight[COMPILE] < 1) {
        fprintf(stderr, "loadgen: bad numbers\n%s", usage);
        return 2;
    }
    snprintf(o.compile, sizeof o.compile, "\"type\":\"compile\",\"op\":\"%s\",\"hidden\":%d,\"dtype\":\"%s\",\"arch\":\"%s\"",
             op, hidden, dtype, arch);

    char path[108];
    const char *env = getenv("KJIT_SERVER");
    if (o.socket) snprintf(path, sizeof path, "%s", o.socket);
    else if (env && *env) snprintf(path, sizeof path, "%s", env);
    else if (kjit_client_default_socket(path, sizeof path)) return 1;
    /* Warm the compile tuple so compile requests measure the cached path. */
    kjit_client *kc;
    if (kjit_client_connect(&kc, path, 600000)) {
        fprintf(stderr, "loadgen: %s\n", kjit_last_error());
        return 1;
    }
    char warm[300];
    snprintf(warm, sizeof warm, "{%s}", o.compile);
    kjit_client_reply r;
    if (o.weight[COMPILE] && (kjit_client_request(kc, warm, NULL, 0, NULL, NULL, &r) || !r.ok)) {
        fprintf(stderr, "loadgen: warm-up compile failed: %s\n", r.json ? r.json : kjit_last_error());
        return 1;
    }
    if (o.weight[COMPILE]) kjit_client_reply_free(&r);
    kjit_client_close(kc);

    conn *conns = calloc((size_t)o.clients, sizeof *conns);
    for (int i = 0; i < o.clients; ++i) {
        conns[i].sent_at = calloc((size_t)o.pipeline, sizeof(double));
        conns[i].next_id = 1;
        conns[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        if (connect_client(path, &conns[i])) {
            fprintf(stderr, "loadgen: cannot connect client %d\n", i);
            return 1;
        }
    }
    /* Each connection's hello reply is read (blocking) before the clock starts. */
    for (int i = 0; i < o.clients; ++i) {
        conn *c = &conns[i];
        c->rcap = 65536;
        c->rbuf = malloc(c->rcap);
        while (c->rlen < KJIT_FRAME_HEADER || c->rlen < KJIT_FRAME_HEADER + ((uint8_t)c->rbuf[8] | (size_t)(uint8_t)c->rbuf[9] << 8)) {
            ssize_t n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
            if (n == 0 || (n < 0 && errno != EAGAIN)) { fprintf(stderr, "loadgen: hello failed\n"); return 1; }
            if (n > 0) c->rlen += (size_t)n;
        }
        c->rlen = 0;
    }
    worker *ws = calloc((size_t)o.threads, sizeof *ws);
    pthread_t *th = calloc((size_t)o.threads, sizeof *th);
    double t0 = now_s();
    for (int t = 0, first = 0; t < o.threads; ++t) {
        int n = o.clients / o.threads + (t < o.clients % o.threads);
        ws[t] = (worker){.o = &o, .conns = conns + first, .n = n};
        ws[t].lat = malloc((size_t)n * (size_t)o.requests * sizeof(float));
        first += n;
        pthread_create(&th[t], NULL, run_worker, &ws[t]);
    }
    size_t total = 0;
    uint64_t errors = 0;
    int failed = 0;
    for (int t = 0; t < o.threads; ++t) {
        pthread_join(th[t], NULL);
        total += ws[t].n_lat;
        errors += ws[t].errors;
        failed |= ws[t].failed;
    }
    double secs = now_s() - t0;
    float *lat = malloc((total ? total : 1) * sizeof *lat);
    for (int t = 0, k = 0; t < o.threads; ++t) {
        memcpy(lat + k, ws[t].lat, ws[t].n_lat * sizeof *lat);
        k += (int)ws[t].n_lat;
    }
    qsort(lat, total, sizeof *lat, cmp_float);
    double p50 = total ? lat[total / 2] * 1e3 : 0, p99 = total ? lat[total * 99 / 100] * 1e3 : 0;
    double mx = total ? lat[total - 1] * 1e3 : 0;
    char mixs[96];
    snprintf(mixs, sizeof mixs, "ping:%d,stats:%d,compile:%d", o.weight[PING], o.weight[STATS], o.weight[COMPILE]);
    if (o.json)
        printf("{\"clients\":%d,\"requests\":%zu,\"mix\":\"%s\",\"pipeline\":%d,\"seconds\":%.3f,\"req_per_s\":%.0f,"
               "\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"errors\":%llu}\n",
               o.clients, total, mixs, o.pipeline, secs, (double)total / secs, p50, p99, mx, (unsigned long long)errors);
    else
        printf("loadgen: %d clients, %zu requests (%s, pipeline %d) in %.2f s: %.0f req/s, p50 %.3f ms, p99 %.3f ms, "
               "max %.3f ms, %llu errors\n",
               o.clients, total, mixs, o.pipeline, secs, (double)total / secs, p50, p99, mx, (unsigned long long)errors);
    for (int t = 0; t < o.threads; ++t) free(ws[t].lat);
    for (int i = 0; i < o.clients; ++i) {
        close(conns[i].fd);
        free(conns[i].sent_at);
        free(conns[i].rbuf);
    }
    free(lat);
    free(ws);
    free(th);
    free(conns);
    return failed || errors ? 1 : 0;
}
