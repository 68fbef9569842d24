/* Registers and spill bytes of every kernel an op uses at its default
 * config (NVRTC's ptxas report; no GPU needed): what a hidden size or dtype
 * the benchmark does not time would run with. A kernel that spills in its
 * row loop is usually far slower than its bytes allow.
 *
 *   bench_spills [--ops LIST] [--hidden LIST] [--dtype LIST] [--arch sm_N] [--spills-only] [--space]
 * --ops: AdaLN op names (default the three norm / gated ops), --hidden:
 * hidden sizes (default 3072,4096,5120,5376,6144,8192), --dtype: activation
 * dtypes fp32, bf16, fp16 (default all three), --arch (default sm_90),
 * --spills-only: print only the kernels that spill, --space: every forward
 * and backward candidate of the tuning space (norm / gated ops) instead of
 * the default's kernels. Exit 0, 1 when a compile failed, 2 on bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/compile.h"
#include "jit/ptxas_report.h"
#include "kjit.h"
#include "tune/config.h"

#define MAXL 16

static const char *usage =
    "usage: bench_spills [--ops LIST] [--hidden LIST] [--dtype LIST] [--arch sm_N] [--spills-only] [--space]\n"
    "Registers and spill bytes of each op's kernels at the default config (NVRTC, no GPU).\n"
    "  --ops LIST     norm_modulate, gated_residual, gated_residual_norm_modulate, adaln_row_gather\n"
    "                 (default: the first three)\n"
    "  --hidden LIST  hidden sizes, 1..16384 (default: 3072,4096,5120,5376,6144,8192)\n"
    "  --dtype LIST   activation dtypes fp32, bf16, fp16 (default: all three)\n"
    "  --arch sm_N    target (default: sm_90)\n"
    "  --spills-only  print only the kernels that spill\n"
    "  --space        every forward and backward candidate of the tuning space\n"
    "                 (norm_modulate, gated_residual, the fused op), with its config\n";

/* Splits a comma list into at most MAXL items (in place); an empty item
 * ("a,,b", a trailing comma) is an error. */
static int split(char *s, char **out, const char *opt)
{
    int n = 0;
    for (char *t = s;; ++n) {
        char *c = strchr(t, ',');
        if (c) *c = 0;
        if (!*t) {
            fprintf(stderr, "bench_spills: %s: empty item in the list\n", opt);
            return -1;
        }
        if (n == MAXL) {
            fprintf(stderr, "bench_spills: %s: at most %d items\n", opt, MAXL);
            return -1;
        }
        out[n] = t;
        if (!c) return n + 1;
        t = c + 1;
    }
}

typedef struct tally {
    int only, failed, total, spilling;
} tally;

/* Compiles the n names of template tf in one program and prints a line per
 * kernel; label[k] (may be NULL) is printed before the kernel's name. */
static void report(const char *op, int h, kjit_dtype dt, const char *tf, const char **names, const char **label, int n,
                   int sm, tally *t)
{
    kjit_ptxas_stats st[KJIT_TUNE_MAX_FWD + KJIT_TUNE_MAX_BWD + 64], cal;
    if (kjit__ptxas_report(tf, names, n, sm, st, &cal) != KJIT_OK) {
        fprintf(stderr, "bench_spills: %s %d %s: %s\n", op, h, kjit_dtype_name(dt), kjit_last_error());
        t->failed = 1;
        return;
    }
    for (int k = 0; k < n; ++k) {
        const int spills = st[k].spill_stores > 0 || st[k].spill_loads > 0;
        ++t->total;
        t->spilling += spills;
        if (!t->only || spills)
            printf("%-28s %6d %5s %4d %8ld %8ld  %s%s\n", op, h, kjit_dtype_name(dt), st[k].registers,
                   st[k].spill_stores, st[k].spill_loads, label && label[k] ? label[k] : "", names[k]);
    }
    /* __noinline__ callees (the training forward's partition build) have
     * blocks of their own: their spills are not in any entry's line. */
    if (cal.spill_stores > 0 || cal.spill_loads > 0)
        printf("%-28s %6d %5s %4s %8ld %8ld  (callees of the %d kernels above)\n", op, h, kjit_dtype_name(dt), "-",
               cal.spill_stores, cal.spill_loads, n);
}

