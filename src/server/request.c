#include "server/request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "client/frame.h"
#include "jit/compile.h"
#include "jit/templates.h"
#include "tune/config.h"

static const char *const type_names[] = {
    [KJIT_REQ_HELLO] = "hello",     [KJIT_REQ_PING] = "ping",   [KJIT_REQ_STATS] = "stats",
    [KJIT_REQ_COMPILE] = "compile", [KJIT_REQ_KERNEL] = "kernel", [KJIT_REQ_PREWARM] = "prewarm",
    [KJIT_REQ_TUNE] = "tune",       [KJIT_REQ_RUN] = "run",       [KJIT_REQ_SHUTDOWN] = "shutdown",
};
#define N_TYPES ((int)(sizeof type_names / sizeof type_names[0]))

/* The fields each type takes besides id and type; anything else is refused,
 * so a misspelt option fails loudly instead of being ignored. */
#define MAX_FIELDS 16
static const char *const type_fields[][MAX_FIELDS] = {
    [KJIT_REQ_HELLO] = {"versions", "client"},
    [KJIT_REQ_PING] = {0},
    [KJIT_REQ_STATS] = {0},
    [KJIT_REQ_COMPILE] = {"op", "hidden", "dtype", "arch", "config"},
    [KJIT_REQ_KERNEL] = {"op", "template", "expr", "arch"},
    [KJIT_REQ_PREWARM] = {"ops", "hidden", "dtype", "arch"},
    [KJIT_REQ_TUNE] = {"op", "hidden", "dtype"},
    [KJIT_REQ_RUN] = {"op", "dir", "hidden", "dtype", "n", "rows", "param_dtype", "index_dtype", "eps", "buffers",
                      "event", "flip_sin_to_cos", "downscale_freq_shift", "scale", "max_period"},
    [KJIT_REQ_SHUTDOWN] = {0},
};

const char *kjit__req_type_name(kjit_req_type t)
{
    return (int)t >= 0 && (int)t < N_TYPES ? type_names[t] : "?";
}

