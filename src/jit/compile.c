#include "compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/error.h"
#include "jit/nvrtc_api.h"
#include "jit/templates.h"

int kjit__arch_parse(const char *text, int *sm)
{
    if (!text || !*text) return kjit__fail(KJIT_EINVAL, "arch: empty (expected e.g. sm_90)");
    const char *p = text;
    if (strncmp(p, "sm_", 3) == 0) p += 3;
    else if (strncmp(p, "sm", 2) == 0) p += 2;
    char *end = NULL;
    /* Digits only, no leading zero (strtol alone would take " 90", "+90"
     * and any number of zeros). */
    long v = *p >= '1' && *p <= '9' ? strtol(p, &end, 10) : 0;
    if (end == p || !end || *end || v <= 0 || v > 10000)
        return kjit__fail(KJIT_EINVAL, "arch '%s': expected sm_<number>, e.g. sm_90 or sm_100", text);
    const kjit_nvrtc_api *nv = kjit__nvrtc();
    if (!nv) return KJIT_ENONVRTC;
    for (int i = 0; i < nv->n_archs; ++i)
        if (nv->archs[i] == v) {
            *sm = (int)v;
            return KJIT_OK;
        }
    char list[512] = "";
    for (int i = 0; i < nv->n_archs; ++i) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%ssm_%d", i ? ", " : "", nv->archs[i]);
    }
    return kjit__fail(KJIT_EINVAL, "arch '%s': NVRTC %d.%d does not support it (supported: %s)",
                      text, nv->major, nv->minor, list);
}

int kjit__arch_runs_on(int sm, int dev_sm)
{
    return sm > 0 && dev_sm > 0 && sm / 10 == dev_sm / 10 && sm % 10 <= dev_sm % 10;
}

int kjit__arch_for_device(int dev_sm, const int *archs, int n_archs)
{
    int best = 0;
    for (int i = 0; i < n_archs; ++i) {
        if (archs[i] == dev_sm) return dev_sm;
        if (kjit__arch_runs_on(archs[i], dev_sm) && archs[i] > best) best = archs[i];
    }
    return best ? best : dev_sm;
}

int kjit__jit_options(int sm, char buf[64], const char *opts[KJIT_MAX_OPTIONS])
{
    snprintf(buf, 64, "--gpu-architecture=sm_%d", sm);
    int n = 0;
    opts[n++] = buf;
    opts[n++] = "-std=c++17";
    opts[n++] = "-default-device";
    opts[n++] = "-DKJIT_NVRTC=1";
    /* Includes come from the templates alone: without this NVRTC also
     * searches the directory of the source, the process's working
     * directory for our unrooted names, and a file found there is not in
     * the cache key. */
    opts[n++] = "-no-source-include";
    /* KJIT_LINEINFO=1: source lines in the cubin, for compute-sanitizer and
     * profilers. It is an option like the others, so it is part of the key. */
    int li = 0; /* (checked when a context is created; anything else: off) */
    (void)kjit__env_switch_parse("KJIT_LINEINFO", 0, &li);
    if (li) opts[n++] = "-lineinfo";
    return n;
}

int kjit__jit_compile(const char *template_name, const char *name_expr, int sm,
                      char **lowered, void **cubin, size_t *cubin_len)
{
    char arch_buf[64];
    const char *opts[KJIT_MAX_OPTIONS];
    const int n_opts = kjit__jit_options(sm, arch_buf, opts);
    return kjit__jit_compile_with(template_name, name_expr, sm, opts, n_opts, lowered, cubin, cubin_len);
}

int kjit__jit_compile_with(const char *template_name, const char *name_expr, int sm, const char *const *opts,
                           int n_opts, char **lowered, void **cubin, size_t *cubin_len)
{
    const kjit_nvrtc_api *nv = kjit__nvrtc();
    if (!nv) return KJIT_ENONVRTC;
    const kjit_template_file *all;
    int n_all, rc = kjit__templates(&all, &n_all);
    if (rc) return rc;
    const kjit_template_file *main_file = NULL;
    rc = kjit__template_find(template_name, &main_file);
    if (rc) {
        char why[KJIT__ERROR_MAX];
        snprintf(why, sizeof why, "%s", kjit_last_error());
        return kjit__fail(rc, "%s for sm_%d: %s", name_expr, sm, why);
    }

    /* Every other template is offered as an includable header. */
    const char **hdr = malloc(sizeof *hdr * (size_t)n_all * 2);
    if (!hdr) return kjit__fail(KJIT_ENOMEM, "out of memory compiling %s", name_expr);
    const char **hdr_names = hdr + n_all;
    int n_hdr = 0;
    for (int i = 0; i < n_all; ++i) {
        if (&all[i] == main_file) continue;
        hdr[n_hdr] = all[i].text;
        hdr_names[n_hdr++] = all[i].name;
    }

    nvrtcProgram prog = NULL;
    nvrtcResult r = nv->CreateProgram(&prog, main_file->text, main_file->name, n_hdr, hdr, hdr_names);
    free(hdr);
    if (r != NVRTC_SUCCESS)
        return kjit__fail(KJIT_ECOMPILE, "%s for sm_%d (%s): nvrtcCreateProgram: %s", name_expr, sm, template_name,
                          nv->GetErrorString(r));
    r = nv->AddNameExpression(prog, name_expr);
    if (r != NVRTC_SUCCESS) {
        nv->DestroyProgram(&prog);
        return kjit__fail(KJIT_ECOMPILE, "%s for sm_%d (%s): nvrtcAddNameExpression: %s", name_expr, sm,
                          template_name, nv->GetErrorString(r));
    }
    r = nv->CompileProgram(prog, n_opts, (const char **)opts);
    if (r != NVRTC_SUCCESS) {
        size_t log_size = 0;
        char *log = nv->GetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS ? malloc(log_size + 1) : NULL;
        if (log && nv->GetProgramLog(prog, log) == NVRTC_SUCCESS) {
            log[log_size] = '\0';
        } else {
            free(log);
            log = NULL;
        }
        rc = kjit__fail(KJIT_ECOMPILE, "%s for sm_%d (%s): %s\n%s", name_expr, sm, template_name,
                        nv->GetErrorString(r), log ? log : "(no log)");
        free(log);
        nv->DestroyProgram(&prog);
        return rc;
    }
    const char *low = NULL;
    size_t size = 0;
    rc = KJIT_OK;
    if (nv->GetLoweredName(prog, name_expr, &low) != NVRTC_SUCCESS || !low ||
        nv->GetCUBINSize(prog, &size) != NVRTC_SUCCESS || size == 0) {
        rc = kjit__fail(KJIT_ECOMPILE, "%s for sm_%d: NVRTC produced no cubin or lowered name",
                        name_expr, sm);
    } else {
        *lowered = strdup(low);
        *cubin = malloc(size);
        nvrtcResult g = NVRTC_SUCCESS;
        if (!*lowered || !*cubin || (g = nv->GetCUBIN(prog, *cubin)) != NVRTC_SUCCESS) {
            free(*lowered);
            free(*cubin);
            *lowered = NULL;
            *cubin = NULL;
            rc = g != NVRTC_SUCCESS ? kjit__fail(KJIT_ECOMPILE, "%s for sm_%d: nvrtcGetCUBIN: %s", name_expr, sm,
                                                 nv->GetErrorString(g))
                                    : kjit__fail(KJIT_ENOMEM, "%s for sm_%d: no memory for its %zu-byte cubin",
                                                 name_expr, sm, size);
        } else {
            *cubin_len = size;
        }
    }
    nv->DestroyProgram(&prog);
    return rc;
}
