/* Every public function fed bad arguments returns the documented status, a
 * message naming the argument, and writes nothing. Runs without a GPU. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <ftw.h>
#include <string.h>
#include <unistd.h>

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
    for (int t = -1; t <= 5; t += 6) { /* neither turns the tuner on */
        kjit_ctx_options_init(&o);
        o.tune = t;
        o.device = KJIT_NO_DEVICE;
        o.cache_dir = dir;
        CHECK_STATUS(kjit_ctx_create(&ctx, &o), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "tune") != NULL);
        CHECK(ctx == NULL);
    }
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
    CHECK(strstr(kjit_last_error(), "out is NULL (max > 0)") != NULL);
    CHECK_STATUS(kjit_op_kernels("timestep_sinusoid", 256, KJIT_BF16, &spec, -1, &n), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "max < 0") != NULL);
    CHECK_EQ_INT(n, -3);
    /* A count alone (no specs) is the count the full list has, for every op
     * and for a size it refuses too. */
    for (int i = 0; i < kjit_op_count(); ++i) {
        kjit_kernel_spec all[64];
        int n_all = -1, n_count = -2, n_one = -3;
        CHECK_STATUS(kjit_op_kernels(kjit_op_name(i), 512, KJIT_BF16, all, 64, &n_all), KJIT_OK);
        CHECK_STATUS(kjit_op_kernels(kjit_op_name(i), 512, KJIT_BF16, NULL, 0, &n_count), KJIT_OK);
        CHECK_STATUS(kjit_op_kernels(kjit_op_name(i), 512, KJIT_BF16, all, 1, &n_one), KJIT_OK);
        CHECK_EQ_INT(n_count, n_all);
        CHECK_EQ_INT(n_one, n_all);
        CHECK_STATUS(kjit_op_kernels(kjit_op_name(i), 0, KJIT_BF16, NULL, 0, &n_count), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "hidden") != NULL);
    }
    n = -3;
    /* Each function's messages name it (kjit_kernel_build's named fetch). */
    CHECK_STATUS(kjit_kernel_build(NULL, &spec, NULL, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "kjit_kernel_build: ctx is NULL") != NULL);
    CHECK_STATUS(kjit_kernel_fetch(NULL, &spec, NULL, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "kjit_kernel_fetch: ctx is NULL") != NULL);
    memset(&spec, 0, sizeof spec);
    CHECK_STATUS(kjit_kernel_build(ctx, &spec, NULL, NULL), KJIT_EINVAL); /* no op */
    CHECK(strstr(kjit_last_error(), "kjit_kernel_build: spec does not come from") != NULL);
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
    /* Past the top of the address space (the device would wrap to low
     * addresses): refused, named; the same spans one step lower pass. */
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 8, 256, (void *)(uintptr_t)(UINTPTR_MAX - 4095), 256, KJIT_F32, NULL,
                                        NULL), KJIT_EINVAL); /* 8 rows of 1 KiB from 4 KiB below the top */
    CHECK(strstr(kjit_last_error(), "out:") && strstr(kjit_last_error(), "end of the address space"));
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, (float *)(uintptr_t)(UINTPTR_MAX - 7), 4, 256, out, 256, KJIT_F32, NULL,
                                        NULL), KJIT_EINVAL); /* 16 bytes of t from 8 below the top */
    CHECK(strstr(kjit_last_error(), "t:") && strstr(kjit_last_error(), "end of the address space"));
    if (!kjit_ctx_has_device(ctx)) {
        CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 8, 256, (void *)(uintptr_t)(UINTPTR_MAX - 8207), 256, KJIT_F32,
                                            NULL, NULL), KJIT_ENODRIVER); /* its end 16 bytes below the top */
        CHECK_STATUS(kjit_timestep_sinusoid(ctx, (float *)(uintptr_t)(UINTPTR_MAX - 31), 4, 256, out, 256, KJIT_F32,
                                            NULL, NULL), KJIT_ENODRIVER);
    }
    o.downscale_freq_shift = 128; /* d/2 - shift == 0 */
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 4, 256, out, 256, KJIT_F32, &o, NULL), KJIT_EINVAL);
    o.downscale_freq_shift = 0; /* d = 1: half = 0, and 0 - 0 == 0 too */
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 4, 1, out, 1, KJIT_F32, &o, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "d = 1") != NULL);
    o.downscale_freq_shift = INFINITY;
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 4, 256, out, 256, KJIT_F32, &o, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "downscale_freq_shift inf") != NULL);
    kjit_sinusoid_opts_init(&o);
    o.scale = NAN;
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, t, 4, 256, out, 256, KJIT_F32, &o, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "scale nan") != NULL);
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


/* The AdaLN ops refuse bad arguments before touching the device, so these
 * run on CI: each bad field gives KJIT_EINVAL naming it; valid arguments on a
 * compile-only context give KJIT_ENODRIVER. */
/* Operands of the argument tests: each its own region of one buffer, so
 * that valid calls pass the overlap check (tables as chunk(6) views of one
 * (3, 6 * 64) bf16 table, which interleave without sharing a byte). */