__attribute__((format(printf, 3, 4))) static int fail(kjit_req_error *err, const char *code, const char *fmt, ...)
{
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* Names only: a string that could be a path or smuggle control bytes is
 * refused wherever it appears, keys included. NULL when s is fine, else why.
 * (Lengths are the caller's check: the limit depends on the field.) */
static const char *string_problem(const char *s, size_t *len)
{
    /* One pass; the reasons keep their order of precedence. */
    int slash = 0, dots = 0, control = 0;
    const unsigned char *p = (const unsigned char *)s;
    for (; *p; ++p) {
        slash |= *p == '/';
        dots |= *p == '.' && p[1] == '.';
        /* C0, DEL, and C1 (U+0080..U+009F: 0xC2 0x80..0x9F in UTF-8) */
        control |= *p < 0x20 || *p == 0x7f || (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f);
    }
    *len = (size_t)(p - (const unsigned char *)s);
    if (slash) return "contains '/' (requests name ops, never paths)";
    if (dots) return "contains '..' (requests name ops, never paths)";
    if (control) return "contains a control character";
    return NULL;
}

/* top: the request object's own fields. Only a top-level `expr` (a kernel's
 * name expression, up to what kjit_kernel_spec holds) may exceed
 * KJIT_REQ_MAX_STRING: template-ids of the larger ops do. */
static int check_strings(const cJSON *item, const char *field, int top, kjit_req_error *err)
{
    for (; item; item = item->next) {
        const char *why;
        size_t len;
        const char *name = item->string ? item->string : field;
        if (item->string) {
            why = string_problem(item->string, &len);
            if (len > KJIT_REQ_MAX_STRING)
                return fail(err, "bad_request", "a field name is longer than %d bytes", KJIT_REQ_MAX_STRING);
            if (why) return fail(err, "bad_request", "a field name %s", why);
        }
        if (cJSON_IsString(item)) {
            int max = top && !strcmp(name, "expr") ? KJIT_REQ_MAX_EXPR : KJIT_REQ_MAX_STRING;
            why = string_problem(item->valuestring, &len);
            if (len > (size_t)max)
                return fail(err, "bad_request", "field '%s': the string is longer than %d bytes", name, max);
            if (why) return fail(err, "bad_request", "field '%s': the string %s", name, why);
        }
        if (item->child && check_strings(item->child, name, 0, err)) return -1;
    }
    return 0;
}

/* An integer-valued JSON number in [lo, hi] (v: the member named name). */
static int member_int(const cJSON *v, const char *name, double lo, double hi, double *out, kjit_req_error *err)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || floor(v->valuedouble) != v->valuedouble)
        return fail(err, "bad_request", "field '%s': expected an integer", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return fail(err, "bad_request", "field '%s': %.17g outside %.17g..%.17g", name, v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return 0;
}

/* member_int of o's member `name`; 1 when it is absent and not required. */
static int get_int(const cJSON *o, const char *name, double lo, double hi, int required, double *out,
                   kjit_req_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v) {
        if (required) return fail(err, "bad_request", "field '%s' is missing", name);
        return 1;
    }
    return member_int(v, name, lo, hi, out, err);
}

static int lookup_op(const char *name, const char **out, kjit_req_error *err)
{
    for (int i = 0; i < kjit_op_count(); ++i)
        if (!strcmp(name, kjit_op_name(i))) {
            *out = kjit_op_name(i);
            return 0;
        }
    char known[512] = "";
    for (int i = 0; i < kjit_op_count(); ++i)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", kjit_op_name(i));
    return fail(err, "unknown_op", "op '%s' is not registered (known: %s)", name, known);
}

static int parse_dtype(const char *field, const char *name, kjit_dtype *out, kjit_req_error *err)
{
    if (kjit_dtype_parse(name, out) || *out == KJIT_I32 || *out == KJIT_I64)
        return fail(err, "bad_request", "field '%s': dtype '%s': expected fp32, bf16 or fp16", field, name);
    return 0;
}

static int parse_arch(const char *name, int *sm, kjit_req_error *err)
{
    int rc = kjit__arch_parse(name, sm);
    if (rc == KJIT_ENONVRTC) return fail(err, "unsupported", "arch '%s': %s", name, kjit_last_error());
    if (rc) return fail(err, "bad_request", "%s", kjit_last_error());
    return 0;
}

/* The op's own check of hidden and dtype (kjit_op_kernels names the limit). */
static int check_tuple(const kjit_req_tuple *t, kjit_req_error *err)
{
    int n = 0;
    if (kjit_op_kernels(t->op, t->hidden, t->dtype, NULL, 0, &n))
        return fail(err, "bad_request", "%s", kjit_last_error());
    return 0;
}

static const char *get_str(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* o's required string member `name` (what: its description for the
 * message): one that is absent and one of another type are told apart. */
static int need_str(const cJSON *o, const char *name, const char *what, const char **out, kjit_req_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v) return fail(err, "bad_request", "field '%s' (%s) is missing", name, what);
    if (!cJSON_IsString(v)) return fail(err, "bad_request", "field '%s': expected a string (%s)", name, what);
    *out = v->valuestring;
    return 0;
}

/* op, hidden, dtype and (compile only) arch of compile, tune and run. */
static int parse_tuple(const cJSON *o, int default_sm, int with_arch, kjit_req_tuple *t, kjit_req_error *err)
{
    const char *op, *dtype;
    if (need_str(o, "op", "an op name", &op, err)) return -1;
    if (lookup_op(op, &t->op, err)) return -1;
    double h = 0;
    if (get_int(o, "hidden", 1, KJIT_REQ_MAX_HIDDEN, 1, &h, err)) return -1;
    t->hidden = (int)h;
    if (need_str(o, "dtype", "fp32, bf16 or fp16", &dtype, err)) return -1;
    if (parse_dtype("dtype", dtype, &t->dtype, err)) return -1;
    t->sm = default_sm;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arch");
    if (a && !with_arch) return fail(err, "bad_request", "field 'arch': tune and run use the server's device");
    if (a && !cJSON_IsString(a)) return fail(err, "bad_request", "field 'arch': expected a string such as \"sm_90\"");
    if (a && parse_arch(a->valuestring, &t->sm, err)) return -1;
    return check_tuple(t, err);
}

