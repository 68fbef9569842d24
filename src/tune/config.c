#include "tune/config.h"

#include <stdio.h>
#include <string.h>

int kjit__adaln_tpr(int h, kjit_dtype act)
{
    const int v = 16 / (int)kjit_dtype_size(act);
    const int g = (h + v - 1) / v;
    static const int caps[] = {256, 512, 1024};
    for (int c = 0; c < 3; ++c)
        for (int items = (g + caps[c] - 1) / caps[c]; items <= 8; ++items)
            if (g % items == 0 && (g / items) % 32 == 0) return g / items;
    const int items = (g + 255) / 256;
    return 32 * ((g + 32 * items - 1) / (32 * items));
}

void kjit__adaln_config_fit(int mode, int h, kjit_dtype act, kjit_adaln_config *c, size_t smem_max)
{
    while (c->bwd_pf > 0 && kjit__adaln_bwd_smem(mode, h, act, c) > smem_max) --c->bwd_pf;
    while (c->accs > 0 && kjit__adaln_bwd_smem(mode, h, act, c) > smem_max) --c->accs;
    const int had_pf = c->pf > 0;
    while (c->pf > 0 && kjit__adaln_fwd_smem(mode, h, act, c) > smem_max) --c->pf;
    /* gated_residual and the fused op in a persistent grid with no row left
     * to load ahead: back to one CTA per row (8192 fp32 gated_residual:
     * 895.3 us persistent without the row ahead, 818.0 full; fused, 2 rows
     * per CTA: 845.4 against 809.8 for one). */
    if (mode != 1 && had_pf && c->pf == 0) c->rpc = 1, c->grid_per_sm = 0;
}

