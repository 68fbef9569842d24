/* NVRTC's ptxas resource report (-Xptxas=-v) for kernels of one template:
 * registers and spill bytes per entry, no GPU needed. For tests and the
 * spill report (bench/bench_spills.c); kjit's own compiles do not ask for it. */
#ifndef KJIT_PTXAS_REPORT_H
#define KJIT_PTXAS_REPORT_H

typedef struct kjit_ptxas_stats {
    int registers;                  /* -1 for a callee block (ptxas gives none) */
    long stack_frame;               /* bytes */
    long spill_stores, spill_loads; /* bytes */
} kjit_ptxas_stats;

/* Compiles the n name expressions of template_name in one program for
 * sm_<sm> with kjit's options and fills out[i] for names[i] (the entry's own
 * block: a __noinline__ callee has a block of its own). When callees is
 * not NULL it gets the sums over the program's other function blocks (the
 * callees of all n entries; registers -1). KJIT_EINVAL naming a NULL
 * argument; KJIT_ECOMPILE naming the stage and the name, with the start of
 * the log, when a name is refused, the compile fails or the report lacks an
 * entry. */
int kjit__ptxas_report(const char *template_name, const char *const *names, int n, int sm, kjit_ptxas_stats *out,
                       kjit_ptxas_stats *callees);

#endif