static int ident_char(char c) { return c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z'); }

/* The one spelling of a template-id (its characters already checked): no
 * space but one between two identifier characters ("long long") and one
 * after each comma, as the library writes its own kernels' names. The
 * cache key hashes this text, so spellings of one kernel share one entry
 * (and one compile) and the library's names keep theirs. -1 when it does
 * not fit in cap. */
static int expr_canon(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    int gap = 0;
    for (; *in; ++in) {
        if (*in == ' ') {
            gap = 1;
            continue;
        }
        const int sep = n && (out[n - 1] == ',' || (gap && ident_char(out[n - 1]) && ident_char(*in)));
        if (n + (size_t)sep + 1 >= cap) return -1;
        if (sep) out[n++] = ' ';
        out[n++] = *in;
        gap = 0;
    }
    out[n] = 0;
    return 0;
}

/* One kernel by template file and template-id: what the embedded library's
 * build asks a server for (KJIT_SERVER). The expr is compiled as C++, so
 * only template-id text is taken (what kjit_kernel_fetch also insists on). */
static int parse_kernel(const cJSON *o, int default_sm, kjit_req *r, kjit_req_error *err)
{
    const char *op, *tmpl, *expr;
    if (need_str(o, "op", "an op name", &op, err)) return -1;
    if (lookup_op(op, &r->spec.op, err)) return -1;
    if (need_str(o, "template", "a template file name", &tmpl, err)) return -1;
    const kjit_template_file *tf;
    if (kjit__template_find(tmpl, &tf)) {
        const kjit_template_file *all = NULL;
        int n = 0;
        char known[512] = "";
        if (kjit__templates(&all, &n) == KJIT_OK)
            for (int i = 0; i < n; ++i)
                if (!strchr(all[i].name, '/'))
                    snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", known[0] ? ", " : "",
                             all[i].name);
        return fail(err, "bad_request", "field 'template': '%s' is not a kernel template (known: %s)", tmpl, known);
    }
    r->spec.template_file = tf->name;
    if (need_str(o, "expr", "a template-id such as \"kjit_sinusoid<kjit::bf16>\"", &expr, err)) return -1;
    size_t bad = strspn(expr, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:<>, -");
    if (expr[bad] && (unsigned char)expr[bad] < 0x80)
        return fail(err, "bad_request", "field 'expr': character '%c' at byte %zu: a template-id takes only "
                                        "[A-Za-z0-9_:<>, -]", expr[bad], bad);
    if (expr[bad])
        return fail(err, "bad_request", "field 'expr': byte 0x%02x at %zu: a template-id takes only "
                                        "[A-Za-z0-9_:<>, -]", (unsigned char)expr[bad], bad);
    if (strncmp(expr, "kjit_", 5))
        return fail(err, "bad_request", "field 'expr': '%.32s' does not start with kjit_ (the templates' kernels do)",
                    expr);
    if (expr_canon(expr, r->spec.name_expr, sizeof r->spec.name_expr))
        return fail(err, "bad_request", "field 'expr': longer than %d bytes once spaced as a template-id is "
                                        "(one space after each comma)", KJIT_REQ_MAX_EXPR);
    r->spec_sm = default_sm;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arch");
    if (a && !cJSON_IsString(a)) return fail(err, "bad_request", "field 'arch': expected a string such as \"sm_90\"");
    if (a && parse_arch(a->valuestring, &r->spec_sm, err)) return -1;
    return 0;
}

/* A prewarm list: one value or an array of 1..KJIT_REQ_MAX_LIST values. */
static const cJSON *list_items(const cJSON *o, const char *name, int *n, int want_string, kjit_req_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    *n = 0;
    if (!v) return NULL;
    const cJSON *first = cJSON_IsArray(v) ? v->child : v;
    for (const cJSON *i = first; i; i = cJSON_IsArray(v) ? i->next : NULL) {
        if (want_string ? !cJSON_IsString(i) : !cJSON_IsNumber(i)) {
            fail(err, "bad_request", "field '%s': expected %s or a list of them", name,
                 want_string ? "a string" : "an integer");
            *n = -1;
            return NULL;
        }
        if (++*n > KJIT_REQ_MAX_LIST) {
            fail(err, "bad_request", "field '%s': more than %d items", name, KJIT_REQ_MAX_LIST);
            *n = -1;
            return NULL;
        }
    }
    if (!*n) {
        fail(err, "bad_request", "field '%s': the list is empty", name);
        *n = -1;
    }
    return first;
}

#define NEXT(v, i) (cJSON_IsArray(v) ? (i)->next : NULL)

/* A prewarm's lists keep each value once: a combination listed twice would
 * be fetched twice (a failing one compiled again). 1 when x (size bytes)
 * is among the n values at v. */
static int listed(const void *v, int n, size_t size, const void *x)
{
    for (int k = 0; k < n; ++k)
        if (!memcmp((const char *)v + (size_t)k * size, x, size)) return 1;
    return 0;
}

static int parse_prewarm(const cJSON *o, int default_sm, kjit_req *r, kjit_req_error *err)
{
    int n;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "ops");
    const cJSON *it = list_items(o, "ops", &n, 1, err);
    if (n < 0) return -1;
    if (!n) return fail(err, "bad_request", "field 'ops' (an op name, \"all\" or a list) is missing");
    for (; it; it = NEXT(v, it)) {
        const int all = !strcmp(it->valuestring, "all");
        for (int k = 0; k < (all ? kjit_op_count() : 1) && r->n_ops < KJIT_REQ_MAX_LIST; ++k) {
            const char *op = all ? kjit_op_name(k) : NULL;
            if (!all && lookup_op(it->valuestring, &op, err)) return -1;
            if (!listed(r->ops, r->n_ops, sizeof op, &op)) r->ops[r->n_ops++] = op;
        }
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "hidden");
    it = list_items(o, "hidden", &n, 0, err);
    if (n < 0) return -1;
    if (!n) return fail(err, "bad_request", "field 'hidden' (a size or a list) is missing");
    for (; it; it = NEXT(v, it)) {
        double d = it->valuedouble;
        if (!isfinite(d) || floor(d) != d || d < 1 || d > KJIT_REQ_MAX_HIDDEN)
            return fail(err, "bad_request", "field 'hidden': %.17g is not an integer in 1..%d", d, KJIT_REQ_MAX_HIDDEN);
        const int h = (int)d;
        if (!listed(r->hidden, r->n_hidden, sizeof h, &h)) r->hidden[r->n_hidden++] = h;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "dtype");
    it = list_items(o, "dtype", &n, 1, err);
    if (n < 0) return -1;
    if (!n) return fail(err, "bad_request", "field 'dtype' (a dtype or a list) is missing");
    for (; it; it = NEXT(v, it)) {
        kjit_dtype dt;
        if (parse_dtype("dtype", it->valuestring, &dt, err)) return -1;
        if (!listed(r->dtypes, r->n_dtypes, sizeof dt, &dt)) r->dtypes[r->n_dtypes++] = dt;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "arch");
    it = list_items(o, "arch", &n, 1, err);
    if (n < 0) return -1;
    if (!n) r->sms[r->n_sms++] = default_sm;
    for (; it; it = NEXT(v, it)) {
        int sm;
        if (parse_arch(it->valuestring, &sm, err)) return -1;
        if (!listed(r->sms, r->n_sms, sizeof sm, &sm)) r->sms[r->n_sms++] = sm;
    }
    long tuples = (long)r->n_ops * r->n_hidden * r->n_dtypes * r->n_sms;
    if (tuples > KJIT_REQ_MAX_TUPLES)
        return fail(err, "bad_request", "prewarm of %ld combinations: at most %d per request", tuples,
                    KJIT_REQ_MAX_TUPLES);
    for (int a = 0; a < r->n_ops; ++a)
        for (int h = 0; h < r->n_hidden; ++h)
            for (int d = 0; d < r->n_dtypes; ++d) {
                kjit_req_tuple t = {r->ops[a], r->hidden[h], r->dtypes[d], default_sm};
                if (check_tuple(&t, err)) return -1;
            }
    return 0;
}