/* The default config's kernels, one program per template file as kjit
 * compiles them, each kernel once. */
static void report_default(const char *op, int h, kjit_dtype dt, int sm, tally *t)
{
    kjit_kernel_spec specs[64];
    int count = 0;
    if (kjit_op_kernels(op, h, dt, specs, 64, &count) != KJIT_OK) {
        fprintf(stderr, "bench_spills: %s: %s\n", op, kjit_last_error());
        t->failed = 1;
        return;
    }
    if (count > 64) {
        fprintf(stderr, "bench_spills: %s %d %s: %d kernels, the first 64 reported\n", op, h, kjit_dtype_name(dt),
                count);
        count = 64;
    }
    for (int i = 0; i < count; ++i) {
        if (!specs[i].template_file) continue;
        const char *tf = specs[i].template_file, *names[64];
        int n = 0;
        for (int j = i; j < count; ++j) {
            if (!specs[j].template_file || strcmp(specs[j].template_file, tf)) continue;
            int dup = 0;
            for (int k = 0; k < n; ++k) dup |= !strcmp(names[k], specs[j].name_expr);
            if (!dup) names[n++] = specs[j].name_expr;
            specs[j].template_file = NULL;
        }
        report(op, h, dt, tf, names, NULL, n, sm, t);
    }
}

/* Every forward and backward candidate of the tuning space, labelled with
 * its config. */
static void report_space(const char *op, int h, kjit_dtype dt, int sm, tally *t)
{
    const int mode = kjit__adaln_mode(op);
    if (!kjit__adaln_fast_hidden(h)) {
        printf("# %s %d %s: not a tuned hidden size (the generic path runs the default)\n", op, h,
               kjit_dtype_name(dt));
        return;
    }
    kjit_adaln_config f[KJIT_TUNE_MAX_FWD], b[KJIT_TUNE_MAX_BWD];
    const int nf = kjit__adaln_space_fwd(mode, h, dt, f), nb = kjit__adaln_space_bwd(mode, h, dt, 0, b);
    enum { LEN = 512 };
    static char exprs[KJIT_TUNE_MAX_FWD + KJIT_TUNE_MAX_BWD][LEN], labels[KJIT_TUNE_MAX_FWD + KJIT_TUNE_MAX_BWD][48];
    const char *names[KJIT_TUNE_MAX_FWD + KJIT_TUNE_MAX_BWD], *lab[KJIT_TUNE_MAX_FWD + KJIT_TUNE_MAX_BWD];
    char other[LEN];
    int n = 0;
    for (int i = 0; i < nf; ++i, ++n) {
        kjit__adaln_exprs(mode, h, dt, &f[i], exprs[n], other, LEN);
        snprintf(labels[n], sizeof labels[n], "fwd rpc %d pf %d grid %d: ", f[i].rpc, f[i].pf, f[i].grid_per_sm);
    }
    for (int i = 0; i < nb; ++i, ++n) {
        kjit__adaln_exprs(mode, h, dt, &b[i], other, exprs[n], LEN);
        snprintf(labels[n], sizeof labels[n], "bwd bwd_pf %d accs %d: ", b[i].bwd_pf, b[i].accs);
    }
    /* grid_per_sm is a launch parameter: configs that differ only there
     * share a kernel, listed once under the first. */
    int m = 0;
    for (int i = 0; i < n; ++i) {
        int dup = 0;
        for (int k = 0; k < m; ++k) dup |= !strcmp(names[k], exprs[i]);
        if (!dup) names[m] = exprs[i], lab[m++] = labels[i];
    }
    report(op, h, dt, "adaln.cuh", names, lab, m, sm, t);
}

