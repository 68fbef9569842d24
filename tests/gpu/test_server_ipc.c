/* kjit serve's run on the GPU: this process shares its buffers with a
 * server process through CUDA IPC, and what the server's run writes into one
 * set of outputs must equal, bit for bit, what the embedded library writes
 * into another (both poisoned first): norm_modulate, gated_residual and
 * gated_residual_norm_modulate forward and backward, adaln_row_gather
 * (K = 6 chunk(6) views) forward and backward, timestep_sinusoid; H = 5376
 * bf16, N = 4097, R = 9, fresh random inputs each run. The server's outputs
 * are poisoned on this process's stream right before the event it waits on,
 * so a run that did not wait would lose its writes. Before that, a tune
 * through the server (its context then runs a tuned config: the bits must
 * not change). Also a run's refusals on the device side (a buffer past its
 * allocation, a stride the op refuses, an index out of range) with the
 * server serving on, and the round trip of a run against the op's own time
 * (CUDA events), printed: the target is at most 60 us above; and runs
 * still queued when their clients close dropped unrun. Exit 77 without a
 * GPU; $KJIT_BIN is the server. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "gpu_util.h"
#include "kjit_client.h"
#include "ref.h"
#include "server_util.h"
#include "test_util.h"

#define N 4097
#define H 5376
#define R 9
#define K 6
#define D 256
#define TIMED 50

static const kjit_cu_api *cu;
static ref_rng rng;

/* ---- buffers ------------------------------------------------------------ */

static CUdeviceptr rand_bf16(size_t elems, float amp, float bias)
{
    uint16_t *h = malloc(elems * 2);
    for (size_t i = 0; i < elems; ++i)
        h[i] = ref_float_to_bf16((float)((double)(ref_rng_u64(&rng) >> 40) * 0x1p-23 - 1.0) * amp + bias);
    CUdeviceptr d = gpu_alloc(elems * 2);
    gpu_upload(d, h, elems * 2);
    free(h);
    return d;
}

typedef struct inputs {
    CUdeviceptr x, res, y, dout, dh, tab, w, idx, gdout, t;
} inputs;

/* One set of outputs, by kind; their sizes below. */
enum { O_OUT, O_H, O_DX, O_DY, O_DSHIFT, O_DSCALE, O_DGATE, O_DW, O_GOUT, O_DTAB, O_SOUT, N_OUT };
typedef struct outset {
    CUdeviceptr p[N_OUT];
} outset;
static const size_t out_bytes[N_OUT] = {
    2ull * N * H, 2ull * N * H, 2ull * N * H, 2ull * N * H, 2ull * R * H, 2ull * R * H, 2ull * R * H, 2ull * H,
    2ull * N * K * H, 2ull * R * K * H, 4ull * N * D,
};

static void inputs_init(inputs *in)
{
    in->x = rand_bf16((size_t)N * H, 2.0f, 0.3f);
    in->res = rand_bf16((size_t)N * H, 1.0f, 0.0f);
    in->y = rand_bf16((size_t)N * H, 1.0f, 0.0f);
    in->dout = rand_bf16((size_t)N * H, 1.0f, 0.0f);
    in->dh = rand_bf16((size_t)N * H, 1.0f, 0.0f);
    in->tab = rand_bf16((size_t)R * K * H, 0.5f, 0.0f); /* (R, 6H): the chunk(6) projection */
    in->w = rand_bf16(H, 0.1f, 1.0f);
    in->gdout = rand_bf16((size_t)N * K * H, 1.0f, 0.0f);
    int32_t *ix = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; ++i) ix[i] = (int32_t)ref_rng_below(&rng, R);
    in->idx = gpu_alloc(sizeof(int32_t) * N);
    gpu_upload(in->idx, ix, sizeof(int32_t) * N);
    free(ix);
    float *t = malloc(sizeof(float) * N);
    for (int i = 0; i < N; ++i) t[i] = (float)ref_rng_uniform(&rng) * 1000.0f;
    in->t = gpu_alloc(sizeof(float) * N);
    gpu_upload(in->t, t, sizeof(float) * N);
    free(t);
}

static void inputs_free(inputs *in)
{
    gpu_free(in->x), gpu_free(in->res), gpu_free(in->y), gpu_free(in->dout), gpu_free(in->dh);
    gpu_free(in->tab), gpu_free(in->w), gpu_free(in->idx), gpu_free(in->gdout), gpu_free(in->t);
}

/* ---- the ops, as argument blocks of the embedded library ---------------- */

typedef enum { NM, GR, FU, GA, SI } family;

