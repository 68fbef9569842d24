/* Launch configurations. What fixes the arithmetic (threads per row, the
 * partition) is a function of hidden size and dtype alone and lives in the
 * ops; what is here only changes speed: every config gives the same bits. */
#ifndef KJIT_CONFIG_H
#define KJIT_CONFIG_H

#include <stddef.h>

#include "kjit.h"

/* Threads per row of the adaln family, forward and backward
 * (kernel_templates/adaln.cuh): it fixes the arithmetic. */
int kjit__adaln_tpr(int h, kjit_dtype act);

typedef struct kjit_adaln_config {
    int rpc;         /* fwd: rows per CTA (1..15, TPR * rpc <= 1024) */
    int pf;          /* fwd: rows loaded ahead 0..3 */
    int grid_per_sm; /* fwd: CTAs per SM of a persistent grid; 0 = one CTA per row group */
    int bwd_pf;      /* bwd: rows loaded ahead 0..3 */
    int accs;        /* bwd: 0 registers, 1 tables in smem, 2 tables + accumulators in smem */
} kjit_adaln_config;

/* The built-in default of (mode, h, act dtype); valid for the fast path. */
void kjit__adaln_config_default(int mode, int h, kjit_dtype act, kjit_adaln_config *c);
/* Fewer stages (bwd_pf, then accs, then pf) until c's shared memory is at
 * most smem_max bytes; a gated_residual or fused forward whose row ahead
 * does not fit goes back to rpc 1 and one CTA per row (launch-only: the
 * bits do not change). */
void kjit__adaln_config_fit(int mode, int h, kjit_dtype act, kjit_adaln_config *c, size_t smem_max);

/* ---- The tuning space (src/tune) --------------------------------------- *
 * Only the fast path (h % 8 == 0, 8 <= h <= 16384) is tuned; the generic
 * path always runs the default config (pf = accs = 0 there). TPR and the
 * partition are not tunable: they fix the arithmetic. */
#define KJIT_TUNE_FAST_MAX_HIDDEN 16384
/* The most dynamic shared memory a default config uses (sm_90 and sm_100
 * allow 227 KiB); on a device with less, kjit__tune_config fits it. */
#define KJIT_DEFAULT_SMEM (200u * 1024u)
#define KJIT_TUNE_MAX_GRID_PER_SM 64
#define KJIT_TUNE_MAX_FWD 39 /* rpc {1,2,4} x (grid 0 pf 0 | grid {1,2,4} x pf {0..3}), within KJIT_DEFAULT_SMEM */
#define KJIT_TUNE_MAX_BWD 12 /* bwd_pf {0,1,2,3} x accs {0,1,2} */

/* 1 when h takes the vector fast path (the tuned one). */
int kjit__adaln_fast_hidden(int h);
/* The shared memory a launch config may use on devices of arch sm_<sm> (the
 * opt-in limit per block less KJIT_TUNE_STATIC_SMEM, as kjit__tune_attach
 * does for a device at hand), for planning without the device; KJIT_DEFAULT_SMEM for an
 * arch not listed. */
size_t kjit__arch_tune_smem(int sm);
/* Kept from a device's opt-in shared memory per block for the kernels'
 * static shared memory: up to 3840 bytes (the forward's row sums at rpc
 * 15), 512 in the backward. */
#define KJIT_TUNE_STATIC_SMEM 4096u
/* Mode of an adaln op name (1 norm_modulate, 2 gated_residual, 3
 * gated_residual_norm_modulate, also "fused"), 0 when unknown; and back. */
int kjit__adaln_mode(const char *op);
const char *kjit__adaln_mode_name(int mode);
/* Dynamic shared memory of the forward and backward kernels for a config
 * (fast path), as kernel_templates/adaln.cuh defines it. */
size_t kjit__adaln_fwd_smem(int mode, int h, kjit_dtype act, const kjit_adaln_config *c);
size_t kjit__adaln_bwd_smem(int mode, int h, kjit_dtype act, const kjit_adaln_config *c);
/* 0 when c is a valid fast-path launch for (mode, h, act): every field in
 * the range the template accepts, TPR * rpc <= 1024, and (smem_max > 0) the
 * forward's and the backward's dynamic shared memory at most smem_max. Otherwise KJIT_EINVAL
 * with the reason in why (no thread error is set). */
int kjit__adaln_config_check(int mode, int h, kjit_dtype act, const kjit_adaln_config *c, size_t smem_max,
                             char *why, size_t why_len);
/* The forward candidates (backward fields = the default's) and the backward
 * candidates (forward fields = the default's, fitted to smem_max when it is
 * not 0, as the tuner's own default is) of (mode, h, act) that pass
 * kjit__adaln_config_check; the default is always among them. Return the
 * count (<= KJIT_TUNE_MAX_FWD / _BWD). */
int kjit__adaln_space_fwd(int mode, int h, kjit_dtype act, kjit_adaln_config *out);
int kjit__adaln_space_bwd(int mode, int h, kjit_dtype act, size_t smem_max, kjit_adaln_config *out);
/* The tuner's two candidate lists on a device with smem_max bytes of shared
 * memory (0: not known), each led by the default fitted to smem_max: fwd[]
 * then holds the forward candidates whose forward half (rpc, pf,
 * grid_per_sm) differs from it and fits smem_max, with its backward half;
 * bwd[] the backward candidates whose (bwd_pf, accs) differ, with its
 * forward half. Room: KJIT_TUNE_MAX_FWD + 1 and KJIT_TUNE_MAX_BWD + 1
 * configs; the counts go to *nf and *nb. */
void kjit__adaln_tune_lists(int mode, int h, kjit_dtype act, size_t smem_max, kjit_adaln_config *fwd, int *nf,
                            kjit_adaln_config *bwd, int *nb);
/* Whether c's forward half and its backward half are each the default's
 * (as written, or fitted to smem_max) or a candidate of the tuning space:
 * what the tuner can pick on a device with smem_max bytes, and so what
 * test_tune compares bit for bit with the default. */
int kjit__adaln_config_in_space(int mode, int h, kjit_dtype act, const kjit_adaln_config *c, size_t smem_max);
/* 1 when a stored config is used on a device with smem_max bytes: valid
 * there (kjit__adaln_config_check) and in the space; else 0 with the
 * reason in why. _somewhere: on some device kjit knows (every size
 * kjit__arch_tune_smem gives); a config none uses is a hand edit. */
int kjit__adaln_config_usable(int mode, int h, kjit_dtype act, const kjit_adaln_config *c, size_t smem_max,
                              char *why, size_t why_len);
int kjit__adaln_config_usable_somewhere(int mode, int h, kjit_dtype act, const kjit_adaln_config *c);
int kjit__adaln_config_equal(const kjit_adaln_config *a, const kjit_adaln_config *b);

/* The forward and backward kernel name expressions of a config (fast path,
 * int32 index, the op's parameter dtype), as the ops build them
 * (src/ops/adaln.c), so the tuner can compile candidates ahead. */
void kjit__adaln_exprs(int mode, int h, kjit_dtype act, const kjit_adaln_config *c, char *fwd, char *bwd,
                       size_t len);

/* The specs kjit_op_kernels lists for an AdaLN op (mode 1..3), with the
 * default config as a device of smem_max bytes of shared memory a block
 * (kjit__arch_tune_smem) runs it; 0: as listed publicly. Returns the count
 * (may exceed max) or a negative status. */
int kjit__adaln_kernels_fit(int mode, int hidden, kjit_dtype act, size_t smem_max, kjit_kernel_spec *out, int max);

#endif