/* Prefixes the message of a failed buffer field with the buffer's name. */
static int in_buffer(kjit_req_error *err, const char *name)
{
    char m[sizeof err->message];
    memcpy(m, err->message, sizeof m);
    return fail(err, err->code, "buffer '%.128s': %.300s", name, m);
}

static int parse_buffer(const cJSON *it, kjit_run_req *q, kjit_req_error *err)
{
    enum { NAME, HANDLE, OFFSET, STRIDE, NKEYS };
    static const char *const keys[NKEYS] = {"name", "handle", "offset", "stride"};
    if (!cJSON_IsObject(it))
        return fail(err, "bad_request", "field 'buffers': each item is an object {name, handle, offset, stride}");
    /* One pass over the members: each known key's first member, and the
     * first member that is unknown or repeats a key. */
    const cJSON *f[NKEYS] = {0}, *bad = NULL;
    int repeated = 0;
    for (const cJSON *k = it->child; k; k = k->next) {
        int i = 0;
        while (i < NKEYS && strcmp(k->string, keys[i])) ++i;
        if (!bad && (i == NKEYS || f[i])) bad = k, repeated = i < NKEYS;
        if (i < NKEYS && !f[i]) f[i] = k;
    }
    const char *name = cJSON_IsString(f[NAME]) ? f[NAME]->valuestring : NULL;
    if (!name) return fail(err, "bad_request", "field 'buffers': an item without a 'name' (a string)");
    if (bad && !repeated) return fail(err, "bad_request", "buffer '%s': unknown field '%s'", name, bad->string);
    if (bad) return fail(err, "bad_request", "buffer '%s': field '%s' appears twice", name, bad->string);
    const char *op = kjit__run_op_name(q->op), *dir = q->bwd ? "bwd" : "fwd";
    kjit_run_buffer *b = &q->buf[q->n_buffers];
    if ((b->slot = kjit__run_slot(q->op, q->bwd, name)) < 0) {
        char list[256];
        kjit__run_slot_list(q->op, q->bwd, list, sizeof list);
        return fail(err, "bad_request", "buffer '%s': %s %s takes no such buffer (it takes %s)", name, op, dir, list);
    }
    for (int i = 0; i < q->n_buffers; ++i)
        if (q->buf[i].slot == b->slot) return fail(err, "bad_request", "buffer '%s' appears twice", name);
    double v = 0;
    if (!f[HANDLE])
        return fail(err, "bad_request", "buffer '%s': field 'handle' (its record in the payload) is missing", name);
    if (!q->n_records)
        return fail(err, "bad_request", "buffer '%s': field 'handle': the frame has no payload of IPC handles", name);
    if (member_int(f[HANDLE], "handle", 0, q->n_records - 1, &v, err)) return in_buffer(err, name);
    b->handle = (int)v;
    b->offset = 0;
    if (f[OFFSET]) {
        if (member_int(f[OFFSET], "offset", 0, KJIT_RUN_MAX_OFFSET, &v, err)) return in_buffer(err, name);
        b->offset = (uint64_t)v;
    }
    const int two_d = kjit__run_slot_2d(q->op, b->slot);
    if (!two_d && f[STRIDE])
        return fail(err, "bad_request", "buffer '%s': field 'stride': a vector has none", name);
    if (two_d && !f[STRIDE])
        return fail(err, "bad_request", "buffer '%s': field 'stride' (elements between rows) is missing", name);
    if (two_d && member_int(f[STRIDE], "stride", 1, KJIT_RUN_MAX_STRIDE, &v, err)) return in_buffer(err, name);
    b->stride = two_d ? (int64_t)v : 0;
    q->n_buffers++;
    return 0;
}

