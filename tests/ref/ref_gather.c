/* fp64 reference of adaln_row_gather. */
#include "ref.h"

void ref_adaln_row_gather_fwd(int64_t n, int hdim, int64_t r, int k,
                              const double *const table[], const int64_t ldtable[],
                              const int64_t *idx, double *const out[], const int64_t ldout[])
{
    for (int q = 0; q < k; q++)
        for (int64_t i = 0; i < n; i++) {
            const double *src = table[q] + ref_checked_index(idx, i, r) * ldtable[q];
            for (int j = 0; j < hdim; j++)
                out[q][i * ldout[q] + j] = src[j];
        }
}

void ref_adaln_row_gather_bwd(int64_t n, int hdim, int64_t r, int k,
                              const double *const dout[], const int64_t lddout[],
                              const int64_t *idx, double *const dtable[],
                              const int64_t lddtable[])
{
    for (int q = 0; q < k; q++)
        ref_index_sum(n, hdim, r, dout[q], lddout[q], idx, dtable[q], lddtable[q]);
}
