// timestep_sinusoid: t[n] (fp32) -> out[n, d] = [sin(a) | cos(a)] (or
// [cos | sin] when flip), a = scale * t * exp(-ln(max_period) * j / (half - shift)),
// odd d: last column 0.
//
// kjit_sinusoid<T>  T = kjit::f32 | kjit::bf16 | kjit::f16 (output dtype)
//   grid  = min(ceil(n * max(half,1) / 256), 65535 * 8), block = 256, smem = 0
//   One thread per (row, j) pair writes columns j and half + j; grid-stride.
// The angle and sin/cos are evaluated in fp64 (fp32 arguments of |a| ~ 1000
// lose ~1e-5 to range reduction alone) and rounded to fp32; a bf16 or fp16
// output is rounded again from that fp32 value, which lands one unit of its
// last place off the once-rounded value for ~7 outputs in a million (bf16)
// or ~60 (fp16), within SPEC's bounds. Each output
// depends only on (t[i], j) so rows are trivially batch-invariant.
#include "common/kjit_types.cuh"
#include "common/kjit_params.h"

template <class T>
__global__ void kjit_sinusoid(const __grid_constant__ kjit_sinusoid_params p)
{
    kjit::grid_dep_sync();
    const long long half = p.d / 2;
    const long long pairs = half > 0 ? half : 1;
    const long long total = p.n * pairs;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const long long i = e / pairs;
        const long long j = e - i * pairs;
        T *row = (T *)p.out + i * p.out_stride;
        if (half > 0) {
            const double f = exp(-p.log_max_period * (double)j / ((double)half - p.shift));
            const double a = p.scale * (double)p.t[i] * f;
            double s, c;
            sincos(a, &s, &c);
            row[j] = kjit::from_f32<T>((float)(p.flip ? c : s));
            row[half + j] = kjit::from_f32<T>((float)(p.flip ? s : c));
        }
        if ((p.d & 1) && j == 0) row[p.d - 1] = kjit::from_f32<T>(0.0f);
    }
}
