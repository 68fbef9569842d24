/* The training forward (block 0 builds the backward's partition) must not
 * spill more than the plain forward of the same config: its row code is the
 * plain forward's, and the build inlined into it once made the row code spill
 * at the forward's register cap (20 bytes at norm_modulate's default, 5376
 * bf16; 48 at the fused op's), which cost 1.5 to 5 us a training pair at 4097
 * rows on the H200. NVRTC's ptxas report for sm_90, no GPU needed. */
#include <stdlib.h>
#include <string.h>

#include "jit/compile.h"
#include "jit/nvrtc_api.h"
#include "jit/templates.h"
#include "kjit.h"
#include "test_util.h"

/* Spill stores of entry `lowered` in a ptxas -v log; -1 when absent. */
static long spill_stores(const char *log, const char *lowered)
{
    char key[512];
    snprintf(key, sizeof key, "Function properties for %s\n", lowered);
    const char *p = strstr(log, key);
    if (!p) return -1;
    p += strlen(key);
    const char *eol = strchr(p, '\n');
    const char *s = strstr(p, " bytes spill stores");
    if (!s || (eol && s > eol)) return -1;
    while (s > p && s[-1] >= '0' && s[-1] <= '9') --s;
    return strtol(s, NULL, 10);
}

/* Compiles the plain and the training forward of (op, hidden, dtype)'s
 * default config, int32 index, in one program; checks the spills. */
static void check_op(const kjit_nvrtc_api *nv, const char *op, int hidden, kjit_dtype dt)
{
    kjit_kernel_spec specs[32];
    int count = 0;
    CHECK_STATUS(kjit_op_kernels(op, hidden, dt, specs, 32, &count), KJIT_OK);
    const char *fwd = NULL, *train = NULL;
    for (int i = 0; i < count && i < 32; ++i) {
        if (!strstr(specs[i].name_expr, ", int, ")) continue;
        if (strncmp(specs[i].name_expr, "kjit_adaln_fwd<", 15) == 0) fwd = specs[i].name_expr;
        if (strncmp(specs[i].name_expr, "kjit_adaln_fwd_train<", 21) == 0) train = specs[i].name_expr;
    }
    CHECK(fwd && train);
    if (!fwd || !train) return;

    const kjit_template_file *all, *main_file;
    int n_all;
    CHECK_STATUS(kjit__templates(&all, &n_all), KJIT_OK);
    CHECK_STATUS(kjit__template_find("adaln.cuh", &main_file), KJIT_OK);
    const char *hdr[64], *names[64];
    int n_hdr = 0;
    for (int i = 0; i < n_all && n_hdr < 64; ++i)
        if (&all[i] != main_file) hdr[n_hdr] = all[i].text, names[n_hdr++] = all[i].name;
    nvrtcProgram prog = NULL;
    CHECK_EQ_INT(nv->CreateProgram(&prog, main_file->text, main_file->name, n_hdr, hdr, names), NVRTC_SUCCESS);
    CHECK_EQ_INT(nv->AddNameExpression(prog, fwd), NVRTC_SUCCESS);
    CHECK_EQ_INT(nv->AddNameExpression(prog, train), NVRTC_SUCCESS);
    char arch[64];
    const char *opts[KJIT_MAX_OPTIONS + 1];
    int n = kjit__jit_options(90, arch, opts);
    opts[n++] = "-Xptxas=-v";
    const nvrtcResult r = nv->CompileProgram(prog, n, opts);
    size_t len = 0;
    nv->GetProgramLogSize(prog, &len);
    char *log = calloc(len + 1, 1);
    CHECK(log != NULL);
    if (log) nv->GetProgramLog(prog, log);
    CHECK_EQ_INT(r, NVRTC_SUCCESS);
    const char *lf = NULL, *lt = NULL;
    if (r == NVRTC_SUCCESS && log) {
        CHECK_EQ_INT(nv->GetLoweredName(prog, fwd, &lf), NVRTC_SUCCESS);
        CHECK_EQ_INT(nv->GetLoweredName(prog, train, &lt), NVRTC_SUCCESS);
        const long sf = lf ? spill_stores(log, lf) : -1, st = lt ? spill_stores(log, lt) : -1;
        printf("%s %d %s: forward %ld, training forward %ld bytes of spill stores\n", op, hidden,
               kjit_dtype_name(dt), sf, st);
        CHECK(sf >= 0 && st >= 0); /* the report names both entries */
        if (st > sf) fprintf(stderr, "%s spills %ld bytes, %s %ld\n", train, st, fwd, sf);
        CHECK_LE(st, sf);
    } else if (log) {
        fprintf(stderr, "%s\n", log);
    }
    free(log);
    nv->DestroyProgram(&prog);
}

int main(void)
{
    const kjit_nvrtc_api *nv = kjit__nvrtc();
    if (!nv) {
        printf("test_spills: %s: skipped\n", kjit_last_error());
        return 77;
    }
    int sm = 0;
    if (kjit__arch_parse("sm_90", &sm) != KJIT_OK) {
        printf("test_spills: NVRTC %d.%d has no sm_90: skipped\n", nv->major, nv->minor);
        return 77;
    }
    static const char *const ops[] = {"norm_modulate", "gated_residual", "gated_residual_norm_modulate"};
    static const struct { int hidden; kjit_dtype dt; } shapes[] = {
        {5376, KJIT_BF16}, {5376, KJIT_F16}, {4096, KJIT_BF16}, {3072, KJIT_F32}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        for (int o = 0; o < 3; ++o) check_op(nv, ops[o], shapes[s].hidden, shapes[s].dt);
    return kjit_test_result("test_spills");
}
