#include "cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

static kjit_cu_api api;
static int load_status = KJIT_OK;
static char load_message[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The name a driver before a symbol's version exported it under, with the
 * same prototype: cuEventElapsedTime_v2 came with CUDA 12.8 drivers, and
 * CUDA 12.0-12.6 drivers (535-560) have cuEventElapsedTime alone. */
static const char *older_name(const char *sym)
{
    return strcmp(sym, "cuEventElapsedTime_v2") ? NULL : "cuEventElapsedTime";
}

static void load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        load_status = KJIT_ENODRIVER;
        snprintf(load_message, sizeof load_message,
                 "no CUDA driver: libcuda.so.1 could not be loaded (%s)", dlerror());
        return;
    }
#define KJIT_CU_LOAD(name, sym)                                                          \
    api.name = (__typeof__(api.name))dlsym(h, #sym);                                     \
    if (!api.name && older_name(#sym))                                                   \
        api.name = (__typeof__(api.name))dlsym(h, older_name(#sym));                     \
    if (!api.name) {                                                                     \
        load_status = KJIT_ENODRIVER;                                                    \
        snprintf(load_message, sizeof load_message,                                      \
                 "no CUDA driver: libcuda.so.1 lacks %s (a driver older than CUDA 12)", #sym); \
        return;                                                                          \
    }
    KJIT_CU_FUNCS(KJIT_CU_LOAD)
#undef KJIT_CU_LOAD
    api.LaunchKernelEx = (__typeof__(api.LaunchKernelEx))dlsym(h, "cuLaunchKernelEx");
    CUresult r = api.Init(0);
    if (r != CUDA_SUCCESS) {
        const char *name = NULL;
        api.GetErrorName(r, &name);
        load_status = KJIT_ENODRIVER;
        snprintf(load_message, sizeof load_message,
                 "no CUDA driver: cuInit failed with %s (no usable GPU?)", name ? name : "?");
        return;
    }
    api.DriverGetVersion(&api.driver_version);
}

const kjit_cu_api *kjit__cu(void)
{
    pthread_once(&once, load);
    if (load_status != KJIT_OK) {
        kjit__fail(load_status, "%s", load_message);
        return NULL;
    }
    return &api;
}

int kjit__cu_capturing(const kjit_cu_api *cu, CUstream stream, const char **which)
{
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUresult cr = cu->StreamIsCapturing(stream, &cs);
    *which = cr == CUDA_SUCCESS ? "the stream" : "a stream the legacy stream waits on";
    return cr == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT || (cr == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE);
}

int kjit__cu_fail(CUresult r, const char *what)
{
    const char *name = NULL, *text = NULL;
    if (api.GetErrorName) api.GetErrorName(r, &name);
    if (api.GetErrorString) api.GetErrorString(r, &text);
    /* Out of device memory is the caller's to act on (free, shrink): its own status. */
    return kjit__fail(r == CUDA_ERROR_OUT_OF_MEMORY ? KJIT_ENOMEM : KJIT_ECUDA, "%s: %s (%s)", what,
                      name ? name : "CUDA error", text ? text : "no description");
}