/* A float-valued field: absent leaves *out. */
static int get_number(const cJSON *o, const char *name, double *out, kjit_req_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || fabs(v->valuedouble) > 1e30)
        return fail(err, "bad_request", "field '%s': expected a finite number of magnitude at most 1e30", name);
    *out = v->valuedouble;
    return 0;
}

/* An op on buffers shared by CUDA IPC: the payload is 64-byte handles, the
 * buffers and the event name theirs by index. */
static int parse_run(const cJSON *o, int default_sm, uint32_t payload_len, kjit_req *r, kjit_req_error *err)
{
    kjit_run_req *q = &r->run;
    if (parse_tuple(o, default_sm, 0, &r->t, err)) return -1;
    if (!(q->op = kjit__run_op(r->t.op)))
        return fail(err, "unsupported", "field 'op': run does not execute %s", r->t.op);
    const char *op = r->t.op;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "dir");
    if (d && (!cJSON_IsString(d) || (strcmp(d->valuestring, "fwd") && strcmp(d->valuestring, "bwd"))))
        return fail(err, "bad_request", "field 'dir': expected \"fwd\" or \"bwd\"");
    q->bwd = d && !strcmp(d->valuestring, "bwd");
    if (q->bwd && !kjit__run_op_has_bwd(q->op)) return fail(err, "bad_request", "field 'dir': %s has no backward", op);
    q->hidden = r->t.hidden;
    q->dtype = r->t.dtype;
    double v;
    if (get_int(o, "n", 0, 2147483647.0, 1, &v, err)) return -1;
    q->n = (int64_t)v;

    const unsigned takes = kjit__run_op_fields(q->op);
    static const struct { const char *name; unsigned bit; } fields[] = {
        {"rows", KJIT_RUN_ROWS}, {"param_dtype", KJIT_RUN_PARAM_DTYPE}, {"index_dtype", KJIT_RUN_INDEX_DTYPE},
        {"eps", KJIT_RUN_EPS}, {"flip_sin_to_cos", KJIT_RUN_SINUSOID}, {"downscale_freq_shift", KJIT_RUN_SINUSOID},
        {"scale", KJIT_RUN_SINUSOID}, {"max_period", KJIT_RUN_SINUSOID},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; ++i)
        if (!(takes & fields[i].bit) && cJSON_GetObjectItemCaseSensitive(o, fields[i].name))
            return fail(err, "bad_request", "field '%s': %s takes none", fields[i].name, op);
    if (takes & KJIT_RUN_ROWS) {
        if (get_int(o, "rows", 1, 65535, 1, &v, err)) return -1;
        q->rows = (int64_t)v;
    }
    q->param_dtype = q->dtype;
    const char *pd = get_str(o, "param_dtype"), *id = get_str(o, "index_dtype");
    if (cJSON_GetObjectItemCaseSensitive(o, "param_dtype") && !pd)
        return fail(err, "bad_request", "field 'param_dtype': expected a string such as \"bf16\"");
    if (pd && parse_dtype("param_dtype", pd, &q->param_dtype, err)) return -1;
    q->index_dtype = KJIT_I32;
    if (cJSON_GetObjectItemCaseSensitive(o, "index_dtype") &&
        (!id || kjit_dtype_parse(id, &q->index_dtype) || (q->index_dtype != KJIT_I32 && q->index_dtype != KJIT_I64)))
        return fail(err, "bad_request", "field 'index_dtype': expected \"int32\" or \"int64\"");
    double eps = 1e-6;
    if (get_number(o, "eps", &eps, err)) return -1;
    q->eps = (float)eps;
    kjit_sinusoid_opts_init(&q->sinusoid);
    const cJSON *flip = cJSON_GetObjectItemCaseSensitive(o, "flip_sin_to_cos");
    if (flip && !cJSON_IsBool(flip)) return fail(err, "bad_request", "field 'flip_sin_to_cos': expected true or false");
    q->sinusoid.flip_sin_to_cos = cJSON_IsTrue(flip);
    if (get_number(o, "downscale_freq_shift", &q->sinusoid.downscale_freq_shift, err) ||
        get_number(o, "scale", &q->sinusoid.scale, err) || get_number(o, "max_period", &q->sinusoid.max_period, err))
        return -1;

    if (payload_len % KJIT_RUN_HANDLE_BYTES)
        return fail(err, "bad_request", "the payload of %u bytes is not a whole number of %d-byte IPC handles",
                    payload_len, KJIT_RUN_HANDLE_BYTES);
    q->n_records = (int)(payload_len / KJIT_RUN_HANDLE_BYTES);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "buffers");
    if (!b) return fail(err, "bad_request", "field 'buffers' (a list of {name, handle, offset, stride}) is missing");
    if (!cJSON_IsArray(b) || !b->child)
        return fail(err, "bad_request", "field 'buffers': expected a non-empty list of {name, handle, offset, stride}");
    for (const cJSON *it = b->child; it; it = it->next) {
        if (q->n_buffers == KJIT_RUN_MAX_BUFFERS)
            return fail(err, "bad_request", "field 'buffers': more than %d", KJIT_RUN_MAX_BUFFERS);
        if (parse_buffer(it, q, err)) return -1;
    }
    if (kjit__run_complete(q, err->message, sizeof err->message)) {
        err->code = "bad_request";
        return -1;
    }
    q->event = -1;
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
    if (ev && !q->n_records)
        return fail(err, "bad_request", "field 'event': the frame has no payload of IPC handles");
    if (ev && get_int(o, "event", 0, q->n_records - 1, 1, &v, err)) return -1;
    if (ev) q->event = (int)v;
    for (int i = 0; ev && i < q->n_buffers; ++i)
        if (q->buf[i].handle == q->event)
            return fail(err, "bad_request", "field 'event': record %d is buffer '%s''s memory handle", q->event,
                        kjit__run_slot_name(q->op, q->buf[i].slot));
    return 0;
}

