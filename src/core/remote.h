/* The KJIT_SERVER hook: on a miss of memory and disk, the cache's build
 * callback (ctx.c) asks a running `kjit serve` for the kernel before
 * compiling it in process, so one process on the node compiles each key. */
#ifndef KJIT_REMOTE_H
#define KJIT_REMOTE_H

#include <stddef.h>

#include "kjit.h"

typedef struct kjit_remote_kernel {
    const char *socket;        /* $KJIT_SERVER */
    const char *cache_dir;     /* the asking context's; "" when memory-only */
    const char *op;            /* the cache label: a registered op (the caller checks) */
    const char *template_file;
    const char *name_expr;
    int sm;
    const char *key;           /* the key this library computed, 32 hex digits */
} kjit_remote_kernel;

/* KJIT_OK: *lowered and *image (image_len bytes) are malloc'd copies of the
 * server's, whose key is k->key. Else a status, with kjit_last_error()
 * saying why the server was not used (no server, a refused request, another
 * key, a server sharing this cache directory): the caller compiles. */
int kjit__remote_build(const kjit_remote_kernel *k, char **lowered, void **image, size_t *image_len);

/* For the server's own context: its misses are compiled, never forwarded
 * (asking itself would wait on its own build). */
void kjit__remote_off(kjit_ctx *ctx);

#endif
