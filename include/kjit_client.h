/* kjit_client: talk to a running `kjit serve` over its Unix socket
 * (docs/PROTOCOL.md). Blocking, one request at a time per client; use one
 * client per thread. Part of libkjit (status codes and kjit_last_error() as
 * everywhere else); the library itself uses it when KJIT_SERVER is set.
 *
 *   kjit_client *c;
 *   if (kjit_client_connect(&c, NULL, 5000) == KJIT_OK) {
 *       kjit_client_reply r;
 *       if (kjit_client_request(c, "{\"type\":\"stats\"}", NULL, 0, NULL, NULL, &r) == KJIT_OK) {
 *           puts(r.json);
 *           kjit_client_reply_free(&r);
 *       }
 *       kjit_client_close(c);
 *   }
 */
#ifndef KJIT_CLIENT_H
#define KJIT_CLIENT_H

#include <stddef.h>

#include "kjit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kjit_client kjit_client;

/* The socket a server listens on by default: $XDG_RUNTIME_DIR/kjit/kjit.sock
 * where XDG_RUNTIME_DIR is an absolute path (a relative one is ignored, as the
 * XDG spec says), else /tmp/kjit-<uid>/kjit.sock. KJIT_EINVAL when it does
 * not fit in len. */
KJIT_API int kjit_client_default_socket(char *buf, size_t len);

/* Connects to path (NULL: $KJIT_SERVER if set, else the default socket) and
 * says hello. timeout_ms bounds the connect and the whole of each reply
 * (0: none; a progress event of the request starts it anew): a server that
 * trickles bytes or sends only other requests' frames is cut off when it
 * has passed, as a silent one is. KJIT_ENOTFOUND when no server answers at the path (no socket
 * file, or a stale one): callers may fall back to compiling themselves.
 * KJIT_EPERM when the server refuses this user; KJIT_EINVAL for path "".
 * A signal during the connect's wait is retried within the timeout. A
 * frame from the server that is not one JSON object (bytes after it, a NUL
 * byte) fails the request at once (KJIT_EIO; the connection is then done). */
KJIT_API int kjit_client_connect(kjit_client **out, const char *path, int timeout_ms);

/* Changes the bound on each later reply (0: none), e.g. a short one to
 * find a server, then a longer one for a compile. */
KJIT_API int kjit_client_timeout_set(kjit_client *c, int timeout_ms);

/* The server's hello reply (versions, capabilities, ops, arch, limits). */
KJIT_API const char *kjit_client_hello(const kjit_client *c);

typedef struct kjit_client_reply {
    char *json;         /* the reply header, NUL-terminated */
    void *payload;      /* NULL when payload_len is 0 */
    size_t payload_len;
    int ok;             /* the reply's "ok" */
} kjit_client_reply;

/* Progress events of a request (prewarm), as JSON text valid during the call. */
typedef void (*kjit_client_event_fn)(void *arg, const char *event_json);

/* Sends one request and waits for its reply. json is a JSON object with a
 * "type"; the client sets its "id". A request the server would refuse as
 * bad_json (text after the object, not UTF-8, a \u0000 escape, nested
 * deeper than 8) is KJIT_EINVAL naming why, nothing sent. An error reply
 * from the server ({"ok":false,...}) is still KJIT_OK with reply->ok == 0;
 * after one that ends the connection (bad_frame, busy, timeout,
 * not_allowed) the client is unusable, as after a failure to talk (closed
 * connection, bad frame, timeout: KJIT_EIO). *reply is zeroed first; on
 * KJIT_OK free it with kjit_client_reply_free. */
KJIT_API int kjit_client_request(kjit_client *c, const char *json, const void *payload, size_t payload_len,
                                 kjit_client_event_fn on_event, void *arg, kjit_client_reply *reply);
KJIT_API void kjit_client_reply_free(kjit_client_reply *r);

