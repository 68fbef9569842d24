/* fp64 reference of gated_residual_norm_modulate, composed from the
 * gated_residual and norm_modulate references with h kept in fp64: the
 * exact chain. The kernels' out is norm_modulate of h rounded to the
 * activation dtype (SPEC), within SPEC's bound of this (test_adaln checks
 * both: out against this chain, the backward against the rounded h). */
#include "ref.h"

#include <stdlib.h>

void ref_gated_residual_norm_modulate_fwd(
    int64_t n, int hdim, int64_t r, const double *res, int64_t ldres, const double *y,
    int64_t ldy, const double *gate, int64_t ldgate, const double *w, const double *shift,
    int64_t ldshift, const double *scale, int64_t ldscale, const int64_t *idx, double eps,
    double *h, int64_t ldh, double *out, int64_t ldout)
{
    ref_gated_residual_fwd(n, hdim, r, res, ldres, y, ldy, gate, ldgate, idx, h, ldh);
    ref_norm_modulate_fwd(n, hdim, r, h, ldh, w, shift, ldshift, scale, ldscale, idx, eps, out,
                          ldout);
}

/* g is formed densely (norm_modulate dx of h, plus dh), then fed to the
 * gated_residual backward as its upstream gradient. */
void ref_gated_residual_norm_modulate_bwd(
    int64_t n, int hdim, int64_t r, const double *dh, int64_t lddh, const double *dout,
    int64_t lddout, const double *res, int64_t ldres, const double *y, int64_t ldy,
    const double *gate, int64_t ldgate, const double *w, const double *scale, int64_t ldscale,
    const int64_t *idx, double eps, double *dres, int64_t lddres, double *dy, int64_t lddy,
    double *dgate, int64_t lddgate, double *dw, double *dshift, int64_t lddshift,
    double *dscale, int64_t lddscale)
{
    double *h = ref_alloc((size_t)n * (size_t)hdim, sizeof *h);
    double *g = ref_alloc((size_t)n * (size_t)hdim, sizeof *g);
    ref_gated_residual_fwd(n, hdim, r, res, ldres, y, ldy, gate, ldgate, idx, h, hdim);
    ref_norm_modulate_bwd(n, hdim, r, dout, lddout, h, hdim, w, scale, ldscale, idx, eps, g, hdim,
                          dw, dshift, lddshift, dscale, lddscale);
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < hdim; j++)
            g[i * hdim + j] += dh[i * lddh + j];
    ref_gated_residual_bwd(n, hdim, r, g, hdim, y, ldy, gate, ldgate, idx, dres, lddres, dy, lddy,
                           dgate, lddgate);
    free(g);
    free(h);
}
