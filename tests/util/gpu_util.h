/* GPU test helpers over kjit's own dlopen'd driver table (no -lcuda). */
#ifndef KJIT_GPU_UTIL_H
#define KJIT_GPU_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu/cuda_api.h"
#include "kjit.h"
#include "ref.h"

/* Runs a driver call; on failure prints the call and the CUDA error name
 * and exits 1 (tests and benchmarks only). */
#define CU_CHECK(call)                                                                \
    do {                                                                              \
        CUresult r_ = (call);                                                         \
        if (r_ != CUDA_SUCCESS) {                                                     \
            const char *n_ = "?";                                                     \
            kjit__cu()->GetErrorName(r_, &n_);                                        \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, n_); \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

/* Exits 77 (skipped), saying why; exits 1 instead when KJIT_REQUIRE_GPU is
 * set (not "0"), as on the GPU test host, where a driver that does not
 * start must fail the run rather than skip every test. */
_Noreturn void kjit_gpu_skip(const char *test, const char *why);

/* Creates a context on device 0, or kjit_gpu_skip without a driver/GPU. */
kjit_ctx *kjit_gpu_ctx_or_skip(const char *test, kjit_index_check check);

/* Allocation and copies that abort the test on failure. The ctx's CUDA
 * context is made current by kjit_gpu_ctx_or_skip. */
CUdeviceptr gpu_alloc(size_t bytes);
void gpu_free(CUdeviceptr p);
void gpu_upload(CUdeviceptr dst, const void *src, size_t bytes);
void gpu_download(void *dst, CUdeviceptr src, size_t bytes);
/* n normal draws (mean, sd) rounded to dt, on the device. */
CUdeviceptr gpu_upload_normal(ref_rng *g, kjit_dtype dt, size_t n, double mean, double sd);
/* A fresh host copy of bytes of the device (free() it). */
void *gpu_download_new(CUdeviceptr src, size_t bytes);
/* Fills with 0xFF bytes: NaN in fp32, bf16 and fp16, -1 in int. */
void gpu_poison(CUdeviceptr p, size_t bytes);
void gpu_sync(void);

/* Host-side conversions of a kjit dtype buffer to/from double. */
void host_from_double(kjit_dtype dt, const double *in, void *out, size_t n);
void host_to_double(kjit_dtype dt, const void *in, double *out, size_t n);

#endif
