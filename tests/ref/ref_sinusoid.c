/* fp64 reference of timestep_sinusoid. */
#include "ref.h"

/* The angle is formed and evaluated in fp64 (libm sin/cos), so the result
 * is accurate far below the fp32 tolerance even for |scale * t| ~ 1000. */
void ref_sinusoid(const float *t, int64_t n, int d, int flip, double shift, double scale,
                  double max_period, double *out)
{
    int half = d / 2;
    double lmp = log(max_period);
    for (int64_t i = 0; i < n; i++) {
        double *row = out + i * d;
        for (int j = 0; j < half; j++) {
            double a = scale * (double)t[i] * exp(-lmp * j / (half - shift));
            row[j] = flip ? cos(a) : sin(a);
            row[half + j] = flip ? sin(a) : cos(a);
        }
        if (d & 1)
            row[d - 1] = 0;
    }
}
