/* kjit serve: the node-local JIT service on a Unix socket (docs/PROTOCOL.md).
 * The CLI fills a config and calls kjit__server_run; everything else about
 * the server is internal (server_internal.h). */
#ifndef KJIT_SERVER_H
#define KJIT_SERVER_H

#include <sys/types.h>

#define KJIT_SERVER_MAX_ALLOW 32

typedef struct kjit_server_config {
    const char *socket_path; /* NULL: kjit_client_default_socket() */
    const char *cache_dir;   /* NULL: the library's default */
    int max_clients;         /* connections served at once; more are refused */
    int max_pending;         /* requests of one connection not yet answered */
    double idle_timeout_s;   /* close a connection silent this long; 0: never */
    uid_t allow_uid[KJIT_SERVER_MAX_ALLOW];
    int n_allow_uid;
    gid_t allow_gid[KJIT_SERVER_MAX_ALLOW];
    int n_allow_gid;
    int refuse_own_uid;      /* tests: refuse the server's own user unless listed */
} kjit_server_config;

void kjit__server_config_init(kjit_server_config *cfg);

/* Call it before the process starts any other thread: it blocks SIGTERM
 * and SIGINT in the calling thread (so in every thread it starts) and reads
 * them from a signalfd; a thread started earlier would still take them by
 * the handler in place.
 * Serves until SIGTERM, SIGINT or a `shutdown` request, then stops
 * accepting, finishes the work in flight, removes the socket and returns
 * KJIT_OK. Returns a status with kjit_last_error() set when it cannot start
 * (bad directory, a live server on the path, ...). */
int kjit__server_run(const kjit_server_config *cfg);

#endif
