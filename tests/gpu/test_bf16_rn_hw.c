/* kjit_bf16_bits_rn (kernel_templates/common/kjit_bf16_rn.h), the integer
 * float -> bf16 rounding the kernels use before sm_80, equals the GPU's
 * cvt.rn.bf16.f32 on every one of the 2^32 float bit patterns (NaNs, both
 * infinities, subnormals, ties, overflow). The same check with truncation
 * in its place must find differences. Needs a GPU of sm_80 or newer. */
#include <string.h>

#include "common/kjit_params.h"
#include "core/ctx.h"
#include "gpu_util.h"
#include "jit/compile.h"
#include "test_util.h"

static unsigned long long run(kjit_ctx *ctx, int mode, unsigned *first)
{
    const kjit_cu_api *cu = kjit__cu();
    char expr[64], *lowered = NULL;
    void *cubin = NULL;
    size_t len = 0;
    snprintf(expr, sizeof expr, "kjit_bf16_rn_check<%d>", mode);
    CHECK_STATUS(kjit__jit_compile("bf16_rn_check.cuh", expr, ctx->sm, &lowered, &cubin, &len), KJIT_OK);
    CUmodule mod;
    CUfunction fn;
    CU_CHECK(cu->ModuleLoadData(&mod, cubin));
    CU_CHECK(cu->ModuleGetFunction(&fn, mod, lowered));
    CUdeviceptr d = gpu_alloc(16);
    gpu_poison(d, 16);
    CU_CHECK(cu->MemsetD8(d, 0, 12)); /* bad (8 bytes) and first (4) */
    unsigned long long bad = 0;
    kjit_bf16_check_params p = {0, 1ull << 32, (unsigned long long *)(uintptr_t)d, (unsigned int *)(uintptr_t)(d + 8)};
    void *args[] = {&p};
    CU_CHECK(cu->LaunchKernel(fn, 132 * 16, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    gpu_sync();
    gpu_download(&bad, d, 8);
    gpu_download(first, d + 8, 4);
    gpu_free(d);
    CU_CHECK(cu->ModuleUnload(mod));
    free(lowered);
    free(cubin);
    return bad;
}

int main(void)
{
    kjit_ctx *ctx = kjit_gpu_ctx_or_skip("test_bf16_rn_hw", KJIT_INDEX_CHECK_OFF);
    if (ctx->sm < 80) {
        printf("test_bf16_rn_hw: sm_%d has no cvt.rn.bf16.f32, skipped\n", ctx->sm);
        kjit_ctx_destroy(ctx);
        return 77;
    }
    unsigned first = 0;
    const unsigned long long bad = run(ctx, 0, &first);
    printf("test_bf16_rn_hw: cvt.rn.bf16.f32 vs kjit_bf16_bits_rn over 2^32 inputs: %llu differ%s", bad,
           bad ? "" : "\n");
    if (bad) printf(" (e.g. bits %08x)\n", first);
    CHECK(bad == 0);
    unsigned first_t = 0;
    const unsigned long long bad_t = run(ctx, 1, &first_t);
    printf("test_bf16_rn_hw: truncation instead: %llu differ (e.g. bits %08x)\n", bad_t, first_t);
    CHECK(bad_t > 0);
    kjit_ctx_destroy(ctx);
    return kjit_test_result("test_bf16_rn_hw");
}
