/* kjit serve end to end through the C client and raw sockets: round trips,
 * 64 concurrent clients, single flight, every bad input of issue 5, limits,
 * peer credentials, disconnects and SIGTERM with work in flight. Runs the
 * `kjit` binary named by $KJIT_BIN; needs NVRTC, not a GPU. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/frame.h"
#include "kjit_client.h"
#include "server/request.h"
#include "server_util.h"
#include "test_util.h"

static char *tmp;

/* ---- helpers ------------------------------------------------------------ */

/* One request through the client; the parsed reply (NULL on a transport failure). */
static cJSON *call(kjit_client *c, const char *json, size_t *payload_len)
{
    kjit_client_reply r;
    if (kjit_client_request(c, json, NULL, 0, NULL, NULL, &r)) {
        fprintf(stderr, "request %s failed: %s\n", json, kjit_last_error());
        return NULL;
    }
    cJSON *o = cJSON_Parse(r.json);
    if (payload_len) *payload_len = r.payload_len;
    kjit_client_reply_free(&r);
    return o;
}

#define HELLO "{\"id\":0,\"type\":\"hello\",\"versions\":[1]}"

/* A connection to sock past its hello (the reply read and dropped). */
static int greeted(const char *sock)
{
    int fd = kjit_test_connect(sock);
    kjit_test_frame(fd, HELLO, NULL, 0);
    cJSON_Delete(kjit_test_reply(fd, 10000));
    return fd;
}

/* ---- round trips -------------------------------------------------------- */

static void count_event(void *arg, const char *json)
{
    (void)json;
    ++*(int *)arg;
}

static void test_round_trips(const char *sock)
{
    kjit_client *c;
    CHECK_STATUS(kjit_client_connect(&c, sock, 60000), KJIT_OK);
    if (!c) return;
    cJSON *h = cJSON_Parse(kjit_client_hello(c));
    CHECK_EQ_INT(kjit_test_num(h, "version"), 1);
    int gpu = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(h, "gpu"));
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(h, "ops")) >= 1);
    cJSON_Delete(h);

    CHECK_STATUS(kjit_client_timeout_set(NULL, 1000), KJIT_EINVAL);
    CHECK_STATUS(kjit_client_timeout_set(c, -1), KJIT_EINVAL);
    CHECK_STATUS(kjit_client_timeout_set(c, 60000), KJIT_OK);
    cJSON *r = call(c, "{\"type\":\"ping\"}", NULL);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")));
    cJSON_Delete(r);

    const char *q = "{\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\",\"arch\":\"sm_90\"}";
    size_t plen = 0;
    r = call(c, q, &plen);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")));
    CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "cached")));
    CHECK_EQ_INT(kjit_test_num(r, "payload_bytes"), plen);
    cJSON *k = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "kernels"), 0);
    CHECK_EQ_INT(kjit_test_num(k, "size"), plen);
    CHECK_EQ_INT(strlen(cJSON_GetObjectItemCaseSensitive(k, "key")->valuestring), 32);
    char key[33];
    snprintf(key, sizeof key, "%s", cJSON_GetObjectItemCaseSensitive(k, "key")->valuestring);
    cJSON_Delete(r);
    r = call(c, q, NULL);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "cached")));
    cJSON_Delete(r);

    kjit_client_compiled cc;
    CHECK_STATUS(kjit_client_compile(c, "timestep_sinusoid", 256, KJIT_BF16, "sm_90", &cc), KJIT_OK);
    CHECK_EQ_INT(cc.n, 1);
    if (cc.n == 1) {
        CHECK(!memcmp(cc.kernels[0].cubin, "\177ELF", 4));
        CHECK(!strcmp(cc.kernels[0].key, key));
        CHECK(cc.kernels[0].cached);
        CHECK(!strncmp(cc.kernels[0].lowered, "_Z", 2));
    }
    kjit_client_compiled_free(&cc);
    CHECK_STATUS(kjit_client_compile(c, "timestep_sinusoid", 0, KJIT_BF16, NULL, &cc), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "hidden") != NULL);

    /* One kernel by template-id (the KJIT_SERVER hook's request): the same
     * key as compile's, from the library cache. */
    kjit_kernel_spec spec;
    int n_spec = 0;
    CHECK_STATUS(kjit_op_kernels("timestep_sinusoid", 256, KJIT_BF16, &spec, 1, &n_spec), KJIT_OK);
    CHECK_STATUS(kjit_client_kernel_fetch(c, spec.op, spec.template_file, spec.name_expr, "sm_90", &cc), KJIT_OK);
    CHECK_EQ_INT(cc.n, 1);
    if (cc.n == 1) {
        CHECK(!strcmp(cc.kernels[0].key, key));
        CHECK(!strcmp(cc.kernels[0].name_expr, spec.name_expr));
        CHECK(!memcmp(cc.kernels[0].cubin, "\177ELF", 4));
        CHECK(cc.kernels[0].cached);
    }
    kjit_client_compiled_free(&cc);
    /* Other spellings of one template-id (spaces around <, >, :: and
     * commas, none after a comma) are one kernel: the same key, the
     * library's spelling in the reply, no compile of their own. */
    kjit_kernel_spec specs[16];
    CHECK_STATUS(kjit_op_kernels("norm_modulate", 256, KJIT_BF16, specs, 16, &n_spec), KJIT_OK);
    specs[1] = spec;
    for (int v = 0; v < 2 && n_spec > 0; ++v) {
        kjit_client_compiled first;
        CHECK_STATUS(kjit_client_kernel_fetch(c, specs[v].op, specs[v].template_file, specs[v].name_expr, "sm_90",
                                              &first), KJIT_OK);
        const double compiles = kjit_test_stat(sock, "compiles");
        char spaced[512];
        size_t m = 0;
        for (const char *p = specs[v].name_expr; *p && m + 4 < sizeof spaced; ++p) {
            if (*p == ' ' && p[-1] == ',') continue;
            if (strchr("<>,:", *p)) spaced[m++] = ' ';
            spaced[m++] = *p;
            if (strchr("<>:", *p)) spaced[m++] = ' ';
        }
        spaced[m] = '\0';
        CHECK_STATUS(kjit_client_kernel_fetch(c, specs[v].op, specs[v].template_file, spaced, "sm_90", &cc), KJIT_OK);
        CHECK(first.n == 1 && cc.n == 1 && !strcmp(cc.kernels[0].key, first.kernels[0].key) &&
              !strcmp(cc.kernels[0].name_expr, specs[v].name_expr) && cc.kernels[0].cached);
        CHECK(kjit_test_stat(sock, "compiles") == compiles);
        if (v == 0) printf("'%s' answered as '%s'\n", spaced, cc.n == 1 ? cc.kernels[0].name_expr : "(nothing)");
        kjit_client_compiled_free(&first);
        kjit_client_compiled_free(&cc);
    }
    CHECK_STATUS(kjit_client_kernel_fetch(c, spec.op, spec.template_file, "kjit_sinusoid<float>(1)", NULL, &cc),
                 KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "'expr'") != NULL);
    /* The longest expr a spec holds passes the parser (and fails to compile:
     * no such kernel). */
    char expr[256] = "kjit_sinusoid<";
    while (strlen(expr) < KJIT_REQ_MAX_EXPR - 1) strcat(expr, "a");
    strcat(expr, ">");
    CHECK_EQ_INT(strlen(expr), 223);
    CHECK_STATUS(kjit_client_kernel_fetch(c, spec.op, spec.template_file, expr, NULL, &cc), KJIT_ECOMPILE);

    int events = 0;
    kjit_client_reply rep;
    CHECK_STATUS(kjit_client_request(c, "{\"type\":\"prewarm\",\"ops\":\"timestep_sinusoid\",\"hidden\":[64,128],"
                                        "\"dtype\":[\"fp32\",\"bf16\"],\"arch\":\"sm_90\"}",
                                     NULL, 0, count_event, &events, &rep), KJIT_OK);
    r = cJSON_Parse(rep.json);
    CHECK(rep.ok);
    CHECK_EQ_INT(kjit_test_num(r, "combinations"), 4);
    CHECK_EQ_INT(events, 4);
    cJSON_Delete(r);
    kjit_client_reply_free(&rep);

    /* run and tune in depth: test_server_run.c. */
    r = call(c, "{\"type\":\"tune\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\"}", NULL);
    CHECK(!strcmp(kjit_test_err_code(r), "bad_request") && strstr(kjit_test_err_msg(r), "'op'"));
    cJSON_Delete(r);
    if (!gpu) {
        r = call(c, "{\"type\":\"tune\",\"op\":\"norm_modulate\",\"hidden\":5376,\"dtype\":\"bf16\"}", NULL);
        CHECK(!strcmp(kjit_test_err_code(r), "unsupported") && strstr(kjit_test_err_msg(r), "no GPU"));
        cJSON_Delete(r);
    }
    r = call(c, "{\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\",\"config\":{\"block\":256}}", NULL);
    CHECK(!strcmp(kjit_test_err_code(r), "unsupported"));
    cJSON_Delete(r);

    r = call(c, "{\"type\":\"stats\"}", NULL);
    CHECK(kjit_test_num(r, "uptime_s") >= 0);
    CHECK_EQ_INT(kjit_test_num(r, "kernel_requests"), 6); /* 2, and the 4 of the spellings */
    CHECK(kjit_test_num(r, "requests") >= 8);
    CHECK(kjit_test_num(r, "hits") >= 2);
    CHECK(kjit_test_num(r, "misses") >= 1);
    CHECK(kjit_test_num(r, "compiles") >= 1);
    CHECK(kjit_test_num(r, "clients") >= 1);
    CHECK(kjit_test_num(r, "in_flight") >= 1);
    cJSON_Delete(r);
    kjit_client_close(c);

    /* Pipelining on one connection: 200 requests out, then 200 replies in. */
    int fd = kjit_test_connect(sock);
    kjit_test_frame(fd, HELLO, NULL, 0);
    char buf[160];
    for (int i = 1; i <= 200; ++i) {
        snprintf(buf, sizeof buf, i % 2 ? "{\"id\":%d,\"type\":\"ping\"}" : "{\"id\":%d,\"type\":\"compile\",\"op\":"
                 "\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\",\"arch\":\"sm_90\"}", i);
        kjit_test_frame(fd, buf, NULL, 0);
    }
    static char seen[201];
    memset(seen, 0, sizeof seen);
    int got = 0;
    for (int i = 0; i <= 200; ++i) {
        r = kjit_test_reply(fd, 20000);
        if (!r) break;
        int id = (int)kjit_test_num(r, "id");
        if (id >= 0 && id <= 200 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")) && !seen[id]++) ++got;
        cJSON_Delete(r);
    }
    CHECK_EQ_INT(got, 201);
    close(fd);
}

