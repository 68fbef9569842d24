/* CUDA source text the standalone probes' kernels share (each probe pastes
 * these into the string it hands to NVRTC, e.g. `PROBE_SRC_BF16 "..."`).
 * PROBE_SRC_BF16 (norm_probe, cluster_fwd_probe): bf16 pairs of a 32-bit
 * word as floats (lo, hi), two floats rounded into one (pk, round to nearest
 * even), a 16-byte load that skips the L1 (ld_x), and a granule's sum of
 * squares (sq4). PROBE_SRC_CLUSTER (cluster_probe, cluster_fwd_probe):
 * shared-memory addresses (smem_addr) and their image in a peer CTA of the
 * cluster (peer), the cluster barrier (cluster_sync), and the mbarrier steps
 * of a push exchange (bar_init with one arrival, bar_expect, bar_wait on a
 * phase parity, acquiring at cluster scope). */
#pragma once

#define PROBE_SRC_BF16                                                                                           \
    "__device__ __forceinline__ float lo(unsigned u) { return __uint_as_float(u << 16); }\n"                      \
    "__device__ __forceinline__ float hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }\n"              \
    "__device__ __forceinline__ unsigned pk(float a, float b)\n"                                                  \
    "{ unsigned r; asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(r) : \"f\"(b), \"f\"(a)); return r; }\n"         \
    "__device__ __forceinline__ uint4 ld_x(const uint4 *p)\n"                                                     \
    "{ uint4 v; asm volatile(\"ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\"\n"                       \
    "    : \"=r\"(v.x), \"=r\"(v.y), \"=r\"(v.z), \"=r\"(v.w) : \"l\"(p)); return v; }\n"                             \
    "__device__ __forceinline__ float sq4(uint4 v)\n"                                                             \
    "{ float a = lo(v.x) * lo(v.x) + hi(v.x) * hi(v.x), b = lo(v.y) * lo(v.y) + hi(v.y) * hi(v.y);\n"             \
    "  float c = lo(v.z) * lo(v.z) + hi(v.z) * hi(v.z), d = lo(v.w) * lo(v.w) + hi(v.w) * hi(v.w);\n"             \
    "  return (a + b) + (c + d); }\n"

#define PROBE_SRC_CLUSTER                                                                                        \
    "__device__ __forceinline__ unsigned smem_addr(const void *p)\n"                                              \
    "{ unsigned a; asm(\"{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\" : \"=r\"(a) : \"l\"(p)); return a; }\n" \
    "/* The shared::cluster address of local shared address a in the CTA of rank k. */\n"                        \
    "__device__ __forceinline__ unsigned peer(unsigned a, unsigned k)\n"                                          \
    "{ unsigned r; asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\" : \"=r\"(r) : \"r\"(a), \"r\"(k)); return r; }\n" \
    "__device__ __forceinline__ void cluster_sync()\n"                                                            \
    "{\n"                                                                                                         \
    "    asm volatile(\"barrier.cluster.arrive.release.aligned;\" ::: \"memory\");\n"                               \
    "    asm volatile(\"barrier.cluster.wait.acquire.aligned;\" ::: \"memory\");\n"                                 \
    "}\n"                                                                                                         \
    "__device__ __forceinline__ void bar_init(unsigned bar)\n"                                                    \
    "{ asm volatile(\"mbarrier.init.shared::cta.b64 [%0], 1;\" :: \"r\"(bar) : \"memory\"); }\n"                      \
    "__device__ __forceinline__ void bar_expect(unsigned bar, unsigned bytes)\n"                                  \
    "{ asm volatile(\"{ .reg .b64 st; mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 st, [%0], %1; }\"\n"    \
    "               :: \"r\"(bar), \"r\"(bytes) : \"memory\"); }\n"                                                 \
    "__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity)\n"                                   \
    "{\n"                                                                                                         \
    "    unsigned done = 0;\n"                                                                                    \
    "    while (!done)\n"                                                                                         \
    "        asm volatile(\"{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\"\n" \
    "                     \" selp.u32 %0, 1, 0, p; }\" : \"=r\"(done) : \"r\"(bar), \"r\"(parity) : \"memory\");\n"    \
    "}\n"
