/* The CUDA driver API, loaded with dlopen("libcuda.so.1") on first use, so
 * that the library, the CLI and the CPU tests run on machines with no GPU
 * driver. Only the prototypes come from the toolkit's cuda.h; every call goes
 * through this table. Versioned symbols (_v2) are named explicitly. */
#ifndef KJIT_CUDA_API_H
#define KJIT_CUDA_API_H

#include <cuda.h>

#define KJIT_CU_FUNCS(XX)                                   \
    XX(Init, cuInit)                                        \
    XX(DriverGetVersion, cuDriverGetVersion)                \
    XX(DeviceGet, cuDeviceGet)                              \
    XX(DeviceGetCount, cuDeviceGetCount)                    \
    XX(DeviceGetName, cuDeviceGetName)                      \
    XX(DeviceGetAttribute, cuDeviceGetAttribute)            \
    XX(DeviceTotalMem, cuDeviceTotalMem_v2)                 \
    XX(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)    \
    XX(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2) \
    XX(DevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState) \
    XX(CtxGetCurrent, cuCtxGetCurrent)                      \
    XX(CtxSetCurrent, cuCtxSetCurrent)                      \
    XX(CtxPushCurrent, cuCtxPushCurrent_v2)                 \
    XX(CtxPopCurrent, cuCtxPopCurrent_v2)                   \
    XX(CtxSynchronize, cuCtxSynchronize)                    \
    XX(ModuleLoadData, cuModuleLoadData)                    \
    XX(ModuleUnload, cuModuleUnload)                        \
    XX(ModuleGetFunction, cuModuleGetFunction)              \
    XX(FuncSetAttribute, cuFuncSetAttribute)                \
    XX(FuncGetAttribute, cuFuncGetAttribute)                \
    XX(LaunchKernel, cuLaunchKernel)                        \
    XX(GetErrorName, cuGetErrorName)                        \
    XX(GetErrorString, cuGetErrorString)                    \
    XX(MemAlloc, cuMemAlloc_v2)                             \
    XX(MemFree, cuMemFree_v2)                               \
    XX(MemcpyHtoD, cuMemcpyHtoD_v2)                         \
    XX(MemcpyDtoH, cuMemcpyDtoH_v2)                         \
    XX(MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2)               \
    XX(MemcpyDtoDAsync, cuMemcpyDtoDAsync_v2)               \
    XX(MemsetD8, cuMemsetD8_v2)                             \
    XX(MemsetD8Async, cuMemsetD8Async)                      \
    XX(MemsetD32Async, cuMemsetD32Async)                    \
    XX(StreamCreate, cuStreamCreate)                        \
    XX(StreamDestroy, cuStreamDestroy_v2)                   \
    XX(StreamSynchronize, cuStreamSynchronize)              \
    XX(StreamBeginCapture, cuStreamBeginCapture_v2)         \
    XX(StreamEndCapture, cuStreamEndCapture)                \
    XX(StreamIsCapturing, cuStreamIsCapturing)              \
    XX(GraphInstantiate, cuGraphInstantiateWithFlags)       \
    XX(GraphLaunch, cuGraphLaunch)                          \
    XX(GraphExecDestroy, cuGraphExecDestroy)                \
    XX(GraphDestroy, cuGraphDestroy)                        \
    XX(GraphGetNodes, cuGraphGetNodes)                      \
    XX(EventCreate, cuEventCreate)                          \
    XX(EventDestroy, cuEventDestroy_v2)                     \
    XX(EventRecord, cuEventRecord)                          \
    XX(EventSynchronize, cuEventSynchronize)                \
    XX(EventElapsedTime, cuEventElapsedTime_v2)             \
    XX(MemHostAlloc, cuMemHostAlloc)                        \
    XX(MemFreeHost, cuMemFreeHost)                          \
    XX(MemGetAddressRange, cuMemGetAddressRange_v2)         \
    XX(StreamWaitEvent, cuStreamWaitEvent)                  \
    XX(IpcGetMemHandle, cuIpcGetMemHandle)                  \
    XX(IpcOpenMemHandle, cuIpcOpenMemHandle_v2)             \
    XX(IpcCloseMemHandle, cuIpcCloseMemHandle)              \
    XX(IpcGetEventHandle, cuIpcGetEventHandle)              \
    XX(IpcOpenEventHandle, cuIpcOpenEventHandle)

typedef struct kjit_cu_api {
#define KJIT_CU_FIELD(name, sym) __typeof__(&sym) name;
    KJIT_CU_FUNCS(KJIT_CU_FIELD)
#undef KJIT_CU_FIELD
    /* Optional (NULL when the driver lacks it): launches with attributes,
     * used for programmatic dependent launch on sm_90+. */
    __typeof__(&cuLaunchKernelEx) LaunchKernelEx;
    int driver_version; /* e.g. 13000 */
} kjit_cu_api;

/* Loads libcuda and calls cuInit once (thread-safe). Returns the table, or
 * NULL with KJIT_ENODRIVER set as the thread's error (message: why). */
const kjit_cu_api *kjit__cu(void);

/* Formats a failed driver call as KJIT_ECUDA (KJIT_ENOMEM for
 * CUDA_ERROR_OUT_OF_MEMORY): "<what>: CUDA_ERROR_X (text)". */
int kjit__cu_fail(CUresult r, const char *what);

/* 1 when work on stream would be recorded into a CUDA graph rather than run
 * (the stream captures, or it is the legacy stream while a blocking stream
 * captures), with *which naming it for a message; else 0. */
int kjit__cu_capturing(const kjit_cu_api *cu, CUstream stream, const char **which);

#define KJIT_CU_TRY(api, call, what)                      \
    do {                                                  \
        CUresult kjit_r_ = (api)->call;                   \
        if (kjit_r_ != CUDA_SUCCESS) return kjit__cu_fail(kjit_r_, what); \
    } while (0)

#endif
