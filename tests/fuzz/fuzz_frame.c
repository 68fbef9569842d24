/* libFuzzer target: the server's input path on arbitrary bytes — frame
 * headers as conn.c walks them, then each header's JSON through the
 * request parser — plus the whole input as one JSON header, so the fuzzer
 * reaches the parser without having to build frames first. A request the
 * parser accepts must satisfy what the server then relies on, and the run
 * memo must answer only what the parser would. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/frame.h"
#include "jit/templates.h"
#include "server/request.h"
#include "server/server_internal.h"

/* One connection's run memo (run_memo.c), kept across inputs: a text it
 * answers must parse, by the full parser, to exactly what it answered. */
static kjit_conn *memo_conn(void)
{
    static kjit_conn *c;
    if (!c) c = calloc(1, sizeof *c);
    return c;
}

static void check(const char *json, size_t len, uint32_t payload_len)
{
    kjit_req r, m;
    kjit_req_error e;
    const int hit = kjit__run_memo_find(memo_conn(), json, (uint32_t)len, payload_len, &m);
    if (kjit__req_parse(json, len, payload_len, 90, &r, &e)) {
        if (!e.code || !e.message[0] || hit) abort();
        return;
    }
    if (hit && memcmp(&m, &r, sizeof r)) abort();
    if (r.type == KJIT_REQ_RUN) kjit__run_memo_keep(memo_conn(), json, (uint32_t)len, payload_len, &r);
    if (r.id > (uint64_t)KJIT_REQ_MAX_ID) abort();
    int n = 0;
    if ((r.type == KJIT_REQ_COMPILE || r.type == KJIT_REQ_RUN) &&
        kjit_op_kernels(r.t.op, r.t.hidden, r.t.dtype, NULL, 0, &n))
        abort();
    /* A kernel request is what kjit_kernel_fetch takes: a registered op, an
     * embedded template, a template-id (never other C++) that fits. */
    const kjit_template_file *tf;
    int op_known = 0;
    for (int i = 0; r.type == KJIT_REQ_KERNEL && i < kjit_op_count(); ++i) op_known |= r.spec.op == kjit_op_name(i);
    if (r.type == KJIT_REQ_KERNEL &&
        (!op_known || kjit__template_find(r.spec.template_file, &tf) ||
         strncmp(r.spec.name_expr, "kjit_", 5) || !memchr(r.spec.name_expr, '\0', sizeof r.spec.name_expr) ||
         r.spec.name_expr[strspn(r.spec.name_expr, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:<>, -")]))
        abort();
    /* A run's buffers and event index records of its payload; each buffer
     * is one the op takes, once; every extent is computable or refused. */
    if (r.type == KJIT_REQ_RUN) {
        const kjit_run_req *q = &r.run;
        uint64_t seen = 0, bytes;
        if (!q->op || (uint64_t)q->n_records * KJIT_RUN_HANDLE_BYTES != payload_len || q->event >= q->n_records ||
            q->n_buffers < 1 || q->n_buffers > KJIT_RUN_MAX_BUFFERS)
            abort();
        for (int i = 0; i < q->n_buffers; ++i) {
            const kjit_run_buffer *b = &q->buf[i];
            if (b->handle < 0 || b->handle >= q->n_records || b->handle == q->event || (seen >> b->slot & 1) ||
                strcmp(kjit__run_slot_name(q->op, b->slot), "") == 0 ||
                kjit__run_slot(q->op, q->bwd, kjit__run_slot_name(q->op, b->slot)) != b->slot ||
                (b->stride > 0) != kjit__run_slot_2d(q->op, b->slot))
                abort();
            seen |= 1ull << b->slot;
            (void)kjit__run_extent(q, i, &bytes);
        }
    }
    if (r.type == KJIT_REQ_PREWARM &&
        (long)r.n_ops * r.n_hidden * r.n_dtypes * r.n_sms > KJIT_REQ_MAX_TUPLES)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (size - off >= KJIT_FRAME_HEADER) {
        kjit_frame_header h;
        char why[256];
        if (kjit__frame_decode(data + off, KJIT_MAX_REQUEST_JSON, KJIT_MAX_REQUEST_PAYLOAD, &h, why, sizeof why))
            break;
        size_t total = KJIT_FRAME_HEADER + (size_t)h.json_len + h.payload_len;
        if (size - off < total) break;
        check((const char *)data + off + KJIT_FRAME_HEADER, h.json_len, h.payload_len);
        off += total;
    }
    /* A copy of exactly `size` bytes, so ASan sees any read past the end. */
    char *json = malloc(size ? size : 1);
    if (size) memcpy(json, data, size);
    check(json, size, 0);
    free(json);
    return 0;
}
