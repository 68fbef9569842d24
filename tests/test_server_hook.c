/* The library's KJIT_SERVER hook (src/core/remote.c) end to end: a context
 * with KJIT_SERVER set gets its misses from `kjit serve` ($KJIT_BIN) into
 * its own cache, with no NVRTC compile of its own; with no server, a stale
 * socket or one that never answers it compiles itself within the hook's
 * bounded wait; a server that refuses or whose key differs is not used; a
 * server sharing the context's cache directory is not asked. Needs NVRTC,
 * not a GPU. */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cache/cache.h"
#include "kjit_client.h"
#include "server_util.h"
#include "test_util.h"

static char *tmp;

static kjit_ctx *make_ctx(const char *cache_dir, const char *server)
{
    if (server) setenv("KJIT_SERVER", server, 1);
    else unsetenv("KJIT_SERVER");
    kjit_ctx_options o;
    kjit_ctx_options_init(&o);
    o.device = KJIT_NO_DEVICE;
    o.cache_dir = cache_dir;
    o.arch = "sm_90";
    kjit_ctx *ctx = NULL;
    CHECK_STATUS(kjit_ctx_create(&ctx, &o), KJIT_OK);
    return ctx;
}

static void counters(kjit_ctx *ctx, kjit_cache_counters *cc)
{
    memset(cc, 0, sizeof *cc);
    CHECK_STATUS(kjit_ctx_cache_counters(ctx, cc), KJIT_OK);
}

static void count_entry(void *arg, const kjit_cache_entry_info *e)
{
    if (!e->temp) ++*(int *)arg;
}

/* ---- through a server --------------------------------------------------- */

#define N_SPECS 3

/* A small op's kernel and two of a larger op's (another template). */
static int some_specs(kjit_kernel_spec *s)
{
    int n = 0;
    CHECK_STATUS(kjit_op_kernels("timestep_sinusoid", 64, KJIT_F16, s, 1, &n), KJIT_OK);
    CHECK_STATUS(kjit_op_kernels("norm_modulate", 512, KJIT_BF16, s + 1, N_SPECS - 1, &n), KJIT_OK);
    CHECK(n >= N_SPECS - 1);
    return N_SPECS;
}