typedef struct opcase {
    const char *op;
    family fam;
    int bwd;
    int outs[8]; /* the outputs it writes, -1 ended */
} opcase;

static const opcase cases[] = {
    {"norm_modulate", NM, 0, {O_OUT, -1}},
    {"norm_modulate", NM, 1, {O_DX, O_DSHIFT, O_DSCALE, O_DW, -1}},
    {"gated_residual", GR, 0, {O_OUT, -1}},
    {"gated_residual", GR, 1, {O_DX, O_DY, O_DGATE, -1}},
    {"gated_residual_norm_modulate", FU, 0, {O_OUT, O_H, -1}},
    {"gated_residual_norm_modulate", FU, 1, {O_DX, O_DY, O_DGATE, O_DSHIFT, O_DSCALE, O_DW, -1}},
    {"adaln_row_gather", GA, 0, {O_GOUT, -1}},
    {"adaln_row_gather", GA, 1, {O_DTAB, -1}},
    {"timestep_sinusoid", SI, 0, {O_SOUT, -1}},
};

typedef struct call {
    const opcase *c;
    kjit_adaln_args a;
    kjit_row_gather_args g;
    kjit_sinusoid_opts so;
    const float *t;
    void *sout;
} call;

#define P(d) ((void *)(uintptr_t)(d))

static void call_init(call *k, const opcase *c, const inputs *in, const outset *o)
{
    memset(k, 0, sizeof *k);
    k->c = c;
    kjit_adaln_args *a = &k->a;
    a->n = N, a->hidden = H, a->eps = 1e-6f, a->act_dtype = KJIT_BF16, a->param_dtype = KJIT_BF16;
    a->index = (kjit_index){P(in->idx), KJIT_I32, R};
    const int64_t ts = (int64_t)K * H;
    const CUdeviceptr shift = in->tab, scale = in->tab + 2 * H, gate = in->tab + 4 * H;
    switch (c->fam * 2 + c->bwd) {
    case NM * 2:
        a->x = P(in->x), a->x_stride = H, a->weight = P(in->w);
        a->shift = P(shift), a->scale = P(scale), a->shift_stride = a->scale_stride = ts;
        a->out = P(o->p[O_OUT]), a->out_stride = H;
        break;
    case NM * 2 + 1:
        a->x = P(in->x), a->x_stride = H, a->weight = P(in->w), a->scale = P(scale), a->scale_stride = ts;
        a->dout = P(in->dout), a->dout_stride = H, a->dx = P(o->p[O_DX]), a->dx_stride = H;
        a->dshift = P(o->p[O_DSHIFT]), a->dscale = P(o->p[O_DSCALE]), a->dshift_stride = a->dscale_stride = H;
        a->dweight = P(o->p[O_DW]);
        break;
    case GR * 2:
        a->res = P(in->res), a->y = P(in->y), a->res_stride = a->y_stride = H;
        a->gate = P(gate), a->gate_stride = ts, a->out = P(o->p[O_OUT]), a->out_stride = H;
        break;
    case GR * 2 + 1:
        a->y = P(in->y), a->y_stride = H, a->gate = P(gate), a->gate_stride = ts;
        a->dout = P(in->dout), a->dout_stride = H, a->dx = P(o->p[O_DX]), a->dy = P(o->p[O_DY]), a->dx_stride = a->dy_stride = H;
        a->dgate = P(o->p[O_DGATE]), a->dgate_stride = H;
        break;
    case FU * 2:
        a->res = P(in->res), a->y = P(in->y), a->res_stride = a->y_stride = H, a->weight = P(in->w);
        a->shift = P(shift), a->scale = P(scale), a->gate = P(gate), a->shift_stride = a->scale_stride = a->gate_stride = ts;
        a->out = P(o->p[O_OUT]), a->h = P(o->p[O_H]), a->out_stride = a->h_stride = H;
        break;
    case FU * 2 + 1:
        a->x = P(in->x), a->y = P(in->y), a->x_stride = a->y_stride = H, a->weight = P(in->w);
        a->scale = P(scale), a->gate = P(gate), a->scale_stride = a->gate_stride = ts;
        a->dout = P(in->dout), a->dh = P(in->dh), a->dout_stride = a->dh_stride = H;
        a->dx = P(o->p[O_DX]), a->dy = P(o->p[O_DY]), a->dx_stride = a->dy_stride = H;
        a->dgate = P(o->p[O_DGATE]), a->dshift = P(o->p[O_DSHIFT]), a->dscale = P(o->p[O_DSCALE]);
        a->dgate_stride = a->dshift_stride = a->dscale_stride = H;
        a->dweight = P(o->p[O_DW]);
        break;
    case GA * 2:
    case GA * 2 + 1: {
        kjit_row_gather_args *g = &k->g;
        g->n = N, g->hidden = H, g->num_tables = K, g->dtype = KJIT_BF16, g->index = a->index;
        for (int t = 0; t < K; ++t) {
            if (!c->bwd) {
                g->table[t] = P(in->tab + 2ull * t * H), g->table_stride[t] = ts;
                g->out[t] = P(o->p[O_GOUT] + 2ull * t * H), g->out_stride[t] = ts;
            } else {
                g->dout[t] = P(in->gdout + 2ull * t * H), g->dout_stride[t] = ts;
                g->dtable[t] = P(o->p[O_DTAB] + 2ull * t * H), g->dtable_stride[t] = ts;
            }
        }
        break;
    }
    default:
        kjit_sinusoid_opts_init(&k->so);
        k->so.flip_sin_to_cos = 1;
        k->so.max_period = 5000;
        k->t = P(in->t), k->sout = P(o->p[O_SOUT]);
    }
}

