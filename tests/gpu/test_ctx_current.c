/* The primary context a kjit context makes current on a thread that had
 * none: a second kjit context on the device, then the first destroyed, and
 * the primary context stays current (plain driver calls keep working for
 * the second one's caller); destroying the last one unsets it. */
#include <stdio.h>
#include <string.h>

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
    /* An arch whose cubins the device cannot run is refused when the
     * context is made, naming both (every op failed at its first launch,
     * naming a kernel); the device's own is taken. */
    {
        kjit_device_info d;
        kjit_runtime_info ri;
        CHECK_STATUS(kjit_device_info_get(0, &d), KJIT_OK);
        CHECK_STATUS(kjit_runtime_info_get(&ri), KJIT_OK);
        /* Another major version NVRTC knows (so the refusal is the device's,
         * not NVRTC's). */
        int o_sm = 0;
        for (int i = 0; i < ri.n_archs && !o_sm; ++i)
            if (ri.archs[i] / 10 != d.sm / 10) o_sm = ri.archs[i];
        CHECK(o_sm != 0);
        char own[16], other[16];
        snprintf(own, sizeof own, "sm_%d", d.sm);
        snprintf(other, sizeof other, "sm_%d", o_sm);
        kjit_ctx_options o;
        kjit_ctx_options_init(&o);
        o.arch = other;
        kjit_ctx *c = (kjit_ctx *)1;
        CHECK_STATUS(kjit_ctx_create(&c, &o), KJIT_EINVAL);
        CHECK(c == NULL);
        CHECK(strstr(kjit_last_error(), other) && strstr(kjit_last_error(), own) &&
              strstr(kjit_last_error(), "cannot run"));
        o.arch = own;
        CHECK_STATUS(kjit_ctx_create(&c, &o), KJIT_OK);
        CHECK(c && !strcmp(kjit_ctx_arch(c), own));
        kjit_ctx_destroy(c);
        CU_CHECK(cu->CtxGetCurrent(&cur));
        CHECK(cur == NULL);
    }
    printf("contexts: the primary context stays current while a second kjit context holds it, unset after the "
           "last one\n");
    return kjit_test_result("test_ctx_current");
}
