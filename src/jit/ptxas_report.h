/* NVRTC's ptxas resource report (-Xptxas=-v) for kernels of one template:
 * registers and spill bytes per entry, no GPU needed. For tests and the
 * spill report (bench/spill_report.c); kjit's own compiles do not ask for it. */
#ifndef KJIT_PTXAS_REPORT_H
#define KJIT_PTXAS_REPORT_H

typedef struct kjit_ptxas_stats {
    int registers;
    long spill_stores, spill_loads; /* bytes */
} kjit_ptxas_stats;

/* Compiles the n name expressions of template_name in one program for
 * sm_<sm> with kjit's options and fills out[i] for names[i]. KJIT_ECOMPILE
 * with the log when the compile fails or the report lacks an entry. */
int kjit__ptxas_report(const char *template_name, const char *const *names, int n, int sm, kjit_ptxas_stats *out);

#endif
