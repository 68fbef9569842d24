/* kjit info: versions, archs and GPUs. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"
#include "gpu/cuda_api.h"
#include "jit/nvrtc_api.h"
#include "kjit.h"

static const char help[] =
    "usage: kjit info [--json]\n"
    "\n"
    "Prints kjit's version, the NVRTC library and version (or why it is\n"
    "missing), the archs it can target, the CUDA driver version and the GPUs\n"
    "seen. Works without a GPU.\n";

int kjit_cli_info(int argc, char **argv)
{
    int json = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else {
            return kjit_cli_unknown("info", argv[i]);
        }
    }
    kjit_runtime_info ri;
    kjit_runtime_info_get(&ri);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kjit", KJIT_VERSION_STRING);
    char nv[32];
    snprintf(nv, sizeof nv, "%d.%d", ri.nvrtc_major, ri.nvrtc_minor);
    cJSON_AddStringToObject(o, "nvrtc", ri.nvrtc_major ? nv : "not found");
    cJSON_AddStringToObject(o, "nvrtc_library", ri.nvrtc_path);
    /* Why NVRTC is missing (a KJIT_NVRTC_LIBRARY that does not load, or
     * none found): named, not only "not found". */
    char why[KJIT__ERROR_MAX] = "";
    if (!ri.nvrtc_major && !kjit__nvrtc()) snprintf(why, sizeof why, "%s", kjit_last_error());
    if (why[0]) cJSON_AddStringToObject(o, "nvrtc_error", why);
    cJSON *archs = cJSON_AddArrayToObject(o, "archs");
    for (int i = 0; i < ri.n_archs; ++i) {
        char a[16];
        snprintf(a, sizeof a, "sm_%d", ri.archs[i]);
        cJSON_AddItemToArray(archs, cJSON_CreateString(a));
    }
    char drv[32];
    snprintf(drv, sizeof drv, "%d.%d", ri.driver_version / 1000, (ri.driver_version % 1000) / 10);
    cJSON_AddStringToObject(o, "driver", ri.driver_version ? drv : "none");
    /* Why there is none (no libcuda.so.1, one that lacks a function kjit
     * calls, cuInit failing): named, as NVRTC's is. */
    char drv_why[600] = "";
    if (!ri.driver_version && !kjit__cu()) snprintf(drv_why, sizeof drv_why, "%s", kjit_last_error());
    if (drv_why[0]) cJSON_AddStringToObject(o, "driver_error", drv_why);
    cJSON *gpus = cJSON_AddArrayToObject(o, "gpus");
    for (int i = 0; i < ri.device_count; ++i) {
        kjit_device_info d;
        if (kjit_device_info_get(i, &d)) continue;
        cJSON *g = cJSON_CreateObject();
        cJSON_AddNumberToObject(g, "ordinal", i);
        cJSON_AddStringToObject(g, "name", d.name);
        char a[16];
        snprintf(a, sizeof a, "sm_%d", d.sm);
        cJSON_AddStringToObject(g, "arch", a);
        cJSON_AddNumberToObject(g, "sms", d.sm_count);
        cJSON_AddNumberToObject(g, "memory_gib", (double)d.memory_bytes / (1u << 30));
        cJSON_AddItemToArray(gpus, g);
    }
    if (json) {
        kjit_cli_json_print(o);
        o = NULL;
    } else {
        printf("kjit     %s\n", KJIT_VERSION_STRING);
        printf("nvrtc    %s (%s)\n", ri.nvrtc_major ? nv : "not found", ri.nvrtc_path[0] ? ri.nvrtc_path : "-");
        if (why[0]) printf("         %s\n", why);
        printf("archs   ");
        for (int i = 0; i < ri.n_archs; ++i) printf(" sm_%d", ri.archs[i]);
        if (!ri.n_archs) printf(" none (no NVRTC to compile with)");
        printf("\ndriver   %s\n", ri.driver_version ? drv : "none (compile only)");
        if (drv_why[0]) printf("         %s\n", drv_why);
        cJSON *g;
        int k = 0;
        cJSON_ArrayForEach(g, gpus) {
            ++k; /* numbered by ordinal: a device whose query failed is not listed */
            printf("gpu %d    %s, %s, %d SMs, %.0f GiB\n", cJSON_GetObjectItem(g, "ordinal")->valueint,
                   cJSON_GetObjectItem(g, "name")->valuestring, cJSON_GetObjectItem(g, "arch")->valuestring,
                   cJSON_GetObjectItem(g, "sms")->valueint, cJSON_GetObjectItem(g, "memory_gib")->valuedouble);
        }
        if (!k) printf("gpus     none\n");
    }
    cJSON_Delete(o);
    return 0;
}
