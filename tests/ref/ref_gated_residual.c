/* fp64 reference of gated_residual. */
#include "ref.h"

#include <stdlib.h>

void ref_gated_residual_fwd(int64_t n, int hdim, int64_t r, const double *res, int64_t ldres,
                            const double *y, int64_t ldy, const double *gate, int64_t ldgate,
                            const int64_t *idx, double *out, int64_t ldout)
{
    for (int64_t i = 0; i < n; i++) {
        const double *gi = gate + ref_checked_index(idx, i, r) * ldgate;
        for (int j = 0; j < hdim; j++)
            out[i * ldout + j] = res[i * ldres + j] + gi[j] * y[i * ldy + j];
    }
}

void ref_gated_residual_bwd(int64_t n, int hdim, int64_t r, const double *dout, int64_t lddout,
                            const double *y, int64_t ldy, const double *gate, int64_t ldgate,
                            const int64_t *idx, double *dres, int64_t lddres, double *dy,
                            int64_t lddy, double *dgate, int64_t lddgate)
{
    double *tgate = ref_alloc((size_t)n * (size_t)hdim, sizeof *tgate);
    for (int64_t i = 0; i < n; i++) {
        const double *gi = gate + ref_checked_index(idx, i, r) * ldgate;
        for (int j = 0; j < hdim; j++) {
            double d = dout[i * lddout + j];
            dres[i * lddres + j] = d;
            dy[i * lddy + j] = d * gi[j];
            tgate[i * hdim + j] = d * y[i * ldy + j];
        }
    }
    ref_index_sum(n, hdim, r, tgate, hdim, idx, dgate, lddgate);
    free(tgate);
}