/* ---- bad input ---------------------------------------------------------- */

typedef struct bad_case {
    const char *json;    /* sent after hello (NULL: raw bytes below) */
    const char *code;    /* expected error code */
    const char *mention; /* the message names this */
} bad_case;

static void expect_error(const char *sock, const char *json, const char *code, const char *mention, int hello)
{
    int fd = kjit_test_connect(sock);
    if (hello) {
        kjit_test_frame(fd, HELLO, NULL, 0);
        cJSON_Delete(kjit_test_reply(fd, 10000));
    }
    kjit_test_frame(fd, json, NULL, 0);
    cJSON *r = kjit_test_reply(fd, 10000);
    if (!r || strcmp(kjit_test_err_code(r), code) || !strstr(kjit_test_err_msg(r), mention)) {
        char *t = r ? cJSON_PrintUnformatted(r) : NULL;
        fprintf(stderr, "bad input %s: want %s naming '%s', got %s\n", json, code, mention, t ? t : "(nothing)");
        free(t);
        kjit_test_failures++;
    }
    cJSON_Delete(r);
    /* A refused request leaves the connection usable. */
    kjit_test_frame(fd, "{\"id\":77,\"type\":\"ping\"}", NULL, 0);
    r = kjit_test_reply(fd, 10000);
    if (hello) CHECK_EQ_INT(kjit_test_num(r, "id"), 77);
    cJSON_Delete(r);
    close(fd);
}

/* A frame-level error: an error reply with id null, then the server closes. */
static void expect_fatal(const char *sock, const void *bytes, size_t len, const char *mention)
{
    int fd = kjit_test_connect(sock);
    if (write(fd, bytes, len) < 0) CHECK(0);
    cJSON *r = kjit_test_reply(fd, 10000);
    if (!r || strcmp(kjit_test_err_code(r), "bad_frame") || !strstr(kjit_test_err_msg(r), mention)) {
        fprintf(stderr, "bad frame naming '%s': got %s\n", mention, r ? kjit_test_err_msg(r) : "(nothing)");
        kjit_test_failures++;
    }
    CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r, "id")));
    cJSON_Delete(r);
    CHECK(kjit_test_closed_within(fd, 5000));
    close(fd);
}

/* Ids up to 2^53 - 1 come back exactly in every kind of reply (the largest
 * were rounded to 15 digits in stats, hello and error replies). */
static void test_big_ids(const char *sock)
{
    static const char *const reqs[] = {
        "{\"id\":%s,\"type\":\"stats\"}", "{\"id\":%s,\"type\":\"ping\"}", "{\"id\":%s,\"type\":\"fly\"}",
        "{\"id\":%s,\"type\":\"compile\",\"op\":\"nope\",\"hidden\":256,\"dtype\":\"bf16\"}",
        "{\"id\":%s,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\"}"};
    static const char *const ids[] = {"9007199254740991", "5000000000000001", "4503599627370497"};
    int fd = greeted(sock);
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; ++i)
        for (size_t k = 0; k < sizeof reqs / sizeof reqs[0]; ++k) {
            char q[256];
            snprintf(q, sizeof q, reqs[k], ids[i]);
            kjit_test_frame(fd, q, NULL, 0);
            cJSON *r = kjit_test_reply(fd, 60000);
            const double want = strtod(ids[i], NULL), got = r ? kjit_test_num(r, "id") : -1;
            if (got != want) {
                fprintf(stderr, "id %s came back as %.17g in the reply to %s\n", ids[i], got, q);
                kjit_test_failures++;
            }
            cJSON_Delete(r);
        }
    close(fd);
}

static void test_bad_input(const char *sock)
{
    static const bad_case cases[] = {
        {"{\"id\":1,", "bad_json", "not valid JSON"},
        {"{\"id\":1}xyz", "bad_json", "trailing"},
        {"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
         "bad_json", "deeper"},
        {"[1,2]", "bad_request", "object"},
        {"{\"type\":\"ping\"}", "bad_request", "'id'"},
        {"{\"id\":-1,\"type\":\"ping\"}", "bad_request", "'id'"},
        {"{\"id\":1152921504606846976,\"type\":\"ping\"}", "bad_request", "'id'"},
        {"{\"id\":1,\"type\":\"fly\"}", "unknown_type", "fly"},
        {"{\"id\":1,\"type\":\"ping\",\"extra\":1}", "bad_request", "extra"},
        {"{\"id\":1,\"type\":\"ping\",\"type\":\"ping\"}", "bad_request", "twice"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"nope\",\"hidden\":256,\"dtype\":\"bf16\"}", "unknown_op", "nope"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":0,\"dtype\":\"bf16\"}", "bad_request", "hidden"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":1099511627776,\"dtype\":\"bf16\"}", "bad_request", "hidden"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":2.5,\"dtype\":\"bf16\"}", "bad_request", "hidden"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":\"256\",\"dtype\":\"bf16\"}", "bad_request", "hidden"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"dtype\":\"bf16\"}", "bad_request", "hidden"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"fp8\"}", "bad_request", "fp8"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"int32\"}", "bad_request", "int32"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\",\"arch\":\"sm_12\"}", "bad_request", "sm_12"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"../timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\"}", "bad_request", "'op'"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"..\"}", "bad_request", ".."},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\",\"arch\":\"/usr/sm_90\"}", "bad_request", "'/'"},
        {"{\"id\":1,\"type\":\"compile\",\"../x\":1,\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\"}", "bad_request", "field name"},
        {"{\"id\":1,\"type\":\"hello\",\"client\":\"a/../b\"}", "bad_request", "'client'"},
        {"{\"id\":1,\"type\":\"hello\",\"versions\":[7]}", "version", "version"},
        /* Protocol versions are integers: 1.5 is no version, not one unsupported. */
        {"{\"id\":1,\"type\":\"hello\",\"versions\":[1.5]}", "bad_request", "expected integers"},
        {"{\"id\":1,\"type\":\"hello\",\"versions\":[1,1.5]}", "bad_request", "expected integers"},
        {"{\"id\":1,\"type\":\"hello\",\"versions\":[1e400]}", "bad_request", "expected integers"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\\u0001\"}", "bad_request", "control"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\\u0085\"}", "bad_request", "control"},
        /* An escaped NUL would end the decoded string before what the checks
         * must see; bytes that are not UTF-8 would be echoed in replies. */
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\\u0000/../../etc/passwd\",\"hidden\":256,"
         "\"dtype\":\"bf16\"}", "bad_json", "\\u0000"},
        {"{\"id\":1,\"type\":\"ping\\u0000 x\"}", "bad_json", "NUL"},
        {"{\"id\":1,\"type\":\"p\xffing\"}", "bad_json", "UTF-8"},
        {"{\"id\":1,\"type\":\"\xc3\x28\"}", "bad_json", "UTF-8"},
        {"{\"id\":1,\"type\":\"\xc0\xaf\"}", "bad_json", "UTF-8"},
        {"{\"id\":1,\"type\":\"\xed\xa0\x80\"}", "bad_json", "UTF-8"},
        {"{\"id\":1,\"type\":\"\xf4\x90\x80\x80\"}", "bad_json", "UTF-8"},
        {"{\"\xff\":1,\"id\":1,\"type\":\"ping\"}", "bad_json", "UTF-8"},
        /* What cJSON takes but JSON is not (the first ones answered ok,
         * and a client of another JSON library could not send them). */
        {"{\"id\":05,\"type\":\"ping\"}", "bad_json", "leading zero"},
        {"{\"id\":1.,\"type\":\"ping\"}", "bad_json", "number JSON does not allow"},
        {"{\"id\":1e,\"type\":\"ping\"}", "bad_json", "number JSON does not allow"},
        {"{\"id\":-,\"type\":\"ping\"}", "bad_json", "number JSON does not allow"},
        {"\xef\xbb\xbf{\"id\":1,\"type\":\"ping\"}", "bad_json", "byte-order mark"},
        {"{\"id\":1,\x01\"type\":\"ping\"}", "bad_json", "control byte outside"},
        {"\x1f{\"id\":1,\"type\":\"ping\"}", "bad_json", "control byte outside"},
        {"{\"id\":1\x0c,\"type\":\"ping\"}", "bad_json", "control byte outside"},
        {"{\"id\":1,\"type\":\"pi\tng\"}", "bad_json", "not escaped in a string"},
        {"{\"id\":1,\"type\":\"ping\"\xc2\xa0}", "bad_json", "non-ASCII byte outside"},
        /* An escaped backslash before u0000 is text, not a NUL: refused by name. */
        {"{\"id\":1,\"type\":\"ping\\\\u0000\"}", "unknown_type", "u0000"},
        {"{\"id\":1,\"type\":\"caf\xc3\xa9\"}", "unknown_type", "caf\xc3\xa9"},
        {"{\"id\":1,\"type\":\"prewarm\",\"ops\":\"all\",\"hidden\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24],"
         "\"dtype\":[\"fp32\",\"bf16\",\"fp16\"],\"arch\":[\"sm_80\",\"sm_90\",\"sm_100\",\"sm_120\"]}", "bad_request", "combinations"},
        {"{\"id\":1,\"type\":\"prewarm\",\"ops\":[],\"hidden\":256,\"dtype\":\"bf16\"}", "bad_request", "empty"},
        {"{\"id\":1,\"type\":\"run\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\",\"n\":1,"
         "\"buffers\":[{\"name\":\"t\",\"handle\":0},{\"name\":\"out\",\"handle\":0,\"stride\":256}]}", "bad_request",
         "no payload"},
