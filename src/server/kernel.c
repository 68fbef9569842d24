/* kernel: one kernel by template file and template-id, the request the
 * embedded library's build sends when KJIT_SERVER names this server.
 *
 * No memo in front, unlike compile: a library asks for a key only on a miss
 * of its own cache, so repeats are rare, and kjit_kernel_fetch answers a
 * repeat from the library cache's memory. The fetch runs on a pool thread;
 * one not yet started is cancelled when its client leaves or the server
 * stops (a pipelining client could queue hundreds, compiled for nobody);
 * concurrent requests for one key share one build inside the library cache
 * (and, through its lock, across processes). The reply's cubin is the
 * cache's own, valid until kjit_ctx_destroy, which comes after the loop. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

typedef struct kjit_kernel_job {
    kjit_pool_item item; /* item.work.data: the job */
    struct kjit_kernel_job *prev, *next; /* the server's queued and running kernel jobs */
    kjit_server *srv;
    kjit_conn *c; /* holds a reference */
    uint64_t id;
    kjit_kernel_spec spec;
    int sm;
    kjit_kernel_image img;
    int status;
    char *message;
} kernel_job;

/* On a pool thread: touches only its job and the (thread-safe) context. */
static void work_cb(uv_work_t *req)
{
    kernel_job *j = req->data;
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d", j->sm);
    if ((j->status = kjit_kernel_fetch(j->srv->ctx, &j->spec, arch, &j->img))) j->message = strdup(kjit_last_error());
    kjit__jobs_snapshot(j->srv);
}

/* The compile reply's shape with the one kernel, so clients parse both alike. */
static char *reply_text(const kernel_job *j)
{
    cJSON *o = cJSON_CreateObject(), *ks, *k;
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d", j->sm);
    kjit__json_add_id(o, j->id);
    cJSON_AddTrueToObject(o, "ok");
    cJSON_AddStringToObject(o, "op", j->spec.op);
    cJSON_AddStringToObject(o, "arch", arch);
    cJSON_AddBoolToObject(o, "cached", j->img.cached);
    cJSON_AddItemToObject(o, "kernels", ks = cJSON_CreateArray());
    cJSON_AddItemToArray(ks, k = cJSON_CreateObject());
    cJSON_AddStringToObject(k, "name_expr", j->spec.name_expr);
    cJSON_AddStringToObject(k, "lowered", j->img.lowered_name);
    cJSON_AddStringToObject(k, "key", j->img.key);
    cJSON_AddStringToObject(k, "template", j->spec.template_file);
    cJSON_AddNumberToObject(k, "offset", 0);
    cJSON_AddNumberToObject(k, "size", (double)j->img.cubin_len);
    cJSON_AddBoolToObject(k, "cached", j->img.cached);
    cJSON_AddNumberToObject(o, "payload_bytes", (double)j->img.cubin_len);
    return kjit__reply_text(o, 1); /* NULL: out of memory */
}

static void done_cb(uv_work_t *req, int status)
{
    kernel_job *j = req->data;
    kjit_server *s = j->srv;
    kjit_conn *c = j->c;
    s->jobs--;
    *(j->prev ? &j->prev->next : &s->kernel_jobs) = j->next;
    if (j->next) j->next->prev = j->prev;
    if (!c->closing) {
        kjit__conn_unpark(c, j->id);
        char *text = j->status || status == UV_ECANCELED ? NULL : reply_text(j);
        if (status == UV_ECANCELED) {
            /* Only stopping cancels the job of a connection still open. */
            kjit__conn_error(c, 1, j->id, "shutting_down", "the server is shutting down: this compile had not started");
        } else if (j->status) {
            kjit__conn_error(c, 1, j->id, j->status == KJIT_ECOMPILE ? "compile_failed" : "internal", "%s",
                             j->message ? j->message : kjit_status_string(j->status));
        } else if (!text) {
            kjit__conn_error(c, 1, j->id, "internal", "out of memory for the reply");
        } else {
            ++*(j->img.cached ? &s->n.hits : &s->n.misses);
            uv_buf_t cubin = uv_buf_init((char *)j->img.cubin, (unsigned)j->img.cubin_len);
            kjit__conn_send(c, text, strlen(text), NULL, 0, &cubin, 1, 1);
        }
        cJSON_free(text);
    }
    kjit__conn_unref(c);
    free(j->message);
    free(j);
    kjit__server_drain_check(s);
}

void kjit__kernel_request(kjit_conn *c, uint64_t id, const kjit_kernel_spec *spec, int sm)
{
    kjit_server *s = c->srv;
    s->n.kernel_requests++;
    kernel_job *j = calloc(1, sizeof *j);
    if (!j) {
        kjit__conn_error(c, 1, id, "internal", "out of memory for a kernel job");
        return;
    }
    kjit__conn_park(c, id);
    kjit__conn_ref(c);
    j->srv = s;
    j->c = c;
    j->id = id;
    j->spec = *spec;
    j->sm = sm;
    j->item.work.data = j;
    j->next = s->kernel_jobs;
    if (j->next) j->next->prev = j;
    s->kernel_jobs = j;
    s->jobs++;
    kjit__pool_submit(c, &j->item, work_cb, done_cb);
}

void kjit__kernel_cancel(kjit_server *s, const kjit_conn *c)
{
    for (kernel_job *j = s->kernel_jobs; j; j = j->next)
        if (!c || j->c == c) kjit__pool_cancel(&j->item); /* UV_EBUSY once it runs */
}