static void test_through_server(const char *sock)
{
    kjit_kernel_spec specs[N_SPECS];
    int n = some_specs(specs);
    double compiles0 = kjit_test_stat(sock, "compiles"), requests0 = kjit_test_stat(sock, "kernel_requests");
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/client-cache", tmp);
    kjit_ctx *ctx = make_ctx(dir, sock);
    kjit_kernel_image img[N_SPECS];
    for (int i = 0; i < n; ++i) {
        CHECK_STATUS(kjit_kernel_fetch(ctx, &specs[i], NULL, &img[i]), KJIT_OK);
        CHECK(!img[i].cached);
    }
    /* Every miss was the server's compile: none ran NVRTC here. */
    kjit_cache_counters cc;
    counters(ctx, &cc);
    CHECK_EQ_INT(cc.misses, n);
    CHECK_EQ_INT(cc.compiles, n);
    CHECK_EQ_INT(cc.server_builds, n);
    CHECK_EQ_INT(kjit_test_stat(sock, "compiles") - compiles0, n);
    CHECK_EQ_INT(kjit_test_stat(sock, "kernel_requests") - requests0, n);

    /* What the server holds is what this library got: same key, same bytes. */
    kjit_client *c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, sock, 60000), KJIT_OK);
    for (int i = 0; c && i < n; ++i) {
        kjit_client_compiled got;
        CHECK_STATUS(kjit_client_kernel_fetch(c, specs[i].op, specs[i].template_file, specs[i].name_expr, "sm_90", &got),
                     KJIT_OK);
        if (got.n != 1) continue;
        CHECK(got.kernels[0].cached);
        CHECK(!strcmp(got.kernels[0].key, img[i].key));
        CHECK(!strcmp(got.kernels[0].lowered, img[i].lowered_name));
        CHECK(got.kernels[0].cubin_len == img[i].cubin_len &&
              !memcmp(got.kernels[0].cubin, img[i].cubin, img[i].cubin_len));
        kjit_client_compiled_free(&got);
    }
    kjit_client_close(c);
    requests0 = kjit_test_stat(sock, "kernel_requests");

    /* Hits are this context's own: from memory, then (a new context) from
     * its directory; the server is not asked again. */
    for (int i = 0; i < n; ++i) {
        int cached = 0;
        CHECK_STATUS(kjit_kernel_build(ctx, &specs[i], NULL, &cached), KJIT_OK);
        CHECK(cached);
    }
    kjit_ctx_destroy(ctx);
    ctx = make_ctx(dir, sock);
    for (int i = 0; i < n; ++i) {
        int cached = 0;
        CHECK_STATUS(kjit_kernel_build(ctx, &specs[i], NULL, &cached), KJIT_OK);
        CHECK(cached);
    }
    counters(ctx, &cc);
    CHECK_EQ_INT(cc.disk_hits, n);
    CHECK_EQ_INT(cc.compiles, 0);
    kjit_ctx_destroy(ctx);
    CHECK_EQ_INT(kjit_test_stat(sock, "kernel_requests"), requests0);

    /* The entries are well-formed files of the client's cache. */
    int entries = 0, bad = -1;
    CHECK_STATUS(kjit__cache_list(dir, 1, count_entry, &entries, &bad), KJIT_OK);
    CHECK_EQ_INT(entries, n);
    CHECK_EQ_INT(bad, 0);
    char cmd[8600];
    snprintf(cmd, sizeof cmd, "'%s' cache verify --cache-dir '%s' >/dev/null", getenv("KJIT_BIN"), dir);
    CHECK_EQ_INT(system(cmd), 0);
}

/* ---- compiling here ----------------------------------------------------- */

/* Seconds to build one small kernel in a fresh cache dir; its counters. */
static double build_one(const char *name, const char *server, const char *arch, kjit_cache_counters *cc)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    kjit_ctx *ctx = make_ctx(dir, server);
    kjit_kernel_spec spec;
    int n = 0;
    CHECK_STATUS(kjit_op_kernels("timestep_sinusoid", 32, KJIT_F32, &spec, 1, &n), KJIT_OK);
    double t0 = kjit_test_now();
    CHECK_STATUS(kjit_kernel_build(ctx, &spec, arch, NULL), KJIT_OK);
    double dt = kjit_test_now() - t0;
    counters(ctx, cc);
    kjit_ctx_destroy(ctx);
    return dt;
}

static int bound_socket(const char *path, int listening)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    if (listening) CHECK(listen(fd, 8) == 0);
    return fd;
}

/* A server that refuses one kernel (its compile fails there as here) is
 * still asked for the next: only a server that is gone, hung or refusing
 * us is left alone for a while. */
static void test_kernel_error(const char *sock)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/client-error", tmp);
    kjit_ctx *ctx = make_ctx(dir, sock);
    kjit_kernel_spec spec;
    int n = 0;
    CHECK_STATUS(kjit_op_kernels("timestep_sinusoid", 64, KJIT_BF16, &spec, 1, &n), KJIT_OK);
    kjit_kernel_spec bad = spec;
    snprintf(bad.name_expr, sizeof bad.name_expr, "kjit_no_such_kernel<float>");
    const double requests0 = kjit_test_stat(sock, "kernel_requests");
    CHECK_STATUS(kjit_kernel_build(ctx, &bad, NULL, NULL), KJIT_ECOMPILE);
    CHECK_STATUS(kjit_kernel_build(ctx, &spec, NULL, NULL), KJIT_OK);
    kjit_cache_counters cc;
    counters(ctx, &cc);
    CHECK_EQ_INT(cc.server_builds, 1);
    CHECK_EQ_INT(kjit_test_stat(sock, "kernel_requests") - requests0, 2);
    kjit_ctx_destroy(ctx);
}