#define KERNEL_Q(op, tmpl, expr) "{\"id\":1,\"type\":\"kernel\",\"op\":\"" op "\",\"template\":\"" tmpl "\",\"expr\":\"" expr "\"}"
        {KERNEL_Q("nope", "timestep_sinusoid.cuh", "kjit_sinusoid<float>"), "unknown_op", "nope"},
        {KERNEL_Q("timestep_sinusoid", "nope.cuh", "kjit_sinusoid<float>"), "bad_request", "'template'"},
        {KERNEL_Q("timestep_sinusoid", "../timestep_sinusoid.cuh", "kjit_sinusoid<float>"), "bad_request", "'template'"},
        {KERNEL_Q("timestep_sinusoid", "common/kjit_types.cuh", "kjit_sinusoid<float>"), "bad_request", "'template'"},
        {KERNEL_Q("timestep_sinusoid", "timestep_sinusoid.cuh", "kjit_sinusoid<float>(1)"), "bad_request", "'expr'"},
        {KERNEL_Q("timestep_sinusoid", "timestep_sinusoid.cuh", "kjit_sinusoid<float>;int x"), "bad_request", "'expr'"},
        {KERNEL_Q("timestep_sinusoid", "timestep_sinusoid.cuh", "kjit_sinusoid</float>"), "bad_request", "'expr'"},
        {KERNEL_Q("timestep_sinusoid", "timestep_sinusoid.cuh", "kjit_sinusoid<float>\\n"), "bad_request", "'expr'"},
        {KERNEL_Q("timestep_sinusoid", "timestep_sinusoid.cuh", "sinusoid<float>"), "bad_request", "kjit_"},
        {KERNEL_Q("timestep_sinusoid", "timestep_sinusoid.cuh", ""), "bad_request", "kjit_"},
        {"{\"id\":1,\"type\":\"kernel\",\"op\":\"timestep_sinusoid\",\"template\":\"timestep_sinusoid.cuh\"}",
         "bad_request", "'expr'"},
        {"{\"id\":1,\"type\":\"kernel\",\"op\":\"timestep_sinusoid\",\"expr\":\"kjit_sinusoid<float>\"}",
         "bad_request", "'template'"},
        {"{\"id\":1,\"type\":\"kernel\",\"op\":\"timestep_sinusoid\",\"template\":\"timestep_sinusoid.cuh\","
         "\"expr\":\"kjit_sinusoid<float>\",\"arch\":\"sm_12\"}", "bad_request", "sm_12"},
        {"{\"id\":1,\"type\":\"kernel\",\"op\":\"timestep_sinusoid\",\"template\":\"timestep_sinusoid.cuh\","
         "\"expr\":\"kjit_sinusoid<float>\",\"hidden\":256}", "bad_request", "hidden"},
        {"{\"id\":1,\"type\":\"kernel\",\"op\":\"timestep_sinusoid\",\"template\":\"timestep_sinusoid.cuh\","
         "\"expr\":[\"kjit_sinusoid<float>\"]}", "bad_request", "field 'expr': expected a string"},
        /* A field of another type is not "missing". */
        {"{\"id\":1,\"type\":5}", "bad_request", "field 'type': expected a string"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":5,\"hidden\":256,\"dtype\":\"bf16\"}", "bad_request",
         "field 'op': expected a string"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":[\"bf16\"]}",
         "bad_request", "field 'dtype': expected a string"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256}", "bad_request",
         "field 'dtype' (fp32, bf16 or fp16) is missing"},
        {"{\"id\":1,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"fp8\"}",
         "bad_request", "field 'dtype': dtype 'fp8'"},
        {"{\"id\":1,\"type\":\"kernel\",\"op\":\"timestep_sinusoid\",\"template\":7,"
         "\"expr\":\"kjit_sinusoid<float>\"}", "bad_request", "field 'template': expected a string"},
#undef KERNEL_Q
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        expect_error(sock, cases[i].json, cases[i].code, cases[i].mention, 1);
    /* An expr one byte longer than a spec holds; any other string that long. */
    char q[512], big[300];
    memset(big, 'a', 224);
    big[224] = '\0';
    memcpy(big, "kjit_", 5);
    snprintf(q, sizeof q, "{\"id\":1,\"type\":\"kernel\",\"op\":\"timestep_sinusoid\",\"template\":"
                          "\"timestep_sinusoid.cuh\",\"expr\":\"%s\"}", big);
    expect_error(sock, q, "bad_request", "field 'expr': the string is longer than 223 bytes", 1);
    snprintf(q, sizeof q, "{\"id\":1,\"type\":\"kernel\",\"op\":\"%s\",\"template\":"
                          "\"timestep_sinusoid.cuh\",\"expr\":\"kjit_sinusoid<float>\"}", big + 90);
    expect_error(sock, q, "bad_request", "field 'op': the string is longer than 128 bytes", 1);
    /* Before hello: out of order. */
    expect_error(sock, "{\"id\":1,\"type\":\"ping\"}", "out_of_order", "hello", 0);
    /* A NUL inside the header. */
    {
        int fd = greeted(sock);
        uint8_t h[KJIT_FRAME_HEADER];
        kjit__frame_encode(h, 8, 0);
        if (write(fd, h, sizeof h) < 0 || write(fd, "{\"id\"\0:1}", 8) < 0) CHECK(0);
        cJSON *r = kjit_test_reply(fd, 10000);
        CHECK(!strcmp(kjit_test_err_code(r), "bad_json") && strstr(kjit_test_err_msg(r), "NUL"));
        cJSON_Delete(r);
        /* A payload on a request that takes none. */
        kjit_test_frame(fd, "{\"id\":5,\"type\":\"ping\"}", "abcd", 4);
        r = kjit_test_reply(fd, 10000);
        CHECK(!strcmp(kjit_test_err_code(r), "bad_request") && strstr(kjit_test_err_msg(r), "payload"));
        cJSON_Delete(r);
        close(fd);
    }
    /* Frame headers: magic, version, flags, lengths. */
    uint8_t h[KJIT_FRAME_HEADER];
    kjit__frame_encode(h, 10, 0);
    memcpy(h, "HTTP", 4);
    expect_fatal(sock, h, sizeof h, "magic");
    kjit__frame_encode(h, 10, 0);
    h[4] = 9;
    expect_fatal(sock, h, sizeof h, "version");
    kjit__frame_encode(h, 10, 0);
    h[6] = 1;
    expect_fatal(sock, h, sizeof h, "flags");
    kjit__frame_encode(h, 0x40000000u, 0);
    expect_fatal(sock, h, sizeof h, "JSON length");
    kjit__frame_encode(h, 0, 0);
    expect_fatal(sock, h, sizeof h, "JSON length");
    kjit__frame_encode(h, 10, 0x7fffffffu);
    expect_fatal(sock, h, sizeof h, "payload");
    const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    expect_fatal(sock, http, strlen(http), "magic");
    /* Truncated frames and random bytes, then hang up: the server stays up. */
    uint64_t seed = kjit_test_seed("test_server");
    for (int i = 0; i < 200; ++i) {
        int fd = kjit_test_connect(sock);
        uint8_t junk[512];
        size_t n = 1 + (size_t)(seed % sizeof junk);
        for (size_t k = 0; k < n; ++k) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            junk[k] = (uint8_t)(seed >> 56);
        }
        if (i % 2) {
            kjit__frame_encode(junk, 200, 0); /* a valid header, then a cut body */
            n = n < 40 ? 40 : n;
        }
        if (write(fd, junk, n) < 0) CHECK(0);
        close(fd);
    }
    CHECK(kjit_test_stat(sock, "bad_frames") >= 7);
}

/* ---- 64 concurrent clients ---------------------------------------------- */

typedef struct load_arg {
    const char *sock;
    int requests, failures;
    pthread_barrier_t *start;
    const char *compile; /* the single-flight request; NULL: the mix */
    char key[33];
} load_arg;

static void *load_worker(void *p)
{
    load_arg *a = p;
    kjit_client *c;
    if (kjit_client_connect(&c, a->sock, 120000)) {
        fprintf(stderr, "connect: %s\n", kjit_last_error());
        a->failures++;
        pthread_barrier_wait(a->start);
        return NULL;
    }
    pthread_barrier_wait(a->start);
    static const char *mix[] = {
        "{\"type\":\"ping\"}", "{\"type\":\"stats\"}",
        "{\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\",\"arch\":\"sm_90\"}",
        "{\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":512,\"dtype\":\"bf16\",\"arch\":\"sm_90\"}",
    };
    for (int i = 0; i < a->requests; ++i) {
        const char *q = a->compile ? a->compile : mix[i % 4];
        kjit_client_reply r;
        if (kjit_client_request(c, q, NULL, 0, NULL, NULL, &r)) {
            fprintf(stderr, "request: %s\n", kjit_last_error());
            a->failures++;
            break;
        }
        if (!r.ok || (i % 4 >= 2 && !r.payload_len)) {
            fprintf(stderr, "reply: %s\n", r.json);
            a->failures++;
        }
        if (a->compile) {
            cJSON *o = cJSON_Parse(r.json);
            const cJSON *k = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "kernels"), 0);
            const cJSON *key = cJSON_GetObjectItemCaseSensitive(k, "key");
            if (cJSON_IsString(key)) snprintf(a->key, sizeof a->key, "%s", key->valuestring);
            cJSON_Delete(o);
        }
        kjit_client_reply_free(&r);
    }
    kjit_client_close(c);
    return NULL;
}

static int run_clients(const char *sock, int n, int requests, const char *compile, load_arg *args)
{
    pthread_t th[64];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)n);
    for (int i = 0; i < n; ++i) {
        args[i] = (load_arg){.sock = sock, .requests = requests, .start = &start, .compile = compile};
        pthread_create(&th[i], NULL, load_worker, &args[i]);
    }
    int failures = 0;
    for (int i = 0; i < n; ++i) {
        pthread_join(th[i], NULL);
        failures += args[i].failures;
    }
    pthread_barrier_destroy(&start);
    return failures;
}

static void test_concurrent(const char *sock)
{
    const char *e = getenv("KJIT_TEST_SERVER_REQUESTS");
    int requests = e ? atoi(e) : 1000;
    static load_arg args[64];
    double t0 = kjit_test_now();
    CHECK_EQ_INT(run_clients(sock, 64, requests, NULL, args), 0);
    double dt = kjit_test_now() - t0;
    printf("64 clients x %d requests (ping, stats, cached compile): %.2f s, %.0f req/s\n", requests, dt,
           64.0 * requests / dt);
}

/* 64 clients ask for one uncached tuple at once: one compile per kernel. */
static void test_single_flight(const char *sock)
{
    static load_arg args[64];
    double before = kjit_test_stat(sock, "compiles");
    const char *q = "{\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":1000,\"dtype\":\"fp16\",\"arch\":\"sm_89\"}";
    CHECK_EQ_INT(run_clients(sock, 64, 1, q, args), 0);
    CHECK_EQ_INT(kjit_test_stat(sock, "compiles") - before, 1);
    for (int i = 1; i < 64; ++i) CHECK(!strcmp(args[i].key, args[0].key));
    /* A tuple with several kernels, if the registry has one. */
    kjit_kernel_spec specs[64];
    int n = 0;
    if (kjit_op_kernels("norm_modulate", 512, KJIT_BF16, specs, 64, &n) == KJIT_OK && n > 1) {
        before = kjit_test_stat(sock, "compiles");
        q = "{\"type\":\"compile\",\"op\":\"norm_modulate\",\"hidden\":512,\"dtype\":\"bf16\",\"arch\":\"sm_89\"}";
        CHECK_EQ_INT(run_clients(sock, 64, 1, q, args), 0);
        double compiles = kjit_test_stat(sock, "compiles") - before;
        /* Kernels shared with tuples compiled earlier are not compiled again. */
        CHECK(compiles >= 1 && compiles <= n);
        printf("single flight: 64 clients, norm_modulate (%d kernels): %.0f compiles\n", n, compiles);
    }
}