static int call_embedded(kjit_ctx *ctx, const call *k, CUstream st)
{
    const opcase *c = k->c;
    switch (c->fam * 2 + c->bwd) {
    case NM * 2: return kjit_norm_modulate_fwd(ctx, &k->a, st);
    case NM * 2 + 1: return kjit_norm_modulate_bwd(ctx, &k->a, NULL, 0, st);
    case GR * 2: return kjit_gated_residual_fwd(ctx, &k->a, st);
    case GR * 2 + 1: return kjit_gated_residual_bwd(ctx, &k->a, NULL, 0, st);
    case FU * 2: return kjit_gated_residual_norm_modulate_fwd(ctx, &k->a, st);
    case FU * 2 + 1: return kjit_gated_residual_norm_modulate_bwd(ctx, &k->a, NULL, 0, st);
    case GA * 2: return kjit_adaln_row_gather_fwd(ctx, &k->g, st);
    case GA * 2 + 1: return kjit_adaln_row_gather_bwd(ctx, &k->g, NULL, 0, st);
    default: return kjit_timestep_sinusoid(ctx, k->t, N, D, k->sout, D, KJIT_F32, &k->so, st);
    }
}

/* ---- the same call as a run request ------------------------------------- */

typedef struct request {
    cJSON *root, *bufs;
    uint8_t rec[64][64];
    CUdeviceptr base[64];
    int n;
} request;

/* A buffer by its device address: its allocation's IPC handle (one record
 * per allocation) and its offset there, as the Python client does. */
static void add_buffer(request *q, const char *name, const void *ptr, int64_t stride)
{
    if (!ptr) return;
    CUdeviceptr base = 0;
    size_t size = 0;
    CU_CHECK(cu->MemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)ptr));
    int h = 0;
    while (h < q->n && q->base[h] != base) ++h;
    if (h == q->n) {
        CUipcMemHandle mh;
        CU_CHECK(cu->IpcGetMemHandle(&mh, base));
        memcpy(q->rec[q->n], &mh, 64);
        q->base[q->n++] = base;
    }
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "name", name);
    cJSON_AddNumberToObject(b, "handle", h);
    cJSON_AddNumberToObject(b, "offset", (double)((CUdeviceptr)(uintptr_t)ptr - base));
    if (stride) cJSON_AddNumberToObject(b, "stride", (double)stride);
    cJSON_AddItemToArray(q->bufs, b);
}