/* The connections waiting on a listener nobody serves (each accepted and
 * closed): how many times a client tried it. */
static int backlog(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    int n = 0;
    for (int c; (c = accept(fd, NULL, NULL)) >= 0; ++n) close(c);
    return n;
}

/* No server, a stale socket, a server that never answers: compiled here,
 * after at most the hook's 2 s wait to find a server. */
static void test_no_server(void)
{
    kjit_cache_counters cc;
    build_one("warm", NULL, NULL, &cc); /* NVRTC's first compile in this process */
    double base = build_one("base", NULL, NULL, &cc);
    CHECK_EQ_INT(cc.compiles, 1);
    CHECK_EQ_INT(cc.server_builds, 0);

    char path[4200];
    snprintf(path, sizeof path, "%s/none.sock", tmp);
    double none = build_one("none", path, NULL, &cc);
    CHECK_EQ_INT(cc.compiles, 1);
    CHECK_EQ_INT(cc.server_builds, 0);
    CHECK_LE(none, base + 1.0);

    snprintf(path, sizeof path, "%s/stale.sock", tmp);
    close(bound_socket(path, 0)); /* the file stays; nobody listens */
    double t = build_one("stale", path, NULL, &cc);
    CHECK_EQ_INT(cc.compiles, 1);
    CHECK_EQ_INT(cc.server_builds, 0);
    CHECK_LE(t, base + 1.0);

    snprintf(path, sizeof path, "%s/hung.sock", tmp);
    int fd = bound_socket(path, 1); /* connects (the backlog), never answers */
    t = build_one("hung", path, NULL, &cc);
    CHECK_EQ_INT(cc.compiles, 1);
    CHECK_EQ_INT(cc.server_builds, 0);
    CHECK(t >= 1.5);
    CHECK_LE(t, base + 2.0 + 3.0);
    CHECK_EQ_INT(backlog(fd), 1);
    /* One context, three kernels: only the first asks the hung server,
     * which is then left alone (each asked, and waited its 2 s, before). */
    char dir[4300];
    snprintf(dir, sizeof dir, "%s/hung4", tmp);
    kjit_ctx *ctx = make_ctx(dir, path);
    double t0 = kjit_test_now();
    const kjit_dtype dts[] = {KJIT_F32, KJIT_BF16, KJIT_F16};
    for (int d = 0; d < 3; ++d) {
        kjit_kernel_spec spec;
        int n = 0;
        CHECK_STATUS(kjit_op_kernels("timestep_sinusoid", 40, dts[d], &spec, 1, &n), KJIT_OK);
        CHECK_STATUS(kjit_kernel_build(ctx, &spec, NULL, NULL), KJIT_OK);
    }
    double t4 = kjit_test_now() - t0;
    counters(ctx, &cc);
    kjit_ctx_destroy(ctx);
    CHECK_EQ_INT(backlog(fd), 1);
    close(fd);
    CHECK_EQ_INT(cc.compiles, 3);
    CHECK_EQ_INT(cc.server_builds, 0);
    CHECK(t4 >= 1.5);
    printf("compile here: %.3f s; no server %.3f s; hung server %.3f s, three kernels %.3f s\n", base, none, t,
           t4);
}

/* A server on the context's own cache directory is not asked: the build
 * holds that directory's lock on the key, which the server would wait for. */