/* Tuning applies to the AdaLN ops' fast path (kjit_tune). */
static int parse_tune(const cJSON *o, int default_sm, kjit_req *r, kjit_req_error *err)
{
    if (parse_tuple(o, default_sm, 0, &r->t, err)) return -1;
    if (!kjit__adaln_mode(r->t.op))
        return fail(err, "bad_request", "field 'op': %s has no launch config to tune (tunable: norm_modulate, "
                                        "gated_residual, gated_residual_norm_modulate)", r->t.op);
    if (!kjit__adaln_fast_hidden(r->t.hidden))
        return fail(err, "unsupported", "field 'hidden': %d takes the generic path, which is not tuned (a multiple "
                                        "of 8 up to %d is)", r->t.hidden, KJIT_TUNE_FAST_MAX_HIDDEN);
    return 0;
}

static int parse_hello(const cJSON *o, kjit_req *r, kjit_req_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "versions");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "client");
    if (c && !cJSON_IsString(c)) return fail(err, "bad_request", "field 'client': expected a string");
    if (!v) {
        r->version = KJIT_PROTO_VERSION;
        return 0;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1 || cJSON_GetArraySize(v) > 16)
        return fail(err, "bad_request", "field 'versions': expected a list of 1..16 protocol versions");
    r->version = 0;
    for (const cJSON *it = v->child; it; it = it->next) {
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble != floor(it->valuedouble))
            return fail(err, "bad_request", "field 'versions': expected integers");
        if (it->valuedouble == KJIT_PROTO_VERSION) r->version = KJIT_PROTO_VERSION;
    }
    if (!r->version)
        return fail(err, "version", "no common protocol version: this server speaks version %d", KJIT_PROTO_VERSION);
    return 0;
}

