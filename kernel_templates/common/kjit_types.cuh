// Device-side scalar types and 16-byte vector access shared by every template.
// Self-contained on purpose: no CUDA headers, so NVRTC compiles stay fast and
// the cache key covers every line the kernel depends on.
#pragma once

#include "common/kjit_bf16_rn.h"

namespace kjit {

// Programmatic dependent launch (sm_90+; the host launches with programmatic
// stream serialization there). Every kernel calls this first: it waits until
// the grids before it in the stream have completed and their writes are
// visible, then lets the next grid launch (its blocks wait the same way), so
// launch latency overlaps this grid's work. A no-op on older targets and for
// grids launched without the attribute.
__device__ __forceinline__ void grid_dep_sync()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

struct bf16 { unsigned short x; };
struct f16 { unsigned short x; };
typedef float f32;

struct __align__(16) vec16 { unsigned int w[4]; };

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __int_as_float(((int)v.x) << 16); }
__device__ __forceinline__ float to_f32(f16 v)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x));
    return f;
}

template <class T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float v)
{
    bf16 r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    // cvt to bf16 needs sm_80: the same rounding in integer arithmetic.
    r.x = kjit_bf16_bits_rn((unsigned int)__float_as_int(v));
#else
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.x) : "f"(v));
#endif
    return r;
}
template <> __device__ __forceinline__ f16 from_f32<f16>(float v)
{
    f16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(v));
    return r;
}

// Elements of T in one 16-byte vector.
template <class T> struct vec_width { static const int value = 16 / sizeof(T); };

// Unpack a 16-byte vector of T into floats.
template <class T> __device__ __forceinline__ void vec_to_f32(const vec16 &v, float *out);
template <> __device__ __forceinline__ void vec_to_f32<float>(const vec16 &v, float *out)
{
    for (int i = 0; i < 4; ++i) out[i] = __int_as_float((int)v.w[i]);
}
template <> __device__ __forceinline__ void vec_to_f32<bf16>(const vec16 &v, float *out)
{
    for (int i = 0; i < 4; ++i) {
        out[2 * i] = __int_as_float((int)(v.w[i] << 16));
        out[2 * i + 1] = __int_as_float((int)(v.w[i] & 0xffff0000u));
    }
}
template <> __device__ __forceinline__ void vec_to_f32<f16>(const vec16 &v, float *out)
{
    for (int i = 0; i < 4; ++i) {
        f16 lo, hi;
        lo.x = (unsigned short)(v.w[i] & 0xffffu);
        hi.x = (unsigned short)(v.w[i] >> 16);
        out[2 * i] = to_f32(lo);
        out[2 * i + 1] = to_f32(hi);
    }
}

// Pack floats into a 16-byte vector of T (one rounding per element).
template <class T> __device__ __forceinline__ vec16 f32_to_vec(const float *in);
template <> __device__ __forceinline__ vec16 f32_to_vec<float>(const float *in)
{
    vec16 v;
    for (int i = 0; i < 4; ++i) v.w[i] = (unsigned int)__float_as_int(in[i]);
    return v;
}
template <> __device__ __forceinline__ vec16 f32_to_vec<bf16>(const float *in)
{
    vec16 v;
    for (int i = 0; i < 4; ++i)
        v.w[i] = (unsigned int)from_f32<bf16>(in[2 * i]).x | ((unsigned int)from_f32<bf16>(in[2 * i + 1]).x << 16);
    return v;
}
template <> __device__ __forceinline__ vec16 f32_to_vec<f16>(const float *in)
{
    vec16 v;
    for (int i = 0; i < 4; ++i)
        v.w[i] = (unsigned int)from_f32<f16>(in[2 * i]).x | ((unsigned int)from_f32<f16>(in[2 * i + 1]).x << 16);
    return v;
}

__device__ __forceinline__ vec16 ld_vec(const void *p) { return *(const vec16 *)p; }
// Streaming load: data read once, do not keep it in L1.
__device__ __forceinline__ vec16 ld_vec_stream(const void *p)
{
    vec16 v;
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3]) : "l"(p));
    return v;
}
__device__ __forceinline__ void st_vec(void *p, const vec16 &v) { *(vec16 *)p = v; }

// Scalar element access for tails and odd sizes.
template <class T> __device__ __forceinline__ float ld_f32(const T *p) { return to_f32(*p); }
template <class T> __device__ __forceinline__ void st_f32(T *p, float v) { *p = from_f32<T>(v); }

} // namespace kjit