void kjit__adaln_config_default(int mode, int h, kjit_dtype act, kjit_adaln_config *c)
{
    /* First measured on the H200 at h = 5376 bf16 (kernel_templates/adaln.cuh),
     * then against the tuner at 4096, 5120, 5376 and 8192 in bf16, fp16 and
     * fp32 (2026-12-02 10:45 UTC, 32768 rows; docs/PERF_NOTES.md, "Backward
     * launch bounds and the defaults beyond 5376 bf16"). None of this
     * changes a bit (SPEC.md contract 3).
     *
     * norm_modulate forward: a persistent grid of about 4 rows per SM,
     * loading one row ahead, in as few CTAs as the registers allow: the
     * most rows per CTA (up to 4) whose register estimate, 2 per element +
     * 4 per granule + 12, fits 64K / threads (5376 bf16: rpc 4, 72 of 73;
     * bench_ops --sweep, 2026-11-30: 180.6 us at 32768 rows against 187.3 for
     * rpc 1 grid 4). fp16 rows come with fp32 tables: 4 more per granule
     * (5376 fp16 took rpc 4 without them and spilled: 306.7 us against 224.7
     * for rpc 2; 5120 fp16 255.3 against 221.3); fp32 rows 2 more (4096
     * fp32: 326.2 against 286.0). A small spill is cheaper than half the
     * rows per CTA: 4096 fp16 and 8192 fp32 keep rpc 4 and 2 (185.6 and
     * 603.4 us against 199.0 and 655.7 for the next smaller rpc). */
    c->rpc = 1;
    c->pf = mode == 1 ? 1 : 0;
    c->grid_per_sm = mode == 1 ? 4 : 0;
    const int tpr = kjit__adaln_tpr(h, act), v = 16 / (int)kjit_dtype_size(act);
    const int it = ((h + v - 1) / v + tpr - 1) / tpr, cols = it * v;
    if (mode == 1) {
        const int need = 2 * cols + 4 * it + 12 + (act == KJIT_F16 ? 4 * it : act == KJIT_F32 ? 2 * it : 0);
        for (int rpc = 4; rpc > 1; rpc /= 2)
            if (tpr * rpc <= 1024 && 65536 / (tpr * rpc) >= need) {
                c->rpc = rpc, c->grid_per_sm = 4 / rpc;
                break;
            }
    }
    /* gated_residual forward with fp32 rows: a persistent grid of 4 CTAs per
     * SM loading one row ahead (8192: 818.0 us against 778.5; 5376: 526.5
     * against 512.1; 4096 and 5120 1-3% too); 2-byte rows keep one CTA per
     * row (8192 bf16: 391.0 against 429.0). */
    if (mode == 2 && act == KJIT_F32) c->pf = 1, c->grid_per_sm = 4;
    /* The fused forward with fp32 tables (fp16 or fp32 rows) and 24 or more
     * columns a thread: 2 rows per CTA, one ahead, 2 CTAs per SM (8192 fp16:
     * 785.6 us against 577.7; 5376 fp32: 873.7 against 733.8; 5376 fp16:
     * 421.3 against 395.0; at 5120 fp16 even, 380.8 against 383.9), where the
     * staged rows fit (not 8192 fp32: kjit__adaln_config_fit). */
    if (mode == 3 && act != KJIT_BF16 && cols >= 24) c->rpc = 2, c->pf = 1, c->grid_per_sm = 2;
    /* Backward: long bf16 rows of norm_modulate in CTAs of 256 threads or
     * more load two rows ahead, which also leaves one CTA per SM and the
     * whole register file to the per-column state, where two CTAs would
     * leave 128 registers for 32 columns (8192 bf16: 590.3 us against 851.5
     * for one row ahead, 2026-12-01). The fused op: with 24 or more columns
     * a thread, one row ahead and one table accumulator in shared memory
     * (5376 bf16: 547.9 against 560.5 for all five, 2026-12-01); with fewer,
     * three rows ahead and every accumulator in registers, one CTA per SM
     * (4096 bf16: 437.3 against 474.0 for one ahead and five in shared
     * memory; fp16 439.4 against 468.3; fp32, two ahead once fitted: 823.5
     * against 847.9). */
    if (mode == 1)
        c->bwd_pf = act == KJIT_BF16 && cols >= 32 && tpr >= 256 ? 2 : 1;
    else
        c->bwd_pf = mode == 2 || cols >= 24 ? 1 : 3;
    c->accs = mode == 1 ? 1 : mode == 2 ? 0 : cols >= 24 ? 1 : 0;
    /* Fewer stages where the rows are long (kjit__tune_config fits it to a
     * device with less shared memory). */
    kjit__adaln_config_fit(mode, h, act, c, KJIT_DEFAULT_SMEM);
}

/* Opt-in shared memory per block, KiB, of the archs below: every size a
 * device kjit knows can have. */
static const size_t known_kib[] = {227, 163, 99, 64};

size_t kjit__arch_tune_smem(int sm)
{
    /* Opt-in shared memory per block (CUDA C++ Programming Guide, compute
     * capabilities table). An arch not listed (sm_88 among NVRTC 13.0's)
     * gets KJIT_DEFAULT_SMEM, the size the built-in configs assume. */
    const size_t kib = sm == 90 || sm == 100 || sm == 103 || sm == 110 ? known_kib[0]
                       : sm == 80 || sm == 87             ? known_kib[1]
                       : sm == 86 || sm == 89 || sm == 120 || sm == 121 ? known_kib[2]
                       : sm == 75                         ? known_kib[3]
                                                          : 0;
    return kib ? kib * 1024 - KJIT_TUNE_STATIC_SMEM : KJIT_DEFAULT_SMEM;
}

int kjit__adaln_fast_hidden(int h) { return h >= 8 && h % 8 == 0 && h <= KJIT_TUNE_FAST_MAX_HIDDEN; }

static const char *const mode_names[4] = {NULL, "norm_modulate", "gated_residual", "gated_residual_norm_modulate"};