/* A client leaving while its compile runs: the compile finishes for the others. */
static void test_disconnect(const char *sock)
{
    double before = kjit_test_stat(sock, "compiles");
    const char *q = "{\"id\":3,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":64,\"dtype\":\"fp32\",\"arch\":\"sm_86\"}";
    int fd = kjit_test_connect(sock);
    kjit_test_frame(fd, HELLO, NULL, 0);
    kjit_test_frame(fd, q, NULL, 0);
    /* The same id again while the first waits: refused, the first still
     * answered; so is a ping or a stats under that id (one reply per id). */
    kjit_test_frame(fd, q, NULL, 0);
    kjit_test_frame(fd, "{\"id\":3,\"type\":\"ping\"}", NULL, 0);
    kjit_test_frame(fd, "{\"id\":3,\"type\":\"stats\"}", NULL, 0);
    cJSON *r = kjit_test_reply(fd, 10000);
    cJSON_Delete(r);
    for (int k = 0; k < 3; ++k) {
        r = kjit_test_reply(fd, 30000);
        CHECK(!strcmp(kjit_test_err_code(r), "out_of_order"));
        cJSON_Delete(r);
    }
    r = kjit_test_reply(fd, 60000);
    CHECK_EQ_INT(kjit_test_num(r, "id"), 3);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")));
    cJSON_Delete(r);
    close(fd);
    q = "{\"id\":4,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":64,\"dtype\":\"fp32\",\"arch\":\"sm_75\"}";
    fd = kjit_test_connect(sock);
    kjit_test_frame(fd, HELLO, NULL, 0);
    kjit_test_frame(fd, q, NULL, 0);
    close(fd); /* gone before the compile can have finished */
    kjit_client *c;
    CHECK_STATUS(kjit_client_connect(&c, sock, 60000), KJIT_OK);
    r = call(c, "{\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":64,\"dtype\":\"fp32\",\"arch\":\"sm_75\"}", NULL);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")));
    cJSON_Delete(r);
    kjit_client_close(c);
    CHECK_EQ_INT(kjit_test_stat(sock, "compiles") - before, 2);
}

/* A client pipelines kernel requests for 48 kernels (28 of them distinct
 * and uncached) and leaves: those not started are cancelled (all 28 were
 * compiled for nobody, and a stop waited for them). */
/* On fd, kernel requests (ids 1..48) for norm_modulate's fp32 kernels at
 * hidden sizes from h0 on, 28 of them distinct. */
static void pipeline_kernels(int fd, int h0)
{
    int n = 0;
    for (int h = 0; n < 48 && h < 16; ++h) {
        kjit_kernel_spec specs[64];
        int m = 0;
        CHECK_STATUS(kjit_op_kernels("norm_modulate", h0 + 8 * h, KJIT_F32, specs, 64, &m), KJIT_OK);
        for (int k = 0; k < m && k < 64 && n < 48; ++k) {
            char q[512];
            snprintf(q, sizeof q, "{\"id\":%d,\"type\":\"kernel\",\"op\":\"%s\",\"template\":\"%s\",\"expr\":\"%s\"}",
                     ++n, specs[k].op, specs[k].template_file, specs[k].name_expr);
            kjit_test_frame(fd, q, NULL, 0);
        }
    }
    CHECK_EQ_INT(n, 48);
}

/* On fd, compile requests (ids 1..n) for norm_modulate fp32 sm_80 at
 * hidden sizes h0 + 8, h0 + 16, ...: new tuples of ~10 kernels each. */
static void pipeline_compiles(int fd, int n, int h0)
{
    for (int k = 1; k <= n; ++k) {
        char q[256];
        snprintf(q, sizeof q, "{\"id\":%d,\"type\":\"compile\",\"op\":\"norm_modulate\",\"hidden\":%d,"
                              "\"dtype\":\"fp32\",\"arch\":\"sm_80\"}", k, h0 + 8 * k);
        kjit_test_frame(fd, q, NULL, 0);
    }
}

/* Waits (up to 1.5 s: the sweep's period is 250 ms, the machine may be
 * busy) until the server counts `clients` connections. */
static void wait_clients(const char *sock, double clients)
{
    double now = -1;
    for (int t = 0; t < 30 && (now = kjit_test_stat(sock, "clients")) != clients; ++t) usleep(50000);
    CHECK_EQ_INT((int)now, (int)clients);
}

/* The server's compile count once no job is left (up to 60 s). */
static double compiles_when_idle(const char *sock)
{
    double jobs = 1;
    for (int t = 0; t < 1200 && jobs > 0; ++t) {
        usleep(50000);
        jobs = kjit_test_stat(sock, "jobs");
    }
    CHECK(jobs == 0);
    return kjit_test_stat(sock, "compiles");
}

/* One compile of norm_modulate fp32 sm_80 at hidden h on a connection of
 * its own, which must succeed. */
static void compile_ok(const char *sock, int h)
{
    char q[256];
    snprintf(q, sizeof q, "{\"type\":\"compile\",\"op\":\"norm_modulate\",\"hidden\":%d,\"dtype\":\"fp32\","
                          "\"arch\":\"sm_80\"}", h);
    kjit_client *c;
    CHECK_STATUS(kjit_client_connect(&c, sock, 60000), KJIT_OK);
    cJSON *r = call(c, q, NULL);
    CHECK(r && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")));
    cJSON_Delete(r);
    kjit_client_close(c);
}

static void test_kernel_leave(const char *sock)
{
    const double before = kjit_test_stat(sock, "compiles");
    int fd = greeted(sock);
    pipeline_kernels(fd, 1000);
    usleep(100000); /* the server has read them all */
    close(fd);
    const double compiled = compiles_when_idle(sock) - before;
    CHECK_LE(compiled, 12); /* the pool's 4 threads had started theirs */
    printf("48 kernel requests, client gone: %.0f compiled\n", compiled);
}

/* The same with compile requests, which are shared jobs: a client
 * pipelines compiles of 12 new tuples (norm_modulate fp32 at 12 hidden
 * sizes: ~10 kernels of their own each) and leaves; the jobs no one else
 * waits on are cancelled, not compiled for nobody; and the last tuple asked
 * for again afterwards compiles (a new job, not the cancelled one). */
static void test_compile_leave(const char *sock)
{
    const double before = kjit_test_stat(sock, "compiles"), clients = kjit_test_stat(sock, "clients");
    int fd = greeted(sock);
    pipeline_compiles(fd, 12, 2000);
    usleep(100000); /* the server has read them all */
    close(fd);
    wait_clients(sock, clients); /* it has seen it leave: the tuple below is asked anew */
    compile_ok(sock, 2096);
    const double compiled = compiles_when_idle(sock) - before;
    CHECK_LE(compiled, 40); /* those the pool's threads had started, and the tuple asked again */
    printf("12 compile requests, client gone: %.0f compiled\n", compiled);
}

/* A prewarm whose client leaves: its cancelled combinations answer no one,
 * so they are no error in stats (they were counted as one). */
static void test_prewarm_leave(const char *sock)
{
    const double errors = kjit_test_stat(sock, "errors"), clients = kjit_test_stat(sock, "clients");
    int fd = greeted(sock);
    kjit_test_frame(fd, "{\"id\":1,\"type\":\"prewarm\",\"ops\":\"all\",\"hidden\":[9008,9016,9024,9032],"
                        "\"dtype\":[\"fp32\"],\"arch\":\"sm_80\"}", NULL, 0);
    usleep(300000); /* the server has started it */
    close(fd);
    wait_clients(sock, clients);
    compiles_when_idle(sock);
    CHECK_EQ_INT((int)kjit_test_stat(sock, "errors"), (int)errors);
    printf("a prewarm whose client left: errors %.0f -> %.0f\n", errors, kjit_test_stat(sock, "errors"));
}

/* Client a pipelines compiles of 12 new tuples (hidden h0 + 8k: ~10
 * kernels of their own each, ~120 kernels for the pool's 4 threads), then
 * another client asks for hidden h and must come back while at least 6 of
 * a's are still to do. */
static void compile_behind(const char *sock, int h0, int h, const char *what)
{
    int a = greeted(sock);
    pipeline_compiles(a, 12, h0);
    usleep(100000); /* the server has read them all */
    compile_ok(sock, h);
    const double left = kjit_test_stat(sock, "jobs");
    printf("%s: back with %.0f of those 12 still to do\n", what, left);
    CHECK(left >= 6);
    for (int k = 1; k <= 12; ++k) {
        cJSON *x = kjit_test_reply(a, 120000);
        CHECK(x && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "ok")));
        cJSON_Delete(x);
    }
    close(a);
}

/* Fairness (pool.c). A new tuple takes turns with the first client's
 * kernels; first in, first out it came back after all 12. A tuple queued
 * last in the first client's turn (its 12th) goes to the front of that
 * client's queue once another client waits on it; before, it came back
 * after all 12 too. */
static void test_compile_fair(const char *sock)
{
    compile_behind(sock, 5000, 5400, "a compile behind another client's 12 pipelined ones");
    compile_behind(sock, 7000, 7096, "a compile of another client's 12th pipelined tuple");
}

/* A client that sends its requests and shuts its writing side (as `nc -N`
 * or a script piping requests does) still gets every reply owed, the slow
 * ones too, and then the server closes the connection. */
static void test_half_close(const char *sock)
{
    int fd = greeted(sock);
    kjit_test_frame(fd, "{\"id\":1,\"type\":\"compile\",\"op\":\"norm_modulate\",\"hidden\":6008,\"dtype\":\"fp32\","
                        "\"arch\":\"sm_80\"}", NULL, 0);
    kjit_test_frame(fd, "{\"id\":2,\"type\":\"ping\"}", NULL, 0);
    kjit_test_frame(fd, "{\"id\":3,\"type\":\"compile\",\"op\":\"gated_residual\",\"hidden\":6008,\"dtype\":\"fp32\","
                        "\"arch\":\"sm_80\"}", NULL, 0);
    CHECK(shutdown(fd, SHUT_WR) == 0);
    int got = 0;
    for (int k = 0; k < 3; ++k) {
        cJSON *r = kjit_test_reply(fd, 120000);
        got += r && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok"));
        cJSON_Delete(r);
    }
    printf("half-closed client: %d of 3 replies\n", got);
    CHECK_EQ_INT(got, 3);
    char b;
    CHECK(recv(fd, &b, 1, 0) == 0); /* then the server closes */
    close(fd);
}

