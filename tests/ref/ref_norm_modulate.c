/* fp64 reference of norm_modulate. */
#include "ref.h"

#include <stdlib.h>

static double row_rstd(const double *x, int hdim, double eps)
{
    ref_acc ss = {0, 0};
    for (int j = 0; j < hdim; j++)
        ref_acc_add(&ss, x[j] * x[j]);
    return 1.0 / sqrt(ref_acc_value(&ss) / hdim + eps);
}

void ref_norm_modulate_fwd(int64_t n, int hdim, int64_t r, const double *x, int64_t ldx,
                           const double *w, const double *shift, int64_t ldshift,
                           const double *scale, int64_t ldscale, const int64_t *idx, double eps,
                           double *y, int64_t ldy)
{
    for (int64_t i = 0; i < n; i++) {
        const double *xi = x + i * ldx;
        int64_t q = ref_checked_index(idx, i, r);
        double rs = row_rstd(xi, hdim, eps);
        for (int j = 0; j < hdim; j++)
            y[i * ldy + j] = xi[j] * rs * (w ? w[j] : 1.0) * (1.0 + scale[q * ldscale + j]) +
                             shift[q * ldshift + j];
    }
}

/* The per-row terms of dscale and dw are formed first, then reduced by
 * ref_index_sum (per table row, and over all rows for dw). */
void ref_norm_modulate_bwd(int64_t n, int hdim, int64_t r, const double *dy, int64_t lddy,
                           const double *x, int64_t ldx, const double *w, const double *scale,
                           int64_t ldscale, const int64_t *idx, double eps, double *dx,
                           int64_t lddx, double *dw, double *dshift, int64_t lddshift,
                           double *dscale, int64_t lddscale)
{
    double *tscale = ref_alloc((size_t)n * (size_t)hdim, sizeof *tscale);
    double *tw = ref_alloc((size_t)n * (size_t)hdim, sizeof *tw);
    for (int64_t i = 0; i < n; i++) {
        const double *xi = x + i * ldx, *dyi = dy + i * lddy;
        const double *si = scale + ref_checked_index(idx, i, r) * ldscale;
        double rs = row_rstd(xi, hdim, eps);
        ref_acc gx = {0, 0};
        for (int j = 0; j < hdim; j++) {
            double xhat = xi[j] * rs, wj = w ? w[j] : 1.0;
            ref_acc_add(&gx, dyi[j] * wj * (1.0 + si[j]) * xhat);
            tscale[i * hdim + j] = dyi[j] * xhat * wj;
            tw[i * hdim + j] = dyi[j] * xhat * (1.0 + si[j]);
        }
        double mean = ref_acc_value(&gx) / hdim;
        for (int j = 0; j < hdim; j++) {
            double g = dyi[j] * (w ? w[j] : 1.0) * (1.0 + si[j]);
            dx[i * lddx + j] = rs * (g - xi[j] * rs * mean);
        }
    }
    ref_index_sum(n, hdim, r, dy, lddy, idx, dshift, lddshift);
    ref_index_sum(n, hdim, r, tscale, hdim, idx, dscale, lddscale);
    if (dw)
        ref_index_sum(n, hdim, 1, tw, hdim, NULL, dw, hdim);
    free(tw);
    free(tscale);
}