int kjit__adaln_mode(const char *op)
{
    if (!op) return 0;
    for (int m = 1; m <= 3; ++m)
        if (!strcmp(op, mode_names[m])) return m;
    return !strcmp(op, "fused") ? 3 : 0;
}

const char *kjit__adaln_mode_name(int mode) { return mode >= 1 && mode <= 3 ? mode_names[mode] : "?"; }

size_t kjit__adaln_fwd_smem(int mode, int h, kjit_dtype act, const kjit_adaln_config *c)
{
    if (mode < 1 || mode > 3 || c->pf <= 0) return 0;
    const int tpr = kjit__adaln_tpr(h, act);
    const int v = 16 / (int)kjit_dtype_size(act), g = (h + v - 1) / v, it = (g + tpr - 1) / tpr;
    return (size_t)c->rpc * (size_t)(c->pf + 1) * (size_t)(mode == 1 ? 1 : 2) * (size_t)it * (size_t)tpr * 16;
}

size_t kjit__adaln_bwd_smem(int mode, int h, kjit_dtype act, const kjit_adaln_config *c)
{
    /* NT = 2, 2, 4, NTAB = 1, 1, 2 and NACC = 2, 1, 3 for MODE 1, 2, 3 (adaln.cuh). */
    static const int nt[4] = {0, 2, 2, 4}, ntab[4] = {0, 1, 1, 2}, nacc[4] = {0, 2, 1, 3};
    if (mode < 1 || mode > 3) return 0;
    const int tpr = kjit__adaln_tpr(h, act);
    const int v = 16 / (int)kjit_dtype_size(act), g = (h + v - 1) / v, it = (g + tpr - 1) / tpr;
    const int k = (c->accs >= 1 ? ntab[mode] : 0) + (c->accs == 2 ? nacc[mode] : 0);
    const size_t stages = (size_t)(c->bwd_pf + 1) * (size_t)nt[mode] * (size_t)it * (size_t)tpr * 16;
    return stages + (size_t)k * (size_t)it * (size_t)v * (size_t)tpr * 4;
}

int kjit__adaln_config_check(int mode, int h, kjit_dtype act, const kjit_adaln_config *c, size_t smem_max,
                             char *why, size_t why_len)
{
    char dummy[160]; /* the caller wants no message: room for any (-Wformat-truncation) */
    if (!why || !why_len) why = dummy, why_len = sizeof dummy;
#define BAD(...) return snprintf(why, why_len, __VA_ARGS__), KJIT_EINVAL
    if (mode < 1 || mode > 3) BAD("mode %d is not an adaln op", mode);
    if (act != KJIT_F32 && act != KJIT_BF16 && act != KJIT_F16) BAD("dtype %d is not fp32, bf16 or fp16", (int)act);
    if (!kjit__adaln_fast_hidden(h)) BAD("hidden %d is not tuned (a multiple of 8 in 8..%d)", h, KJIT_TUNE_FAST_MAX_HIDDEN);
    if (!c) BAD("no config");
    const int tpr = kjit__adaln_tpr(h, act);
    if (c->rpc < 1 || c->rpc > 15) BAD("rpc %d outside 1..15", c->rpc);
    if (tpr * c->rpc > 1024) BAD("rpc %d: %d threads per row x rpc > 1024", c->rpc, tpr);
    if (c->pf < 0 || c->pf > 3) BAD("pf %d outside 0..3", c->pf);
    if (c->grid_per_sm < 0 || c->grid_per_sm > KJIT_TUNE_MAX_GRID_PER_SM)
        BAD("grid_per_sm %d outside 0..%d", c->grid_per_sm, KJIT_TUNE_MAX_GRID_PER_SM);
    if (c->bwd_pf < 0 || c->bwd_pf > 3) BAD("bwd_pf %d outside 0..3", c->bwd_pf);
    if (c->accs < 0 || c->accs > 2) BAD("accs %d outside 0..2", c->accs);
    const size_t smem = kjit__adaln_bwd_smem(mode, h, act, c), fsmem = kjit__adaln_fwd_smem(mode, h, act, c);
    /* bwd_pf 0 accs 0 is the least there is: rows too long for even that
     * take the generic backward (ops/adaln.c), so it is valid at any size
     * (else tuning the fused op at 16384 fp32 failed at its end). */
    if (smem_max && smem > smem_max && (c->bwd_pf || c->accs))
        BAD("bwd_pf %d accs %d need %zu bytes of shared memory, the device allows %zu", c->bwd_pf, c->accs, smem,
            smem_max);
    if (smem_max && fsmem > smem_max)
        BAD("rpc %d pf %d need %zu bytes of shared memory, the device allows %zu", c->rpc, c->pf, fsmem, smem_max);
#undef BAD
    return KJIT_OK;
}