enum { REGION = 2048, NREGION = 24 };
static char mem[REGION * NREGION] __attribute__((aligned(256)));
#define RG(k) (mem + (k) * REGION)
static kjit_adaln_args adaln_fixture(void)
{
    kjit_adaln_args g;
    memset(&g, 0, sizeof g);
    g.n = 4, g.hidden = 64, g.eps = 1e-6f, g.act_dtype = KJIT_BF16, g.param_dtype = KJIT_BF16;
    g.index.ptr = RG(0), g.index.dtype = KJIT_I32, g.index.rows = 3;
    g.x = RG(1), g.res = RG(2), g.y = RG(3), g.dout = RG(4), g.dh = RG(5);
    g.x_stride = g.res_stride = g.y_stride = g.dout_stride = g.dh_stride = 64;
    g.shift = RG(6), g.scale = RG(6) + 128, g.gate = RG(6) + 256;
    g.shift_stride = g.scale_stride = g.gate_stride = 6 * 64;
    g.out = RG(7), g.h = RG(8), g.dx = RG(9), g.dy = RG(10);
    g.dshift = RG(11), g.dscale = RG(11) + 128, g.dgate = RG(11) + 256;
    g.out_stride = g.h_stride = g.dx_stride = g.dy_stride = 64;
    g.dshift_stride = g.dscale_stride = g.dgate_stride = 6 * 64;
    return g;
}
/* adaln_row_gather: k tables as views of one (3, k * 64) table. The
 * forward reads the tables and writes out, the backward reads dout and
 * writes dtable: each pair may share memory, never meeting in one call. */
static kjit_row_gather_args gather_fixture(int k, kjit_dtype idx)
{
    kjit_row_gather_args r;
    memset(&r, 0, sizeof r);
    r.n = 4, r.hidden = 64, r.num_tables = k, r.dtype = KJIT_BF16;
    r.index.ptr = RG(0), r.index.dtype = idx, r.index.rows = 3;
    for (int i = 0; i < k; ++i) {
        r.table[i] = r.dtable[i] = RG(1) + i * 128;
        r.dout[i] = r.out[i] = RG(3) + i * 512;
        r.table_stride[i] = r.dtable_stride[i] = k * 64;
        r.out_stride[i] = r.dout_stride[i] = 64;
    }
    return r;
}
#define WEIGHT RG(12)
#define PART RG(14)
#define WS RG(16) /* up to 8 regions */