static void request_init(request *q, const call *k, const CUipcEventHandle *ev)
{
    const opcase *c = k->c;
    const kjit_adaln_args *a = &k->a;
    memset(q, 0, sizeof *q);
    q->root = cJSON_CreateObject();
    cJSON_AddStringToObject(q->root, "op", c->op);
    cJSON_AddStringToObject(q->root, "dir", c->bwd ? "bwd" : "fwd");
    cJSON_AddNumberToObject(q->root, "hidden", c->fam == SI ? D : H);
    cJSON_AddStringToObject(q->root, "dtype", c->fam == SI ? "fp32" : "bf16");
    cJSON_AddNumberToObject(q->root, "n", N);
    q->bufs = cJSON_AddArrayToObject(q->root, "buffers");
    if (c->fam == SI) {
        cJSON_AddTrueToObject(q->root, "flip_sin_to_cos");
        cJSON_AddNumberToObject(q->root, "max_period", k->so.max_period);
        add_buffer(q, "t", k->t, 0);
        add_buffer(q, "out", k->sout, D);
    } else if (c->fam == GA) {
        const kjit_row_gather_args *g = &k->g;
        cJSON_AddNumberToObject(q->root, "rows", R);
        char name[16];
        for (int t = 0; t < g->num_tables; ++t) {
            snprintf(name, sizeof name, c->bwd ? "dout%d" : "table%d", t);
            add_buffer(q, name, c->bwd ? g->dout[t] : g->table[t], c->bwd ? g->dout_stride[t] : g->table_stride[t]);
            snprintf(name, sizeof name, c->bwd ? "dtable%d" : "out%d", t);
            add_buffer(q, name, c->bwd ? g->dtable[t] : g->out[t], c->bwd ? g->dtable_stride[t] : g->out_stride[t]);
        }
        add_buffer(q, "index", g->index.ptr, 0);
    } else {
        cJSON_AddNumberToObject(q->root, "rows", R);
        cJSON_AddStringToObject(q->root, "param_dtype", "bf16");
        cJSON_AddStringToObject(q->root, "index_dtype", "int32");
        if (c->fam != GR) cJSON_AddNumberToObject(q->root, "eps", a->eps);
        add_buffer(q, "x", a->x, a->x_stride);
        add_buffer(q, "res", a->res, a->res_stride);
        add_buffer(q, "y", a->y, a->y_stride);
        add_buffer(q, "weight", a->weight, 0);
        add_buffer(q, "shift", a->shift, a->shift_stride);
        add_buffer(q, "scale", a->scale, a->scale_stride);
        add_buffer(q, "gate", a->gate, a->gate_stride);
        add_buffer(q, "out", a->out, a->out_stride);
        add_buffer(q, "h", a->h, a->h_stride);
        add_buffer(q, "dout", a->dout, a->dout_stride);
        add_buffer(q, "dh", a->dh, a->dh_stride);
        add_buffer(q, "dx", a->dx, a->dx_stride);
        add_buffer(q, "dy", a->dy, a->dy_stride);
        add_buffer(q, "dweight", a->dweight, 0);
        add_buffer(q, "dshift", a->dshift, a->dshift_stride);
        add_buffer(q, "dscale", a->dscale, a->dscale_stride);
        add_buffer(q, "dgate", a->dgate, a->dgate_stride);
        add_buffer(q, "index", a->index.ptr, 0);
    }
    memcpy(q->rec[q->n], ev, 64);
    cJSON_AddNumberToObject(q->root, "event", q->n++);
}

/* Records the event on st, sends the run, waits for its reply. */
static int request_send(kjit_client *cl, request *q, CUevent ev, CUstream st, double *us)
{
    char *text = cJSON_PrintUnformatted(q->root);
    CU_CHECK(cu->EventRecord(ev, st));
    int rc = kjit_client_run(cl, text, q->rec, q->n, us);
    cJSON_free(text);
    return rc;
}

/* For the timing: the run through kjit_client_request, so the reply's
 * breakdown of the server's time is read too: f = us, us_queue, us_prep,
 * us_call, us_wait. Without the event, this process waits for its stream
 * first. */
enum { F_US, F_QUEUE, F_PREP, F_CALL, F_WAIT, F_IN, F_OUT, F_PRE, F_N };
static const char *const f_name[F_N] = {"us", "us_queue", "us_prep", "us_call", "us_wait", "us_in", "us_out", ""};

/* Whether the server (started with this environment) replays repeated
 * runs as graphs: KJIT_RUN_GRAPH=0 turns that off. */
static int server_graphs(void)
{
    int on = 1; /* the server's own reading of KJIT_RUN_GRAPH */
    (void)kjit__env_switch_parse("KJIT_RUN_GRAPH", 1, &on);
    return on;
}

/* The last timed reply's "graph": direct, captured or replayed. */
static char last_graph[16];

/* The run request's text, with or without the event. */
static char *run_text(request *q, int with_event)
{
    cJSON *evi = with_event ? NULL : cJSON_DetachItemFromObject(q->root, "event");
    cJSON_AddStringToObject(q->root, "type", "run");
    char *text = cJSON_PrintUnformatted(q->root);
    cJSON_DeleteItemFromObjectCaseSensitive(q->root, "type");
    if (evi) cJSON_AddItemToObject(q->root, "event", evi);
    return text;
}

/* text: run_text's, built before the clock starts (a client that runs an op
 * every step on the same buffers keeps it). */
