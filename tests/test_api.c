/* Every public function fed bad arguments returns the documented status, a
 * message naming the argument, and writes nothing. Runs without a GPU. */
#include <stdlib.h>
#include <string.h>

#include "kjit.h"
#include "test_util.h"

static void status_map(void)
{
    CHECK(strcmp(kjit_status_name(KJIT_OK), "KJIT_OK") == 0);
    CHECK(strcmp(kjit_status_name(KJIT_ENODRIVER), "KJIT_ENODRIVER") == 0);
    CHECK(strcmp(kjit_status_string(KJIT_ENODRIVER), "no CUDA driver") == 0);
    CHECK(strcmp(kjit_status_name(12345), "KJIT_UNKNOWN") == 0);
    kjit_dtype dt = KJIT_I64;
    CHECK_STATUS(kjit_dtype_parse("bfloat16", &dt), KJIT_OK);
    CHECK_EQ_INT(dt, KJIT_BF16);
    dt = KJIT_I64;
    CHECK_STATUS(kjit_dtype_parse("fp8", &dt), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "fp8") != NULL);
    CHECK_EQ_INT(dt, KJIT_I64);
    CHECK_STATUS(kjit_dtype_parse(NULL, &dt), KJIT_EINVAL);
    CHECK_EQ_INT(kjit_dtype_size(KJIT_BF16), 2);
}

static void ctx_args(const char *dir)
{
    kjit_ctx *ctx = (kjit_ctx *)0x1;
    kjit_ctx_options o;
    kjit_ctx_options_init(&o);
    CHECK_STATUS(kjit_ctx_create(NULL, &o), KJIT_EINVAL);
    o.device = -7;
    CHECK_STATUS(kjit_ctx_create(&ctx, &o), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "-7") != NULL);
    CHECK(ctx == NULL);
    kjit_ctx_options_init(&o);
    o.index_check = (kjit_index_check)9;
    CHECK_STATUS(kjit_ctx_create(&ctx, &o), KJIT_EINVAL);
    kjit_ctx_options_init(&o);
    o.arch = "sm_12";
    o.cache_dir = dir;
    CHECK_STATUS(kjit_ctx_create(&ctx, &o), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "sm_12") != NULL);
    kjit_ctx_destroy(NULL);
    int flag = 5;
    CHECK_STATUS(kjit_ctx_index_error(NULL, NULL, &flag), KJIT_EINVAL);
    CHECK_EQ_INT(flag, 5);
    CHECK_STATUS(kjit_ctx_cache_counters(NULL, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_runtime_info_get(NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_device_info_get(0, NULL), KJIT_EINVAL);
}

static void op_args(kjit_ctx *ctx)
{
    kjit_kernel_spec spec;
    memset(&spec, 0x5a, sizeof spec);
    int n = -3;
    CHECK_STATUS(kjit_op_kernels("no_such_op", 256, KJIT_BF16, &spec, 1, &n), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "no_such_op") != NULL);
    CHECK_EQ_INT(n, -3);
    CHECK_STATUS(kjit_op_kernels("timestep_sinusoid", 0, KJIT_BF16, &spec, 1, &n), KJIT_EINVAL);
    CHECK_STATUS(kjit_op_kernels("timestep_sinusoid", 256, KJIT_I32, &spec, 1, &n), KJIT_EINVAL);
    CHECK_STATUS(kjit_op_kernels(NULL, 256, KJIT_BF16, &spec, 1, &n), KJIT_EINVAL);
    CHECK_STATUS(kjit_op_kernels("timestep_sinusoid", 256, KJIT_BF16, NULL, 1, &n), KJIT_EINVAL);
    CHECK_EQ_INT(n, -3);
    CHECK_STATUS(kjit_kernel_build(NULL, &spec, NULL, NULL), KJIT_EINVAL);
    memset(&spec, 0, sizeof spec);
    CHECK_STATUS(kjit_kernel_build(ctx, &spec, NULL, NULL), KJIT_EINVAL); /* no op */
    spec.op = "no_such_op";
    spec.template_file = "timestep_sinusoid.cuh";
    CHECK_STATUS(kjit_kernel_build(ctx, &spec, NULL, NULL), KJIT_EINVAL);
    spec.op = "timestep_sinusoid"; /* empty name expression */
    CHECK_STATUS(kjit_kernel_build(ctx, &spec, NULL, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_op_kernels("timestep_sinusoid", 256, KJIT_BF16, &spec, 1, &n), KJIT_OK);
    CHECK_STATUS(kjit_kernel_build(ctx, &spec, "sm_12", NULL), KJIT_EINVAL);

    /* Sinusoid: every bad argument is refused before any device work. */
    float *t = (float *)0x1000;
    void *out = (void *)0x2000;
    kjit_sinusoid_opts o;
    kjit_sinusoid_opts_init(&o);
    CHECK_STATUS(kjit_timestep_sinusoid(NULL, t, 4, 256, out, 256, KJIT_F32, NULL, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, -1, 256, out, 256, KJIT_F32, NULL, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "n =") != NULL);
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 4, 0, out, 256, KJIT_F32, NULL, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "d = 0") != NULL);
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 4, 65537, out, 65537, KJIT_F32, NULL, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 4, 256, out, 255, KJIT_F32, NULL, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "out_stride") != NULL);
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 4, 256, out, 256, KJIT_I32, NULL, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, NULL, 4, 256, out, 256, KJIT_F32, NULL, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "t is NULL") != NULL);
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 4, 256, NULL, 256, KJIT_F32, NULL, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, (float *)0x1002, 4, 256, out, 256, KJIT_F32, NULL, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "aligned") != NULL);
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 4, 256, (void *)0x2001, 256, KJIT_BF16, NULL, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, INT64_MAX / 2, 256, out, 256, KJIT_F32, NULL, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "overflow") != NULL);
    o.downscale_freq_shift = 128; /* d/2 - shift == 0 */
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 4, 256, out, 256, KJIT_F32, &o, NULL), KJIT_EINVAL);
    kjit_sinusoid_opts_init(&o);
    o.max_period = 0;
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 4, 256, out, 256, KJIT_F32, &o, NULL), KJIT_EINVAL);
    /* N = 0 is a no-op, valid even without a GPU. */
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, NULL, 0, 256, NULL, 256, KJIT_F32, NULL, NULL), KJIT_OK);
    /* Valid arguments on a compile-only context: a clear "no CUDA driver"-class status. */
    if (!kjit_ctx_has_device(ctx)) {
        CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 4, 256, out, 256, KJIT_F32, NULL, NULL), KJIT_ENODRIVER);
        CHECK(kjit_last_error()[0] != '\0');
    }
}

int main(void)
{
    char *dir = kjit_test_tmpdir();
    status_map();
    ctx_args(dir);
    kjit_ctx_options o;
    kjit_ctx_options_init(&o);
    o.device = KJIT_NO_DEVICE;
    o.cache_dir = dir;
    kjit_ctx *ctx = NULL;
    CHECK_STATUS(kjit_ctx_create(&ctx, &o), KJIT_OK);
    if (ctx) {
        CHECK(!kjit_ctx_has_device(ctx));
        CHECK(strcmp(kjit_ctx_arch(ctx), "sm_90") == 0);
        op_args(ctx);
        kjit_ctx_destroy(ctx);
    }
    kjit_test_rmtree(dir);
    free(dir);
    return kjit_test_result("test_api");
}
