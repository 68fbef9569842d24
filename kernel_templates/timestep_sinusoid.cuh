// timestep_sinusoid: t[n] (fp32) -> out[n, d] = [sin(a) | cos(a)] (or
// [cos | sin] when flip), a = scale * t * exp(-ln(max_period) * j / (half - shift)),
// odd d: last column 0.
//
// kjit_sinusoid<T>  T = kjit::f32 | kjit::bf16 | kjit::f16 (output dtype)
//   grid  = min(ceil(n * max(half,1) / 256), 65535 * 8), block = 256, smem = 0
//   One thread per (row, j) pair writes columns j and half + j; grid-stride.
// The angle and sin/cos are evaluated in fp64 (fp32 arguments of |a| ~ 1000
// lose ~1e-5 to range reduction alone) and rounded once to the output dtype
// (from_f64 below). Each output
// depends only on (t[i], j) so rows are trivially batch-invariant.
#include "common/kjit_types.cuh"
#include "common/kjit_params.h"

namespace kjit {
// fp64 -> T, rounded once to nearest even. fp32 directly; bf16 and fp16
// through an fp32 rounded to odd (truncated, its last bit set when that
// lost anything), which keeps the sticky bit for the second rounding: with
// at least two more bits than the target (fp32 has 24 against 8 and 11),
// rounding that value to nearest gives the once-rounded result (a plain
// fp32 rounding first is one unit off for ~7 outputs in a million in bf16,
// ~60 in fp16).
// tests/test_round_odd.c checks the scheme against a direct rounding.
template <class T> __device__ __forceinline__ T from_f64(double d)
{
    if constexpr (sizeof(T) == 4) {
        return (float)d;
    } else {
        float f = __double2float_rz(d);
        if ((double)f != d) f = __int_as_float(__float_as_int(f) | 1);
        return from_f32<T>(f);
    }
}
} // namespace kjit

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
            row[j] = kjit::from_f64<T>(p.flip ? c : s);
            row[half + j] = kjit::from_f64<T>(p.flip ? s : c);
        }
        if ((p.d & 1) && j == 0) row[p.d - 1] = kjit::from_f32<T>(0.0f);
    }
}