static void adaln_args(kjit_ctx *ctx)
{
    const kjit_adaln_args g = adaln_fixture();
    typedef int (*fwd_fn)(kjit_ctx *, const kjit_adaln_args *, CUstream);
    typedef int (*bwd_fn)(kjit_ctx *, const kjit_adaln_args *, void *, size_t, CUstream);
    const fwd_fn fwds[3] = {kjit_norm_modulate_fwd, kjit_gated_residual_fwd, kjit_gated_residual_norm_modulate_fwd};
    const bwd_fn bwds[3] = {kjit_norm_modulate_bwd, kjit_gated_residual_bwd, kjit_gated_residual_norm_modulate_bwd};
    for (int m = 0; m < 3; ++m) {
        kjit_adaln_args a;
#define BAD(stmt, word)                                                              \
        do {                                                                         \
            a = g;                                                                   \
            stmt;                                                                    \
            CHECK_STATUS(fwds[m](ctx, &a, NULL), KJIT_EINVAL);                       \
            CHECK(strstr(kjit_last_error(), word) != NULL);                          \
            CHECK_STATUS(bwds[m](ctx, &a, NULL, 0, NULL), KJIT_EINVAL);              \
            CHECK(strstr(kjit_last_error(), word) != NULL);                          \
        } while (0)
        BAD(a.hidden = 0, "hidden");
        BAD(a.hidden = 1 << 20, "hidden");
        BAD(a.n = -5, "n =");
        BAD(a.n = 1LL << 40, "n =");
        BAD(a.act_dtype = KJIT_I64, "act_dtype");
        BAD(a.param_dtype = KJIT_F16, "param_dtype");
        BAD(a.index.dtype = KJIT_BF16, "index dtype");
        BAD(a.index.rows = 0, "index.rows");
        BAD(a.index.rows = 70000, "index.rows");
        BAD(a.index.ptr = NULL, "index is NULL");
        BAD(a.index.ptr = mem + 2, "index is not aligned");
        BAD(a.shift_stride = a.scale_stride = a.gate_stride = 63; a.dshift_stride = a.dscale_stride = a.dgate_stride = 63,
            "stride");
        BAD(a.x_stride = a.res_stride = a.y_stride = a.dout_stride = 10, "stride");
        BAD(a.x = a.res = a.y = a.dout = NULL, "NULL");
        BAD(a.x = a.res = a.y = a.dout = mem + 1, "aligned");
#undef BAD
        if (m != 1) {
            a = g;
            a.eps = -1.0f;
            CHECK_STATUS(fwds[m](ctx, &a, NULL), KJIT_EINVAL);
            CHECK(strstr(kjit_last_error(), "eps") != NULL);
            a = g;
            a.dweight = mem; /* without a weight */
            CHECK_STATUS(bwds[m](ctx, &a, NULL, 0, NULL), KJIT_EINVAL);
            CHECK(strstr(kjit_last_error(), "dweight") != NULL);
        }
        /* The row gradients alone: every parameter gradient NULL; some of
         * them NULL is refused, naming the first missing, and nothing is
         * written (every buffer here is mem, poisoned first). */
        static char before[sizeof mem];
        memset(mem, 0xA5, sizeof mem);
#define REFUSED(stmt, word)                                                          \
        do {                                                                         \
            stmt;                                                                    \
            memcpy(before, mem, sizeof mem);                                         \
            CHECK_STATUS(bwds[m](ctx, &a, NULL, 0, NULL), KJIT_EINVAL);              \
            CHECK(strstr(kjit_last_error(), word) != NULL);                          \
            CHECK(memcmp(before, mem, sizeof mem) == 0);                             \
        } while (0)
        kjit_adaln_args r = g;
        r.dshift = r.dscale = r.dgate = NULL;
        if (m != 1) {
            REFUSED((a = g, a.dshift = NULL), "dshift is NULL while other parameter gradients are given");
            REFUSED((a = g, a.dscale = NULL), "dscale is NULL while");
            REFUSED((a = r, a.weight = a.dweight = mem), "dshift is NULL while"); /* dweight alone */
            if (m == 2) REFUSED((a = g, a.dgate = NULL), "dgate is NULL while");
            REFUSED((a = r, a.dx = NULL), "dx");
            if (m == 2) REFUSED((a = r, a.dy = NULL), ": dy is NULL");
            REFUSED((a = r, a.dweight = mem), "dweight given but weight is NULL"); /* named first */
            a = r;
            a.weight = WEIGHT; /* with a weight, without its gradient */
            if (!kjit_ctx_has_device(ctx)) CHECK_STATUS(bwds[m](ctx, &a, NULL, 0, NULL), KJIT_ENODRIVER);
        } else {
            /* gated_residual: dgate is its one parameter gradient; without
             * it dy (and dx when given) alone, reading no y. */
            REFUSED((a = g, a.y = NULL), ": y is NULL");
            REFUSED((a = r, a.dy = NULL), ": dy is NULL");
            REFUSED((a = r, a.gate = NULL), ": gate is NULL");
            REFUSED((a = r, a.dout = NULL), ": dout is NULL");
            REFUSED((a = r, a.dx = mem + 1), "dx (dres) is not aligned"); /* optional, checked when given */
            REFUSED((a = r, a.dx_stride = 10), "dx (dres) row stride 10 < hidden 64");
        }
#undef REFUSED
        a = r;
        a.n = 0; /* no parameter gradient to zero: nothing to do */
        CHECK_STATUS(bwds[m](ctx, &a, NULL, 0, NULL), KJIT_OK);
        /* The training backward reads no partition then, and checks none. */
        CHECK_STATUS(kjit_adaln_train_bwd(ctx, (kjit_adaln_op)(m + 1), &a, NULL, 0, NULL, 0, NULL), KJIT_OK);
        if (!kjit_ctx_has_device(ctx)) {
            /* No workspace is used: a small one is not refused; nor is a
             * training backward without a partition, nor no y (it only
             * feeds dgate), nor (gated_residual) no dx. */
            CHECK_STATUS(bwds[m](ctx, &r, mem, 16, NULL), KJIT_ENODRIVER);
            CHECK_STATUS(kjit_adaln_train_bwd(ctx, (kjit_adaln_op)(m + 1), &r, NULL, 0, NULL, 0, NULL),
                         KJIT_ENODRIVER);
            a = r;
            a.y = NULL;
            if (m == 1) a.dx = NULL;
            CHECK_STATUS(bwds[m](ctx, &a, NULL, 0, NULL), KJIT_ENODRIVER);
        }
        memset(mem, 0, sizeof mem);
        CHECK_STATUS(bwds[m](ctx, &g, mem, 16, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "workspace") != NULL);
        /* A misaligned workspace is refused with the other arguments,
         * before anything is compiled, loaded or run (compile-only: not
         * KJIT_ENODRIVER). */
        CHECK_STATUS(bwds[m](ctx, &g, mem + 16, (size_t)1 << 40, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "workspace is not 256-byte aligned") != NULL);
        /* The training pair: the caller's partition buffer, aligned, large
         * enough; a valid op; the op's own argument checks. */
        const kjit_adaln_op aop = (kjit_adaln_op)(m + 1);
        size_t need = 0, wsb = 0;
        CHECK_STATUS(kjit_adaln_partition_bytes(aop, g.n, g.hidden, g.index.rows, &need), KJIT_OK);
        CHECK_STATUS(kjit_adaln_workspace(aop, g.n, g.hidden, g.index.rows, &wsb), KJIT_OK);
        CHECK(need > 0 && need < wsb && need <= REGION && wsb <= 8 * REGION);
        CHECK_STATUS(kjit_adaln_train_fwd(ctx, aop, &g, NULL, need, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "partition is NULL") != NULL);
        CHECK_STATUS(kjit_adaln_train_bwd(ctx, aop, &g, NULL, need, NULL, 0, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "partition is NULL") != NULL);
        CHECK_STATUS(kjit_adaln_train_fwd(ctx, aop, &g, PART, need - 1, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "needed") != NULL);
        CHECK_STATUS(kjit_adaln_train_bwd(ctx, aop, &g, PART, need - 1, NULL, 0, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "needed") != NULL);
        CHECK_STATUS(kjit_adaln_train_fwd(ctx, aop, &g, PART + 16, need, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "aligned") != NULL);
        CHECK_STATUS(kjit_adaln_train_bwd(ctx, aop, &g, PART + 16, need, NULL, 0, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "aligned") != NULL);
        CHECK(strstr(kjit_last_error(), "training backward") != NULL);
        CHECK_STATUS(kjit_adaln_train_bwd(ctx, aop, &g, PART, need, mem, 16, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "workspace") != NULL);
        CHECK_STATUS(kjit_adaln_train_fwd(ctx, (kjit_adaln_op)4, &g, PART, need, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "op 4") != NULL);
        CHECK_STATUS(kjit_adaln_train_bwd(ctx, (kjit_adaln_op)0, &g, PART, need, NULL, 0, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "op 0") != NULL);
        CHECK_STATUS(kjit_adaln_train_fwd(NULL, aop, &g, PART, need, NULL), KJIT_EINVAL);
        CHECK_STATUS(kjit_adaln_train_bwd(ctx, aop, NULL, mem, need, NULL, 0, NULL), KJIT_EINVAL);
        a = g;
        a.hidden = 0;
        CHECK_STATUS(kjit_adaln_train_fwd(ctx, aop, &a, PART, need, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "hidden") != NULL);
        a = g;
        a.n = 0; /* nothing to build or compute */
        CHECK_STATUS(kjit_adaln_train_fwd(ctx, aop, &a, PART, need, NULL), KJIT_OK);
        if (!kjit_ctx_has_device(ctx)) {
            CHECK_STATUS(kjit_adaln_train_fwd(ctx, aop, &g, PART, need, NULL), KJIT_ENODRIVER);
            CHECK_STATUS(kjit_adaln_train_bwd(ctx, aop, &g, PART, need, NULL, 0, NULL), KJIT_ENODRIVER);
        }
        CHECK_STATUS(fwds[m](NULL, &g, NULL), KJIT_EINVAL);
        CHECK_STATUS(fwds[m](ctx, NULL, NULL), KJIT_EINVAL);
        /* A workspace or partition buffer whose needed bytes run past the
         * top of the address space (the device would wrap to low
         * addresses): refused, named, as every other operand. */
        {
            void *top = (void *)(uintptr_t)(UINTPTR_MAX - 255); /* 256-byte aligned, 256 bytes left */
            CHECK_STATUS(bwds[m](ctx, &g, top, SIZE_MAX, NULL), KJIT_EINVAL);
            CHECK(strstr(kjit_last_error(), "workspace:") && strstr(kjit_last_error(), "end of the address space"));
            CHECK_STATUS(kjit_adaln_train_fwd(ctx, aop, &g, top, SIZE_MAX, NULL), KJIT_EINVAL);
            CHECK(strstr(kjit_last_error(), "partition:") && strstr(kjit_last_error(), "end of the address space"));
            CHECK_STATUS(kjit_adaln_train_bwd(ctx, aop, &g, top, SIZE_MAX, NULL, 0, NULL), KJIT_EINVAL);
            CHECK(strstr(kjit_last_error(), "partition:") && strstr(kjit_last_error(), "end of the address space"));
        }
        a = g;
        a.n = 0;
        CHECK_STATUS(fwds[m](ctx, &a, NULL), KJIT_OK);
        /* n = 0: the operands of n rows and the index are not read, nor
         * checked; the tables are, as at any n (kjit.h). */
        a.x = a.res = a.y = a.out = a.h = NULL;
        a.index.ptr = mem + 2;
        CHECK_STATUS(fwds[m](ctx, &a, NULL), KJIT_OK);
        a.index.ptr = NULL;
        CHECK_STATUS(fwds[m](ctx, &a, NULL), KJIT_OK);
        a.shift = a.gate = NULL;
        CHECK_STATUS(fwds[m](ctx, &a, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), m == 1 ? "gate is NULL" : "shift is NULL") != NULL);
        if (!kjit_ctx_has_device(ctx)) {
            CHECK_STATUS(fwds[m](ctx, &g, NULL), KJIT_ENODRIVER);
            CHECK_STATUS(bwds[m](ctx, &g, NULL, 0, NULL), KJIT_ENODRIVER);
        }
    }
    size_t bytes = 7;
    CHECK_STATUS(kjit_adaln_workspace((kjit_adaln_op)0, 10, 64, 3, &bytes), KJIT_EINVAL);
    CHECK_STATUS(kjit_adaln_workspace(KJIT_NORM_MODULATE, -1, 64, 3, &bytes), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "n = -1 outside") != NULL);
    CHECK_STATUS(kjit_adaln_workspace(KJIT_NORM_MODULATE, 10, 64, 0, &bytes), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "rows = 0 outside") != NULL);
    CHECK_STATUS(kjit_adaln_workspace(KJIT_NORM_MODULATE, 10, 64, 3, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_adaln_partition_bytes((kjit_adaln_op)9, 10, 64, 3, &bytes), KJIT_EINVAL);
    CHECK_STATUS(kjit_adaln_partition_bytes(KJIT_NORM_MODULATE, 10, 0, 3, &bytes), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "hidden = 0 outside") != NULL);
    CHECK_STATUS(kjit_adaln_partition_bytes(KJIT_NORM_MODULATE, 10, 64, 3, NULL), KJIT_EINVAL);
    CHECK_EQ_INT(bytes, 7);
    /* The partition is ~4 bytes per row: what a training step keeps from
     * the forward to the backward. */
    CHECK_STATUS(kjit_adaln_partition_bytes(KJIT_NORM_MODULATE, 32768, 5376, 9, &bytes), KJIT_OK);
    CHECK_LE(bytes, 32768 * 4 + 8192);
    CHECK_STATUS(kjit_adaln_workspace(KJIT_GATED_RESIDUAL_NORM_MODULATE, 32768, 5376, 4096, &bytes), KJIT_OK);
    CHECK_LE(bytes, 32e6);

    kjit_row_gather_args r = gather_fixture(6, KJIT_I64);
    kjit_row_gather_args b = r;
    b.num_tables = 0;
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "num_tables") != NULL);
    b = r, b.num_tables = 9;
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &b, NULL, 0, NULL), KJIT_EINVAL);
    b = r, b.dtype = KJIT_F16;
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_EINVAL);
    b = r, b.table[3] = NULL;
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "table[3]") != NULL);
    /* Sizes out of range, and rows whose offsets overflow, each named. */
    b = r, b.n = -1;
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "n = -1 outside") != NULL);
    b = r, b.n = 2147483648LL;
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &b, NULL, 0, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "n = 2147483648 outside") != NULL);
    b = r, b.hidden = 0;
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "hidden 0 outside") != NULL);
    b = r, b.hidden = 65537;
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &b, NULL, 0, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "hidden 65537 outside") != NULL);
    b = r, b.n = 2147483647LL, b.out_stride[2] = 1LL << 33;
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "out[2]") && strstr(kjit_last_error(), "overflow 64-bit offsets"));
    /* Rows, or an index, that would run past the top of the address space
     * (the device's addresses would wrap to low ones): refused, named. */
    b = r, b.out[2] = (void *)(uintptr_t)(UINTPTR_MAX - 255); /* 4 rows of 128 bytes, pitch 128 */
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "out[2]") && strstr(kjit_last_error(), "end of the address space"));
    b = r, b.table[1] = (void *)(uintptr_t)(UINTPTR_MAX - 1023); /* 3 rows of pitch 768: 1664 bytes */
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "table[1]") && strstr(kjit_last_error(), "end of the address space"));
    b = r, b.index.ptr = (void *)(uintptr_t)(UINTPTR_MAX - 15); /* 4 int64 entries: 32 bytes */
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &b, NULL, 0, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "index") && strstr(kjit_last_error(), "end of the address space"));
    b = r, b.out[2] = (void *)(uintptr_t)(UINTPTR_MAX - 511); /* one past its end: 2^64 */
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "out[2]") && strstr(kjit_last_error(), "end of the address space"));
    if (!kjit_ctx_has_device(ctx)) { /* the same rows 16 bytes lower pass every check */
        b = r, b.out[2] = (void *)(uintptr_t)(UINTPTR_MAX - 527);
        CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_ENODRIVER);
    }
    b = r, b.dtable_stride[5] = 1;
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &b, NULL, 0, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "dtable[5]") != NULL);
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &r, mem, 8, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "kjit_adaln_row_gather_workspace") != NULL);
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &r, mem + 16, (size_t)1 << 40, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "workspace is not 256-byte aligned") != NULL);
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &r, (void *)(uintptr_t)(UINTPTR_MAX - 255), SIZE_MAX, NULL),
                 KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "workspace:") && strstr(kjit_last_error(), "end of the address space"));
    /* n = 0: the outputs and the index are not checked, the tables are. */
    b = r, b.n = 0, b.index.ptr = mem + 2, b.out[1] = NULL;
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_OK);
    b.table[1] = NULL;
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "table[1] is NULL") != NULL);
    bytes = 7;
    CHECK_STATUS(kjit_adaln_row_gather_workspace(10, 64, 0, 3, &bytes), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "num_tables = 0 outside 1..8") != NULL);
    CHECK_STATUS(kjit_adaln_row_gather_workspace(10, 64, 2, 0, &bytes), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "rows = 0 outside") != NULL);
    CHECK_EQ_INT(bytes, 7);
    CHECK_STATUS(kjit_adaln_row_gather_workspace(32768, 5376, 6, 4096, &bytes), KJIT_OK);
    CHECK_LE(bytes, 32e6);
    if (!kjit_ctx_has_device(ctx)) CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &r, NULL), KJIT_ENODRIVER);
    /* Nothing above wrote to the buffer the pointers name. */
    for (size_t i = 0; i < sizeof mem; ++i)
        if (mem[i]) {
            CHECK(!"a refused call wrote to its output");
            break;
        }
}