static void test_shared_dir(const char *sock, const char *server_cache)
{
    kjit_cache_counters cc;
    double requests0 = kjit_test_stat(sock, "kernel_requests");
    char dir[8500];
    snprintf(dir, sizeof dir, "%s/../%s", server_cache, strrchr(server_cache, '/') + 1); /* same dir, other name */
    kjit_ctx *ctx = make_ctx(dir, sock);
    kjit_kernel_spec spec;
    int n = 0;
    CHECK_STATUS(kjit_op_kernels("timestep_sinusoid", 48, KJIT_BF16, &spec, 1, &n), KJIT_OK);
    double t0 = kjit_test_now();
    CHECK_STATUS(kjit_kernel_build(ctx, &spec, "sm_80", NULL), KJIT_OK);
    CHECK_LE(kjit_test_now() - t0, 10.0);
    counters(ctx, &cc);
    CHECK_EQ_INT(cc.compiles, 1);
    CHECK_EQ_INT(cc.server_builds, 0);
    kjit_ctx_destroy(ctx);
    CHECK_EQ_INT(kjit_test_stat(sock, "kernel_requests"), requests0);
}

/* ---- a server that answers wrongly -------------------------------------- */

typedef struct fake {
    int listen_fd;
    const char *kind; /* "refuse", or a key to answer with */
    int asked;        /* a kernel request came */
} fake;

/* An ELF header's magic and at least its 64 bytes: what the library checks
 * of a server's cubin before its cache keeps it. */
#define FAKE_CUBIN "\177ELF, but the fake server's, as long as an ELF header (64 bytes) at the least"
#define NOT_ELF "XXXX: not a cubin, though under the right key; as long as an ELF header (64 bytes) at least"

/* One connection: hello, then the kernel request, answered by f->kind. */
static void *fake_serve(void *arg)
{
    fake *f = arg;
    int fd = accept(f->listen_fd, NULL, NULL);
    cJSON *q = kjit_test_reply(fd, 10000);
    char text[1024];
    snprintf(text, sizeof text, "{\"id\":%.0f,\"ok\":true,\"version\":1,\"cache_dir\":\"\"}", kjit_test_num(q, "id"));
    cJSON_Delete(q);
    kjit_test_frame(fd, text, NULL, 0);
    q = kjit_test_reply(fd, 10000);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(q, "type");
    const cJSON *expr = cJSON_GetObjectItemCaseSensitive(q, "expr");
    f->asked = cJSON_IsString(type) && !strcmp(type->valuestring, "kernel") && cJSON_IsString(expr);
    if (!strcmp(f->kind, "refuse")) {
        snprintf(text, sizeof text, "{\"id\":%.0f,\"ok\":false,\"error\":{\"code\":\"bad_request\",\"message\":\"no\"}}",
                 kjit_test_num(q, "id"));
        kjit_test_frame(fd, text, NULL, 0);
    } else if (f->asked) {
        /* "noelf:<key>": the right key, bytes that are not a cubin. */
        const int noelf = !strncmp(f->kind, "noelf:", 6);
        const char *bytes = noelf ? NOT_ELF : FAKE_CUBIN;
        const size_t n = noelf ? sizeof NOT_ELF : sizeof FAKE_CUBIN;
        snprintf(text, sizeof text, "{\"id\":%.0f,\"ok\":true,\"cached\":true,\"kernels\":[{\"name_expr\":\"%s\","
                                    "\"lowered\":\"_Zfake\",\"key\":\"%s\",\"offset\":0,\"size\":%zu,\"cached\":true}]}",
                 kjit_test_num(q, "id"), expr->valuestring, f->kind + (noelf ? 6 : 0), n);
        kjit_test_frame(fd, text, bytes, n);
    }
    cJSON_Delete(q);
    kjit_test_closed_within(fd, 10000);
    close(fd);
    return NULL;
}

