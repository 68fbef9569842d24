/* kjit serve's run and tune requests as far as a machine without a GPU can
 * take them: every malformed run refused with bad_request naming the field
 * (the connection and the server stay up: a ping after each), well-formed
 * runs and a tune answered unsupported naming the missing GPU, the C
 * client's statuses, the counters, a clean stop. On a machine with a GPU the
 * well-formed runs fail in the driver instead (their handles are made up)
 * and tuning is left to tests/gpu/test_server_ipc.c. Runs $KJIT_BIN. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kjit_client.h"
#include "server_util.h"
#include "test_util.h"

/* The JSON of the cases below is written with ' for ": this makes it JSON. */
static char *json_of(const char *text)
{
    char *s = strdup(text);
    for (char *p = s; *p; ++p)
        if (*p == '\'') *p = '"';
    return s;
}

#define NM "'op':'norm_modulate','hidden':5376,'dtype':'bf16','n':4097,'rows':9"
#define NM_BUFS                                                                                              \
    "{'name':'x','handle':0,'stride':5376},{'name':'shift','handle':1,'stride':32256},"                      \
    "{'name':'scale','handle':1,'offset':10752,'stride':32256},{'name':'out','handle':2,'stride':5376}"
#define IDX "{'name':'index','handle':3}"
#define RUN(fields, bufs, tail) "{'id':1,'type':'run'," fields ",'buffers':[" bufs "]" tail "}"
/* A well-formed norm_modulate forward: 5 records, the last the event. */
#define NM_RUN(tail) RUN(NM, NM_BUFS "," IDX, ",'event':4" tail)
#define GR "'op':'gated_residual','hidden':5376,'dtype':'bf16','n':4097,'rows':9"
#define GATHER "'op':'adaln_row_gather','hidden':5376,'dtype':'bf16','n':4097,'rows':9"
#define FU "'op':'gated_residual_norm_modulate','hidden':5376,'dtype':'bf16','n':4097,'rows':9"
#define SIN "'op':'timestep_sinusoid','hidden':256,'dtype':'fp32','n':64"

typedef struct run_case {
    const char *json;
    uint32_t payload; /* bytes (of 0x01) */
    const char *code;
    const char *mention;
} run_case;

