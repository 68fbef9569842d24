/* Parsing and validation of one request's JSON header, with no I/O, so the
 * fuzz target (tests/fuzz) drives exactly what the server runs.
 *
 * A request names registered ops with validated parameters, never source
 * code or a path: every string in it (keys included) is at most
 * KJIT_REQ_MAX_STRING bytes (a `kernel` request's expr: KJIT_REQ_MAX_EXPR),
 * free of control characters, '/' and "..". Strings in a parsed kjit_req
 * point into static storage (the op registry, the template table) or into
 * the request itself, never into the JSON text, so the request outlives the
 * cJSON tree. */
#ifndef KJIT_SERVER_REQUEST_H
#define KJIT_SERVER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "kjit.h"
#include "server/run_args.h"

#define KJIT_REQ_MAX_STRING 128
/* A kernel's name expression: what kjit_kernel_spec.name_expr holds. */
#define KJIT_REQ_MAX_EXPR ((int)sizeof(((kjit_kernel_spec *)0)->name_expr) - 1)
#define KJIT_REQ_MAX_LIST 64      /* items in one prewarm list */
#define KJIT_REQ_MAX_TUPLES 1024  /* (op, hidden, dtype, arch) combinations in one prewarm */
#define KJIT_REQ_MAX_HIDDEN 65536
#define KJIT_REQ_MAX_ID 9007199254740991.0 /* 2^53 - 1: exact in a JSON number */

typedef enum kjit_req_type {
    KJIT_REQ_HELLO,
    KJIT_REQ_PING,
    KJIT_REQ_STATS,
    KJIT_REQ_COMPILE,
    KJIT_REQ_KERNEL,
    KJIT_REQ_PREWARM,
    KJIT_REQ_TUNE,
    KJIT_REQ_RUN,
    KJIT_REQ_SHUTDOWN
} kjit_req_type;

/* One specialization: a registered op for a hidden size, dtype and arch. */
typedef struct kjit_req_tuple {
    const char *op; /* the registry's own string */
    int hidden;
    kjit_dtype dtype;
    int sm;
} kjit_req_tuple;

typedef struct kjit_req {
    kjit_req_type type;
    uint64_t id;
    int version;        /* hello: the highest version both sides speak */
    kjit_req_tuple t;   /* compile, tune, run (op, hidden, dtype) */
    /* kernel: one template-id of an embedded template file, for sm */
    kjit_kernel_spec spec;
    int spec_sm;
    /* prewarm: the cross product of these lists */
    const char *ops[KJIT_REQ_MAX_LIST];
    int n_ops;
    int hidden[KJIT_REQ_MAX_LIST];
    int n_hidden;
    kjit_dtype dtypes[3];
    int n_dtypes;
    int sms[KJIT_REQ_MAX_LIST];
    int n_sms;
    /* run: the op, its fields and buffers (server/run_args.h) */
    kjit_run_req run;
} kjit_req;

/* Why a request was refused: a stable code for programs, a message for people. */
typedef struct kjit_req_error {
    const char *code; /* "bad_json", "bad_request", "unknown_type", "unknown_op", "version", "unsupported" */
    char message[512];
    int has_id;       /* the id could be read: the error reply carries it */
    uint64_t id;
} kjit_req_error;

/* Parses and validates one header. default_sm is the arch used when a
 * request names none. payload_len is the frame's (only `run` may carry one:
 * its 64-byte IPC handles, which the header's buffers and event index).
 * Returns 0 and fills *out, or -1 and fills *err. */
int kjit__req_parse(const char *json, size_t len, uint32_t payload_len, int default_sm, kjit_req *out,
                    kjit_req_error *err);

/* "compile" for KJIT_REQ_COMPILE, ... */
const char *kjit__req_type_name(kjit_req_type t);

#endif
