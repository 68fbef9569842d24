#include "ptxas_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "jit/compile.h"
#include "jit/nvrtc_api.h"
#include "jit/templates.h"

/* The entry's lines in a ptxas -v log:
 *   ptxas info    : Function properties for <lowered>
 *   ptxas         .     0 bytes stack frame, 20 bytes spill stores, 20 bytes spill loads
 *   ptxas info    : Used 72 registers, ... */
static int parse_entry(const char *log, const char *lowered, kjit_ptxas_stats *st)
{
    const char *head = "Function properties for ";
    const size_t hl = strlen(head), ll = strlen(lowered);
    for (const char *p = strstr(log, head); p; p = strstr(p + 1, head)) {
        p += hl;
        if (strncmp(p, lowered, ll) != 0 || p[ll] != '\n') continue;
        const char *line = p + ll + 1, *next = strchr(line, '\n');
        if (!next) return -1;
        const char *s = strstr(line, " bytes spill stores"), *l = strstr(line, " bytes spill loads");
        if (!s || !l || s > next || l > next) return -1;
        const char *a = s, *b = l;
        while (a > line && a[-1] >= '0' && a[-1] <= '9') --a;
        while (b > line && b[-1] >= '0' && b[-1] <= '9') --b;
        st->spill_stores = strtol(a, NULL, 10);
        st->spill_loads = strtol(b, NULL, 10);
        const char *u = strstr(next + 1, "Used "), *end = strchr(next + 1, '\n');
        if (!u || (end && u > end) || sscanf(u, "Used %d registers", &st->registers) != 1) return -1;
        return 0;
    }
    return -1;
}

int kjit__ptxas_report(const char *template_name, const char *const *names, int n, int sm, kjit_ptxas_stats *out)
{
    if (!template_name || !names || n < 1 || !out)
        return kjit__fail(KJIT_EINVAL, "ptxas report: %s", !template_name ? "template_name is NULL"
                                                            : !names ? "names is NULL"
                                                            : n < 1 ? "no names"
                                                                    : "out is NULL");
    const kjit_nvrtc_api *nv = kjit__nvrtc();
    if (!nv) return KJIT_ENONVRTC;
    const kjit_template_file *all, *main_file;
    int n_all, rc = kjit__templates(&all, &n_all);
    if (rc || (rc = kjit__template_find(template_name, &main_file))) return rc;
    const char **hdr = malloc(sizeof *hdr * (size_t)n_all * 2);
    if (!hdr) return kjit__fail(KJIT_ENOMEM, "ptxas report: out of memory");
    const char **hdr_names = hdr + n_all;
    int n_hdr = 0;
    for (int i = 0; i < n_all; ++i)
        if (&all[i] != main_file) hdr[n_hdr] = all[i].text, hdr_names[n_hdr++] = all[i].name;
    nvrtcProgram prog = NULL;
    nvrtcResult r = nv->CreateProgram(&prog, main_file->text, main_file->name, n_hdr, hdr, hdr_names);
    free(hdr);
    if (r != NVRTC_SUCCESS)
        return kjit__fail(KJIT_ECOMPILE, "ptxas report: nvrtcCreateProgram: %s", nv->GetErrorString(r));
    for (int i = 0; i < n && r == NVRTC_SUCCESS; ++i) r = nv->AddNameExpression(prog, names[i]);
    char arch[64];
    const char *opts[KJIT_MAX_OPTIONS + 1];
    int n_opts = kjit__jit_options(sm, arch, opts);
    opts[n_opts++] = "-Xptxas=-v";
    if (r == NVRTC_SUCCESS) r = nv->CompileProgram(prog, n_opts, opts);
    size_t len = 0;
    nv->GetProgramLogSize(prog, &len);
    char *log = calloc(len + 1, 1);
    if (!log) {
        nv->DestroyProgram(&prog);
        return kjit__fail(KJIT_ENOMEM, "ptxas report: out of memory for the log");
    }
    nv->GetProgramLog(prog, log);
    if (r != NVRTC_SUCCESS) {
        rc = kjit__fail(KJIT_ECOMPILE, "ptxas report of %s for sm_%d: %s\n%s", names[0], sm, nv->GetErrorString(r), log);
    } else {
        for (int i = 0; i < n && !rc; ++i) {
            const char *low = NULL;
            if (nv->GetLoweredName(prog, names[i], &low) != NVRTC_SUCCESS || !low || parse_entry(log, low, &out[i]))
                rc = kjit__fail(KJIT_ECOMPILE, "ptxas report: no resource lines for %s in the log:\n%s", names[i], log);
        }
    }
    free(log);
    nv->DestroyProgram(&prog);
    return rc;
}
