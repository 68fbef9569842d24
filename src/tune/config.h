/* Launch configurations. What fixes the arithmetic (threads per row, the
 * partition) is a function of hidden size and dtype alone and lives in the
 * ops; what is here only changes speed: every config gives the same bits. */
#ifndef KJIT_CONFIG_H
#define KJIT_CONFIG_H

#include "kjit.h"

/* Threads per row of the adaln family (kernel_templates/adaln.cuh). */
int kjit__adaln_tpr(int h, kjit_dtype act);

typedef struct kjit_adaln_config {
    int rpc;         /* fwd: rows per CTA (1..15, TPR * rpc <= 1024) */
    int pf;          /* fwd: look-ahead 0 | 1 */
    int grid_per_sm; /* fwd: CTAs per SM of a persistent grid; 0 = one CTA per row group */
    int bwd_pf;      /* bwd: rows loaded ahead 0..3 */
    int accs;        /* bwd: 0 registers, 1 tables in smem, 2 tables + accumulators in smem */
} kjit_adaln_config;

/* The built-in default of (mode, h, act dtype); valid for the fast path. */
void kjit__adaln_config_default(int mode, int h, kjit_dtype act, kjit_adaln_config *c);

#endif
