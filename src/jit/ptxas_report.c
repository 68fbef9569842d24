#include "ptxas_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "jit/compile.h"
#include "jit/nvrtc_api.h"
#include "jit/templates.h"

/* A function's block in a ptxas -v log:
 *   ptxas info    : Function properties for <lowered>
 *   ptxas         .     0 bytes stack frame, 20 bytes spill stores, 20 bytes spill loads
 *   ptxas info    : Used 72 registers, ...          (entries only)
 * Reads the block whose name starts at name (ending at its newline) into
 * st; returns the end of the block, NULL when its lines are not there. */
static const char *number_before(const char *line, const char *next, const char *what, long *v)
{
    const char *s = strstr(line, what);
    if (!s || s > next) return NULL;
    const char *a = s;
    while (a > line && a[-1] >= '0' && a[-1] <= '9') --a;
    if (a == s) return NULL;
    *v = strtol(a, NULL, 10);
    return s;
}

static const char *parse_block(const char *name, kjit_ptxas_stats *st)
{
    const char *line = strchr(name, '\n');
    if (!line) return NULL;
    const char *next = strchr(++line, '\n');
    if (!next) next = line + strlen(line);
    if (!number_before(line, next, " bytes stack frame", &st->stack_frame) ||
        !number_before(line, next, " bytes spill stores", &st->spill_stores) ||
        !number_before(line, next, " bytes spill loads", &st->spill_loads))
        return NULL;
    st->registers = -1;
    const char *u = *next ? strstr(next + 1, "Used ") : NULL, *f = *next ? strstr(next + 1, "Function properties") : NULL;
    if (u && (!f || u < f) && sscanf(u, "Used %d registers", &st->registers) != 1) st->registers = -1;
    return next;
}

static const char head[] = "Function properties for ";

/* The entry lowered's block; -1 when absent or without its register line. */
static int parse_entry(const char *log, const char *lowered, kjit_ptxas_stats *st)
{
    const size_t hl = sizeof head - 1, ll = strlen(lowered);
    for (const char *p = strstr(log, head); p; p = strstr(p + 1, head)) {
        p += hl;
        if (strncmp(p, lowered, ll) != 0 || p[ll] != '\n') continue;
        return parse_block(p, st) && st->registers >= 0 ? 0 : -1;
    }
    return -1;
}

/* Sums the blocks of functions that are none of the n entries. */
static void parse_callees(const char *log, const char *const *lowered, int n, kjit_ptxas_stats *sum)
{
    *sum = (kjit_ptxas_stats){.registers = -1};
    for (const char *p = strstr(log, head); p; p = strstr(p + 1, head)) {
        p += sizeof head - 1;
        const char *nl = strchr(p, '\n');
        if (!nl) break;
        int entry = 0;
        for (int i = 0; i < n && !entry; ++i)
            entry = lowered[i] && strlen(lowered[i]) == (size_t)(nl - p) && !strncmp(p, lowered[i], (size_t)(nl - p));
        kjit_ptxas_stats st;
        if (entry || !parse_block(p, &st)) continue;
        sum->stack_frame += st.stack_frame;
        sum->spill_stores += st.spill_stores;
        sum->spill_loads += st.spill_loads;
    }
}

int kjit__ptxas_report(const char *template_name, const char *const *names, int n, int sm, kjit_ptxas_stats *out,
                       kjit_ptxas_stats *callees)
{
    if (!template_name || !names || n < 1 || !out)
        return kjit__fail(KJIT_EINVAL, "ptxas report: %s", !template_name ? "template_name is NULL"
                                                            : !names ? "names is NULL"
                                                            : n < 1 ? "no names"
                                                                    : "out is NULL");
    for (int i = 0; i < n; ++i)
        if (!names[i]) return kjit__fail(KJIT_EINVAL, "ptxas report: names[%d] is NULL", i);
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
    for (int i = 0; i < n; ++i)
        if ((r = nv->AddNameExpression(prog, names[i])) != NVRTC_SUCCESS) {
            nv->DestroyProgram(&prog);
            return kjit__fail(KJIT_ECOMPILE, "ptxas report: nvrtcAddNameExpression(%s): %s", names[i],
                              nv->GetErrorString(r));
        }
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
    /* The log's start names the first error; kjit's messages hold ~4 KB. */
    if (r != NVRTC_SUCCESS) {
        rc = kjit__fail(KJIT_ECOMPILE, "ptxas report: nvrtcCompileProgram (%d names, the first %s) for sm_%d: %s\n%.2000s",
                        n, names[0], sm, nv->GetErrorString(r), log);
    } else {
        const char **low = calloc((size_t)n, sizeof *low);
        if (!low) rc = kjit__fail(KJIT_ENOMEM, "ptxas report: out of memory");
        for (int i = 0; i < n && !rc; ++i) {
            const char *l = NULL;
            if (nv->GetLoweredName(prog, names[i], &l) != NVRTC_SUCCESS || !l || parse_entry(log, l, &out[i]))
                rc = kjit__fail(KJIT_ECOMPILE, "ptxas report: no resource lines for %s in the log:\n%.2000s", names[i],
                                log);
            low[i] = l;
        }
        if (!rc && callees) parse_callees(log, low, n, callees);
        free(low);
    }
    free(log);
    nv->DestroyProgram(&prog);
    return rc;
}