/* A client that shuts its writing side inside a frame is told so (bad_frame,
 * with how much of it came), then closed: not dropped without a word. */
static void test_half_close_partial(const char *sock)
{
    for (int k = 0; k < 2; ++k) {
        int fd = greeted(sock);
        uint8_t b[KJIT_FRAME_HEADER + 22];
        kjit__frame_encode(b, 100, 0);
        memset(b + KJIT_FRAME_HEADER, '{', 22);
        const size_t n = k ? sizeof b : 8;
        if (write(fd, b, n) != (ssize_t)n) CHECK(0);
        CHECK(shutdown(fd, SHUT_WR) == 0);
        cJSON *r = kjit_test_reply(fd, 5000);
        const char *want = k ? "(38 of its 116 bytes)" : "(8 of its 16 bytes of header)";
        if (!r || strcmp(kjit_test_err_code(r), "bad_frame") || !strstr(kjit_test_err_msg(r), want)) {
            fprintf(stderr, "half-close inside a frame: want '%s', got %s\n", want, r ? kjit_test_err_msg(r) : "(nothing)");
            kjit_test_failures++;
        }
        cJSON_Delete(r);
        CHECK(kjit_test_closed_within(fd, 5000));
        close(fd);
    }
}

/* A client fills its max_pending (64) with compiles that wait behind
 * another client's long queue, so the server stops reading it, and leaves:
 * the sweep sees it gone within its period, not once a reply lets reading
 * resume after the other client's queue (seconds here, hours behind a
 * large one). The other client's compiles are untouched. */
static void test_closed_while_paused(const char *sock)
{
    int b = greeted(sock);
    pipeline_compiles(b, 24, 3000);
    usleep(100000);
    const double clients = kjit_test_stat(sock, "clients");
    int a = greeted(sock);
    for (int k = 1; k <= 64; ++k) { /* waiters on the last four of b's jobs */
        char q[256];
        snprintf(q, sizeof q, "{\"id\":%d,\"type\":\"compile\",\"op\":\"norm_modulate\",\"hidden\":%d,"
                              "\"dtype\":\"fp32\",\"arch\":\"sm_80\"}", k, 3000 + 8 * (21 + k % 4));
        kjit_test_frame(a, q, NULL, 0);
    }
    usleep(100000);
    CHECK_EQ_INT((int)kjit_test_stat(sock, "clients"), (int)clients + 1);
    close(a);
    wait_clients(sock, clients); /* seen by the sweep, not once a reply resumes reading */
    for (int k = 1; k <= 24; ++k) {
        cJSON *r = kjit_test_reply(b, 120000);
        CHECK(r && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")));
        cJSON_Delete(r);
    }
    close(b);
}

/* ---- limits ------------------------------------------------------------- */

/* Reads exactly n bytes, `chunk` at a time with a pause between reads: a
 * client slower than the idle timeout at taking a large reply. 0 on EOF. */
static int slow_read(int fd, char *buf, size_t n, size_t chunk, int pause_us)
{
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, buf + got, n - got < chunk ? n - got : chunk);
        if (k <= 0) return 0;
        got += (size_t)k;
        if (got < n) usleep((useconds_t)pause_us);
    }
    return 1;
}

/* A large reply read more slowly than --idle-timeout (1 s here) but without
 * stopping: bytes keep moving, so it arrives whole, before any timeout (the
 * idle clock ran from the request and, with the reply in the socket's
 * buffer, ignored the client's reading: the reply was cut off). */
static void slow_reader(const char *sock)
{
    int fd = kjit_test_connect(sock);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    kjit_test_frame(fd, HELLO, NULL, 0);
    cJSON_Delete(kjit_test_reply(fd, 10000));
    kjit_test_frame(fd, "{\"id\":7,\"type\":\"compile\",\"op\":\"norm_modulate\",\"hidden\":5376,\"dtype\":\"bf16\"}",
                  NULL, 0);
    uint8_t h[KJIT_FRAME_HEADER];
    kjit_frame_header fh;
    char why[128];
    int ok = slow_read(fd, (char *)h, sizeof h, sizeof h, 0) &&
             !kjit__frame_decode(h, 1u << 20, 1u << 30, &fh, why, sizeof why);
    const double t0 = kjit_test_now(); /* the reading alone: 117 pauses of 12 ms */
    char *body = ok ? malloc((size_t)fh.json_len + fh.payload_len + 1) : NULL;
    ok = ok && body && slow_read(fd, body, (size_t)fh.json_len + fh.payload_len, 4096, 12000);
    const double took = kjit_test_now() - t0;
    if (ok) {
        body[fh.json_len] = '\0';
        cJSON *r = cJSON_Parse(body);
        ok = r && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")) && kjit_test_num(r, "id") == 7;
        cJSON_Delete(r);
    }
    if (!ok || took < 1.2) {
        fprintf(stderr, "slow reader: reply %s after %.1f s (a read slower than the 1 s idle time expected)\n",
                ok ? "whole" : "cut off or wrong", took);
        kjit_test_failures++;
    }
    /* Then idle: the timeout comes a second after the last byte moved, not
     * queued while the reply was still being read. */
    const double t1 = kjit_test_now();
    cJSON *r = kjit_test_reply(fd, 5000);
    const double quiet = kjit_test_now() - t1;
    if (!r || strcmp(kjit_test_err_code(r), "timeout") || quiet < 0.7) {
        fprintf(stderr, "slow reader: after the reply, %s after %.2f s (timeout after ~1 s expected)\n",
                r ? kjit_test_err_code(r) : "nothing", quiet);
        kjit_test_failures++;
    }
    cJSON_Delete(r);
    free(body);
    close(fd);
}

/* A client whose writes never end on a frame's boundary (a stream cut into
 * fixed-size writes): a frame completes every 0.3 s, each read leaves half
 * of the next one waiting. The frame clock restarts with every frame that
 * completes, so the 1 s frame timeout never fires (it ran from the first
 * half frame on, and cut the client off after 1 s). */
static void staggered_writer(const char *sock)
{
    int fd = kjit_test_connect(sock);
    kjit_test_frame(fd, HELLO, NULL, 0);
    cJSON_Delete(kjit_test_reply(fd, 10000));
    const char *q = "{\"id\":1,\"type\":\"ping\"}";
    const size_t len = KJIT_FRAME_HEADER + strlen(q);
    char one[128], stream[128 * 16];
    kjit__frame_encode((uint8_t *)one, (uint32_t)strlen(q), 0);
    memcpy(one + KJIT_FRAME_HEADER, q, strlen(q));
    enum { FRAMES = 12 };
    for (int i = 0; i < FRAMES; ++i) memcpy(stream + i * len, one, len); /* every id 1: pings answer in order */
    size_t sent = len / 2;
    int ok = send(fd, stream, sent, MSG_NOSIGNAL) == (ssize_t)sent, answered = 0;
    for (int i = 0; ok && i < FRAMES; ++i) {
        usleep(300000);
        const size_t n = i + 1 < FRAMES ? len : len - len / 2;
        ok = send(fd, stream + sent, n, MSG_NOSIGNAL) == (ssize_t)n;
        sent += n;
        cJSON *r = ok ? kjit_test_reply(fd, 5000) : NULL;
        ok = r && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok"));
        answered += ok;
        cJSON_Delete(r);
    }
    if (answered != FRAMES) {
        fprintf(stderr, "staggered writer: %d of %d pings answered over %.1f s (frame timeout 1 s)\n", answered,
                FRAMES, FRAMES * 0.3);
        kjit_test_failures++;
    }
    close(fd);
}

/* A half-close with a frame begun and not finished, behind a request slower
 * than the frame timeout (1 s here): that request is still answered, then
 * the rest is said (bad_frame), then the connection closes. Before, the
 * frame timeout fired after the half-close and dropped the owed reply. The
 * prewarm is made longer until it outlasts the timeout (else the check
 * could not fail). */
static void half_close_behind_slow(const char *sock)
{
    double took = 0;
    for (int round = 0, n = 4; round < 4 && took < 1.6; ++round, n *= 2) {
        int fd = kjit_test_connect(sock);
        kjit_test_frame(fd, HELLO, NULL, 0);
        cJSON_Delete(kjit_test_reply(fd, 10000));
        char q[2048];
        int len = snprintf(q, sizeof q, "{\"id\":1,\"type\":\"prewarm\",\"ops\":\"norm_modulate\",\"dtype\":\"fp32\","
                                      "\"arch\":\"sm_80\",\"hidden\":[");
        for (int k = 0; k < n; ++k) /* sizes no other test compiles */
            len += snprintf(q + len, sizeof q - (size_t)len, "%s%d", k ? "," : "", 7000 + 8 * (32 * round + k));
        snprintf(q + len, sizeof q - (size_t)len, "]}");
        const double t0 = kjit_test_now();
        kjit_test_frame(fd, q, NULL, 0);
        uint8_t h[KJIT_FRAME_HEADER];
        kjit__frame_encode(h, 100, 0);
        if (write(fd, h, 10) != 10) CHECK(0);
        CHECK(shutdown(fd, SHUT_WR) == 0);
        int final_ok = 0;
        cJSON *r;
        while ((r = kjit_test_reply(fd, 60000)) && kjit_test_num(r, "id") == 1 &&
               cJSON_GetObjectItemCaseSensitive(r, "event")) /* progress */
            cJSON_Delete(r);
        took = kjit_test_now() - t0;
        final_ok = r && kjit_test_num(r, "id") == 1 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok"));
        if (!final_ok) {
            fprintf(stderr, "half-close behind a %d-combination prewarm: after %.1f s, %s (%s) instead of its reply\n",
                    n, took, r ? kjit_test_err_code(r) : "nothing", r ? kjit_test_err_msg(r) : "");
            kjit_test_failures++;
        }
        cJSON_Delete(r);
        r = final_ok ? kjit_test_reply(fd, 5000) : NULL;
        if (final_ok && (!r || strcmp(kjit_test_err_code(r), "bad_frame"))) {
            fprintf(stderr, "half-close behind a prewarm: %s after its reply, bad_frame expected\n",
                    r ? kjit_test_err_code(r) : "nothing");
            kjit_test_failures++;
        }
        cJSON_Delete(r);
        CHECK(kjit_test_closed_within(fd, 5000));
        close(fd);
        if (!final_ok) return;
    }
    if (took < 1.6) {
        fprintf(stderr, "half-close behind a prewarm: the longest prewarm took %.1f s, not past the 1 s frame timeout\n",
                took);
        kjit_test_failures++;
    }
}