int main(int argc, char **argv)
{
    char dops[] = "norm_modulate,gated_residual,gated_residual_norm_modulate", dhid[] = "3072,4096,5120,5376,6144,8192",
         ddt[] = "fp32,bf16,fp16";
    char *ops_s = dops, *hid_s = dhid, *dt_s = ddt;
    const char *arch = "sm_90";
    int only = 0, space = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--spills-only")) {
            only = 1;
        } else if (!strcmp(a, "--space")) {
            space = 1;
        } else if ((!strcmp(a, "--ops") || !strcmp(a, "--hidden") || !strcmp(a, "--dtype") || !strcmp(a, "--arch"))) {
            if (i + 1 >= argc) {
                fprintf(stderr, "bench_spills: %s needs a value\n%s", a, usage);
                return 2;
            }
            char *v = argv[++i];
            if (!strcmp(a, "--ops")) ops_s = v;
            else if (!strcmp(a, "--hidden")) hid_s = v;
            else if (!strcmp(a, "--dtype")) dt_s = v;
            else arch = v;
        } else {
            fprintf(stderr, "bench_spills: unknown option '%s'\n%s", a, usage);
            return 2;
        }
    }
    char *ops[MAXL], *hid[MAXL], *dts[MAXL];
    int no = split(ops_s, ops, "--ops"), nh = split(hid_s, hid, "--hidden"), nd = split(dt_s, dts, "--dtype");
    if (no < 0 || nh < 0 || nd < 0) return 2;
    int hv[MAXL];
    kjit_dtype dv[MAXL];
    for (int i = 0; i < no; ++i) {
        const int adaln = kjit__adaln_mode(ops[i]) > 0 && strcmp(ops[i], "fused");
        if (!adaln && strcmp(ops[i], "adaln_row_gather")) {
            fprintf(stderr, "bench_spills: --ops: '%s' is not an AdaLN op\n", ops[i]);
            return 2;
        }
        if (space && !adaln) {
            fprintf(stderr, "bench_spills: --space: '%s' has no tuning space (norm / gated ops only)\n", ops[i]);
            return 2;
        }
    }
    for (int i = 0; i < nh; ++i) {
        char *end = NULL;
        long v = hid[i][0] >= '1' && hid[i][0] <= '9' ? strtol(hid[i], &end, 10) : 0;
        if (!end || *end || v < 1 || v > 16384) {
            fprintf(stderr, "bench_spills: --hidden: '%s' is not a hidden size in 1..16384\n", hid[i]);
            return 2;
        }
        hv[i] = (int)v;
    }
    for (int i = 0; i < nd; ++i) {
        if (!strcmp(dts[i], "fp32")) dv[i] = KJIT_F32;
        else if (!strcmp(dts[i], "bf16")) dv[i] = KJIT_BF16;
        else if (!strcmp(dts[i], "fp16")) dv[i] = KJIT_F16;
        else {
            fprintf(stderr, "bench_spills: --dtype: '%s' is not fp32, bf16 or fp16\n", dts[i]);
            return 2;
        }
    }
    int sm = 0, rc = kjit__arch_parse(arch, &sm);
    if (rc == KJIT_ENONVRTC) {
        fprintf(stderr, "bench_spills: %s\n", kjit_last_error());
        return 1;
    }
    if (rc) {
        fprintf(stderr, "bench_spills: --arch: %s\n", kjit_last_error());
        return 2;
    }
    printf("%-28s %6s %5s %4s %8s %8s  %s\n", "op", "hidden", "dtype", "regs", "spill_st", "spill_ld",
           space ? "candidate: kernel" : "kernel");
    tally t = {.only = only};
    for (int o = 0; o < no; ++o)
        for (int h = 0; h < nh; ++h)
            for (int d = 0; d < nd; ++d)
                (space ? report_space : report_default)(ops[o], hv[h], dv[d], sm, &t);
    printf("# %d kernels, %d spill (sm_%d)\n", t.total, t.spilling, sm);
    return t.failed;
}
