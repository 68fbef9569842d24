/* timestep_sinusoid: the diffusers timestep embedding (SPEC.md). */
#include <math.h>
#include <stdint.h>

#include "common/kjit_params.h"
#include "core/ctx.h"
#include "core/error.h"
#include "ops/op.h"
#include "ops/overlap.h"
#include "ops/rows.h"

#define SINUSOID_MAX_D 65536

static int sinusoid_kernels(int hidden, kjit_dtype dtype, kjit_kernel_spec *out, int max)
{
    if (hidden < 1 || hidden > SINUSOID_MAX_D)
        return kjit__fail(KJIT_EINVAL, "timestep_sinusoid: hidden (D) %d outside 1..%d", hidden, SINUSOID_MAX_D);
    return kjit__spec_add(out, max, 0, &kjit__op_timestep_sinusoid, "kjit_sinusoid<%s>", kjit__dtype_cxx(dtype));
}

const kjit_op_desc kjit__op_timestep_sinusoid = {
    .name = "timestep_sinusoid",
    .template_file = "timestep_sinusoid.cuh",
    .kernels = sinusoid_kernels,
};

void kjit_sinusoid_opts_init(kjit_sinusoid_opts *o)
{
    if (!o) return;
    o->flip_sin_to_cos = 0;
    o->downscale_freq_shift = 1.0;
    o->scale = 1.0;
    o->max_period = 10000.0;
}

int kjit_timestep_sinusoid(kjit_ctx *ctx, const float *t, int64_t n, int d, void *out,
                           int64_t out_stride, kjit_dtype out_dtype, const kjit_sinusoid_opts *opts,
                           CUstream stream)
{
    kjit__clear_error();
    kjit_sinusoid_opts def;
    if (!opts) {
        kjit_sinusoid_opts_init(&def);
        opts = &def;
    }
    if (!ctx) return kjit__fail(KJIT_EINVAL, "timestep_sinusoid: ctx is NULL");
    if (n < 0) return kjit__fail(KJIT_EINVAL, "timestep_sinusoid: n = %lld is negative", (long long)n);
    if (d < 1 || d > SINUSOID_MAX_D)
        return kjit__fail(KJIT_EINVAL, "timestep_sinusoid: d = %d outside 1..%d", d, SINUSOID_MAX_D);
    if (out_dtype != KJIT_F32 && out_dtype != KJIT_BF16 && out_dtype != KJIT_F16)
        return kjit__fail(KJIT_EINVAL, "timestep_sinusoid: out_dtype %s: expected fp32, bf16 or fp16",
                          kjit_dtype_name(out_dtype));
    if (out_stride < d)
        return kjit__fail(KJIT_EINVAL, "timestep_sinusoid: out_stride %lld < d = %d", (long long)out_stride, d);
    const int half = d / 2;
    if (!isfinite(opts->scale)) return kjit__fail(KJIT_EINVAL, "timestep_sinusoid: scale %g must be finite", opts->scale);
    if (!isfinite(opts->downscale_freq_shift))
        return kjit__fail(KJIT_EINVAL, "timestep_sinusoid: downscale_freq_shift %g must be finite",
                          opts->downscale_freq_shift);
    /* SPEC.md: half - shift == 0 is bad input for every d, d = 1 (half 0,
     * no frequency used) included, as the Python binding has it. */
    if ((double)half - opts->downscale_freq_shift == 0.0)
        return kjit__fail(KJIT_EINVAL,
                          "timestep_sinusoid: d/2 - downscale_freq_shift is 0 (d = %d, shift = %g): "
                          "the frequencies divide by it", d, opts->downscale_freq_shift);
    if (!(opts->max_period > 0.0) || !isfinite(opts->max_period))
        return kjit__fail(KJIT_EINVAL, "timestep_sinusoid: max_period %g must be finite and > 0", opts->max_period);
    const size_t esize = kjit_dtype_size(out_dtype);
    if (n > 0 && (uint64_t)(n - 1) > (uint64_t)(INT64_MAX / 16) / (uint64_t)out_stride)
        return kjit__fail(KJIT_EINVAL, "timestep_sinusoid: n * out_stride overflows (n = %lld, out_stride = %lld)",
                          (long long)n, (long long)out_stride);
    if (n == 0) return KJIT_OK;
    /* Each non-NULL, aligned to its elements and within the address space
     * (past its end the device's addresses wrap to low ones, which the
     * overlap check below would not see), as every op's rows: t as n rows
     * of one value. */
    int vec = 1; /* (the sinusoid has no vector path to choose) */
    int rc = kjit__check_rows("timestep_sinusoid", "t", t, 1, n, 1, KJIT_F32, &vec);
    if (!rc) rc = kjit__check_rows("timestep_sinusoid", "out", out, out_stride, n, d, out_dtype, &vec);
    if (rc) return rc;
    const kjit_span sp[2] = {kjit__span_bytes("t", t, (size_t)n * 4, 0),
                             kjit__span_rows("out", out, out_stride, n, d, esize, 1)};
    rc = kjit__spans_check("timestep_sinusoid", sp, 2);
    if (rc) return rc;

    kjit_kernel_spec spec;
    sinusoid_kernels(d, out_dtype, &spec, 1);
    int pushed;
    if ((rc = kjit__ctx_enter(ctx, &pushed))) return rc;
    CUfunction fn;
    rc = kjit__ctx_kernel(ctx, spec.template_file, spec.op, spec.name_expr, &fn);
    if (rc == KJIT_OK) {
        kjit_sinusoid_params p = {
            .t = t, .out = out, .n = n, .out_stride = out_stride, .d = d,
            .flip = opts->flip_sin_to_cos != 0, .shift = opts->downscale_freq_shift,
            .scale = opts->scale, .log_max_period = log(opts->max_period),
        };
        const int64_t pairs = half > 0 ? half : 1;
        int64_t blocks = (n * pairs + 255) / 256;
        if (blocks > 65535 * 8) blocks = 65535 * 8;
        rc = kjit__launch(ctx, fn, (unsigned)blocks, 1, 1, 256, 0, stream, &p, "timestep_sinusoid launch");
    }
    kjit__ctx_leave(ctx, pushed);
    return rc;
}
