#include "server_util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "client/frame.h"
#include "kjit_client.h"
#include "test_util.h"

double kjit_test_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int kjit_test_connect(const char *sock)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
    if (fd >= 0) close(fd);
    return -1;
}

pid_t kjit_test_serve(const char *sock, const char *cache, const char *const *extra)
{
    const char *bin = getenv("KJIT_BIN");
    char log[4200];
    snprintf(log, sizeof log, "%s.log", sock);
    pid_t pid = fork();
    if (pid == 0) {
        const char *argv[32] = {bin, "serve", "--socket", sock, "--cache-dir", cache};
        int n = 6;
        for (int i = 0; extra && extra[i]; ++i) argv[n++] = extra[i];
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) dup2(fd, 2);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 400; ++i) {
        int fd = kjit_test_connect(sock);
        if (fd >= 0) {
            close(fd);
            return pid;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) break;
        usleep(25000);
    }
    fprintf(stderr, "server on %s did not start (log %s)\n", sock, log);
    CHECK(0);
    return -1;
}

int kjit_test_serve_stop(pid_t pid)
{
    if (pid <= 0) return -1;
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void kjit_test_frame(int fd, const char *json, const void *payload, uint32_t payload_len)
{
    uint8_t h[KJIT_FRAME_HEADER];
    kjit__frame_encode(h, (uint32_t)strlen(json), payload_len);
    if (write(fd, h, sizeof h) < 0 || write(fd, json, strlen(json)) < 0 ||
        (payload_len && write(fd, payload, payload_len) < 0))
        fprintf(stderr, "kjit_test_frame: write failed: %s\n", strerror(errno));
}

static int read_full(int fd, void *buf, size_t len, int timeout_ms)
{
    char *p = buf;
    while (len) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, timeout_ms) <= 0) return -1;
        ssize_t r = read(fd, p, len);
        if (r <= 0) return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

cJSON *kjit_test_reply(int fd, int timeout_ms)
{
    uint8_t h[KJIT_FRAME_HEADER];
    kjit_frame_header fh;
    char why[256];
    if (read_full(fd, h, sizeof h, timeout_ms)) return NULL;
    if (kjit__frame_decode(h, KJIT_MAX_REPLY_JSON, KJIT_MAX_REPLY_PAYLOAD, &fh, why, sizeof why)) {
        fprintf(stderr, "bad reply frame: %s\n", why);
        return NULL;
    }
    char *buf = malloc(fh.json_len + fh.payload_len + 1);
    if (read_full(fd, buf, fh.json_len + fh.payload_len, timeout_ms)) {
        free(buf);
        return NULL;
    }
    cJSON *o = cJSON_ParseWithLength(buf, fh.json_len);
    free(buf);
    return o;
}

int kjit_test_closed_within(int fd, int timeout_ms)
{
    char b[4096];
    double end = kjit_test_now() + timeout_ms / 1000.0;
    while (kjit_test_now() < end) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 100) > 0) {
            ssize_t r = read(fd, b, sizeof b);
            if (r <= 0) return 1;
        }
    }
    return 0;
}

const char *kjit_test_err_code(const cJSON *r)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "error"), "code");
    return cJSON_IsString(v) ? v->valuestring : "";
}

const char *kjit_test_err_msg(const cJSON *r)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "error"), "message");
    return cJSON_IsString(v) ? v->valuestring : "";
}

double kjit_test_num(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

double kjit_test_stat(const char *sock, const char *name)
{
    kjit_client *c;
    kjit_client_reply r;
    if (kjit_client_connect(&c, sock, 10000)) return -1;
    double v = -1;
    if (kjit_client_request(c, "{\"type\":\"stats\"}", NULL, 0, NULL, NULL, &r) == KJIT_OK) {
        cJSON *o = cJSON_Parse(r.json);
        v = kjit_test_num(o, name);
        cJSON_Delete(o);
        kjit_client_reply_free(&r);
    }
    kjit_client_close(c);
    return v;
}
