/* NVRTC, loaded with dlopen: $KJIT_NVRTC_LIBRARY, else libnvrtc.so.13, .12,
 * .so, then the same names under /usr/local/cuda/lib64. */
#ifndef KJIT_NVRTC_API_H
#define KJIT_NVRTC_API_H

#include <nvrtc.h>
#include <stddef.h>

#define KJIT_NVRTC_FUNCS(XX)                              \
    XX(Version, nvrtcVersion)                             \
    XX(GetErrorString, nvrtcGetErrorString)               \
    XX(GetNumSupportedArchs, nvrtcGetNumSupportedArchs)   \
    XX(GetSupportedArchs, nvrtcGetSupportedArchs)         \
    XX(CreateProgram, nvrtcCreateProgram)                 \
    XX(DestroyProgram, nvrtcDestroyProgram)               \
    XX(AddNameExpression, nvrtcAddNameExpression)         \
    XX(CompileProgram, nvrtcCompileProgram)               \
    XX(GetProgramLogSize, nvrtcGetProgramLogSize)         \
    XX(GetProgramLog, nvrtcGetProgramLog)                 \
    XX(GetCUBINSize, nvrtcGetCUBINSize)                   \
    XX(GetCUBIN, nvrtcGetCUBIN)                           \
    XX(GetLoweredName, nvrtcGetLoweredName)

typedef struct kjit_nvrtc_api {
#define KJIT_NVRTC_FIELD(name, sym) __typeof__(&sym) name;
    KJIT_NVRTC_FUNCS(KJIT_NVRTC_FIELD)
#undef KJIT_NVRTC_FIELD
    int major, minor;
    int archs[64]; /* supported sm numbers, ascending */
    int n_archs;
    char path[256]; /* the library that was loaded */
} kjit_nvrtc_api;

/* Thread-safe, loads once. NULL with KJIT_ENONVRTC set when not found. */
const kjit_nvrtc_api *kjit__nvrtc(void);

/* dlopen of each name in order; the first that loads is returned, its name
 * copied to path. NULL when none loads, with `broken` holding the dlopen
 * message of each that exists but could not be loaded ("; " between them;
 * empty when every one was simply missing). For the loader above and its
 * test. */
void *kjit__nvrtc_open_list(const char *const *names, size_t n_names, char *path, size_t path_size,
                            char *broken, size_t broken_size);

/* Compiles an empty program, so that libnvrtc's once-per-process signal
 * handling (nvrtc_api.c says what it does) happens now. */
int kjit__nvrtc_warm(void);

#endif