static const run_case bad_runs[] = {
    {RUN("'op':'nope','hidden':5376,'dtype':'bf16','n':4097,'rows':9", NM_BUFS "," IDX, ",'event':4"), 320,
     "unknown_op", "nope"},
    {RUN(NM, NM_BUFS "," IDX ",{'name':'dgate','handle':0,'stride':5376}", ""), 320, "bad_request", "'dgate'"},
    {RUN(NM, NM_BUFS, ""), 320, "bad_request", "'index' is missing"},
    {RUN(NM, IDX ",{'name':'x','handle':0,'stride':5376}", ""), 320, "bad_request", "'shift' is missing"},
    {RUN(NM, NM_BUFS "," IDX "," IDX, ""), 320, "bad_request", "'index' appears twice"},
    {RUN(NM, NM_BUFS ",{'name':'index','handle':7}", ""), 320, "bad_request", "buffer 'index': field 'handle'"},
    {RUN(NM, NM_BUFS ",{'name':'index','handle':-1}", ""), 320, "bad_request", "field 'handle'"},
    {RUN(NM, NM_BUFS ",{'name':'index','handle':1.5}", ""), 320, "bad_request", "field 'handle'"},
    {RUN(NM, NM_BUFS ",{'name':'index'}", ""), 320, "bad_request", "field 'handle'"},
    {RUN(NM, NM_BUFS "," IDX, ""), 0, "bad_request", "no payload"},
    {NM_RUN(""), 100, "bad_request", "64-byte"},
    {NM_RUN(""), 321, "bad_request", "64-byte"},
    {RUN("'op':'norm_modulate','hidden':5376,'dtype':'bf16','n':1000000000000,'rows':9", NM_BUFS "," IDX, ""), 320,
     "bad_request", "'n'"},
    {RUN("'op':'norm_modulate','hidden':5376,'dtype':'bf16','n':-1,'rows':9", NM_BUFS "," IDX, ""), 320,
     "bad_request", "'n'"},
    {RUN("'op':'norm_modulate','hidden':5376,'dtype':'bf16','n':'4097','rows':9", NM_BUFS "," IDX, ""), 320,
     "bad_request", "'n'"},
    {RUN("'op':'norm_modulate','hidden':5376,'dtype':'bf16','rows':9", NM_BUFS "," IDX, ""), 320, "bad_request", "'n'"},
    {RUN("'op':'norm_modulate','hidden':1048576,'dtype':'bf16','n':4097,'rows':9", NM_BUFS "," IDX, ""), 320,
     "bad_request", "'hidden'"},
    {RUN("'op':'norm_modulate','hidden':0,'dtype':'bf16','n':4097,'rows':9", NM_BUFS "," IDX, ""), 320,
     "bad_request", "'hidden'"},
    {RUN("'op':'norm_modulate','hidden':5376,'n':4097,'rows':9", NM_BUFS "," IDX, ""), 320, "bad_request", "'dtype'"},
    {RUN("'op':'norm_modulate','hidden':5376,'dtype':'bf16','n':4097,'rows':0", NM_BUFS "," IDX, ""), 320,
     "bad_request", "'rows'"},
    {RUN("'op':'norm_modulate','hidden':5376,'dtype':'bf16','n':4097,'rows':70000", NM_BUFS "," IDX, ""), 320,
     "bad_request", "'rows'"},
    {RUN("'op':'norm_modulate','hidden':5376,'dtype':'bf16','n':4097", NM_BUFS "," IDX, ""), 320, "bad_request",
     "'rows'"},
    {RUN(NM, NM_BUFS ",{'name':'../index','handle':3}", ""), 320, "bad_request", "'name'"},
    {RUN(NM, NM_BUFS ",{'name':'index/..','handle':3}", ""), 320, "bad_request", "'/'"},
    {RUN("'op':'../norm_modulate','hidden':5376,'dtype':'bf16','n':4097,'rows':9", NM_BUFS "," IDX, ""), 320,
     "bad_request", "'op'"},
    {NM_RUN(",'dir':'../bwd'"), 320, "bad_request", "'dir'"},
    {NM_RUN(",'dir':'sideways'"), 320, "bad_request", "'dir'"},
    {NM_RUN(",'dir':1"), 320, "bad_request", "'dir'"},
    {NM_RUN(",'arch':'sm_90'"), 320, "bad_request", "'arch'"},
    {NM_RUN(",'params':{}"), 320, "bad_request", "'params'"},
    {NM_RUN(",'eps':'small'"), 320, "bad_request", "'eps'"},
    {NM_RUN(",'index_dtype':'fp32'"), 320, "bad_request", "'index_dtype'"},
    {NM_RUN(",'param_dtype':'int8'"), 320, "bad_request", "field 'param_dtype': dtype 'int8'"},
    {NM_RUN(",'flip_sin_to_cos':true"), 320, "bad_request", "'flip_sin_to_cos'"},
    {RUN(NM, NM_BUFS "," IDX, ",'event':5"), 320, "bad_request", "'event'"},
    {RUN(NM, NM_BUFS "," IDX, ",'event':2"), 320, "bad_request", "'event'"},
    {RUN(NM, NM_BUFS "," IDX, ",'event':'last'"), 320, "bad_request", "'event'"},
    {RUN(NM, NM_BUFS ",{'name':'index','handle':3,'stride':1}", ""), 320, "bad_request", "'stride'"},
    {RUN(NM, "{'name':'x','handle':0},{'name':'shift','handle':1,'stride':32256},{'name':'scale','handle':1,'stride':"
             "32256},{'name':'out','handle':2,'stride':5376}," IDX, ""), 320, "bad_request", "'stride'"},
    {RUN(NM, "{'name':'x','handle':0,'stride':0},{'name':'shift','handle':1,'stride':32256},{'name':'scale','handle':"
             "1,'stride':32256},{'name':'out','handle':2,'stride':5376}," IDX, ""), 320, "bad_request", "'stride'"},
    {RUN(NM, "{'name':'x','handle':0,'stride':5376,'offset':-2},{'name':'shift','handle':1,'stride':32256},{'name':"
             "'scale','handle':1,'stride':32256},{'name':'out','handle':2,'stride':5376}," IDX, ""), 320,
     "bad_request", "'offset'"},
    {RUN(NM, "{'name':'x','handle':0,'stride':5376,'offset':1125899906842624},{'name':'shift','handle':1,'stride':"
             "32256},{'name':'scale','handle':1,'stride':32256},{'name':'out','handle':2,'stride':5376}," IDX, ""),
     320, "bad_request", "'offset'"},
    /* 2^48: "below 2^48" (PROTOCOL.md) */
    {RUN(NM, "{'name':'x','handle':0,'stride':5376,'offset':281474976710656},{'name':'shift','handle':1,'stride':"
             "32256},{'name':'scale','handle':1,'stride':32256},{'name':'out','handle':2,'stride':5376}," IDX, ""),
     320, "bad_request", "'offset'"},
    {RUN(NM, NM_BUFS ",{'name':'index','handle':3,'bytes':16}", ""), 320, "bad_request", "'bytes'"},
    {RUN(NM, NM_BUFS ",{'name':'index','handle':3,'handle':3}", ""), 320, "bad_request", "twice"},
    {RUN(NM, NM_BUFS ",{'handle':3}", ""), 320, "bad_request", "'name'"},
    {RUN(NM, NM_BUFS ",3", ""), 320, "bad_request", "'buffers'"},
    {RUN(NM, "", ""), 320, "bad_request", "'buffers'"},
    {"{'id':1,'type':'run'," NM ",'buffers':{'x':{'handle':0}}}", 320, "bad_request", "'buffers'"},
    {"{'id':1,'type':'run'," NM "}", 320, "bad_request", "'buffers'"},
    /* norm_modulate's backward takes no shift; gated_residual no eps; the
     * sinusoid has no backward, rows or weight. */
    {NM_RUN(",'dir':'bwd'"), 320, "bad_request", "'shift'"},
    {RUN(GR ",'eps':1e-6", "{'name':'res','handle':0,'stride':5376}", ""), 320, "bad_request", "'eps'"},
    {RUN(GR, "{'name':'res','handle':0,'stride':5376},{'name':'y','handle':0,'stride':5376},{'name':'out','handle':2,"
             "'stride':5376}," IDX, ""), 320, "bad_request", "'gate' is missing"},
    {RUN(SIN ",'dir':'bwd'", "{'name':'t','handle':0}", ""), 64, "bad_request", "'dir'"},
    {RUN(SIN ",'rows':9", "{'name':'t','handle':0}", ""), 64, "bad_request", "'rows'"},
    {RUN(SIN ",'max_period':1e300", "{'name':'t','handle':0}", ""), 64, "bad_request",
     "'max_period': expected a finite number of magnitude at most 1e30"},
    {RUN(SIN, "{'name':'t','handle':0},{'name':'weight','handle':0}", ""), 64, "bad_request", "'weight'"},
    {RUN(SIN, "{'name':'t','handle':0}", ""), 64, "bad_request", "'out' is missing"},
    /* adaln_row_gather: table<k>/out<k> pairs for k = 0..K-1. */
    {RUN(GATHER, "{'name':'index','handle':0},{'name':'table0','handle':1,'stride':5376},{'name':'out1','handle':2,"
                 "'stride':5376}", ""), 192, "bad_request", "'table1' is missing"},
    {RUN(GATHER, "{'name':'index','handle':0},{'name':'table0','handle':1,'stride':5376}", ""), 192, "bad_request",
     "'out0' is missing"},
    {RUN(GATHER, "{'name':'index','handle':0}", ""), 192, "bad_request", "'table0' is missing"},
    {RUN(GATHER, "{'name':'index','handle':0},{'name':'dout0','handle':1,'stride':5376}", ""), 192, "bad_request",
     "'dout0'"},
    {RUN(GATHER, "{'name':'index','handle':0},{'name':'table8','handle':1,'stride':5376}", ""), 192, "bad_request",
     "'table8'"},
    {RUN(GATHER ",'eps':1e-6", "{'name':'index','handle':0}", ""), 192, "bad_request", "'eps'"},
    {RUN(GATHER ",'param_dtype':'bf16'", "{'name':'index','handle':0}", ""), 192, "bad_request", "'param_dtype'"},
    /* tune: what it takes. */
    {"{'id':1,'type':'tune','op':'timestep_sinusoid','hidden':256,'dtype':'bf16'}", 0, "bad_request", "'op'"},
    {"{'id':1,'type':'tune','op':'norm_modulate','hidden':5377,'dtype':'bf16'}", 0, "unsupported", "'hidden'"},
    {"{'id':1,'type':'tune','op':'norm_modulate','hidden':5376,'dtype':'bf16','arch':'sm_90'}", 0, "bad_request",
     "'arch'"},
    {"{'id':1,'type':'tune','op':'norm_modulate','hidden':5376,'dtype':'bf16'}", 64, "bad_request", "payload"},
    {"{'id':1,'type':'tune','op':'nope','hidden':5376,'dtype':'bf16'}", 0, "unknown_op", "nope"},
};