/* Outputs that share memory with another operand are refused, naming both,
 * before anything runs; the documented in-place pairs, given exactly, and
 * chunk(6) views that interleave without sharing a byte are accepted. */
static void overlaps(kjit_ctx *ctx)
{
    const kjit_adaln_args g = adaln_fixture();
    typedef int (*fwd_fn)(kjit_ctx *, const kjit_adaln_args *, CUstream);
    typedef int (*bwd_fn)(kjit_ctx *, const kjit_adaln_args *, void *, size_t, CUstream);
    const fwd_fn fwds[3] = {kjit_norm_modulate_fwd, kjit_gated_residual_fwd, kjit_gated_residual_norm_modulate_fwd};
    const bwd_fn bwds[3] = {kjit_norm_modulate_bwd, kjit_gated_residual_bwd, kjit_gated_residual_norm_modulate_bwd};
    const int ok = kjit_ctx_has_device(ctx) ? KJIT_OK : KJIT_ENODRIVER; /* accepted */
    static char before[sizeof mem];
    memset(mem, 0x5A, sizeof mem);
    memcpy(before, mem, sizeof mem);
    kjit_adaln_args a;
#define FWD(m, stmt, rc, word)                                                               \
    do {                                                                                     \
        a = g;                                                                               \
        stmt;                                                                                \
        CHECK_STATUS(fwds[m](ctx, &a, NULL), rc);                                            \
        if ((rc) == KJIT_EINVAL && !strstr(kjit_last_error(), word)) {                       \
            fprintf(stderr, "%s:%d: \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, kjit_last_error(), word); \
            kjit_test_failures++;                                                            \
        }                                                                                    \
    } while (0)
#define BWD(m, stmt, rc, word)                                                               \
    do {                                                                                     \
        a = g;                                                                               \
        stmt;                                                                                \
        CHECK_STATUS(bwds[m](ctx, &a, NULL, 0, NULL), rc);                                   \
        if ((rc) == KJIT_EINVAL && !strstr(kjit_last_error(), word)) {                       \
            fprintf(stderr, "%s:%d: \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, kjit_last_error(), word); \
            kjit_test_failures++;                                                            \
        }                                                                                    \
    } while (0)
    /* In place, as documented: norm_modulate out = x, gated_residual
     * out = res, the fused op's h = res; the same pointer and stride. */
    FWD(0, a.out = (void *)a.x, ok, "");
    FWD(1, a.out = (void *)a.res, ok, "");
    FWD(2, a.h = (void *)a.res, ok, "");
    FWD(0, (a.out = (void *)a.x, a.out_stride = 2 * 64), KJIT_EINVAL,
        "norm_modulate forward: out overlaps input x (in place, give it exactly as that input");
    FWD(0, a.out = (char *)a.x + 64, KJIT_EINVAL, "out overlaps input x (in place");
    FWD(0, a.out = (char *)a.x + 128, KJIT_EINVAL, "out overlaps input x"); /* one row on */
    FWD(0, a.out = (char *)a.x + 512, ok, "");                              /* just past x */
    FWD(0, a.out = (void *)a.shift, KJIT_EINVAL, "norm_modulate forward: out overlaps input shift");
    FWD(1, a.out = (char *)a.index.ptr + 8, KJIT_EINVAL, "gated_residual forward: out overlaps input index");
    FWD(0, (a.weight = WEIGHT, a.out = WEIGHT + 64), KJIT_EINVAL, "out overlaps input weight");
    FWD(1, a.out = (void *)a.y, KJIT_EINVAL, "gated_residual forward: out overlaps input y");
    FWD(1, a.out = (void *)a.gate, KJIT_EINVAL, "out overlaps input gate");
    FWD(2, a.out = a.h, KJIT_EINVAL, "gated_residual_norm_modulate forward: out overlaps output h");
    FWD(2, a.out = (void *)a.res, KJIT_EINVAL, "out overlaps input res");
    FWD(2, a.h = (void *)a.y, KJIT_EINVAL, "h overlaps input y");
    /* A table's chunk views written over one another, or over an input. */
    BWD(0, a.dscale = a.dshift, KJIT_EINVAL, "norm_modulate backward: dshift overlaps output dscale");
    BWD(0, a.dscale = (char *)a.dshift + 64, KJIT_EINVAL, "dshift overlaps output dscale");
    BWD(2, a.dgate = a.dscale, KJIT_EINVAL, "dscale overlaps output dgate");
    BWD(0, a.dx = (void *)a.dout, KJIT_EINVAL, "dx overlaps input dout");
    BWD(1, a.dy = (void *)a.y, KJIT_EINVAL, "gated_residual backward: dy overlaps input y");
    BWD(1, a.dx = a.dy, KJIT_EINVAL, "gated_residual backward: dy overlaps output dx (dres)");
    BWD(2, a.dx = a.dy, KJIT_EINVAL, "dx (dres) overlaps output dy");
    BWD(2, a.dx = (void *)a.dh, KJIT_EINVAL, "dx (dres) overlaps input dh");
    BWD(0, (a.weight = WEIGHT, a.dweight = WEIGHT), KJIT_EINVAL, "dweight overlaps input weight");
    BWD(0, (a.weight = WEIGHT, a.dweight = a.dx), KJIT_EINVAL, "dx overlaps output dweight");
    BWD(0, a.dshift = (void *)a.scale, KJIT_EINVAL, "dshift overlaps input scale");
    /* The row gradients alone are checked too. */
    BWD(0, (a.dshift = a.dscale = a.dgate = NULL, a.dx = (void *)a.x), KJIT_EINVAL, "dx overlaps input x");
    /* A caller's workspace is written: not over an operand. */
    size_t wsb = 0, need = 0;
    CHECK_STATUS(kjit_adaln_workspace(KJIT_NORM_MODULATE, g.n, g.hidden, g.index.rows, &wsb), KJIT_OK);
    CHECK_STATUS(kjit_adaln_partition_bytes(KJIT_NORM_MODULATE, g.n, g.hidden, g.index.rows, &need), KJIT_OK);
    CHECK(need % 256 == 0 && need < wsb);
    a = g;
    CHECK_STATUS(kjit_norm_modulate_bwd(ctx, &a, WS, wsb, NULL), ok);
    a.dx = WS + wsb - 256;
    CHECK_STATUS(kjit_norm_modulate_bwd(ctx, &a, WS, wsb, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "norm_modulate backward: dx overlaps output workspace") != NULL);
    a = g;
    a.dout = WS;
    CHECK_STATUS(kjit_norm_modulate_bwd(ctx, &a, WS, wsb, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "workspace overlaps input dout") != NULL);
    /* The training pair's partition: the forward writes it, the backward
     * reads it; it may be the workspace's first bytes, and nowhere else in it. */
    a = g;
    CHECK_STATUS(kjit_adaln_train_fwd(ctx, KJIT_NORM_MODULATE, &a, a.out, need, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "norm_modulate training forward: out overlaps output partition") != NULL);
    CHECK_STATUS(kjit_adaln_train_fwd(ctx, KJIT_NORM_MODULATE, &a, RG(6), need, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "partition overlaps input shift") != NULL);
    CHECK_STATUS(kjit_adaln_train_fwd(ctx, KJIT_NORM_MODULATE, &a, RG(0), need, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "partition overlaps input index") != NULL);
    a.n = 0; /* no rows: the forward writes no partition, nothing to refuse */
    CHECK_STATUS(kjit_adaln_train_fwd(ctx, KJIT_NORM_MODULATE, &a, a.out, need, NULL), KJIT_OK);
    a = g;
    CHECK_STATUS(kjit_adaln_train_bwd(ctx, KJIT_NORM_MODULATE, &a, WS, need, WS, wsb, NULL), ok);
    CHECK_STATUS(kjit_adaln_train_bwd(ctx, KJIT_NORM_MODULATE, &a, WS + 256, need, WS, wsb, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "norm_modulate training backward: workspace overlaps input partition") != NULL);
    CHECK_STATUS(kjit_adaln_train_bwd(ctx, KJIT_NORM_MODULATE, &a, a.dx, need, WS, wsb, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "dx overlaps input partition") != NULL);
    /* With no rows the training backward reads no partition: not checked. */
    a.n = 0;
    CHECK_STATUS(kjit_adaln_train_bwd(ctx, KJIT_NORM_MODULATE, &a, WS + 256, need, WS, wsb, NULL), ok);

    /* The gather: outputs over outputs or tables; the backward's table
     * gradients as views over one another. */
    const kjit_row_gather_args r = gather_fixture(3, KJIT_I32);
    kjit_row_gather_args b = r;
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), ok);
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &b, NULL, 0, NULL), ok);
    b.out[2] = b.out[1];
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "adaln_row_gather forward: out[1] overlaps output out[2]") != NULL);
    b = r, b.out[0] = (void *)b.table[2];
    CHECK_STATUS(kjit_adaln_row_gather_fwd(ctx, &b, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "adaln_row_gather forward: out[0] overlaps input table[") != NULL);
    b = r, b.dtable[1] = (char *)b.dtable[0] + 64;
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &b, NULL, 0, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "adaln_row_gather backward: dtable[0] overlaps output dtable[1]") != NULL);
    b = r, b.dtable[1] = (void *)b.index.ptr;
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &b, NULL, 0, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "dtable[1] overlaps input index") != NULL);
    b = r, b.dtable[2] = (void *)b.dout[0];
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &b, NULL, 0, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "dtable[2] overlaps input dout[0]") != NULL);
    size_t gwsb = 0;
    CHECK_STATUS(kjit_adaln_row_gather_workspace(4, 64, 3, 3, &gwsb), KJIT_OK);
    b = r;
    CHECK_STATUS(kjit_adaln_row_gather_bwd(ctx, &b, RG(3), gwsb, NULL), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "workspace overlaps input dout[0]") != NULL);

    /* The sinusoid's output over its times. */
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, (const float *)RG(4), 4, 256, RG(4) + 8, 256, KJIT_BF16, NULL, NULL),
                 KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "timestep_sinusoid: out overlaps input t") != NULL);
    CHECK_STATUS(kjit_timestep_sinusoid(ctx, (const float *)RG(4), 4, 256, RG(5), 256, KJIT_BF16, NULL, NULL), ok);
    /* No call above wrote a byte. */
    CHECK(memcmp(before, mem, sizeof mem) == 0);