static void test_limits(const char *cache)
{
    char sock[4200];
    snprintf(sock, sizeof sock, "%s/limits/kjit.sock", tmp);
    const char *extra[] = {"--max-clients", "4", "--idle-timeout", "1", "--max-pending", "4", NULL};
    pid_t pid = kjit_test_serve(sock, cache, extra);
    int fds[4];
    for (int i = 0; i < 4; ++i) {
        fds[i] = kjit_test_connect(sock);
        kjit_test_frame(fds[i], HELLO, NULL, 0);
        cJSON_Delete(kjit_test_reply(fds[i], 10000));
    }
    int extra_fd = kjit_test_connect(sock);
    cJSON *r = kjit_test_reply(extra_fd, 10000);
    CHECK(!strcmp(kjit_test_err_code(r), "busy"));
    cJSON_Delete(r);
    CHECK(kjit_test_closed_within(extra_fd, 5000));
    close(extra_fd);
    /* Pending cap: 50 pipelined requests all answered (backpressure, no loss). */
    for (int i = 1; i <= 50; ++i) {
        char q[64];
        snprintf(q, sizeof q, "{\"id\":%d,\"type\":\"ping\"}", i);
        kjit_test_frame(fds[0], q, NULL, 0);
    }
    int got = 0;
    for (int i = 1; i <= 50; ++i) {
        r = kjit_test_reply(fds[0], 10000);
        got += r && kjit_test_num(r, "id") == i;
        cJSON_Delete(r);
    }
    CHECK_EQ_INT(got, 50);
    /* A frame begun and never finished, and a silent connection: both closed. */
    uint8_t h[KJIT_FRAME_HEADER];
    kjit__frame_encode(h, 100, 0);
    if (write(fds[1], h, 10) < 0) CHECK(0);
    double t0 = kjit_test_now();
    CHECK(kjit_test_closed_within(fds[1], 5000));
    CHECK(kjit_test_closed_within(fds[2], 5000));
    CHECK_LE(kjit_test_now() - t0, 4.0);
    for (int i = 0; i < 4; ++i) close(fds[i]);
    slow_reader(sock);
    staggered_writer(sock);
    half_close_behind_slow(sock);
    /* A client that sends and never reads: the server stops reading it and
     * keeps serving others. */
    int hog = kjit_test_connect(sock);
    kjit_test_frame(hog, HELLO, NULL, 0);
    fcntl(hog, F_SETFL, O_NONBLOCK);
    const char *q = "{\"id\":9,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,\"dtype\":\"bf16\",\"arch\":\"sm_90\"}";
    uint8_t fh[KJIT_FRAME_HEADER];
    kjit__frame_encode(fh, (uint32_t)strlen(q), 0);
    char frame[256];
    memcpy(frame, fh, sizeof fh);
    memcpy(frame + sizeof fh, q, strlen(q));
    int sent = 0;
    for (int i = 0; i < 100000 && write(hog, frame, sizeof fh + strlen(q)) > 0; ++i) ++sent;
    CHECK(sent < 100000);
    CHECK(kjit_test_stat(sock, "clients") >= 1);
    close(hog);
    CHECK_EQ_INT(kjit_test_serve_stop(pid), 0);
}

/* ---- peer credentials --------------------------------------------------- */

static void test_peer_refusal(const char *cache)
{
    char sock[4200];
    snprintf(sock, sizeof sock, "%s/refuse/kjit.sock", tmp);
    const char *extra[] = {"--test-refuse-own-uid", NULL};
    pid_t pid = kjit_test_serve(sock, cache, extra);
    kjit_client *c = NULL;
    CHECK_STATUS(kjit_client_connect(&c, sock, 10000), KJIT_EPERM);
    CHECK(strstr(kjit_last_error(), "may not use") != NULL);
    kjit_client_close(c);
    CHECK_EQ_INT(kjit_test_serve_stop(pid), 0);
    if (geteuid() != 0) return;

    /* As root: real other users, allowed and not, through SO_PEERCRED. */
    chmod(tmp, 0711);
    snprintf(sock, sizeof sock, "%s/shared/kjit.sock", tmp);
    const char *allow[] = {"--allow-uid", "4242", NULL};
    pid = kjit_test_serve(sock, cache, allow);
    struct stat st;
    CHECK(stat(sock, &st) == 0 && (st.st_mode & 0777) == 0666);
    static const struct { uid_t uid; int want; } who[] = {{65534, KJIT_EPERM}, {4242, KJIT_OK}};
    for (int i = 0; i < 2; ++i) {
        pid_t child = fork();
        if (child == 0) {
            if (setgid(65534) || setuid(who[i].uid)) _exit(90);
            kjit_client *cc = NULL;
            int rc = kjit_client_connect(&cc, sock, 10000);
            if (rc != who[i].want) {
                fprintf(stderr, "uid %u: connect gave %s (%s), want %s\n", (unsigned)who[i].uid, kjit_status_name(rc),
                        kjit_last_error(), kjit_status_name(who[i].want));
                _exit(91);
            }
            if (rc == KJIT_OK) {
                kjit_client_reply r;
                /* Only the server's own user may stop it. */
                if (kjit_client_request(cc, "{\"type\":\"shutdown\"}", NULL, 0, NULL, NULL, &r) || r.ok ||
                    !strstr(r.json, "not_allowed"))
                    _exit(92);
                kjit_client_reply_free(&r);
            }
            kjit_client_close(cc);
            _exit(0);
        }
        int cst = -1;
        waitpid(child, &cst, 0);
        CHECK_EQ_INT(WIFEXITED(cst) ? WEXITSTATUS(cst) : -1, 0);
    }
    CHECK_EQ_INT(kjit_test_serve_stop(pid), 0);
    chmod(tmp, 0700);
}

/* ---- SIGTERM with work in flight ---------------------------------------- */

static void test_sigterm(const char *cache)
{
    char sock[4200];
    snprintf(sock, sizeof sock, "%s/term/kjit.sock", tmp);
    pid_t pid = kjit_test_serve(sock, cache, NULL);
    int fd = greeted(sock);
    kjit_test_frame(fd, "{\"id\":8,\"type\":\"prewarm\",\"ops\":\"timestep_sinusoid\",\"hidden\":32,"
                  "\"dtype\":[\"fp32\",\"bf16\",\"fp16\"],\"arch\":[\"sm_80\",\"sm_86\",\"sm_87\",\"sm_89\"]}", NULL, 0);
    cJSON *r = kjit_test_reply(fd, 60000); /* the first progress event: work is under way */
    CHECK(r && cJSON_GetObjectItemCaseSensitive(r, "event"));
    cJSON_Delete(r);
    kill(pid, SIGTERM);
    /* The final reply still comes: every combination accounted for, those
     * not started by then failed with "shutting_down". */
    int final_ok = 0, events = 1;
    while ((r = kjit_test_reply(fd, 60000))) {
        if (cJSON_GetObjectItemCaseSensitive(r, "event")) events++;
        else
            final_ok = kjit_test_num(r, "combinations") == 12 &&
                       (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")) ||
                        !strcmp(kjit_test_err_code(r), "shutting_down"));
        cJSON_Delete(r);
    }
    CHECK(final_ok);
    CHECK_EQ_INT(events, 12);
    close(fd);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK_EQ_INT(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), 0);
    CHECK(access(sock, F_OK) != 0);
}

/* Requests pipelined behind a `shutdown` in one write are each answered
 * (shutting_down), beyond the pending cap too (4 here: the rest are
 * answered as replies are written), then the connection closes; an idle
 * connection just closes. Before, the requests after the shutdown got no
 * reply. */
static void test_shutdown_pipelined(const char *cache)
{
    char sock[4200];
    snprintf(sock, sizeof sock, "%s/pipe/kjit.sock", tmp);
    const char *extra[] = {"--max-pending", "4", NULL};
    pid_t pid = kjit_test_serve(sock, cache, extra);
    int idle = greeted(sock), fd = greeted(sock);
    char buf[4096];
    size_t len = 0;
    for (int id = 5; id < 15; ++id) {
        char json[96];
        const int n = snprintf(json, sizeof json, "{\"id\":%d,\"type\":\"%s\"}", id,
                               id == 5 ? "shutdown" : id % 2 ? "stats" : "ping");
        kjit__frame_encode((uint8_t *)buf + len, (uint32_t)n, 0);
        memcpy(buf + len + KJIT_FRAME_HEADER, json, (size_t)n);
        len += KJIT_FRAME_HEADER + (size_t)n;
    }
    CHECK(write(fd, buf, len) == (ssize_t)len);
    int ok = 0, refused = 0, next = 5;
    cJSON *r;
    while ((r = kjit_test_reply(fd, 20000))) {
        CHECK_EQ_INT(kjit_test_num(r, "id"), next);
        next++;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok"))) ok++;
        else refused += !strcmp(kjit_test_err_code(r), "shutting_down");
        cJSON_Delete(r);
    }
    printf("shutdown pipelined: %d ok, %d shutting_down of 1 + 9\n", ok, refused);
    CHECK_EQ_INT(ok, 1);
    CHECK_EQ_INT(refused, 9);
    char b;
    CHECK(recv(idle, &b, 1, 0) == 0);
    close(idle);
    close(fd);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK_EQ_INT(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), 0);
}

/* SIGTERM with a connection's kernel requests queued: every one answered,
 * those not started with "shutting_down" (they were all compiled first). */
static void test_sigterm_kernels(const char *cache)
{
    char sock[4200];
    snprintf(sock, sizeof sock, "%s/termk/kjit.sock", tmp);
    pid_t pid = kjit_test_serve(sock, cache, NULL);
    int fd = greeted(sock);
    pipeline_kernels(fd, 2000);
    cJSON *r = kjit_test_reply(fd, 60000); /* the first compile is done: the rest under way or queued */
    int answered = r != NULL, refused = 0, other = 0;
    cJSON_Delete(r);
    kill(pid, SIGTERM);
    while ((r = kjit_test_reply(fd, 60000))) {
        answered++;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok"))) {
        } else if (!strcmp(kjit_test_err_code(r), "shutting_down")) {
            refused++;
        } else {
            other++;
        }
        cJSON_Delete(r);
    }
    CHECK_EQ_INT(answered, 48);
    CHECK(refused >= 1);
    CHECK_EQ_INT(other, 0);
    close(fd);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK_EQ_INT(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), 0);
    printf("SIGTERM with 48 kernel requests queued: %d answered shutting_down\n", refused);
}

