/* The driver-call check of the standalone probes (ipc_order_probe,
 * sol_probe): a failed call prints where and why, then ends the process
 * (_exit: a probe's forked children must not run the parent's exit path). */
#pragma once

#include <cuda.h>
#include <stdio.h>
#include <unistd.h>

#define CK(x)                                                                       \
    do {                                                                            \
        CUresult r_ = (x);                                                          \
        if (r_ != CUDA_SUCCESS) {                                                   \
            const char *s_ = 0;                                                     \
            cuGetErrorString(r_, &s_);                                              \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?"); \
            _exit(2);                                                               \
        }                                                                           \
    } while (0)
