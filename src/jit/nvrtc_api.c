#include "nvrtc_api.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static kjit_nvrtc_api api;
static int load_status = KJIT_OK;
static char load_message[1024];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Whether dlopen's message for `name` says only that no such file exists
 * (glibc: "NAME: cannot open shared object file: <strerror(ENOENT)>", the
 * middle words translated under a translated locale, the end with them),
 * as against a library that exists and could not be loaded: another errno,
 * a bad ELF file, a missing dependency or symbol (those name the
 * dependency or the problem, not a missing NAME). */
static int missing_only(const char *name, const char *err)
{
    const size_t n = strlen(name), ne = strlen(err);
    const char *enoent = strerror(ENOENT);
    const size_t nz = strlen(enoent);
    return ne > n + 2 + nz && strncmp(err, name, n) == 0 && err[n] == ':' && err[n + 1] == ' ' &&
           strchr(err + n + 2, ':') == err + ne - nz - 2 && strcmp(err + ne - nz, enoent) == 0;
}

void *kjit__nvrtc_open_list(const char *const *names, size_t n_names, char *path, size_t path_size,
                            char *broken, size_t broken_size)
{
    size_t used = 0;
    if (broken_size) broken[0] = '\0';
    for (size_t i = 0; i < n_names; ++i) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            snprintf(path, path_size, "%s", names[i]);
            return h;
        }
        const char *err = dlerror();
        if (!err || missing_only(names[i], err) || used >= broken_size) continue;
        int k = snprintf(broken + used, broken_size - used, "%s%s", used ? "; " : "", err);
        if (k > 0) used += (size_t)k;
    }
    return NULL;
}

static void *open_first(void)
{
    static const char *const names[] = {
        "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
        "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12",
        "/usr/local/cuda/lib64/libnvrtc.so",
    };
    const char *env = getenv("KJIT_NVRTC_LIBRARY");
    if (env && *env) {
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        snprintf(api.path, sizeof api.path, "%s", env);
        if (!h)
            snprintf(load_message, sizeof load_message,
                     "KJIT_NVRTC_LIBRARY=%s could not be loaded (%s)", env, dlerror());
        return h;
    }
    char broken[768];
    void *h = kjit__nvrtc_open_list(names, sizeof names / sizeof names[0], api.path, sizeof api.path,
                                    broken, sizeof broken);
    if (!h)
        snprintf(load_message, sizeof load_message, "%s%s%s%s",
                 broken[0] ? "NVRTC could not be loaded: " : "NVRTC not found: ",
                 "tried libnvrtc.so.13, .12 and .so on the loader path and in /usr/local/cuda/lib64 "
                 "(install the CUDA toolkit or set KJIT_NVRTC_LIBRARY)",
                 broken[0] ? "; found but not loadable: " : "", broken);
    return h;
}

static void load(void)
{
    void *h = open_first();
    if (!h) {
        load_status = KJIT_ENONVRTC;
        return;
    }
#define KJIT_NVRTC_LOAD(name, sym)                                                       \
    api.name = (__typeof__(api.name))dlsym(h, #sym);                                     \
    if (!api.name) {                                                                     \
        load_status = KJIT_ENONVRTC;                                                     \
        snprintf(load_message, sizeof load_message, "%s lacks %s (NVRTC older than 11.2?)", \
                 api.path, #sym);                                                        \
        return;                                                                          \
    }
    KJIT_NVRTC_FUNCS(KJIT_NVRTC_LOAD)
#undef KJIT_NVRTC_LOAD
    /* A library that cannot say its version or its architectures is not
     * usable: without the list every arch would be refused as unsupported. */
    int n = 0;
    nvrtcResult r = api.Version(&api.major, &api.minor);
    const char *step = "nvrtcVersion";
    if (r == NVRTC_SUCCESS) step = "nvrtcGetNumSupportedArchs", r = api.GetNumSupportedArchs(&n);
    /* On the stack for any list NVRTC has had (a dozen): the load happens
     * once a process, so a transient failure of malloc here would leave
     * the process without NVRTC for good. */
    int small[256];
    int *all = r != NVRTC_SUCCESS || n <= 0 ? NULL : n <= 256 ? small : calloc((size_t)n, sizeof *all);
    if (r == NVRTC_SUCCESS && all) step = "nvrtcGetSupportedArchs", r = api.GetSupportedArchs(all);
    if (r != NVRTC_SUCCESS || !all) {
        load_status = KJIT_ENONVRTC;
        snprintf(load_message, sizeof load_message, "%s: %s %s", api.path, step,
                 r != NVRTC_SUCCESS ? "failed" : n > 0 ? "ran out of memory" : "lists no architecture");
        if (all != small) free(all);
        return;
    }
    /* Keep the newest that fit: the list is ascending. */
    const int cap = (int)(sizeof api.archs / sizeof api.archs[0]);
    const int skip = n > cap ? n - cap : 0;
    memcpy(api.archs, all + skip, sizeof *all * (size_t)(n - skip));
    api.n_archs = n - skip;
    if (all != small) free(all);
}

const kjit_nvrtc_api *kjit__nvrtc(void)
{
    pthread_once(&once, load);
    if (load_status != KJIT_OK) {
        kjit__fail(load_status, "%s", load_message);
        return NULL;
    }
    return &api;
}

/* libnvrtc's first compile in a process installs its own SIGINT and
 * SIGTERM handlers for the compile's length, and sets SIGINT to SIG_IGN on
 * the way (seen with strace; later compiles leave the handlers alone).
 * Setting SIG_IGN discards a pending SIGINT even where it is blocked, so a
 * process that takes its signals from a signalfd (`kjit serve`) can lose
 * one that arrives then. An empty program's compile does that first
 * compile now, at a moment the caller chooses. */
int kjit__nvrtc_warm(void)
{
    const kjit_nvrtc_api *n = kjit__nvrtc();
    if (!n) return load_status;
    nvrtcProgram p;
    nvrtcResult r = n->CreateProgram(&p, "", "kjit_warm.cu", 0, NULL, NULL);
    if (r != NVRTC_SUCCESS) return kjit__fail(KJIT_ECOMPILE, "nvrtcCreateProgram: %s", n->GetErrorString(r));
    r = n->CompileProgram(p, 0, NULL);
    n->DestroyProgram(&p);
    if (r != NVRTC_SUCCESS) return kjit__fail(KJIT_ECOMPILE, "nvrtcCompileProgram (empty program): %s", n->GetErrorString(r));
    return KJIT_OK;
}
