/* One request: parse and validate (request.c), then answer it here (the
 * cheap requests) or hand it to jobs.c (compile, prewarm), kernel.c, or the
 * GPU lane (run.c, tune.c). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client/frame.h"
#include "core/ctx.h"
#include "server/server_internal.h"

static void reply_json(kjit_conn *c, cJSON *o, uint64_t id)
{
    char *text = kjit__reply_print(o, 1, id);
    if (!text) {
        kjit__conn_close(c);
        return;
    }
    kjit__conn_send(c, text, strlen(text), NULL, 0, NULL, 0, 1);
    cJSON_free(text);
}

static cJSON *ok_reply(uint64_t id)
{
    cJSON *o = cJSON_CreateObject();
    kjit__json_add_id(o, id);
    cJSON_AddTrueToObject(o, "ok");
    return o;
}

static void hello(kjit_conn *c, const kjit_req *r)
{
    kjit_server *s = c->srv;
    c->helloed = 1;
    cJSON *o = ok_reply(r->id), *a;
    cJSON_AddNumberToObject(o, "version", r->version);
    cJSON_AddStringToObject(o, "server", "kjit " KJIT_VERSION_STRING);
    int gpu = kjit_ctx_has_device(s->ctx);
    const char *caps[] = {"ping", "stats", "compile", "kernel", "prewarm", "shutdown", gpu ? "run" : NULL,
                          gpu ? "tune" : NULL};
    cJSON_AddItemToObject(o, "capabilities", a = cJSON_CreateArray());
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; ++i)
        if (caps[i]) cJSON_AddItemToArray(a, cJSON_CreateString(caps[i]));
    cJSON_AddItemToObject(o, "ops", a = cJSON_CreateArray());
    for (int i = 0; i < kjit_op_count(); ++i) cJSON_AddItemToArray(a, cJSON_CreateString(kjit_op_name(i)));
    cJSON_AddStringToObject(o, "arch", kjit_ctx_arch(s->ctx));
    cJSON_AddBoolToObject(o, "gpu", gpu);
    /* A library whose cache shares this directory must not ask for kernels:
     * its build holds the directory's lock on the key this server would
     * then wait for (src/core/remote.c). */
    cJSON_AddStringToObject(o, "cache_dir", kjit_ctx_cache_dir(s->ctx));
    cJSON *l = cJSON_AddObjectToObject(o, "limits");
    cJSON_AddNumberToObject(l, "max_request_json", KJIT_MAX_REQUEST_JSON);
    cJSON_AddNumberToObject(l, "max_request_payload", KJIT_MAX_REQUEST_PAYLOAD);
    cJSON_AddNumberToObject(l, "max_json_depth", KJIT_MAX_JSON_DEPTH);
    cJSON_AddNumberToObject(l, "max_string", KJIT_REQ_MAX_STRING);
    cJSON_AddNumberToObject(l, "max_expr", KJIT_REQ_MAX_EXPR);
    cJSON_AddNumberToObject(l, "max_pending", s->cfg.max_pending);
    cJSON_AddNumberToObject(l, "max_clients", s->cfg.max_clients);
    cJSON_AddNumberToObject(l, "idle_timeout_s", s->cfg.idle_timeout_s);
    cJSON_AddNumberToObject(l, "max_prewarm", KJIT_REQ_MAX_TUPLES);
    cJSON_AddNumberToObject(l, "max_run_buffers", KJIT_RUN_MAX_BUFFERS);
    reply_json(c, o, r->id);
}

static void stats(kjit_conn *c, uint64_t id)
{
    kjit_server *s = c->srv;
    kjit_cache_counters cc;
    pthread_mutex_lock(&s->snap_mu);
    cc = s->snap;
    pthread_mutex_unlock(&s->snap_mu);
    cJSON *o = ok_reply(id);
    cJSON_AddNumberToObject(o, "uptime_s", (double)(uv_now(&s->loop) - s->start_ms) / 1000.0);
    cJSON_AddNumberToObject(o, "requests", (double)s->n.requests);
    cJSON_AddNumberToObject(o, "errors", (double)s->n.errors);
    cJSON_AddNumberToObject(o, "compile_requests", (double)s->n.compile_requests);
    cJSON_AddNumberToObject(o, "kernel_requests", (double)s->n.kernel_requests);
    cJSON_AddNumberToObject(o, "prewarm_requests", (double)s->n.prewarm_requests);
    cJSON_AddNumberToObject(o, "run_requests", (double)s->n.run_requests);
    cJSON_AddNumberToObject(o, "tune_requests", (double)s->n.tune_requests);
    cJSON_AddNumberToObject(o, "run_memo_hits", (double)s->n.run_memo_hits);
    cJSON_AddNumberToObject(o, "run_graph_replays", (double)s->n.run_graph_replays);
    cJSON_AddNumberToObject(o, "runs_dropped", (double)s->n.runs_dropped);
    cJSON_AddNumberToObject(o, "hits", (double)s->n.hits);
    cJSON_AddNumberToObject(o, "misses", (double)s->n.misses);
    cJSON_AddNumberToObject(o, "compiles", (double)cc.compiles);
    cJSON_AddNumberToObject(o, "in_flight", (double)s->in_flight);
    cJSON_AddNumberToObject(o, "jobs", s->jobs);
    cJSON_AddNumberToObject(o, "clients", s->n_clients);
    cJSON_AddNumberToObject(o, "clients_total", (double)s->n.clients_total);
    cJSON_AddNumberToObject(o, "refused", (double)s->n.refused);
    cJSON_AddNumberToObject(o, "accept_pauses", (double)s->n.accept_pauses);
    cJSON_AddNumberToObject(o, "bad_frames", (double)s->n.bad_frames);
    cJSON_AddNumberToObject(o, "timeouts", (double)s->n.idle_closed);
    cJSON_AddNumberToObject(o, "memo", (double)kjit__jobs_memo_count(s));
    cJSON_AddNumberToObject(o, "memo_evictions", (double)kjit__jobs_memo_evictions(s));
    cJSON *k = cJSON_AddObjectToObject(o, "cache");
    cJSON_AddNumberToObject(k, "mem_hits", (double)cc.mem_hits);
    cJSON_AddNumberToObject(k, "disk_hits", (double)cc.disk_hits);
    cJSON_AddNumberToObject(k, "misses", (double)cc.misses);
    cJSON_AddNumberToObject(k, "compiles", (double)cc.compiles);
    cJSON_AddNumberToObject(k, "bad_entries", (double)cc.bad_entries);
    cJSON_AddNumberToObject(k, "evictions", (double)cc.evictions);
    cJSON_AddNumberToObject(k, "not_stored", (double)cc.store_failures);
    cJSON_AddStringToObject(o, "cache_dir", kjit_ctx_cache_dir(s->ctx));
    cJSON_AddNumberToObject(o, "pid", (double)getpid());
    reply_json(c, o, id);
}

