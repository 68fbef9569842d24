/* Versions, archs and devices, for `kjit info` and callers picking an arch. */
#include <string.h>

#include "core/error.h"
#include "gpu/cuda_api.h"
#include "jit/nvrtc_api.h"
#include "kjit.h"

int kjit_runtime_info_get(kjit_runtime_info *out)
{
    kjit__clear_error();
    if (!out) return kjit__fail(KJIT_EINVAL, "kjit_runtime_info_get: out is NULL");
    memset(out, 0, sizeof *out);
    const kjit_nvrtc_api *nv = kjit__nvrtc();
    if (nv) {
        out->nvrtc_major = nv->major;
        out->nvrtc_minor = nv->minor;
        memcpy(out->nvrtc_path, nv->path, sizeof out->nvrtc_path);
        out->n_archs = nv->n_archs;
        memcpy(out->archs, nv->archs, sizeof out->archs);
    }
    const kjit_cu_api *cu = kjit__cu();
    if (cu) {
        out->driver_version = cu->driver_version;
        if (cu->DeviceGetCount(&out->device_count) != CUDA_SUCCESS) out->device_count = 0;
    }
    kjit__clear_error();
    return KJIT_OK;
}

int kjit_device_info_get(int ordinal, kjit_device_info *out)
{
    kjit__clear_error();
    if (!out) return kjit__fail(KJIT_EINVAL, "kjit_device_info_get: out is NULL");
    const kjit_cu_api *cu = kjit__cu();
    if (!cu) return KJIT_ENODRIVER;
    int count = 0;
    KJIT_CU_TRY(cu, DeviceGetCount(&count), "cuDeviceGetCount");
    if (ordinal < 0 || ordinal >= count)
        return kjit__fail(KJIT_EINVAL, "device %d: %d CUDA device(s) present", ordinal, count);
    CUdevice dev;
    int major = 0, minor = 0;
    size_t mem = 0;
    kjit_device_info d;
    memset(&d, 0, sizeof d);
    KJIT_CU_TRY(cu, DeviceGet(&dev, ordinal), "cuDeviceGet");
    KJIT_CU_TRY(cu, DeviceGetName(d.name, sizeof d.name, dev), "cuDeviceGetName");
    KJIT_CU_TRY(cu, DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute");
    KJIT_CU_TRY(cu, DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute");
    KJIT_CU_TRY(cu, DeviceGetAttribute(&d.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute");
    KJIT_CU_TRY(cu, DeviceTotalMem(&mem, dev), "cuDeviceTotalMem");
    d.memory_bytes = mem;
    d.sm = major * 10 + minor;
    *out = d;
    return KJIT_OK;
}