static void timed_send(kjit_client *cl, request *q, const char *text, int with_event, CUevent ev, CUstream st,
                       double f[F_N])
{
    if (with_event) CU_CHECK(cu->EventRecord(ev, st));
    else CU_CHECK(cu->StreamSynchronize(st));
    const double t_pre = kjit_test_now();
    kjit_client_reply r = {0};
    const int rc = kjit_client_request(cl, text, q->rec, (size_t)q->n * 64, NULL, NULL, &r);
    for (int k = 0; k < F_N; ++k) f[k] = 0;
    f[F_PRE] = t_pre; /* made relative by the caller */
    CHECK_STATUS(rc, KJIT_OK);
    if (rc != KJIT_OK) return;
    cJSON *root = cJSON_Parse(r.json);
    if (!r.ok || !root) {
        fprintf(stderr, "timed run failed: %s\n", r.json);
        kjit_test_failures++;
    }
    for (int k = 0; k < F_PRE; ++k) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, f_name[k]);
        f[k] = cJSON_IsNumber(v) ? v->valuedouble : 0;
    }
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "graph");
    snprintf(last_graph, sizeof last_graph, "%s", cJSON_IsString(g) ? g->valuestring : "?");
    f[F_PRE] = t_pre; /* made relative by the caller */
    cJSON_Delete(root);
    kjit_client_reply_free(&r);
}

/* ---- checks ------------------------------------------------------------- */

static void poison(outset *o, const opcase *c, CUstream st)
{
    for (int i = 0; c->outs[i] >= 0; ++i)
        CU_CHECK(cu->MemsetD8Async(o->p[c->outs[i]], 0xFF, out_bytes[c->outs[i]], st));
}

/* Elements still holding the poison (0xFF..: NaN); esz bytes each. */
static size_t poisoned(const uint8_t *b, size_t bytes, size_t esz)
{
    size_t n = 0;
    for (size_t i = 0; i < bytes; i += esz) {
        size_t j = 0;
        while (j < esz && b[i + j] == 0xFF) ++j;
        n += j == esz;
    }
    return n;
}

static void compare(const opcase *c, outset *a, outset *b)
{
    for (int i = 0; c->outs[i] >= 0; ++i) {
        const int o = c->outs[i];
        const size_t bytes = out_bytes[o], esz = o == O_SOUT ? 4 : 2;
        uint8_t *ha = malloc(bytes), *hb = malloc(bytes);
        gpu_download(ha, a->p[o], bytes);
        gpu_download(hb, b->p[o], bytes);
        size_t left = poisoned(hb, bytes, esz), differ = 0;
        for (size_t k = 0; k < bytes; k += esz) differ += memcmp(ha + k, hb + k, esz) != 0;
        if (left || differ) {
            fprintf(stderr, "%s %s output %d: %zu elements differ from the embedded call, %zu unwritten (of %zu)\n",
                    c->op, c->bwd ? "bwd" : "fwd", o, differ, left, bytes / esz);
            kjit_test_failures++;
        }
        free(ha);
        free(hb);
    }
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; ++i)
        for (int j = i; j > 0 && v[j - 1] > v[j]; --j) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[n / 2];
}

/* The op's own time (events around the embedded call) and the run's round
 * trip (event record, request, reply) with the server's breakdown, medians
 * (the request texts built beforehand, as a client running one op on the
 * same buffers each step keeps them):
 * queue (loop to lane), prep (handles, event), call (the op's launches),
 * wait (the device); "outside" is the rest (client, socket, loop). */
static void timing(kjit_ctx *ctx, kjit_client *cl, const call *ka, request *q, CUevent ev, CUstream st)
{
    CUevent e0, e1;
    CU_CHECK(cu->EventCreate(&e0, CU_EVENT_DEFAULT));
    CU_CHECK(cu->EventCreate(&e1, CU_EVENT_DEFAULT));
    double op[TIMED], rt[TIMED], f[F_N][TIMED], m[F_N];
    for (int i = 0; i < TIMED; ++i) {
        CU_CHECK(cu->EventRecord(e0, st));
        CHECK_STATUS(call_embedded(ctx, ka, st), KJIT_OK);
        CU_CHECK(cu->EventRecord(e1, st));
        CU_CHECK(cu->EventSynchronize(e1));
        float ms = 0;
        CU_CHECK(cu->EventElapsedTime(&ms, e0, e1));
        op[i] = ms * 1e3;
    }
    const double mo = median(op, TIMED);
    /* Modes: with the event; without it; without it and every request
     * parsed (two texts, one space apart, alternate: the server's memo of a
     * connection's last run never matches). */
    static const char *const mode_name[3] = {"event   ", "no event", "no event, parsed each time"};
    for (int mode = 0; mode < 3; ++mode) {
        const int with_event = mode == 0;
        char *text = run_text(q, with_event);
        char *other = malloc(strlen(text) + 2);
        snprintf(other, strlen(text) + 2, "{ %s", text + 1);
        for (int i = 0; i < TIMED; ++i) {
            double one[F_N];
            double t0 = kjit_test_now();
            timed_send(cl, q, mode == 2 && i % 2 ? other : text, with_event, ev, st, one);
            rt[i] = (kjit_test_now() - t0) * 1e6;
            one[F_PRE] = (one[F_PRE] - t0) * 1e6;
            for (int k = 0; k < F_N; ++k) f[k][i] = one[k];
        }
        cJSON_free(text);
        free(other);
        const double mr = median(rt, TIMED);
        for (int k = 0; k < F_N; ++k) m[k] = median(f[k], TIMED);
        printf("  %-29s %s: op %6.1f us; %s: round trip %6.1f us, %+6.1f over the op (target <= 60); server %6.1f "
               "(queue %.1f, prep %.1f, call %.1f (%s), wait %.1f), outside %.1f (before the request %.1f, loop in %.1f, "
               "loop out %.1f, the rest: client library, socket, the reply's parse)\n",
               ka->c->op, ka->c->bwd ? "bwd" : "fwd", mo, mode_name[mode], mr, mr - mo, m[F_US],
               m[F_QUEUE], m[F_PREP], m[F_CALL], last_graph, m[F_WAIT], mr - m[F_US] - m[F_QUEUE], m[F_PRE], m[F_IN],
               m[F_OUT]);
    }
    cu->EventDestroy(e0);
    cu->EventDestroy(e1);
}