int kjit__adaln_space_fwd(int mode, int h, kjit_dtype act, kjit_adaln_config *out)
{
    /* A full grid (one row group per CTA) has nothing to look ahead to: pf 0
     * only. Rows loaded ahead sit in shared memory: configs needing more
     * than KJIT_DEFAULT_SMEM are left out. */
    static const int rpcs[] = {1, 2, 4}, grids[] = {0, 1, 2, 4};
    kjit_adaln_config d;
    kjit__adaln_config_default(mode, h, act, &d);
    int n = 0;
    for (int r = 0; r < 3; ++r)
        for (int g = 0; g < 4; ++g)
            for (int pf = 0; pf <= (grids[g] ? 3 : 0); ++pf) {
                kjit_adaln_config c = d;
                c.rpc = rpcs[r], c.pf = pf, c.grid_per_sm = grids[g];
                if (kjit__adaln_fwd_smem(mode, h, act, &c) > KJIT_DEFAULT_SMEM) continue;
                if (kjit__adaln_config_check(mode, h, act, &c, 0, NULL, 0) == KJIT_OK && n < KJIT_TUNE_MAX_FWD)
                    out[n++] = c;
            }
    return n;
}

int kjit__adaln_space_bwd(int mode, int h, kjit_dtype act, size_t smem_max, kjit_adaln_config *out)
{
    kjit_adaln_config d;
    kjit__adaln_config_default(mode, h, act, &d);
    /* The forward half as the tuner runs it on this device: an unfitted
     * one that does not fit would fail every candidate's check, leaving the
     * default alone (on 99 KiB devices, e.g. norm_modulate 8192 fp32). */
    if (smem_max) kjit__adaln_config_fit(mode, h, act, &d, smem_max);
    int n = 0;
    for (int pf = 0; pf <= 3; ++pf)
        for (int a = 0; a <= 2; ++a) {
            kjit_adaln_config c = d;
            c.bwd_pf = pf, c.accs = a;
            /* The default stays a candidate whatever its shared memory. */
            const int is_default = kjit__adaln_config_equal(&c, &d);
            if ((is_default || kjit__adaln_config_check(mode, h, act, &c, smem_max, NULL, 0) == KJIT_OK) &&
                n < KJIT_TUNE_MAX_BWD)
                out[n++] = c;
        }
    return n;
}

static int same_fwd(const kjit_adaln_config *a, const kjit_adaln_config *b)
{
    return a->rpc == b->rpc && a->pf == b->pf && a->grid_per_sm == b->grid_per_sm;
}