static int check_fields(const cJSON *o, kjit_req_type t, kjit_req_error *err)
{
    for (const cJSON *it = o->child; it; it = it->next) {
        int known = !strcmp(it->string, "id") || !strcmp(it->string, "type");
        for (int k = 0; !known && k < MAX_FIELDS && type_fields[t][k]; ++k)
            known = !strcmp(it->string, type_fields[t][k]);
        if (!known) return fail(err, "bad_request", "%s: unknown field '%s'", type_names[t], it->string);
        for (const cJSON *j = o->child; j != it; j = j->next)
            if (!strcmp(j->string, it->string))
                return fail(err, "bad_request", "field '%s' appears twice", it->string);
    }
    return 0;
}

static int parse_tree(const cJSON *o, uint32_t payload_len, int default_sm, kjit_req *r, kjit_req_error *err)
{
    if (!cJSON_IsObject(o)) return fail(err, "bad_request", "the header must be a JSON object");
    double id = 0;
    const cJSON *idv = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (!idv) return fail(err, "bad_request", "field 'id' (the request id, an integer) is missing");
    if (get_int(o, "id", 0, KJIT_REQ_MAX_ID, 1, &id, err)) return -1;
    r->id = (uint64_t)id;
    err->has_id = 1;
    err->id = r->id;
    if (check_strings(o->child, "", 1, err)) return -1;
    const char *type;
    if (need_str(o, "type", "the request type", &type, err)) return -1;
    int t = 0;
    while (t < N_TYPES && strcmp(type, type_names[t])) ++t;
    if (t == N_TYPES)
        return fail(err, "unknown_type", "unknown request type '%s' (known: hello, ping, stats, compile, kernel, "
                                         "prewarm, tune, run, shutdown)", type);
    r->type = (kjit_req_type)t;
    if (check_fields(o, r->type, err)) return -1;
    if (payload_len && r->type != KJIT_REQ_RUN)
        return fail(err, "bad_request", "%s takes no payload (got %u bytes)", type, payload_len);
    switch (r->type) {
    case KJIT_REQ_HELLO: return parse_hello(o, r, err);
    case KJIT_REQ_COMPILE: {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "config");
        if (c && !cJSON_IsNull(c) && !(cJSON_IsObject(c) && !c->child))
            return fail(err, "unsupported", "field 'config': a launch config is the tuner's choice (the tune "
                                            "request), not a compile option (omit it or pass null)");
        return parse_tuple(o, default_sm, 1, &r->t, err);
    }
    case KJIT_REQ_KERNEL: return parse_kernel(o, default_sm, r, err);
    case KJIT_REQ_TUNE: return parse_tune(o, default_sm, r, err);
    case KJIT_REQ_PREWARM: return parse_prewarm(o, default_sm, r, err);
    case KJIT_REQ_RUN: return parse_run(o, default_sm, payload_len, r, err);
    default: return 0;
    }
}

