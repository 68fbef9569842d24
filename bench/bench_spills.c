/* Registers and spill bytes of every kernel an op uses at its default
 * config (NVRTC's ptxas report; no GPU needed): what a hidden size or dtype
 * the benchmark does not time would run with. A kernel that spills in its
 * row loop is usually far slower than its bytes allow.
 *
 *   bench_spills [--ops LIST] [--hidden LIST] [--dtype LIST] [--arch sm_N] [--spills-only]
 * --ops: AdaLN op names (default the three norm / gated ops), --hidden:
 * hidden sizes (default 3072,4096,5120,5376,6144,8192), --dtype: activation
 * dtypes fp32, bf16, fp16 (default all three), --arch (default sm_90),
 * --spills-only: print only the kernels that spill. Exit 0, 1 when a compile
 * failed, 2 on bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/compile.h"
#include "jit/ptxas_report.h"
#include "kjit.h"

#define MAXL 16

static const char *usage =
    "usage: bench_spills [--ops LIST] [--hidden LIST] [--dtype LIST] [--arch sm_N] [--spills-only]\n"
    "Registers and spill bytes of each op's kernels at the default config (NVRTC, no GPU).\n"
    "  --ops LIST     norm_modulate, gated_residual, gated_residual_norm_modulate, adaln_row_gather\n"
    "                 (default: the first three)\n"
    "  --hidden LIST  hidden sizes, 1..16384 (default: 3072,4096,5120,5376,6144,8192)\n"
    "  --dtype LIST   activation dtypes fp32, bf16, fp16 (default: all three)\n"
    "  --arch sm_N    target (default: sm_90)\n"
    "  --spills-only  print only the kernels that spill\n";

/* Splits a comma list into at most MAXL non-empty items (in place). */
static int split(char *s, char **out, const char *opt)
{
    int n = 0;
    for (char *t = strtok(s, ","); t; t = strtok(NULL, ",")) {
        if (n == MAXL) {
            fprintf(stderr, "bench_spills: %s: at most %d items\n", opt, MAXL);
            return -1;
        }
        out[n++] = t;
    }
    if (n == 0) fprintf(stderr, "bench_spills: %s: empty list\n", opt);
    return n ? n : -1;
}

int main(int argc, char **argv)
{
    char dops[] = "norm_modulate,gated_residual,gated_residual_norm_modulate", dhid[] = "3072,4096,5120,5376,6144,8192",
         ddt[] = "fp32,bf16,fp16";
    char *ops_s = dops, *hid_s = dhid, *dt_s = ddt;
    const char *arch = "sm_90";
    int only = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--spills-only")) {
            only = 1;
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
    for (int i = 0; i < no; ++i)
        if (strcmp(ops[i], "norm_modulate") && strcmp(ops[i], "gated_residual") &&
            strcmp(ops[i], "gated_residual_norm_modulate") && strcmp(ops[i], "adaln_row_gather")) {
            fprintf(stderr, "bench_spills: --ops: '%s' is not an AdaLN op\n", ops[i]);
            return 2;
        }
    for (int i = 0; i < nh; ++i) {
        char *end = NULL;
        long v = strtol(hid[i], &end, 10);
        if (!end || *end || end == hid[i] || v < 1 || v > 16384) {
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
    printf("%-30s %6s %5s %5s %7s %7s  %s\n", "op", "hidden", "dtype", "regs", "spill_st", "spill_ld", "kernel");
    int failed = 0, spilling = 0, total = 0;
    for (int o = 0; o < no; ++o)
        for (int h = 0; h < nh; ++h)
            for (int d = 0; d < nd; ++d) {
                kjit_kernel_spec specs[64];
                int count = 0;
                if (kjit_op_kernels(ops[o], hv[h], dv[d], specs, 64, &count) != KJIT_OK) {
                    fprintf(stderr, "bench_spills: %s: %s\n", ops[o], kjit_last_error());
                    failed = 1;
                    continue;
                }
                if (count > 64) count = 64;
                /* One program per template file, as kjit compiles them. */
                for (int i = 0; i < count; ++i) {
                    if (!specs[i].template_file) continue;
                    const char *tf = specs[i].template_file, *names[64];
                    int n = 0, idx[64];
                    for (int j = i; j < count; ++j)
                        if (specs[j].template_file && !strcmp(specs[j].template_file, tf)) {
                            idx[n] = j;
                            names[n++] = specs[j].name_expr;
                        }
                    kjit_ptxas_stats st[64];
                    if (kjit__ptxas_report(tf, names, n, sm, st) != KJIT_OK) {
                        fprintf(stderr, "bench_spills: %s\n", kjit_last_error());
                        failed = 1;
                    } else {
                        for (int k = 0; k < n; ++k) {
                            ++total;
                            spilling += st[k].spill_stores > 0 || st[k].spill_loads > 0;
                            if (!only || st[k].spill_stores > 0 || st[k].spill_loads > 0)
                                printf("%-30s %6d %5s %5d %7ld %7ld  %s\n", ops[o], hv[h], kjit_dtype_name(dv[d]),
                                       st[k].registers, st[k].spill_stores, st[k].spill_loads, names[k]);
                        }
                    }
                    for (int k = 0; k < n; ++k) specs[idx[k]].template_file = NULL;
                }
            }
    printf("# %d kernels, %d spill (sm_%d)\n", total, spilling, sm);
    return failed;
}