/* SIGINT's and SIGTERM's bits of the server's ignored and caught signal
 * sets (/proc/PID/status), as "ign/cgt", or "" when unreadable. */
static void dispositions(pid_t pid, char *out, size_t n)
{
    const unsigned long long mine = (1ull << (SIGINT - 1)) | (1ull << (SIGTERM - 1));
    char path[64], line[256];
    unsigned long long ign = 0, cgt = 0;
    int found = 0;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        found += sscanf(line, "SigIgn: %llx", &ign) == 1;
        found += sscanf(line, "SigCgt: %llx", &cgt) == 1;
    }
    fclose(f);
    if (found == 2) snprintf(out, n, "%llx/%llx", ign & mine, cgt & mine);
}

/* How many of the server's threads do not block both SIGINT and SIGTERM
 * (/proc/PID/task/T/status); *threads the count seen. */
static int threads_taking_signals(pid_t pid, int *threads)
{
    const unsigned long long mine = (1ull << (SIGINT - 1)) | (1ull << (SIGTERM - 1));
    char dir[64], path[400], line[256];
    int open_ = 0;
    *threads = 0;
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s/status", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* a thread that ended meanwhile */
        unsigned long long blk = 0;
        int found = 0;
        while (fgets(line, sizeof line, f)) found += sscanf(line, "SigBlk: %llx", &blk) == 1;
        fclose(f);
        if (found) {
            ++*threads;
            open_ += (blk & mine) != mine;
        }
    }
    closedir(d);
    return open_;
}

/* A client's first compile leaves the server's signal dispositions alone:
 * libnvrtc's once-per-process handler swap, with SIGINT set to SIG_IGN on
 * the way (which discards a pending SIGINT), happened at start-up.
 * Sampled every 100 us until the reply comes. */
static void test_first_compile_dispositions(const char *cache)
{
    char sock[4200], before[512], now[512], seen[512] = "";
    snprintf(sock, sizeof sock, "%s/disp/kjit.sock", tmp);
    pid_t pid = kjit_test_serve(sock, cache, NULL);
    int fd = greeted(sock);
    dispositions(pid, before, sizeof before);
    CHECK(before[0] != 0);
    kjit_test_frame(fd, "{\"id\":1,\"type\":\"compile\",\"op\":\"norm_modulate\",\"hidden\":512,"
                  "\"dtype\":\"bf16\"}", NULL, 0);
    int changed = 0, samples = 0;
    const double deadline = kjit_test_now() + 60;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) > 0) break;
        if (kjit_test_now() > deadline) {
            fprintf(stderr, "no reply to the first compile in 60 s: the server hung\n");
            kjit_test_failures++;
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            close(fd);
            return;
        }
        dispositions(pid, now, sizeof now);
        if (strcmp(now, before)) {
            if (!changed++) snprintf(seen, sizeof seen, "%s", now);
        }
        ++samples;
        usleep(100);
    }
    cJSON *r = kjit_test_reply(fd, 60000);
    CHECK(r && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")));
    cJSON_Delete(r);
    CHECK(samples > 0);
    CHECK_EQ_INT(changed, 0);
    /* The signals come from the signalfd only if no thread takes them: not
     * the pool's, the lane's, the driver's or libnvrtc's own. */
    int threads = 0;
    CHECK_EQ_INT(threads_taking_signals(pid, &threads), 0);
    CHECK(threads > 1);
    if (changed)
        fprintf(stderr, "SIGINT/SIGTERM ignored/caught changed in %d of %d samples during the first compile: %s -> %s\n",
                changed, samples, before, seen);
    close(fd);
    CHECK_EQ_INT(kjit_test_serve_stop(pid), 0);
}

/* pid's exit status as a shell reports it (128 + the signal for a death
 * by one), waiting at most 30 s: a server that hangs is killed and reported
 * with `hang` (a failure here instead of the suite's timeout). */
static int exit_within_30s(pid_t pid, const char *hang)
{
    int st = 0;
    pid_t w = 0;
    for (int t = 0; t < 600 && !(w = waitpid(pid, &st, WNOHANG)); ++t) usleep(50000);
    if (!w) {
        fprintf(stderr, "%s\n", hang);
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- the memo's bound, a prewarm's share of the workers, stopping ------ */

/* With KJIT_SERVE_MEMO_MAX=2, a third tuple drops the least recently used
 * one; asked again, it comes back whole (from the library's cache). A
 * reply stays intact while its memo entry goes: it waits in the server's
 * queue, behind a larger one, until after the entry was dropped (the
 * frame's text was referenced from the entry: under ASan a use after free). */
static void test_memo_bound(const char *cache)
{
    char sock[4200];
    snprintf(sock, sizeof sock, "%s/memo/kjit.sock", tmp);
    setenv("KJIT_SERVE_MEMO_MAX", "2", 1);
    pid_t pid = kjit_test_serve(sock, cache, NULL);
    unsetenv("KJIT_SERVE_MEMO_MAX");
    static const char *const q[3] = {
        "{\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":1008,\"dtype\":\"fp32\",\"arch\":\"sm_80\"}",
        "{\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":1016,\"dtype\":\"fp32\",\"arch\":\"sm_80\"}",
        "{\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":1024,\"dtype\":\"fp32\",\"arch\":\"sm_80\"}"};
    kjit_client *c = NULL;
    CHECK_EQ_INT(kjit_client_connect(&c, sock, 10000), KJIT_OK);
    size_t first_len = 0, len = 0;
    cJSON *first = c ? call(c, q[0], &first_len) : NULL;
    CHECK(first && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(first, "ok")) && first_len > 0);
    /* A reply to a memo hit of q[0], queued behind a reply larger than the
     * socket holds (a norm_modulate tuple's ~300 KB of cubins), unread. */
    int fd = greeted(sock);
    kjit_test_frame(fd, "{\"id\":4,\"type\":\"compile\",\"op\":\"norm_modulate\",\"hidden\":1032,\"dtype\":\"bf16\","
                        "\"arch\":\"sm_80\"}", NULL, 0);
    for (int t = 0; t < 1200 && kjit_test_stat(sock, "jobs") != 0; ++t) usleep(50000);
    char text[256];
    snprintf(text, sizeof text, "{\"id\":5,%s", q[0] + 1);
    kjit_test_frame(fd, text, NULL, 0);
    usleep(100000);
    for (int i = 1; c && i < 3; ++i) cJSON_Delete(call(c, q[i], NULL));
    CHECK_EQ_INT(kjit_test_stat(sock, "memo"), 2);
    CHECK_EQ_INT(kjit_test_stat(sock, "memo_evictions"), 2); /* the norm_modulate tuple, then q[0] */
    cJSON *r = kjit_test_reply(fd, 60000);
    CHECK(r && kjit_test_num(r, "id") == 4 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")));
    cJSON_Delete(r);
    r = kjit_test_reply(fd, 10000); /* its memo entry is gone by now */
    CHECK(r && kjit_test_num(r, "id") == 5 && kjit_test_num(r, "payload_bytes") == (double)first_len);
    CHECK(r && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "op")), "timestep_sinusoid"));
    cJSON_Delete(r);
    close(fd);
    cJSON *again = c ? call(c, q[0], &len) : NULL;
    CHECK(again && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(again, "ok")) && len == first_len);
    CHECK(again && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(again, "cached")));
    CHECK_EQ_INT(kjit_test_stat(sock, "memo"), 2);
    CHECK_EQ_INT(kjit_test_stat(sock, "memo_evictions"), 3);
    /* A value listed twice in a prewarm counts once (a failing combination
     * would otherwise be compiled again for each). */
    cJSON *dup = c ? call(c, "{\"type\":\"prewarm\",\"ops\":[\"timestep_sinusoid\",\"timestep_sinusoid\"],"
                             "\"hidden\":[1008,1008,1016],\"dtype\":[\"fp32\",\"fp32\"],\"arch\":[\"sm_80\",\"sm_80\"]}",
                          NULL) : NULL;
    CHECK(dup && kjit_test_num(dup, "combinations") == 2);
    cJSON_Delete(dup);
    cJSON_Delete(first);
    cJSON_Delete(again);
    kjit_client_close(c);
    CHECK_EQ_INT(kjit_test_serve_stop(pid), 0);
}

/* A prewarm's text: head (up to "hidden":), then 64 hidden sizes first,
 * first + step, ... */
static void prewarm_64(char *out, size_t n, const char *head, int first, int step)
{
    int k = snprintf(out, n, "%s[", head);
    for (int h = 0; h < 64; ++h) k += snprintf(out + k, n - (size_t)k, "%s%d", h ? "," : "", first + step * h);
    snprintf(out + k, n - (size_t)k, "]}");
}

/* A client that sends 64 prewarms (61,440 combinations) and reads nothing
 * until they are done gets their 64 final replies and only the progress
 * events that fit in 1 MiB of queued frames, bookkeeping included (2,663
 * on the build machine; 6,502 when only the frames' bytes were counted). */
static void test_event_backlog(const char *cache)
{
    char sock[4200];
    snprintf(sock, sizeof sock, "%s/backlog/kjit.sock", tmp);
    pid_t pid = kjit_test_serve(sock, cache, NULL);
    int fd = greeted(sock);
    char q[2048];
    prewarm_64(q, sizeof q, "\"type\":\"prewarm\",\"ops\":\"timestep_sinusoid\",\"dtype\":[\"fp32\",\"bf16\","
               "\"fp16\"],\"arch\":[\"sm_80\",\"sm_86\",\"sm_89\",\"sm_90\",\"sm_100\"],\"hidden\":", 8, 8);
    for (int i = 1; i <= 64; ++i) {
        char text[2100];
        snprintf(text, sizeof text, "{\"id\":%d,%s", i, q);
        kjit_test_frame(fd, text, NULL, 0);
    }
    /* Done: all 64 taken and no job left (a prewarm hands out its next
     * combinations as a job ends, on the loop, so no gap shows 0 early). */
    int done = 0;
    for (int t = 0; t < 600 && !done; ++t) {
        done = kjit_test_stat(sock, "prewarm_requests") == 64 && kjit_test_stat(sock, "jobs") == 0;
        if (!done) usleep(50000);
    }
    CHECK(done);
    int events = 0, finals = 0;
    cJSON *r;
    while (finals < 64 && (r = kjit_test_reply(fd, 10000))) {
        if (cJSON_GetObjectItemCaseSensitive(r, "event")) events++;
        else finals += kjit_test_num(r, "combinations") == 960;
        cJSON_Delete(r);
    }
    /* At most 1 MiB of queued frames (~480 bytes an event with its
     * bookkeeping, taken as 300) plus what the socket holds (~200 bytes an
     * event, taken as 150; Linux reports twice the buffer it grants). */
    int sndbuf = 0;
    socklen_t sl = sizeof sndbuf;
    getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl);
    const int bound = (1 << 20) / 300 + sndbuf / 2 / 150;
    printf("64 prewarms unread: %d progress events kept (bound %d), %d final replies\n", events, bound, finals);
    CHECK_EQ_INT(finals, 64);
    CHECK(events > 0 && events < bound);
    close(fd);
    CHECK_EQ_INT(kjit_test_serve_stop(pid), 0);
}