int kjit__req_parse(const char *json, size_t len, uint32_t payload_len, int default_sm, kjit_req *out,
                    kjit_req_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    if (memchr(json, '\0', len)) return fail(err, "bad_json", "the JSON header contains a NUL byte");
    size_t at = 0;
    const char *why = kjit__json_text_problem(json, len, &at);
    if (why) return fail(err, "bad_json", "the JSON header %s (at byte %zu)", why, at);
    if (kjit__json_depth(json, len, KJIT_MAX_JSON_DEPTH) > KJIT_MAX_JSON_DEPTH)
        return fail(err, "bad_json", "the JSON header nests deeper than %d levels", KJIT_MAX_JSON_DEPTH);
    const char *end = NULL;
    cJSON *root = kjit__json_parse(json, len, &end); /* a shortage of memory is not bad_json */
    if (!root) {
        at = end ? (size_t)(end - json) : 0;
        return fail(err, "bad_json", "the header is not valid JSON (at byte %zu of %zu)", at, len);
    }
    for (const char *p = end; p < json + len; ++p)
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
            cJSON_Delete(root);
            return fail(err, "bad_json", "trailing bytes after the JSON header (at byte %zu)", (size_t)(p - json));
        }
    int rc = parse_tree(root, payload_len, default_sm, out, err);
    cJSON_Delete(root);
    return rc;
}