/* Well-formed: the ops, both directions, with and without an event. */
static const struct {
    const char *json;
    uint32_t payload;
} good_runs[] = {
    {NM_RUN(""), 320},
    {NM_RUN(",'eps':1e-5,'param_dtype':'fp32','index_dtype':'int64'"), 320},
    {RUN(NM ",'dir':'bwd'", "{'name':'x','handle':0,'stride':5376},{'name':'scale','handle':1,'stride':32256},"
                            "{'name':'dout','handle':0,'offset':64,'stride':5376},{'name':'dx','handle':2,'stride':"
                            "5376},{'name':'dshift','handle':1,'stride':5376},{'name':'dscale','handle':1,'stride':"
                            "5376},{'name':'weight','handle':2},{'name':'dweight','handle':2}," IDX, ",'event':4"),
     320},
    /* The row gradients alone: no parameter gradient (gated_residual and the
     * fused op: no y). */
    {RUN(NM ",'dir':'bwd'", "{'name':'x','handle':0,'stride':5376},{'name':'scale','handle':1,'stride':32256},"
                            "{'name':'dout','handle':0,'offset':64,'stride':5376},{'name':'dx','handle':2,'stride':"
                            "5376}," IDX, ""),
     320},
    {RUN(FU ",'dir':'bwd'", "{'name':'x','handle':0,'stride':5376},{'name':'gate','handle':1,'stride':32256},"
                            "{'name':'scale','handle':1,'stride':32256},{'name':'dout','handle':0,'stride':5376},"
                            "{'name':'dx','handle':2,'stride':5376},{'name':'dy','handle':2,'stride':5376}," IDX, ""),
     320},
    {RUN(GR ",'dir':'bwd'", "{'name':'gate','handle':1,'stride':32256},{'name':'dout','handle':0,'stride':5376},"
                            "{'name':'dy','handle':2,'stride':5376}," IDX, ""),
     320},
    {RUN(GR, "{'name':'res','handle':0,'stride':5376},{'name':'y','handle':0,'stride':5376},{'name':'gate','handle':1,"
             "'stride':5376},{'name':'out','handle':2,'stride':5376}," IDX, ""), 256},
    {RUN(GATHER, "{'name':'index','handle':0},{'name':'table0','handle':1,'stride':5376},{'name':'out0','handle':2,"
                 "'stride':5376},{'name':'table1','handle':1,'offset':10752,'stride':5376},{'name':'out1','handle':2,"
                 "'stride':5376}", ",'event':3"), 256},
    {RUN(SIN ",'flip_sin_to_cos':true,'max_period':100", "{'name':'t','handle':0},{'name':'out','handle':1,'stride':"
                                                          "300}", ""), 128},
};

