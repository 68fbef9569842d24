/* The training forward (block 0 builds the backward's partition) must not
 * spill more than the plain forward of the same config: its row code is the
 * plain forward's, and the build inlined into it once made the row code spill
 * at the forward's register cap (20 bytes at norm_modulate's default, 5376
 * bf16; 48 at the fused op's), which cost 1.3 to 7 us a training pair at 4097
 * rows on the H200 (A/B, 2026-12-01). NVRTC's ptxas report for sm_90, no GPU needed. */
#include <string.h>

#include "jit/compile.h"
#include "jit/ptxas_report.h"
#include "kjit.h"
#include "test_util.h"

/* The plain and the training forward of (op, hidden, dtype)'s default
 * config, int32 index, in one program; checks the spills. */
static void check_op(const char *op, int hidden, kjit_dtype dt)
{
    kjit_kernel_spec specs[32];
    int count = 0;
    CHECK_STATUS(kjit_op_kernels(op, hidden, dt, specs, 32, &count), KJIT_OK);
    const char *names[2] = {NULL, NULL}; /* forward, training forward */
    for (int i = 0; i < count && i < 32; ++i) {
        if (!strstr(specs[i].name_expr, ", int, ")) continue;
        if (strncmp(specs[i].name_expr, "kjit_adaln_fwd<", 15) == 0) names[0] = specs[i].name_expr;
        if (strncmp(specs[i].name_expr, "kjit_adaln_fwd_train<", 21) == 0) names[1] = specs[i].name_expr;
    }
    CHECK(names[0] && names[1]);
    if (!names[0] || !names[1]) return;
    kjit_ptxas_stats st[2], cal;
    CHECK_STATUS(kjit__ptxas_report("adaln.cuh", names, 2, 90, st, &cal), KJIT_OK);
    printf("%s %d %s: forward %ld, training forward %ld bytes of spill stores (%d, %d registers); callees %ld\n", op,
           hidden, kjit_dtype_name(dt), st[0].spill_stores, st[1].spill_stores, st[0].registers, st[1].registers,
           cal.spill_stores);
    /* The partition build as a call (where the rows run at a register cap)
     * spills in neither block. */
    CHECK(cal.spill_stores == 0);
    CHECK(st[0].registers > 0 && st[1].registers > 0);
    if (st[1].spill_stores > st[0].spill_stores)
        fprintf(stderr, "%s spills %ld bytes, %s %ld\n", names[1], st[1].spill_stores, names[0], st[0].spill_stores);
    CHECK_LE(st[1].spill_stores, st[0].spill_stores);
}

int main(void)
{
    int sm = 0;
    int rc = kjit__arch_parse("sm_90", &sm);
    if (rc != KJIT_OK) {
        printf("test_spills: %s: skipped\n", kjit_last_error());
        return 77;
    }
    /* The report's own errors: bad arguments, a name no template defines. */
    {
        kjit_ptxas_stats st;
        const char *bogus[1] = {"kjit_no_such_kernel<1>"}, *null_name[1] = {NULL};
        CHECK_STATUS(kjit__ptxas_report("adaln.cuh", NULL, 1, 90, &st, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "names") != NULL);
        CHECK_STATUS(kjit__ptxas_report("adaln.cuh", null_name, 1, 90, &st, NULL), KJIT_EINVAL);
        CHECK(strstr(kjit_last_error(), "names[0]") != NULL);
        CHECK_STATUS(kjit__ptxas_report("adaln.cuh", bogus, 0, 90, &st, NULL), KJIT_EINVAL);
        CHECK_STATUS(kjit__ptxas_report("no_such.cuh", bogus, 1, 90, &st, NULL), KJIT_ENOTFOUND);
        CHECK_STATUS(kjit__ptxas_report("adaln.cuh", bogus, 1, 90, &st, NULL), KJIT_ECOMPILE);
        CHECK(strstr(kjit_last_error(), "kjit_no_such_kernel") != NULL);
    }
    static const char *const ops[] = {"norm_modulate", "gated_residual", "gated_residual_norm_modulate"};
    static const struct { int hidden; kjit_dtype dt; } shapes[] = {
        {5376, KJIT_BF16}, {5376, KJIT_F16}, {4096, KJIT_BF16}, {3072, KJIT_F32}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        for (int o = 0; o < 3; ++o) check_op(ops[o], shapes[s].hidden, shapes[s].dt);
    return kjit_test_result("test_spills");
}
