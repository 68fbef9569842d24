/* The ops a `run` request executes (docs/PROTOCOL.md): the buffers each
 * takes in each direction, the request fields that apply to it, and how a
 * request fills the library's argument block. No CUDA calls and no I/O: the
 * request parser (and its fuzz target) validates against these tables; the
 * server's GPU lane (run.c) then bounds each buffer by its shared
 * allocation and calls the op. */
#ifndef KJIT_SERVER_RUN_ARGS_H
#define KJIT_SERVER_RUN_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "kjit.h"

#define KJIT_RUN_HANDLE_BYTES 64          /* a CUipcMemHandle or CUipcEventHandle */
#define KJIT_RUN_MAX_BUFFERS 32
#define KJIT_RUN_MAX_OFFSET 281474976710655.0 /* 2^48 - 1 bytes: below 2^48 */
#define KJIT_RUN_MAX_STRIDE 2147483647.0      /* elements */

/* The request fields besides op, dir, hidden, dtype, n, buffers and event
 * that an op takes (kjit__run_op_fields). */
enum {
    KJIT_RUN_ROWS = 1,        /* "rows": R, the table rows */
    KJIT_RUN_PARAM_DTYPE = 2, /* "param_dtype" */
    KJIT_RUN_INDEX_DTYPE = 4, /* "index_dtype" */
    KJIT_RUN_EPS = 8,         /* "eps" */
    KJIT_RUN_SINUSOID = 16    /* "flip_sin_to_cos", "downscale_freq_shift", "scale", "max_period" */
};

typedef struct kjit_run_op kjit_run_op;

typedef struct kjit_run_buffer {
    int slot;        /* the op's buffer (kjit__run_slot) */
    int handle;      /* the payload record holding its CUipcMemHandle */
    uint64_t offset; /* bytes from the shared allocation's base */
    int64_t stride;  /* elements between rows of a 2-D buffer; 0 for a vector */
} kjit_run_buffer;

typedef struct kjit_run_req {
    const kjit_run_op *op;
    int bwd;
    int hidden;                   /* timestep_sinusoid: D */
    int64_t n;                    /* rows (timestep_sinusoid: timesteps) */
    int64_t rows;                 /* R: table rows (index values are in [0, R)) */
    kjit_dtype dtype;             /* activations; adaln_row_gather: tables and outputs; sinusoid: out */
    kjit_dtype param_dtype;       /* weight, shift, scale, gate (adaln_row_gather: = dtype) */
    kjit_dtype index_dtype;
    float eps;
    kjit_sinusoid_opts sinusoid;
    int event;                    /* the payload record of the CUipcEventHandle; -1: none */
    int n_records;                /* payload length / 64 */
    int n_buffers;
    kjit_run_buffer buf[KJIT_RUN_MAX_BUFFERS];
} kjit_run_req;

/* The op a run executes by its registered name; NULL when run takes none. */
const kjit_run_op *kjit__run_op(const char *name);
const char *kjit__run_op_name(const kjit_run_op *op);
int kjit__run_op_has_bwd(const kjit_run_op *op);
unsigned kjit__run_op_fields(const kjit_run_op *op);

/* The slot of a buffer name op takes in a direction, or -1. */
int kjit__run_slot(const kjit_run_op *op, int bwd, const char *name);
const char *kjit__run_slot_name(const kjit_run_op *op, int slot);
/* 1 for a 2-D buffer (rows with a stride), 0 for a vector (weight, index, t). */
int kjit__run_slot_2d(const kjit_run_op *op, int slot);
/* "x, shift, scale, out, index; optional: weight" for messages. */
void kjit__run_slot_list(const kjit_run_op *op, int bwd, char *buf, size_t len);
/* 0 when every buffer the op needs is there; else -1 and why[] names the
 * first one missing. */
int kjit__run_complete(const kjit_run_req *r, char *why, size_t len);

/* The bytes buffer i spans from its start (0 when it has no rows); -1 when
 * that overflows 64 bits. */
int kjit__run_extent(const kjit_run_req *r, int i, uint64_t *bytes);
/* The argument block of timestep_sinusoid, whose C call takes scalars. */
typedef struct kjit_run_sinusoid_args {
    const float *t;
    void *out;
    int64_t out_stride;
    int64_t n;
    int d;
    kjit_dtype dtype;
    int flip_sin_to_cos;
    double downscale_freq_shift, scale, max_period;
} kjit_run_sinusoid_args;

/* The library call a run makes: the op, its direction and the op's
 * argument block with ptr[i] placed for buf[i]. Built on zeroed memory, so
 * two runs that make the same call are equal byte for byte (the server
 * replays a repeated call as a CUDA graph: run_graph.c). */
typedef struct kjit_run_call {
    const kjit_run_op *op;
    int bwd;
    union {
        kjit_adaln_args a;
        kjit_row_gather_args g;
        kjit_run_sinusoid_args s;
    } u;
} kjit_run_call;

void kjit__run_call_make(const kjit_run_req *r, const uint64_t *ptr, kjit_run_call *c);
/* Calls the op on stream (a backward with the context's own workspace).
 * The library's status; its own checks name a bad argument. */
int kjit__run_call_invoke(kjit_ctx *ctx, const kjit_run_call *c, CUstream stream);

#endif