static cJSON *send_case(int fd, const char *text, uint32_t payload)
{
    static uint8_t ones[512];
    memset(ones, 1, sizeof ones);
    char *json = json_of(text);
    kjit_test_frame(fd, json, ones, payload);
    free(json);
    return kjit_test_reply(fd, 10000);
}

static void test_bad_runs(const char *sock)
{
    int fd = kjit_test_connect(sock);
    kjit_test_frame(fd, "{\"id\":0,\"type\":\"hello\"}", NULL, 0);
    cJSON_Delete(kjit_test_reply(fd, 10000));
    for (size_t i = 0; i < sizeof bad_runs / sizeof bad_runs[0]; ++i) {
        const run_case *k = &bad_runs[i];
        cJSON *r = send_case(fd, k->json, k->payload);
        if (!r || strcmp(kjit_test_err_code(r), k->code) || !strstr(kjit_test_err_msg(r), k->mention)) {
            char *t = r ? cJSON_PrintUnformatted(r) : NULL;
            fprintf(stderr, "case %zu %s (%u bytes): want %s naming \"%s\", got %s\n", i, k->json, k->payload, k->code,
                    k->mention, t ? t : "(nothing)");
            free(t);
            kjit_test_failures++;
        }
        cJSON_Delete(r);
        /* The connection and the server stay up. */
        kjit_test_frame(fd, "{\"id\":77,\"type\":\"ping\"}", NULL, 0);
        r = kjit_test_reply(fd, 10000);
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")) && kjit_test_num(r, "id") == 77);
        cJSON_Delete(r);
    }
    close(fd);
}