/* Builds one kernel with the fake server answering `kind`. */
static void with_fake(const char *name, const char *kind, kjit_kernel_image *img, kjit_cache_counters *cc)
{
    char path[4200], dir[4200];
    snprintf(path, sizeof path, "%s/%s.sock", tmp, name);
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    fake f = {bound_socket(path, 1), kind, 0};
    kjit_ctx *ctx = make_ctx(dir, path);
    pthread_t th;
    pthread_create(&th, NULL, fake_serve, &f);
    kjit_kernel_spec spec;
    int n = 0;
    CHECK_STATUS(kjit_op_kernels("timestep_sinusoid", 96, KJIT_BF16, &spec, 1, &n), KJIT_OK);
    memset(img, 0, sizeof *img);
    CHECK_STATUS(kjit_kernel_fetch(ctx, &spec, NULL, img), KJIT_OK);
    counters(ctx, cc);
    pthread_join(th, NULL);
    CHECK(f.asked);
    close(f.listen_fd);
    /* The image belongs to the context's cache: keep what the checks need. */
    static char lowered[64];
    snprintf(lowered, sizeof lowered, "%s", img->lowered_name);
    int fake_bytes = img->cubin_len == sizeof FAKE_CUBIN && !memcmp(img->cubin, FAKE_CUBIN, sizeof FAKE_CUBIN);
    img->lowered_name = lowered;
    img->cubin = fake_bytes ? FAKE_CUBIN : NULL;
    kjit_ctx_destroy(ctx);
}

static void test_fake_server(void)
{
    kjit_kernel_image img;
    kjit_cache_counters cc;
    /* Refused: compiled here. */
    with_fake("refuse", "refuse", &img, &cc);
    CHECK_EQ_INT(cc.compiles, 1);
    CHECK_EQ_INT(cc.server_builds, 0);
    CHECK(!strncmp(img.lowered_name, "_Z13kjit_sinusoid", 17) && !img.cubin);
    char key[33];
    snprintf(key, sizeof key, "%s", img.key);
    /* Another key (other templates, another NVRTC): its cubin is not taken. */
    with_fake("other-key", "0123456789abcdef0123456789abcdef", &img, &cc);
    CHECK_EQ_INT(cc.server_builds, 0);
    CHECK(!strcmp(img.key, key) && !img.cubin);
    /* This library's key but bytes without an ELF header: not taken
     * (before: stored, and the cache's checksum vouched for them). */
    char noelf[64];
    snprintf(noelf, sizeof noelf, "noelf:%s", key);
    with_fake("not-elf", noelf, &img, &cc);
    CHECK_EQ_INT(cc.compiles, 1);
    CHECK_EQ_INT(cc.server_builds, 0);
    CHECK(!strncmp(img.lowered_name, "_Z13kjit_sinusoid", 17) && !img.cubin);
    /* This library's key: the server's cubin is what the cache keeps. */
    with_fake("same-key", key, &img, &cc);
    CHECK_EQ_INT(cc.compiles, 1);
    CHECK_EQ_INT(cc.server_builds, 1);
    CHECK(!strcmp(img.lowered_name, "_Zfake") && img.cubin);
}

int main(void)
{
    if (!getenv("KJIT_BIN")) {
        fprintf(stderr, "test_server_hook: set KJIT_BIN to the kjit binary\n");
        return 1;
    }
    kjit_runtime_info ri;
    if (kjit_runtime_info_get(&ri) || !ri.nvrtc_major) {
        printf("test_server_hook: no NVRTC, skipped\n");
        return 77;
    }
    tmp = kjit_test_tmpdir();
    char sock[4200], cache[4200];
    snprintf(sock, sizeof sock, "%s/srv/kjit.sock", tmp);
    snprintf(cache, sizeof cache, "%s/server-cache", tmp);
    pid_t pid = kjit_test_serve(sock, cache, NULL);
    test_through_server(sock);
    test_kernel_error(sock);
    test_shared_dir(sock, cache);
    test_no_server();
    test_fake_server();
    CHECK_EQ_INT(kjit_test_serve_stop(pid), 0);
    unsetenv("KJIT_SERVER");
    kjit_test_rmtree(tmp);
    free(tmp);
    return kjit_test_result("test_server_hook");
}