/* A large prewarm does not hold back another client's compile: that
 * compile is answered while most of the prewarm is still to come (before,
 * its kernel queued behind all 1024 of the prewarm's). Then
 * SIGTERM: the combinations not started are given up ("shutting_down"),
 * and the server exits at once rather than after all of them. */
static void test_prewarm_share(const char *cache)
{
    char sock[4200];
    snprintf(sock, sizeof sock, "%s/share/kjit.sock", tmp);
    pid_t pid = kjit_test_serve(sock, cache, NULL);
    char pw[2048];
    prewarm_64(pw, sizeof pw, "{\"id\":3,\"type\":\"prewarm\",\"ops\":\"norm_modulate\",\"dtype\":\"fp32\","
               "\"arch\":\"sm_86\",\"hidden\":", 2008, 8);
    int fd = greeted(sock);
    kjit_test_frame(fd, pw, NULL, 0);
    cJSON *r = kjit_test_reply(fd, 60000); /* under way */
    CHECK(r && cJSON_GetObjectItemCaseSensitive(r, "event"));
    cJSON_Delete(r);
    kjit_client *c = NULL;
    CHECK_EQ_INT(kjit_client_connect(&c, sock, 10000), KJIT_OK);
    cJSON *other = c ? call(c, "{\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":64,"
                                 "\"dtype\":\"fp32\",\"arch\":\"sm_75\"}", NULL) : NULL;
    CHECK(other && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(other, "ok")));
    cJSON_Delete(other);
    kjit_client_close(c);
    const double compiles = kjit_test_stat(sock, "compiles");
    printf("a 64-combination prewarm (1024 kernels): %.0f compiles when another client's compile was answered\n",
           compiles);
    CHECK(compiles >= 1 && compiles < 200);
    kill(pid, SIGTERM);
    int final = 0, events = 1;
    while ((r = kjit_test_reply(fd, 30000))) {
        if (cJSON_GetObjectItemCaseSensitive(r, "event")) events++;
        else
            final = kjit_test_num(r, "combinations") == 64 && kjit_test_num(r, "failed") > 0 &&
                    !strcmp(kjit_test_err_code(r), "shutting_down");
        cJSON_Delete(r);
    }
    CHECK(final);
    CHECK_EQ_INT(events, 64);
    close(fd);
    CHECK_EQ_INT(exit_within_30s(pid, "SIGTERM during a large prewarm: the server did not exit within 30 s"), 0);
}

/* A SIGINT already waiting when the server starts (blocked and raised
 * before exec: a pending signal survives execve) stops it before it
 * listens: exit 0, no socket. Before the check ahead of the start-up
 * compile, libnvrtc's SIG_IGN discarded it and the server ran on. */
static void test_signal_at_start(const char *cache)
{
    char sock[4200];
    snprintf(sock, sizeof sock, "%s/early/kjit.sock", tmp);
    const char *bin = getenv("KJIT_BIN");
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigprocmask(SIG_BLOCK, &set, NULL);
        raise(SIGINT);
        execl(bin, bin, "serve", "--socket", sock, "--cache-dir", cache, (char *)NULL);
        _exit(127);
    }
    CHECK_EQ_INT(exit_within_30s(pid, "a SIGINT pending at start-up: the server ran on"), 0);
    CHECK(access(sock, F_OK) != 0);
}

/* SIGTERM and SIGINT early in a client's first compile (an empty cache):
 * libnvrtc replaced the process's handlers while the process's first
 * compile ran, so a handler-based server died there (no reply, the socket
 * left behind); now that compile runs at start-up and the signals are read
 * from a signalfd: the compile's reply comes, exit 0. Then two signals in a
 * row: the second ends the process at once. */
static void test_signal_first_compile(const char *cache_base)
{
    static const int sigs[3] = {SIGTERM, SIGINT, SIGTERM};
    /* SIGINT 1 ms in: libnvrtc's first compile sets SIGINT to SIG_IGN for a
     * moment, discarding a pending one (the server then never stopped) when
     * a client's compile was the process's first. */
    const int delays_us[3] = {5000, 1000, 20000};
    for (int k = 0; k < 4; ++k) {
        char sock[4200], cache[4300];
        snprintf(sock, sizeof sock, "%s/first%d/kjit.sock", tmp, k);
        snprintf(cache, sizeof cache, "%s-%d", cache_base, k); /* empty: the compile runs NVRTC */
        pid_t pid = kjit_test_serve(sock, cache, NULL);
        int fd = greeted(sock);
        kjit_test_frame(fd, "{\"id\":3,\"type\":\"compile\",\"op\":\"timestep_sinusoid\",\"hidden\":256,"
                      "\"dtype\":\"bf16\"}", NULL, 0);
        if (k < 3) {
            usleep((useconds_t)delays_us[k]);
            kill(pid, sigs[k]);
            /* Answered: done if its compile had started, else cancelled. */
            cJSON *r = kjit_test_reply(fd, 60000);
            CHECK(r && (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")) ||
                        !strcmp(kjit_test_err_code(r), "shutting_down")));
            cJSON_Delete(r);
            close(fd);
            CHECK_EQ_INT(exit_within_30s(pid, sigs[k] == SIGINT ? "SIGINT during the first compile: the server hung"
                                                                : "SIGTERM during the first compile: the server hung"),
                         0);
            CHECK(access(sock, F_OK) != 0);
        } else {
            usleep(5000);
            kill(pid, SIGTERM);
            usleep(2000);
            kill(pid, SIGTERM);
            int st = 0;
            waitpid(pid, &st, 0);
            /* Drained within the 2 ms (exit 0) or ended at once by the second
             * signal (128 + SIGTERM), never by a crash or a handler's exit. */
            CHECK_EQ_INT(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 128 + SIGTERM), 1);
            close(fd);
        }
    }
}

/* A second SIGTERM while an idle server stops: before the loop has read
 * the first it merges with it (exit 0); in the loop it ends the process at
 * once (143); in the teardown after the loop it found the default action
 * (death by SIGTERM) or a handler libnvrtc had left, and now the server's
 * own handler (143); after the exit it finds nothing (0). The teardown
 * lasts a fraction of a ms, so the delays sweep 0 to 4 ms in 40 us steps:
 * with the binary before the handler, 8 and 5 of the 100 died by the
 * signal on the build machine. Never a death by the signal, never another
 * status. */
static void test_signal_teardown(const char *cache)
{
    char sock[4200];
    snprintf(sock, sizeof sock, "%s/teardown/kjit.sock", tmp);
    int n0 = 0, n143 = 0, bad = 0;
    for (int i = 0; i < 100; ++i) {
        pid_t pid = kjit_test_serve(sock, cache, NULL);
        if (pid <= 0) { /* kill(-1, ...) would signal every process of the user */
            CHECK(pid > 0);
            return;
        }
        kill(pid, SIGTERM);
        usleep((useconds_t)(40 * i));
        kill(pid, SIGTERM);
        int st = 0;
        waitpid(pid, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) n0++;
        else if (WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGTERM) n143++;
        else {
            fprintf(stderr, "two SIGTERMs %d us apart: %s %d\n", 40 * i, WIFEXITED(st) ? "exit status" : "killed by signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            bad++;
        }
    }
    printf("two SIGTERMs 0..4 ms apart, 100 servers: %d exit 0, %d exit 143, %d otherwise\n", n0, n143, bad);
    CHECK_EQ_INT(bad, 0);
}

int main(void)
{
    const char *bin = getenv("KJIT_BIN");
    if (!bin) {
        fprintf(stderr, "test_server: set KJIT_BIN to the kjit binary\n");
        return 1;
    }
    kjit_runtime_info ri;
    if (kjit_runtime_info_get(&ri) || !ri.nvrtc_major) {
        printf("test_server: no NVRTC, skipped\n");
        return 77;
    }
    tmp = kjit_test_tmpdir();
    char sock[4200], cache[4200];
    snprintf(sock, sizeof sock, "%s/main/kjit.sock", tmp);
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    pid_t pid = kjit_test_serve(sock, cache, NULL);
    test_round_trips(sock);
    test_bad_input(sock);
    test_big_ids(sock);
    test_concurrent(sock);
    test_single_flight(sock);
    test_disconnect(sock);
    test_kernel_leave(sock);
    test_compile_leave(sock);
    test_prewarm_leave(sock);
    test_half_close_partial(sock);
    test_compile_fair(sock);
    test_half_close(sock);
    test_closed_while_paused(sock);
    /* Every connection is gone but the stats client's own. */
    double clients = -1;
    for (int i = 0; i < 40 && clients != 1; ++i) {
        clients = kjit_test_stat(sock, "clients");
        if (clients != 1) usleep(50000);
    }
    CHECK_EQ_INT(clients, 1);
    CHECK_EQ_INT(kjit_test_serve_stop(pid), 0);
    CHECK(access(sock, F_OK) != 0);

    test_limits(cache);
    test_peer_refusal(cache);
    snprintf(cache, sizeof cache, "%s/cache-term", tmp);
    test_sigterm(cache);
    test_sigterm_kernels(cache);
    test_shutdown_pipelined(cache);
    snprintf(cache, sizeof cache, "%s/cache-memo", tmp);
    test_memo_bound(cache);
    test_prewarm_share(cache);
    test_event_backlog(cache);
    snprintf(cache, sizeof cache, "%s/cache-first", tmp);
    test_first_compile_dispositions(cache);
    test_signal_at_start(cache);
    test_signal_first_compile(cache);
    test_signal_teardown(cache);
    kjit_test_rmtree(tmp);
    free(tmp);
    return kjit_test_result("test_server");
}