static void test_good_runs(const char *sock, int gpu)
{
    int fd = kjit_test_connect(sock);
    kjit_test_frame(fd, "{\"id\":0,\"type\":\"hello\"}", NULL, 0);
    cJSON_Delete(kjit_test_reply(fd, 10000));
    for (size_t i = 0; i < sizeof good_runs / sizeof good_runs[0]; ++i) {
        cJSON *r = send_case(fd, good_runs[i].json, good_runs[i].payload);
        /* No GPU: unsupported, naming it. A GPU: the made-up handles fail
         * in the driver (or a refused argument), never a crash. */
        int ok = r && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")) &&
                 (gpu ? strcmp(kjit_test_err_code(r), "unsupported") != 0
                      : !strcmp(kjit_test_err_code(r), "unsupported") && strstr(kjit_test_err_msg(r), "no GPU"));
        if (!ok) {
            char *t = r ? cJSON_PrintUnformatted(r) : NULL;
            fprintf(stderr, "good run %zu %s: got %s\n", i, good_runs[i].json, t ? t : "(nothing)");
            free(t);
            kjit_test_failures++;
        }
        cJSON_Delete(r);
        kjit_test_frame(fd, "{\"id\":77,\"type\":\"ping\"}", NULL, 0);
        r = kjit_test_reply(fd, 10000);
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")));
        cJSON_Delete(r);
    }
    close(fd);
}

/* The same run text with a new id (the loop's parsed-request memo) gets the
 * answer a full parse gives, with its own id; a different payload length,
 * one changed byte or an id the memo does not take (a leading zero, past
 * 2^53) are parsed on their own. 6 of the 8 reach dispatch as runs. */
/* Runs refused before hello are neither run_requests nor memo hits, even
 * when the second repeats the first's text with a new id (the memo keeps
 * the text; its hit is counted only where the run is dispatched). */
static void test_memo_before_hello(const char *sock)
{
    int fd = kjit_test_connect(sock);
    char *base = json_of(NM_RUN(""));
    const char *rest = base + strlen("{\"id\":1,");
    static uint8_t ones[320];
    memset(ones, 1, sizeof ones);
    char text[4096];
    for (int k = 0; k < 3; ++k) {
        snprintf(text, sizeof text, "{\"id\":%d,%s", 300 + k, rest);
        kjit_test_frame(fd, text, ones, sizeof ones);
        cJSON *r = kjit_test_reply(fd, 10000);
        CHECK(r && !strcmp(kjit_test_err_code(r), "out_of_order"));
        cJSON_Delete(r);
    }
    close(fd);
    free(base);
}

