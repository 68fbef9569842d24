/* The smallest kjit program: create a context, run one op, check a value.
 * Build (kjit installed; libkjit itself loads the driver at run time, but
 * this program calls cuMemAlloc and friends for its buffers):
 *   cc embed.c $(pkg-config --cflags --libs kjit) -I/usr/local/cuda/include \
 *      -L/usr/local/cuda/lib64/stubs -lcuda -lm
 * Needs the CUDA driver library (libcuda.so.1) to start; with it and no GPU
 * it exits 77 (skipped). */
#include <cuda.h>
#include <math.h>
#include <stdio.h>

#include "kjit.h"

int main(void)
{
    kjit_ctx *ctx;
    if (kjit_ctx_create(&ctx, NULL)) {
        fprintf(stderr, "kjit_ctx_create: %s\n", kjit_last_error());
        return 1;
    }
    if (!kjit_ctx_has_device(ctx)) {
        printf("no GPU: %s\n", "skipping");
        kjit_ctx_destroy(ctx);
        return 77;
    }
    /* Device buffers through the driver API (a PyTorch tensor's data_ptr() works the same). */
    CUdeviceptr t, out;
    float ts[4] = {0.f, 1.f, 250.f, 999.f}, host[4 * 256];
    if (cuMemAlloc(&t, sizeof ts) != CUDA_SUCCESS || cuMemAlloc(&out, sizeof host) != CUDA_SUCCESS ||
        cuMemcpyHtoD(t, ts, sizeof ts) != CUDA_SUCCESS) {
        fprintf(stderr, "embed: device allocation failed\n");
        return 1;
    }

    kjit_sinusoid_opts o;
    kjit_sinusoid_opts_init(&o);
    o.flip_sin_to_cos = 1; /* MiniMax-H3: D = 256, flip, shift 0 */
    o.downscale_freq_shift = 0.0;
    int rc = kjit_timestep_sinusoid(ctx, (const float *)t, 4, 256, (void *)out, 256, KJIT_F32, &o, NULL);
    if (rc) {
        fprintf(stderr, "kjit_timestep_sinusoid: %s: %s\n", kjit_status_name(rc), kjit_last_error());
        return 1;
    }
    if (cuMemcpyDtoH(host, out, sizeof host) != CUDA_SUCCESS) return 1;
    /* Row 2, column 128 + 0 is sin(250 * 1) with flip. */
    printf("embed: sin(250) = %.7f (kjit %.7f)\n", sin(250.0), host[2 * 256 + 128]);
    cuMemFree(t);
    cuMemFree(out);
    kjit_ctx_destroy(ctx);
    return fabs(host[2 * 256 + 128] - sin(250.0)) < 1e-6 ? 0 : 1;
}