/* One compiled kernel, pointing into the kjit_client_compiled that holds it. */
typedef struct kjit_client_kernel {
    const char *name_expr;  /* e.g. "kjit_sinusoid<kjit::bf16>" */
    const char *lowered;    /* the entry name for cuModuleGetFunction */
    const char *key;        /* the cache key, 32 hex digits */
    const void *cubin;
    size_t cubin_len;
    int cached;
} kjit_client_kernel;

typedef struct kjit_client_compiled {
    int n;
    kjit_client_kernel *kernels;
    int cached;             /* every kernel came from a cache */
    void *priv_;            /* the reply the pointers lead into */
} kjit_client_compiled;

/* Every kernel of an op for (hidden, dtype, arch) through the server: what
 * the embedded library would ask when KJIT_SERVER names a socket. arch NULL:
 * the server's. A refused request is KJIT_EINVAL, a failed compile
 * KJIT_ECOMPILE, with the server's message in kjit_last_error(). */
KJIT_API int kjit_client_compile(kjit_client *c, const char *op, int hidden, kjit_dtype dtype, const char *arch,
                                 kjit_client_compiled *out);

/* One kernel by template file and template-id (a kjit_kernel_spec's
 * template_file and name_expr; op its op, a registered one) for arch (NULL:
 * the server's): what the embedded library asks on a miss of its own cache
 * when KJIT_SERVER names a socket. out->n is 1. Errors as for
 * kjit_client_compile. */
KJIT_API int kjit_client_kernel_fetch(kjit_client *c, const char *op, const char *template_file, const char *expr,
                                      const char *arch, kjit_client_compiled *out);
KJIT_API void kjit_client_compiled_free(kjit_client_compiled *r);

/* Runs an op on the server's GPU over buffers this process shares through
 * CUDA IPC (docs/PROTOCOL.md, `run`). json is the request header (its
 * "type" is set to "run" here): op, dir, hidden, dtype, n, rows, ...,
 * "buffers":[{"name","handle","offset","stride"}, ...] and "event";
 * handles holds n_handles 64-byte records (CUipcMemHandle from
 * cuIpcGetMemHandle on an allocation's base, CUipcEventHandle from
 * cuIpcGetEventHandle on an event made with CU_EVENT_INTERPROCESS |
 * CU_EVENT_DISABLE_TIMING), which "handle" and "event" index. Record the
 * event on the stream that produced the inputs before calling: the server's
 * stream waits for it. Returns once the op is done on the device; *us (may
 * be NULL) is the server's time for it. The server keeps the handles open
 * until this connection closes: keep the allocations and the event alive
 * until then. A refused or failed run returns the server's status
 * (KJIT_EINVAL for a malformed request or a bad argument, KJIT_EUNSUPPORTED
 * on a server without a GPU, KJIT_EINDEX, KJIT_ECUDA, ...) with its message
 * in kjit_last_error(). */
KJIT_API int kjit_client_run(kjit_client *c, const char *json, const void *handles, int n_handles, double *us);

/* Tunes (op, hidden, dtype) on the server's GPU: kjit_tune there, whose
 * context uses the result from then on and stores it in its tuning file.
 * Concurrent requests for one key share one tuning. Fills *out (may be
 * NULL) from the reply (config sources TUNED and DEFAULT). Takes seconds:
 * allow for it with kjit_client_timeout_set. As kjit_tune: KJIT_EIO with
 * *out filled when the server tuned (and uses the result) but could not
 * write its tuning file, the reason in kjit_last_error(); on any other
 * error *out is zeroed. Errors as for kjit_client_run (KJIT_EUNSUPPORTED
 * without a GPU or off the tuned path); a reply whose configs, candidate
 * counts or row counts are not whole numbers in range is KJIT_EIO (naming
 * the field). */
KJIT_API int kjit_client_tune(kjit_client *c, const char *op, int hidden, kjit_dtype dtype, kjit_tune_result *out);

/* Closes the connection. NULL is a no-op. */
KJIT_API void kjit_client_close(kjit_client *c);

#ifdef __cplusplus
}
#endif
#endif