#undef FWD
#undef BWD
}

/* Each operand of each AdaLN op alone NULL, then alone misaligned (one byte
 * off its elements): refused, naming it, where the call reads or writes it;
 * accepted where it does not (the call goes on to find no driver here);
 * every other operand valid, so a missing check on one operand
 * cannot hide behind another's. */
static void adaln_operands(kjit_ctx *ctx)
{
    memset(mem, 0xA5, sizeof mem);
    kjit_adaln_args g = adaln_fixture();
    g.weight = WEIGHT, g.dweight = RG(13);
    enum { F = 1, B = 2 }; /* read or written by the forward, the backward */
    static const struct {
        const char *name;
        size_t off;
        unsigned use[3]; /* norm_modulate, gated_residual, fused */
    } f[] = {
        {"x", offsetof(kjit_adaln_args, x), {F | B, 0, B}},
        {"res", offsetof(kjit_adaln_args, res), {0, F, F}},
        {"y", offsetof(kjit_adaln_args, y), {0, F | B, F | B}},
        {"shift", offsetof(kjit_adaln_args, shift), {F, 0, F}},
        {"scale", offsetof(kjit_adaln_args, scale), {F | B, 0, F | B}},
        {"gate", offsetof(kjit_adaln_args, gate), {0, F | B, F | B}},
        {"weight", offsetof(kjit_adaln_args, weight), {F | B, 0, F | B}},
        {"out", offsetof(kjit_adaln_args, out), {F, F, F}},
        {"h", offsetof(kjit_adaln_args, h), {0, 0, F}},
        {"dout", offsetof(kjit_adaln_args, dout), {B, B, B}},
        {"dh", offsetof(kjit_adaln_args, dh), {0, 0, B}},
        {"dx", offsetof(kjit_adaln_args, dx), {B, B, B}},
        {"dy", offsetof(kjit_adaln_args, dy), {0, B, B}},
        {"dshift", offsetof(kjit_adaln_args, dshift), {B, 0, B}},
        {"dscale", offsetof(kjit_adaln_args, dscale), {B, 0, B}},
        {"dgate", offsetof(kjit_adaln_args, dgate), {0, B, B}},
        {"dweight", offsetof(kjit_adaln_args, dweight), {B, 0, B}},
    };
    typedef int (*fwd_fn)(kjit_ctx *, const kjit_adaln_args *, CUstream);
    typedef int (*bwd_fn)(kjit_ctx *, const kjit_adaln_args *, void *, size_t, CUstream);
    const fwd_fn fwds[3] = {kjit_norm_modulate_fwd, kjit_gated_residual_fwd, kjit_gated_residual_norm_modulate_fwd};
    const bwd_fn bwds[3] = {kjit_norm_modulate_bwd, kjit_gated_residual_bwd, kjit_gated_residual_norm_modulate_bwd};
    int checked = 0;
    for (int m = 0; m < 3; ++m)
        for (size_t i = 0; i < sizeof f / sizeof f[0]; ++i)
            for (int dir = F; dir <= B; ++dir)
                for (int bad = 0; bad < 2; ++bad) {
                    const int used = (f[i].use[m] & dir) != 0;
                    /* Optional operands, checked when given: the weight
                     * (and its gradient), gated_residual's dres, the fused
                     * op's dh. NULL means "none" for them. */
                    const int optional = !strcmp(f[i].name, "weight") || !strcmp(f[i].name, "dweight") ||
                                         !strcmp(f[i].name, "dh") || (m == 1 && !strcmp(f[i].name, "dx"));
                    kjit_adaln_args a = g;
                    void *v = bad ? (void *)(mem + 1) : NULL;
                    memcpy((char *)&a + f[i].off, &v, sizeof v);
                    /* The weight's gradient alone NULL is a valid call (a
                     * frozen weight); the weight NULL with its gradient is
                     * refused naming dweight. */
                    char want[96];
                    const char *nm = f[i].name;
                    if (dir == B && m == 2 && !strcmp(nm, "x")) nm = "x (the forward's h)";
                    if (m != 0 && !strcmp(nm, "dx")) nm = "dx (dres)";
                    snprintf(want, sizeof want, ": %s is %s", nm, bad ? "not aligned" : "NULL");
                    if (!bad && optional) {
                        if (!strcmp(f[i].name, "weight") && dir == B)
                            snprintf(want, sizeof want, "dweight given but weight is NULL");
                        else
                            want[0] = 0; /* accepted */
                    }
                    /* Some parameter gradients NULL, not all: refused
                     * naming the first missing (rows-only needs them all NULL). */
                    if (!bad && dir == B && m != 1 &&
                        (!strcmp(nm, "dshift") || !strcmp(nm, "dscale") || (m == 2 && !strcmp(nm, "dgate"))))
                        snprintf(want, sizeof want, "%s is NULL while other parameter gradients are given", nm);
                    /* gated_residual without dgate: the row gradients alone, reading no y. */
                    if (!bad && dir == B && m == 1 && !strcmp(nm, "dgate")) want[0] = 0;
                    if (!used) want[0] = 0; /* not read or written: not checked */
                    const int rc = dir == F ? fwds[m](ctx, &a, NULL) : bwds[m](ctx, &a, NULL, 0, NULL);
                    checked++;
                    if (want[0]) {
                        CHECK_STATUS(rc, KJIT_EINVAL);
                        if (!strstr(kjit_last_error(), want)) {
                            fprintf(stderr, "op %d %s, %s %s: message \"%s\" lacks \"%s\"\n", m, dir == F ? "fwd" : "bwd",
                                    f[i].name, bad ? "misaligned" : "NULL", kjit_last_error(), want);
                            kjit_test_failures++;
                        }
                    } else {
                        CHECK_STATUS(rc, KJIT_ENODRIVER); /* accepted: no driver here */
                    }
                }
    CHECK_EQ_INT(checked, 3 * 17 * 2 * 2);
    printf("adaln operands: %d single-operand calls checked\n", checked);
}