static void refusals(kjit_client *cl, const inputs *in, outset *b, CUdeviceptr bad_idx, const CUipcEventHandle *evh,
                     CUevent ev, CUstream st)
{
    call k;
    request q;
    /* A buffer past the end of its allocation. */
    call_init(&k, &cases[0], in, b);
    k.a.out = P(b->p[O_OUT] + 2ull * H);
    request_init(&q, &k, evh);
    CHECK_STATUS(request_send(cl, &q, ev, st, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "buffer 'out'") && strstr(kjit_last_error(), "do not fit"));
    cJSON_Delete(q.root);
    /* A stride the op itself refuses (its own message). */
    call_init(&k, &cases[0], in, b);
    k.a.x_stride = 100;
    request_init(&q, &k, evh);
    CHECK_STATUS(request_send(cl, &q, ev, st, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "x row stride") != NULL);
    cJSON_Delete(q.root);
    /* An index out of range: its row skipped, the run refused... */
    call_init(&k, &cases[0], in, b);
    k.a.index.ptr = P(bad_idx);
    request_init(&q, &k, evh);
    CHECK_STATUS(request_send(cl, &q, ev, st, NULL), KJIT_EINDEX);
    cJSON_Delete(q.root);
    /* ...and the next run is fine. */
    call_init(&k, &cases[0], in, b);
    request_init(&q, &k, evh);
    CHECK_STATUS(request_send(cl, &q, ev, st, NULL), KJIT_OK);
    cJSON_Delete(q.root);
}

/* A number from the server's stats reply (-1 when missing). */
static double stat_of(kjit_client *cl, const char *key)
{
    kjit_client_reply r;
    double v = -1;
    if (kjit_client_request(cl, "{\"type\":\"stats\"}", NULL, 0, NULL, NULL, &r) != KJIT_OK) return v;
    cJSON *o = cJSON_Parse(r.json);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNumber(n)) v = n->valuedouble;
    cJSON_Delete(o);
    kjit_client_reply_free(&r);
    return v;
}

/* Runs of clients that close before the GPU lane comes to them are dropped,
 * not run: NC connections each send a run that waits on an event recorded
 * behind ~100 ms of device work, give up after 5 ms and close. The first
 * run holds the lane until the event; the other NC - 1, queued behind it,
 * find their clients gone. Their outputs (not the first's) are checked
 * unwritten: each run writes its own poisoned output set. */
enum { NC = 5 };

/* o: NC output sets, freed by the caller once the server has stopped (the
 * first run's are mapped there until its connection's handles close). */