static void test_memo(const char *sock)
{
    int fd = kjit_test_connect(sock);
    kjit_test_frame(fd, "{\"id\":0,\"type\":\"hello\"}", NULL, 0);
    cJSON_Delete(kjit_test_reply(fd, 10000));
    char *base = json_of(NM_RUN("")); /* {"id":1,"type":"run",... */
    const char *rest = base + strlen("{\"id\":1,");
    static uint8_t ones[320];
    memset(ones, 1, sizeof ones);
    char text[4096];
    cJSON *first = NULL;
    char *first_code = NULL, *first_msg = NULL;
    for (int k = 0; k < 8; ++k) {
        uint32_t payload = 320;
        const char *want = NULL; /* NULL: the first reply's code and message */
        const char *mention = "";
        unsigned long long id = 100 + (unsigned)k;
        switch (k) {
        case 3: payload = 256; want = "bad_request"; mention = "'event'"; break; /* 4 records: event 4 is past them */
        case 5: want = "bad_json"; mention = "leading zero"; break; /* {"id":0105,...: not the memo's form, nor JSON */
        case 6: id = 9007199254740993ull; want = "bad_request"; mention = "'id'"; break;
        default: break;
        }
        if (k == 5) snprintf(text, sizeof text, "{\"id\":0%llu,%s", id, rest);
        else snprintf(text, sizeof text, "{\"id\":%llu,%s", id, rest);
        if (k == 4) { /* one byte changed: n 4097 -> 4098 still parses, and is its own request */
            char *n = strstr(text, "4097");
            n[3] = '8';
        }
        kjit_test_frame(fd, text, ones, payload);
        cJSON *r = kjit_test_reply(fd, 10000);
        const char *code = r ? kjit_test_err_code(r) : "", *msg = r ? kjit_test_err_msg(r) : "";
        if (k == 0) {
            first = r;
            first_code = strdup(code);
            first_msg = strdup(msg);
            CHECK(r && kjit_test_num(r, "id") == 100);
            continue;
        }
        int ok = r != NULL;
        if (ok && want) ok = !strcmp(code, want) && strstr(msg, mention) != NULL;
        else if (ok && k != 4) ok = !strcmp(code, first_code) && !strcmp(msg, first_msg);
        if (ok && k != 6 && k != 5) ok = kjit_test_num(r, "id") == (double)id;
        if (!ok) {
            char *t = r ? cJSON_PrintUnformatted(r) : NULL;
            fprintf(stderr, "memo case %d: got %s (first: %s %s)\n", k, t ? t : "(nothing)", first_code, first_msg);
            free(t);
            kjit_test_failures++;
        }
        cJSON_Delete(r);
    }
    cJSON_Delete(first);
    free(first_code);
    free(first_msg);
    free(base);
    close(fd);
}

static void test_client(const char *sock, int gpu)
{
    kjit_client *c;
    CHECK_STATUS(kjit_client_connect(&c, sock, 30000), KJIT_OK);
    if (!c) return;
    uint8_t handles[5 * 64];
    memset(handles, 1, sizeof handles);
    char *good = json_of(NM_RUN("")), *bad = json_of(RUN(NM, NM_BUFS, ""));
    double us = -1;
    if (!gpu) {
        /* Twice: the second time the client sends the text it kept. */
        for (int i = 0; i < 2; ++i) {
            CHECK_STATUS(kjit_client_run(c, good, handles, 5, &us), KJIT_EUNSUPPORTED);
            CHECK(strstr(kjit_last_error(), "no GPU") != NULL);
        }
        CHECK_STATUS(kjit_client_tune(c, "norm_modulate", 5376, KJIT_BF16, NULL), KJIT_EUNSUPPORTED);
        CHECK(strstr(kjit_last_error(), "no GPU") != NULL);
    } else {
        /* Made-up handles: the driver refuses them (a CUDA error, or the
         * record names no allocation). */
        CHECK(kjit_client_run(c, good, handles, 5, &us) != KJIT_OK);
    }
    CHECK_STATUS(kjit_client_run(c, bad, handles, 5, &us), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "'index' is missing") != NULL);
    CHECK_STATUS(kjit_client_run(c, good, handles, 4, &us), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "'event'") != NULL);
    CHECK_STATUS(kjit_client_run(c, good, NULL, 5, &us), KJIT_EINVAL);
    CHECK_STATUS(kjit_client_run(c, good, handles, 65, &us), KJIT_EINVAL);
    CHECK_STATUS(kjit_client_run(c, "[1]", handles, 5, &us), KJIT_EINVAL);
    CHECK_STATUS(kjit_client_tune(c, "timestep_sinusoid", 256, KJIT_BF16, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "'op'") != NULL);
    CHECK_STATUS(kjit_client_tune(c, "norm_modulate", 5377, KJIT_BF16, NULL), KJIT_EUNSUPPORTED);
    /* JSON whitespace around and inside an object (pretty-printed): the
     * request still goes out whole. Text after the object is refused (only
     * the object went out), and so are the other control bytes cJSON would
     * skip as whitespace: not JSON, which the server refuses too. */
    static const char *const not_json[] = {"\f{\"type\":\"ping\"}", "{\"type\":\"ping\"}\x01",
                                           "{\"type\":\"ping\"}\f", "{\x01}"};
    for (size_t i = 0; i < 2 * sizeof not_json / sizeof not_json[0]; ++i) {
        kjit_client_reply rep = {0};
        CHECK_STATUS(kjit_client_request(c, not_json[i / 2], NULL, 0, NULL, NULL, &rep), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "control byte outside a string") != NULL);
    }
    static const char *const odd[] = {"\n {\n  \"type\" : \"ping\"\n}\n", "\r\n{\"type\":\"ping\"}\t", "{}",
                                      " { \t} "};
    for (int i = 0; i < 2; ++i) {
        kjit_client_reply rep = {0};
        CHECK_STATUS(kjit_client_request(c, "{\"type\":\"ping\"} trailing", NULL, 0, NULL, NULL, &rep), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "text after its JSON object: trailing") != NULL);
    }
    /* Each twice: the client keeps the last text it spliced and sends the
     * same one again without a parse (its reply still carries its own id). */
    for (size_t i = 0; i < 2 * sizeof odd / sizeof odd[0]; ++i) {
        kjit_client_reply rep = {0};
        CHECK_STATUS(kjit_client_request(c, odd[i / 2], NULL, 0, NULL, NULL, &rep), KJIT_OK);
        const int want_ok = i / 2 < 2; /* {} has no type: the server says so */
        if (rep.json && (rep.ok != want_ok || (!want_ok && !strstr(rep.json, "type")))) {
            fprintf(stderr, "odd text %zu: %s\n", i / 2, rep.json);
            kjit_test_failures++;
        }
        kjit_client_reply_free(&rep);
    }
    for (int i = 0; i < 2; ++i) {
        CHECK_STATUS(kjit_client_run(c, "[1]", handles, 5, &us), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "not a JSON object") != NULL);
    }
    /* A run's "type" is the client's to set. */
    char *typed = json_of("{'type':'ping','op':'nope'}");
    CHECK_STATUS(kjit_client_run(c, typed, NULL, 0, &us), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "nope") != NULL);
    free(typed);
    free(good);
    free(bad);
    kjit_client_close(c);
}

