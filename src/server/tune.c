/* tune: kjit_tune on the server's device (docs/PROTOCOL.md).
 *
 * Each (op, hidden, dtype) has at most one job queued or running on the GPU
 * lane; a request for one already there waits on that job and gets its
 * result (single flight, as compile). The lane runs one item at a time, so
 * tunes never overlap each other or a run. The tuned config is used by the
 * server's context from then on and merged into its tuning file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tune_json.h"
#include "server/server_internal.h"

typedef struct tune_waiter {
    kjit_conn *c; /* holds a reference */
    uint64_t id;
} tune_waiter;

struct kjit_tune_job {
    kjit_gpu_item item; /* first: the lane hands this back */
    kjit_tune_job *next;
    kjit_server *srv;
    kjit_req_tuple t;
    tune_waiter *w;
    int n_w, cap_w;
    int status;
    char message[KJIT__ERROR_MAX + 64]; /* a status name, ": ", the library's message */
    kjit_tune_result res;
};

static void work_cb(kjit_gpu_item *it)
{
    kjit_tune_job *j = (kjit_tune_job *)it;
    j->status = kjit_tune(j->srv->ctx, j->t.op, j->t.hidden, j->t.dtype, &j->res);
    if (j->status) snprintf(j->message, sizeof j->message, "%s: %s", kjit_status_name(j->status), kjit_last_error());
    kjit__jobs_snapshot(j->srv); /* the candidates' compiles */
}

/* The reply after the id: ok, the key, the result as `kjit tune --json`
 * has it; a result that could not be saved (KJIT_EIO) says why. */
static char *reply_text(const kjit_tune_job *j)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddTrueToObject(o, "ok");
    cJSON_AddStringToObject(o, "op", j->t.op);
    cJSON_AddNumberToObject(o, "hidden", j->t.hidden);
    cJSON_AddStringToObject(o, "dtype", kjit_dtype_name(j->t.dtype));
    kjit__tune_result_json(o, &j->res);
    if (j->status) cJSON_AddStringToObject(o, "message", j->message);
    return kjit__reply_text(o, -1); /* NULL: out of memory */
}

static void done_cb(kjit_gpu_item *it)
{
    kjit_tune_job *j = (kjit_tune_job *)it;
    kjit_server *s = j->srv;
    kjit_tune_job **p = &s->tunes;
    while (*p != j) p = &(*p)->next;
    *p = j->next;
    s->jobs--;
    const int tuned = kjit__tune_result_tuned(j->status, &j->res);
    char *text = tuned ? reply_text(j) : NULL;
    for (int i = 0; i < j->n_w; ++i) {
        kjit_conn *c = j->w[i].c;
        if (!c->closing) {
            kjit__conn_unpark(c, j->w[i].id);
            if (!tuned) {
                kjit__conn_error(c, 1, j->w[i].id, kjit__status_code(j->status, "tune_failed"), "%s", j->message);
            } else if (!text) {
                kjit__conn_error(c, 1, j->w[i].id, "internal", "out of memory for the reply");
            } else {
                char head[32];
                int n = snprintf(head, sizeof head, "{\"id\":%llu,", (unsigned long long)j->w[i].id);
                kjit__conn_send(c, head, (size_t)n, text + 1, strlen(text) - 1, NULL, 0, 1);
            }
        }
        kjit__conn_unref(c);
    }
    cJSON_free(text);
    free(j->w);
    free(j);
    kjit__server_drain_check(s);
}

static int add_waiter(kjit_tune_job *j, kjit_conn *c, uint64_t id)
{
    if (j->n_w == j->cap_w) {
        int cap = j->cap_w ? j->cap_w * 2 : 4;
        tune_waiter *w = realloc(j->w, (size_t)cap * sizeof *w);
        if (!w) return -1;
        j->w = w;
        j->cap_w = cap;
    }
    j->w[j->n_w++] = (tune_waiter){c, id};
    return 0;
}

void kjit__tune_request(kjit_conn *c, uint64_t id, const kjit_req_tuple *t)
{
    kjit_server *s = c->srv;
    kjit_tune_job *j = s->tunes;
    while (j && !(j->t.op == t->op && j->t.hidden == t->hidden && j->t.dtype == t->dtype)) j = j->next;
    const int fresh = !j;
    if (fresh && !(j = calloc(1, sizeof *j))) {
        kjit__conn_error(c, 1, id, "internal", "out of memory for a tune");
        return;
    }
    kjit__conn_park(c, id);
    if (add_waiter(j, c, id)) {
        kjit__conn_unpark(c, id);
        if (fresh) free(j);
        kjit__conn_error(c, 1, id, "internal", "out of memory for a tune");
        return;
    }
    kjit__conn_ref(c);
    if (!fresh) return;
    j->item.work = work_cb;
    j->item.done = done_cb;
    j->srv = s;
    j->t = *t;
    j->next = s->tunes;
    s->tunes = j;
    s->jobs++;
    kjit__gpu_submit(s, &j->item);
}
