/* The primary context a kjit context makes current on a thread that had
 * none: a second kjit context on the device, then the first destroyed, and
 * the primary context stays current (plain driver calls keep working for
 * the second one's caller); destroying the last one unsets it. */
#include <stdio.h>

#include "gpu_util.h"
#include "test_util.h"

int main(void)
{
    kjit_ctx *first = kjit_gpu_ctx_or_skip("test_ctx_current", KJIT_INDEX_CHECK_OFF);
    const kjit_cu_api *cu = kjit__cu();
    CUcontext cur = NULL;
    CU_CHECK(cu->CtxGetCurrent(&cur));
    CHECK(cur != NULL); /* made current by the first context */
    kjit_ctx *second = kjit_gpu_ctx_or_skip("test_ctx_current", KJIT_INDEX_CHECK_OFF);
    kjit_ctx_destroy(first);
    cur = NULL;
    CU_CHECK(cu->CtxGetCurrent(&cur));
    CHECK(cur != NULL);
    CUdeviceptr p = 0;
    CU_CHECK(cu->MemAlloc(&p, 256));
    CU_CHECK(cu->MemsetD8(p, 0x5A, 256));
    CU_CHECK(cu->MemFree(p));
    kjit_ctx_destroy(second);
    CU_CHECK(cu->CtxGetCurrent(&cur));
    CHECK(cur == NULL);
    printf("contexts: the primary context stays current while a second kjit context holds it, unset after the "
           "last one\n");
    return kjit_test_result("test_ctx_current");
}