static void departed_runs(const char *sock, kjit_client *cl, const inputs *in, const CUipcEventHandle *evh,
                          CUevent ev, CUstream st, CUdeviceptr busy, size_t busy_bytes, outset o[NC])
{
    const opcase *c = &cases[0];
    kjit_client *k[NC];
    request q[NC];
    char *text[NC];
    for (int i = 0; i < NC; ++i) {
        CHECK_STATUS(kjit_client_connect(&k[i], sock, 600000), KJIT_OK);
        if (!k[i]) return;
        for (int j = 0; j < N_OUT; ++j) o[i].p[j] = gpu_alloc(out_bytes[j]);
        poison(&o[i], c, st);
        call kb;
        call_init(&kb, c, in, &o[i]);
        request_init(&q[i], &kb, evh);
        text[i] = run_text(&q[i], 1);
    }
    const double before = stat_of(cl, "runs_dropped");
    CHECK(before >= 0);
    for (int r = 0; r < 300; ++r) CU_CHECK(cu->MemsetD8Async(busy, (unsigned char)r, busy_bytes, st));
    CU_CHECK(cu->EventRecord(ev, st));
    for (int i = 0; i < NC; ++i) {
        double us = 0;
        CHECK_STATUS(kjit_client_timeout_set(k[i], 5), KJIT_OK);
        const int rc = kjit_client_run(k[i], text[i], q[i].rec, q[i].n, &us);
        if (rc == KJIT_OK) fprintf(stderr, "departed runs: run %d answered within 5 ms, behind ~100 ms of work\n", i);
        CHECK(rc != KJIT_OK);
        kjit_client_close(k[i]);
    }
    CU_CHECK(cu->StreamSynchronize(st));
    /* The lane's queue is done once the server holds no job. */
    double jobs = 1;
    for (int t = 0; t < 500 && jobs != 0; ++t) {
        jobs = stat_of(cl, "jobs");
        if (jobs != 0) usleep(2000);
    }
    CHECK(jobs == 0);
    const double dropped = stat_of(cl, "runs_dropped") - before;
    printf("departed runs: %d clients closed with a run queued; %.0f dropped by the lane\n", NC, dropped);
    CHECK(dropped >= NC - 1);
    for (int i = 1; i < NC; ++i) {
        uint8_t *h = malloc(out_bytes[O_OUT]);
        gpu_download(h, o[i].p[O_OUT], out_bytes[O_OUT]);
        const size_t left = poisoned(h, out_bytes[O_OUT], 2);
        if (left != out_bytes[O_OUT] / 2)
            fprintf(stderr, "departed runs: run %d wrote %zu of its output's %zu elements\n", i,
                    out_bytes[O_OUT] / 2 - left, out_bytes[O_OUT] / 2);
        CHECK(left == out_bytes[O_OUT] / 2);
        free(h);
    }
    for (int i = 0; i < NC; ++i) {
        cJSON_free(text[i]);
        cJSON_Delete(q[i].root);
    }
}

