#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/ctx.h"
#include "core/error.h"
#include "jit/compile.h"
#include "jit/templates.h"
#include "ops/op.h"
#include "tune/config.h"

static const kjit_op_desc *const ops[] = {
    &kjit__op_timestep_sinusoid,
    &kjit__op_adaln_row_gather,
    &kjit__op_norm_modulate,
    &kjit__op_gated_residual,
    &kjit__op_gated_residual_norm_modulate,
};
#define N_OPS ((int)(sizeof ops / sizeof ops[0]))

int kjit_op_count(void) { return N_OPS; }
const char *kjit_op_name(int i) { return i >= 0 && i < N_OPS ? ops[i]->name : NULL; }

const kjit_op_desc *kjit__op_find(const char *name)
{
    for (int i = 0; name && i < N_OPS; ++i)
        if (strcmp(ops[i]->name, name) == 0) return ops[i];
    return NULL;
}

const char *kjit__dtype_cxx(kjit_dtype dt)
{
    switch (dt) {
    case KJIT_F32: return "float";
    case KJIT_BF16: return "kjit::bf16";
    case KJIT_F16: return "kjit::f16";
    case KJIT_I32: return "int";
    case KJIT_I64: return "long long";
    }
    return "void";
}

int kjit__spec_add(kjit_kernel_spec *out, int max, int n, const kjit_op_desc *op, const char *fmt, ...)
{
    if (n < max) {
        out[n].op = op->name;
        out[n].template_file = op->template_file;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(out[n].name_expr, sizeof out[n].name_expr, fmt, ap);
        va_end(ap);
    }
    return n + 1;
}

static int list_names(char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; i < N_OPS; ++i) {
        size_t l = strlen(buf);
        snprintf(buf + l, len - l, "%s%s", i ? ", " : "", ops[i]->name);
    }
    return 0;
}

int kjit_op_kernels(const char *op, int hidden, kjit_dtype dtype, kjit_kernel_spec *out, int max,
                    int *count)
{
    kjit__clear_error();
    if (!op || !count || (max > 0 && !out) || max < 0)
        return kjit__fail(KJIT_EINVAL, "kjit_op_kernels: %s", !op ? "op is NULL" : !count ? "count is NULL"
                                                               : max < 0 ? "max < 0" : "out is NULL (max > 0)");
    const kjit_op_desc *d = kjit__op_find(op);
    if (!d) {
        char names[512];
        list_names(names, sizeof names);
        return kjit__fail(KJIT_EINVAL, "op '%s' is not registered (known: %s)", op, names);
    }
    if (dtype != KJIT_F32 && dtype != KJIT_BF16 && dtype != KJIT_F16)
        return kjit__fail(KJIT_EINVAL, "dtype %s: ops take fp32, bf16 or fp16 activations", kjit_dtype_name(dtype));
    int n = d->kernels(hidden, dtype, out, max);
    if (n < 0) return n;
    *count = n;
    return KJIT_OK;
}

int kjit__op_kernels_arch(const char *op, int hidden, kjit_dtype dtype, int sm, kjit_kernel_spec *out, int max,
                          int *count)
{
    int rc = kjit_op_kernels(op, hidden, dtype, out, max, count);
    const int mode = kjit__adaln_mode(op);
    if (rc || !mode || max <= 0) return rc;
    /* The same kernels with other configs: the same count. */
    const int n = kjit__adaln_kernels_fit(mode, hidden, dtype, kjit__arch_tune_smem(sm), out, max);
    if (n < 0) return n;
    if (n != *count) return kjit__fail(KJIT_EINVAL, "%s: %d kernels fitted for sm_%d, %d listed", op, n, sm, *count);
    return KJIT_OK;
}

/* kjit_kernel_fetch and kjit_kernel_build; fn names the caller's function
 * in the messages. */
static int kernel_fetch(const char *fn, kjit_ctx *ctx, const kjit_kernel_spec *spec, const char *arch,
                        kjit_kernel_image *out)
{
    kjit__clear_error();
    if (!ctx || !spec || !out)
        return kjit__fail(KJIT_EINVAL, "%s: %s is NULL", fn, !ctx ? "ctx" : !spec ? "spec" : "out");
    /* The name expression is compiled as C++: accept only template-id text. */
    const kjit_template_file *tf;
    int ok = kjit__op_find(spec->op) && spec->template_file &&
             memchr(spec->name_expr, '\0', sizeof spec->name_expr) && strncmp(spec->name_expr, "kjit_", 5) == 0 &&
             strspn(spec->name_expr, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:<>, -") ==
                 strlen(spec->name_expr);
    kjit__clear_error();
    /* An unknown template file is a spec kjit did not make; a template set
     * that did not load keeps its own message (e.g. a KJIT_TEMPLATE_DIR it
     * cannot read). */
    const int trc = ok ? kjit__template_find(spec->template_file, &tf) : KJIT_ENOTFOUND;
    if (trc == KJIT_ENOTFOUND)
        return kjit__fail(KJIT_EINVAL, "%s: spec does not come from kjit_op_kernels", fn);
    if (trc) return trc;
    int sm = ctx->sm;
    if (arch) {
        int rc = kjit__arch_parse(arch, &sm);
        if (rc) return rc;
    }
    return kjit__ctx_build(ctx, spec->template_file, spec->op, spec->name_expr, sm, out);
}

int kjit_kernel_fetch(kjit_ctx *ctx, const kjit_kernel_spec *spec, const char *arch, kjit_kernel_image *out)
{
    return kernel_fetch("kjit_kernel_fetch", ctx, spec, arch, out);
}

int kjit_kernel_build(kjit_ctx *ctx, const kjit_kernel_spec *spec, const char *arch, int *cached)
{
    kjit_kernel_image img;
    int rc = kernel_fetch("kjit_kernel_build", ctx, spec, arch, &img);
    if (rc == KJIT_OK && cached) *cached = img.cached;
    return rc;
}