int main(void)
{
    if (!getenv("KJIT_BIN")) {
        fprintf(stderr, "test_server_run: set KJIT_BIN to the kjit binary\n");
        return 1;
    }
    char *tmp = kjit_test_tmpdir();
    char sock[4200], cache[4200];
    snprintf(sock, sizeof sock, "%s/kjit.sock", tmp);
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    pid_t pid = kjit_test_serve(sock, cache, NULL);

    kjit_client *c;
    int gpu = 0;
    CHECK_STATUS(kjit_client_connect(&c, sock, 30000), KJIT_OK);
    if (c) {
        cJSON *h = cJSON_Parse(kjit_client_hello(c));
        gpu = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(h, "gpu"));
        int caps = 0;
        cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(h, "capabilities"))
            caps += !strcmp(it->valuestring, "run") || !strcmp(it->valuestring, "tune");
        CHECK_EQ_INT(caps, gpu ? 2 : 0);
        CHECK_EQ_INT(kjit_test_num(cJSON_GetObjectItemCaseSensitive(h, "limits"), "max_run_buffers"), 32);
        cJSON_Delete(h);
        kjit_client_close(c);
    }
    test_bad_runs(sock);
    test_good_runs(sock, gpu);
    test_memo_before_hello(sock);
    test_memo(sock);
    test_client(sock, gpu);
    /* Counted: every well-formed run and tune that reached dispatch. */
    CHECK_EQ_INT(kjit_test_stat(sock, "run_requests"), sizeof good_runs / sizeof good_runs[0] + 1 + 5 + !gpu);
    /* test_memo's texts 1 and 2 repeat text 0 with new ids: the memo's hits. */
    CHECK_EQ_INT(kjit_test_stat(sock, "run_memo_hits"), 2);
    CHECK_EQ_INT(kjit_test_stat(sock, "tune_requests"), gpu ? 0 : 1);
    CHECK_EQ_INT(kjit_test_serve_stop(pid), 0);
    kjit_test_rmtree(tmp);
    free(tmp);
    return kjit_test_result("test_server_run");
}