static long files_under;
static int count_file(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)path, (void)st, (void)ftw;
    files_under += type == FTW_F;
    return 0;
}

/* The regular files under dir (the cache's entries, temp and lock files). */
static long count_files(const char *dir)
{
    files_under = 0;
    return nftw(dir, count_file, 16, FTW_PHYS) == 0 ? files_under : -1;
}

/* One call in a forked child: refused with KJIT_EINVAL naming the fork. */
static int refused_in_child(int rc, const char *what)
{
    if (rc == KJIT_EINVAL && strstr(kjit_last_error(), "is a fork: a context is not used in a forked child")) return 1;
    fprintf(stderr, "child: %s gave %s: %s\n", what, kjit_status_name(rc), kjit_last_error());
    return 0;
}

/* A context used in a process forked from the one that made it (a
 * trainer's data-loader worker) is refused, whatever the call, instead of
 * calling into CUDA's state or a lock another thread held at the fork; its
 * destroy there does nothing; a context of the child's own works, and so
 * does the parent's. */
static void forked_child(kjit_ctx *ctx, const char *dir)
{
    kjit_kernel_spec spec;
    int n = 0;
    CHECK_STATUS(kjit_op_kernels("timestep_sinusoid", 256, KJIT_F32, &spec, 1, &n), KJIT_OK);
    const long files_before = count_files(dir);
    int report[2];
    CHECK(pipe(report) == 0);
    const pid_t pid = fork();
    if (pid == 0) {
        kjit_op_config c;
        kjit_cache_counters cc;
        int ok = refused_in_child(kjit_kernel_build(ctx, &spec, NULL, NULL), "kjit_kernel_build");
        ok &= refused_in_child(kjit_timestep_sinusoid(ctx, (float *)0x1000, 4, 256, (void *)0x2000, 256, KJIT_F32,
                                                      NULL, NULL), "kjit_timestep_sinusoid");
        ok &= refused_in_child(kjit_op_config_get(ctx, "norm_modulate", 5376, KJIT_BF16, &c), "kjit_op_config_get");
        ok &= refused_in_child(kjit_ctx_cache_counters(ctx, &cc), "kjit_ctx_cache_counters");
        ok &= refused_in_child(kjit_tune(ctx, "norm_modulate", 5376, KJIT_BF16, NULL), "kjit_tune");
        kjit_ctx_destroy(ctx); /* nothing: the parent's */
        kjit_ctx_options o;
        kjit_ctx_options_init(&o);
        o.device = KJIT_NO_DEVICE;
        o.cache_dir = dir;
        kjit_ctx *own = NULL;
        ok &= kjit_ctx_create(&own, &o) == KJIT_OK && kjit_op_config_get(own, "norm_modulate", 5376, KJIT_BF16, &c) == 0;
        kjit_ctx_destroy(own);
        kjit_test_child_exit(report[1], ok);
    }
    CHECK(kjit_test_child_passed(pid, report[0], report[1]));
    CHECK_EQ_INT(count_files(dir), files_before); /* the refused build wrote nothing into the cache */
    kjit_op_config c;
    CHECK_STATUS(kjit_op_config_get(ctx, "norm_modulate", 5376, KJIT_BF16, &c), KJIT_OK);
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
        adaln_args(ctx);
        adaln_operands(ctx);
        overlaps(ctx);
        forked_child(ctx, dir);
        kjit_ctx_destroy(ctx);
    }
    kjit_test_rmtree(dir);
    free(dir);
    return kjit_test_result("test_api");
}