void kjit__adaln_tune_lists(int mode, int h, kjit_dtype act, size_t smem_max, kjit_adaln_config *fwd, int *nf,
                            kjit_adaln_config *bwd, int *nb)
{
    kjit_adaln_config def, sp[KJIT_TUNE_MAX_FWD];
    kjit__adaln_config_default(mode, h, act, &def);
    if (smem_max) kjit__adaln_config_fit(mode, h, act, &def, smem_max);
    /* The space's forward candidates carry the unfitted default's backward
     * half, so they are compared with the fitted default by their forward
     * half alone: where fitting changed the backward half, a whole-config
     * comparison found no match and the list grew past its room. */
    int n = kjit__adaln_space_fwd(mode, h, act, sp), k = 0;
    fwd[k++] = def;
    for (int i = 0; i < n; ++i) {
        kjit_adaln_config c = def;
        c.rpc = sp[i].rpc, c.pf = sp[i].pf, c.grid_per_sm = sp[i].grid_per_sm;
        if (same_fwd(&c, &def) || (smem_max && kjit__adaln_fwd_smem(mode, h, act, &c) > smem_max)) continue;
        fwd[k++] = c;
    }
    *nf = k;
    n = kjit__adaln_space_bwd(mode, h, act, smem_max, sp), k = 0;
    bwd[k++] = def;
    for (int i = 0; i < n; ++i)
        if (sp[i].bwd_pf != def.bwd_pf || sp[i].accs != def.accs) {
            kjit_adaln_config c = def;
            c.bwd_pf = sp[i].bwd_pf, c.accs = sp[i].accs;
            bwd[k++] = c;
        }
    *nb = k;
}

int kjit__adaln_config_in_space(int mode, int h, kjit_dtype act, const kjit_adaln_config *c, size_t smem_max)
{
    kjit_adaln_config d[2], v[KJIT_TUNE_MAX_FWD + KJIT_TUNE_MAX_BWD];
    kjit__adaln_config_default(mode, h, act, &d[0]);
    d[1] = d[0];
    if (smem_max) kjit__adaln_config_fit(mode, h, act, &d[1], smem_max);
    int fwd = 0, bwd = 0;
    for (int i = 0; i < 2; ++i) {
        fwd |= c->rpc == d[i].rpc && c->pf == d[i].pf && c->grid_per_sm == d[i].grid_per_sm;
        bwd |= c->bwd_pf == d[i].bwd_pf && c->accs == d[i].accs;
    }
    const int nf = kjit__adaln_space_fwd(mode, h, act, v);
    for (int i = 0; i < nf; ++i) fwd |= c->rpc == v[i].rpc && c->pf == v[i].pf && c->grid_per_sm == v[i].grid_per_sm;
    const int nb = kjit__adaln_space_bwd(mode, h, act, smem_max, v);
    for (int i = 0; i < nb; ++i) bwd |= c->bwd_pf == v[i].bwd_pf && c->accs == v[i].accs;
    return fwd && bwd;
}

int kjit__adaln_config_usable(int mode, int h, kjit_dtype act, const kjit_adaln_config *c, size_t smem_max,
                              char *why, size_t why_len)
{
    if (kjit__adaln_config_check(mode, h, act, c, smem_max, why, why_len)) return 0;
    if (kjit__adaln_config_in_space(mode, h, act, c, smem_max)) return 1;
    if (why && why_len)
        snprintf(why, why_len, "rpc %d pf %d grid_per_sm %d bwd_pf %d accs %d is not a config of the tuning space",
                 c->rpc, c->pf, c->grid_per_sm, c->bwd_pf, c->accs);
    return 0;
}

int kjit__adaln_config_usable_somewhere(int mode, int h, kjit_dtype act, const kjit_adaln_config *c)
{
    for (size_t i = 0; i < sizeof known_kib / sizeof known_kib[0]; ++i)
        if (kjit__adaln_config_usable(mode, h, act, c, known_kib[i] * 1024 - KJIT_TUNE_STATIC_SMEM, NULL, 0)) return 1;
    return kjit__adaln_config_usable(mode, h, act, c, KJIT_DEFAULT_SMEM, NULL, 0);
}

int kjit__adaln_config_equal(const kjit_adaln_config *a, const kjit_adaln_config *b)
{
    return a->rpc == b->rpc && a->pf == b->pf && a->grid_per_sm == b->grid_per_sm && a->bwd_pf == b->bwd_pf &&
           a->accs == b->accs;
}