const char *kjit__status_code(int status, const char *otherwise)
{
    switch (status) {
    case KJIT_EINVAL: return "bad_request";
    case KJIT_ENODRIVER:
    case KJIT_EUNSUPPORTED: return "unsupported";
    case KJIT_ECOMPILE: return "compile_failed";
    default: return otherwise;
    }
}

/* run and tune need the device the server's context has not got. */
static void no_gpu(kjit_conn *c, uint64_t id, const char *what)
{
    kjit_server *s = c->srv;
    kjit__conn_error(c, 1, id, "unsupported",
                     "no GPU (this server's context has no CUDA device: %s; compile and prewarm work, "
                     "%s does not)", s->ctx->no_gpu_reason[0] ? s->ctx->no_gpu_reason : "KJIT_ENODRIVER", what);
}

void kjit__dispatch(kjit_conn *c, const char *json, uint32_t json_len, uint32_t payload_len)
{
    kjit_server *s = c->srv;
    const double t_frame = kjit__now_us(); /* a run's us_in starts here */
    kjit_req r;
    kjit_req_error e;
    /* Counted with run_requests below: a run refused before it (no hello
     * yet, its id parked, a draining server) is neither. */
    const int memo_hit = kjit__run_memo_find(c, json, json_len, payload_len, &r);
    if (!memo_hit) {
        if (kjit__req_parse(json, json_len, payload_len, s->default_sm, &r, &e)) {
            kjit__conn_error(c, e.has_id, e.id, e.code, "%s", e.message);
            return;
        }
        if (r.type == KJIT_REQ_RUN) kjit__run_memo_keep(c, json, json_len, payload_len, &r);
    }
    if (!c->helloed && r.type != KJIT_REQ_HELLO) {
        kjit__conn_error(c, 1, r.id, "out_of_order", "%s before hello: the first request must be hello",
                         kjit__req_type_name(r.type));
        return;
    }
    /* An id still waiting for a worker is refused whatever the request (the
     * one place this is checked: kjit__conn_park relies on it): a ping or
     * stats answered under it would look to the client like that request's
     * reply. */
    if (kjit__conn_refuse_parked(c, r.id)) return;
    if (s->draining) {
        kjit__conn_error(c, 1, r.id, "shutting_down", "the server is shutting down");
        return;
    }
    switch (r.type) {
    case KJIT_REQ_HELLO:
        hello(c, &r);
        return;
    case KJIT_REQ_PING: {
        char text[64];
        int n = snprintf(text, sizeof text, "{\"id\":%llu,\"ok\":true}", (unsigned long long)r.id);
        kjit__conn_send(c, text, (size_t)n, NULL, 0, NULL, 0, 1);
        return;
    }
    case KJIT_REQ_STATS:
        stats(c, r.id);
        return;
    case KJIT_REQ_COMPILE:
        kjit__jobs_compile(c, r.id, &r.t);
        return;
    case KJIT_REQ_KERNEL:
        kjit__kernel_request(c, r.id, &r.spec, r.spec_sm);
        return;
    case KJIT_REQ_PREWARM:
        kjit__jobs_prewarm(c, r.id, &r);
        return;
    case KJIT_REQ_TUNE:
        s->n.tune_requests++;
        if (!s->gpu) no_gpu(c, r.id, "tune");
        else kjit__tune_request(c, r.id, &r.t);
        return;
    case KJIT_REQ_RUN:
        s->n.run_requests++;
        s->n.run_memo_hits += memo_hit != 0;
        /* The payload (the handles) follows the header in the frame. */
        if (!s->gpu) no_gpu(c, r.id, "run");
        else kjit__run_request(c, r.id, &r.run, (const uint8_t *)json + json_len, t_frame);
        return;
    case KJIT_REQ_SHUTDOWN:
        if (c->uid != geteuid()) {
            kjit__conn_error(c, 1, r.id, "not_allowed", "shutdown: only the server's own user (uid %u) may stop it",
                             (unsigned)geteuid());
            return;
        }
        reply_json(c, ok_reply(r.id), r.id);
        kjit__server_stop(s, "shutdown requested");
        return;
    }
}