int main(void)
{
    kjit_ctx *ctx = kjit_gpu_ctx_or_skip("test_server_ipc", KJIT_INDEX_CHECK_OFF);
    cu = kjit__cu();
    if (!getenv("KJIT_BIN")) {
        fprintf(stderr, "test_server_ipc: set KJIT_BIN to the kjit binary\n");
        return 1;
    }
    ref_rng_seed(&rng, kjit_test_seed("test_server_ipc"));
    char *tmp = kjit_test_tmpdir();
    char sock[4200], cache[4200];
    snprintf(sock, sizeof sock, "%s/kjit.sock", tmp);
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    pid_t pid = kjit_test_serve(sock, cache, NULL);
    kjit_client *cl = NULL;
    CHECK_STATUS(kjit_client_connect(&cl, sock, 600000), KJIT_OK);
    if (!cl) return kjit_test_result("test_server_ipc");
    cJSON *hello = cJSON_Parse(kjit_client_hello(cl));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(hello, "gpu")));
    cJSON_Delete(hello);

    /* Tune through the server first: its runs then use the tuned config. */
    kjit_tune_result tr;
    CHECK_STATUS(kjit_client_tune(cl, "norm_modulate", H, KJIT_BF16, &tr), KJIT_OK);
    CHECK(tr.fwd_us > 0 && tr.bwd_us > 0 && tr.fwd_candidates > 0 && tr.n_rows > 0);
    printf("tune through the server: norm_modulate %d bf16: fwd rpc %d pf %d grid %d (%.1f us), bwd pf %d accs %d "
           "(%.1f us), %.2f s\n", H, tr.config.rpc, tr.config.pf, tr.config.grid_per_sm, tr.fwd_us, tr.config.bwd_pf,
           tr.config.accs, tr.bwd_us, tr.seconds);

    CUstream st;
    CU_CHECK(cu->StreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CUevent ev;
    CU_CHECK(cu->EventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CUipcEventHandle evh;
    CU_CHECK(cu->IpcGetEventHandle(&evh, ev));

    inputs in;
    inputs_init(&in);
    enum { BUSY_BYTES = 1 << 30 };
    CUdeviceptr busy = gpu_alloc(BUSY_BYTES);
    outset oa, ob;
    for (int i = 0; i < N_OUT; ++i) {
        oa.p[i] = gpu_alloc(out_bytes[i]);
        ob.p[i] = gpu_alloc(out_bytes[i]);
    }

    printf("run vs embedded, H %d bf16, N %d, R %d:\n", H, N, R);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const opcase *c = &cases[i];
        call ka, kb;
        call_init(&ka, c, &in, &oa);
        call_init(&kb, c, &in, &ob);
        poison(&oa, c, st);
        CHECK_STATUS(call_embedded(ctx, &ka, st), KJIT_OK);
        CU_CHECK(cu->StreamSynchronize(st));
        request q;
        request_init(&q, &kb, &evh);
        /* The server's outputs are poisoned on this stream just before the
         * event, behind ~1 ms of other work: only a run that waits for the
         * event on the device writes after the poison. Three times: the
         * server calls the op, then captures the same call into a CUDA graph,
         * then replays that graph (KJIT_RUN_GRAPH=0: direct each time); each
         * must write the embedded call's bits. */
        static const char *const want_graph[3] = {"direct", "captured", "replayed"};
        const int graphs = server_graphs();
        char *text = run_text(&q, 1);
        for (int rep = 0; rep < 3; ++rep) {
            for (int k = 0; k < 4; ++k) CU_CHECK(cu->MemsetD8Async(busy, (unsigned char)k, BUSY_BYTES, st));
            poison(&ob, c, st);
            double f[F_N];
            timed_send(cl, &q, text, 1, ev, st, f);
            compare(c, &oa, &ob);
            if (strcmp(last_graph, graphs ? want_graph[rep] : "direct")) {
                fprintf(stderr, "%s %s: run %d was '%s', expected '%s'\n", c->op, c->bwd ? "bwd" : "fwd", rep + 1,
                        last_graph, graphs ? want_graph[rep] : "direct");
                kjit_test_failures++;
            }
        }
        cJSON_free(text);
        timing(ctx, cl, &ka, &q, ev, st);
        cJSON_Delete(q.root);
    }
    /* A training step's pattern: the gather's forward and backward in
     * turn. The server keeps a connection's last few calls, so each is
     * replayed from its own graph (both ran above; the embedded outputs of
     * both are still in oa: no later case writes theirs). */
    {
        const char *want = server_graphs() ? "replayed" : "direct";
        request q2[2];
        char *t2[2];
        for (int k = 0; k < 2; ++k) {
            call kb;
            call_init(&kb, &cases[6 + k], &in, &ob);
            request_init(&q2[k], &kb, &evh);
            t2[k] = run_text(&q2[k], 1);
        }
        for (int rep = 0; rep < 4; ++rep) {
            const opcase *c = &cases[6 + rep % 2];
            poison(&ob, c, st);
            double f[F_N];
            timed_send(cl, &q2[rep % 2], t2[rep % 2], 1, ev, st, f);
            compare(c, &oa, &ob);
            if (strcmp(last_graph, want)) {
                fprintf(stderr, "%s %s in turn with the other direction: '%s', expected '%s'\n", c->op,
                        c->bwd ? "bwd" : "fwd", last_graph, want);
                kjit_test_failures++;
            }
        }
        for (int k = 0; k < 2; ++k) cJSON_free(t2[k]), cJSON_Delete(q2[k].root);
        printf("adaln_row_gather fwd and bwd in turn: %s\n", last_graph);
    }
    int32_t *ix = malloc(sizeof(int32_t) * N);
    gpu_download(ix, in.idx, sizeof(int32_t) * N);
    ix[N / 2] = R;
    CUdeviceptr bad_idx = gpu_alloc(sizeof(int32_t) * N);
    gpu_upload(bad_idx, ix, sizeof(int32_t) * N);
    free(ix);
    refusals(cl, &in, &ob, bad_idx, &evh, ev, st);
    outset od[NC];
    memset(od, 0, sizeof od);
    departed_runs(sock, cl, &in, &evh, ev, st, busy, BUSY_BYTES, od);

    /* The server unmaps on close; only then is freeing safe. */
    kjit_client_close(cl);
    CHECK_EQ_INT(kjit_test_serve_stop(pid), 0);
    for (int i = 0; i < N_OUT; ++i) gpu_free(oa.p[i]), gpu_free(ob.p[i]);
    for (int k = 0; k < NC; ++k)
        for (int i = 0; i < N_OUT; ++i)
            if (od[k].p[i]) gpu_free(od[k].p[i]);
    gpu_free(bad_idx);
    gpu_free(busy);
    inputs_free(&in);
    cu->EventDestroy(ev);
    cu->StreamDestroy(st);
    kjit_ctx_destroy(ctx);
    kjit_test_rmtree(tmp);
    free(tmp);
    return kjit_test_result("test_server_ipc");
}
