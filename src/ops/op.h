/* One descriptor per registered op: its template and the kernels it uses.
 * Adding an op = one template + one descriptor + its tests. */
#ifndef KJIT_OP_H
#define KJIT_OP_H

#include "kjit.h"

typedef struct kjit_op_desc {
    const char *name;
    const char *template_file;
    /* Writes the op's kernel name expressions (forward and backward) for a
     * hidden size and activation dtype into out[0..max), returns how many
     * there are (may exceed max), or a negative status. */
    int (*kernels)(int hidden, kjit_dtype dtype, kjit_kernel_spec *out, int max);
} kjit_op_desc;

const kjit_op_desc *kjit__op_find(const char *name);

/* kjit_op_kernels for an arch (sm, e.g. 90): the AdaLN ops' default config as
 * that arch's devices run it, fitted to their shared memory a block
 * (kjit__arch_tune_smem), as `kjit prewarm --arch` and the server's compile
 * list them; the other ops' list as it is. max 0: *count alone. */
int kjit__op_kernels_arch(const char *op, int hidden, kjit_dtype dtype, int sm, kjit_kernel_spec *out, int max,
                          int *count);

/* Template type name of a dtype in name expressions ("kjit::bf16"). */
const char *kjit__dtype_cxx(kjit_dtype dt);

/* Appends one spec (when it fits) and returns the new count. */
int kjit__spec_add(kjit_kernel_spec *out, int max, int n, const kjit_op_desc *op, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

extern const kjit_op_desc kjit__op_timestep_sinusoid;
extern const kjit_op_desc kjit__op_adaln_row_gather;
extern const kjit_op_desc kjit__op_norm_modulate;
extern const kjit_op_desc kjit__op_gated_residual;
extern const kjit_op_desc kjit__op_gated_residual_norm_modulate;

#endif
