/* NVRTC path without a GPU: every op kernel compiles for sm_90 and sm_100,
 * a failed compile carries the NVRTC log, bad archs are refused. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "jit/compile.h"
#include "jit/nvrtc_api.h"
#include "jit/templates.h"
#include "kjit.h"
#include "test_util.h"
#include "tune/config.h"

/* The NVRTC loader's candidate walk: a name that is missing is passed over
 * in silence, one that exists and cannot be loaded is named with dlopen's
 * reason; the first that loads wins. Needs no NVRTC. */
static void test_open_list(void)
{
    char dir[] = "/tmp/kjit_test_jit_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char bad[128], missing[128];
    snprintf(bad, sizeof bad, "%s/libnvrtc.so.13", dir);
    snprintf(missing, sizeof missing, "%s/libnvrtc.so.12", dir);
    FILE *f = fopen(bad, "w");
    CHECK(f != NULL);
    fputs("not a shared library, long enough to be read as an ELF header or refused as one\n", f);
    fclose(f);
    char path[256] = "untouched", broken[512];

    const char *none[] = {missing, "libkjit_no_such_library.so.7"};
    CHECK(kjit__nvrtc_open_list(none, 2, path, sizeof path, broken, sizeof broken) == NULL);
    CHECK_EQ_INT((int)strlen(broken), 0);
    CHECK(strcmp(path, "untouched") == 0);

    const char *one_bad[] = {missing, bad, dir};
    CHECK(kjit__nvrtc_open_list(one_bad, 3, path, sizeof path, broken, sizeof broken) == NULL);
    printf("test_jit: found but not loadable: %s\n", broken);
    CHECK(strstr(broken, bad) != NULL);    /* the file that exists, with its reason */
    CHECK(strstr(broken, "; ") != NULL);   /* and the directory after it */
    CHECK(strstr(broken, missing) == NULL); /* not the one that is missing */

    /* A tiny buffer: truncated, never overrun (ASan would say). */
    char tiny[8];
    CHECK(kjit__nvrtc_open_list(one_bad, 3, path, sizeof path, tiny, sizeof tiny) == NULL);
    CHECK_EQ_INT((int)strlen(tiny), 7);

    const char *then_good[] = {bad, "libc.so.6"};
    void *h = kjit__nvrtc_open_list(then_good, 2, path, sizeof path, broken, sizeof broken);
    CHECK(h != NULL);
    CHECK(strcmp(path, "libc.so.6") == 0);
    if (h) dlclose(h);
    unlink(bad);
    rmdir(dir);
}

int main(void)
{
    test_open_list();
    int sm = 0;
    int rc = kjit__arch_parse("sm_90", &sm);
    if (rc == KJIT_ENONVRTC) {
        printf("test_jit: %s: skipped\n", kjit_last_error());
        return 77;
    }
    CHECK_STATUS(rc, KJIT_OK);
    CHECK_EQ_INT(sm, 90);
    CHECK_STATUS(kjit__arch_parse("sm_12", &sm), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "sm_12") != NULL);
    CHECK_STATUS(kjit__arch_parse("banana", &sm), KJIT_EINVAL);
    CHECK_STATUS(kjit__arch_parse("", &sm), KJIT_EINVAL);

    /* Which cubins run on which device, and the arch a context compiles
     * for: its device's, or where NVRTC does not list that one, the newest
     * listed arch whose cubins run there. */
    CHECK(kjit__arch_runs_on(90, 90) && kjit__arch_runs_on(120, 121) && kjit__arch_runs_on(80, 86));
    CHECK(!kjit__arch_runs_on(100, 90) && !kjit__arch_runs_on(90, 100) && !kjit__arch_runs_on(121, 120));
    CHECK(!kjit__arch_runs_on(86, 80) && !kjit__arch_runs_on(0, 90) && !kjit__arch_runs_on(90, 0));
    {
        static const int l13[] = {75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121};
        static const int l128[] = {75, 80, 86, 87, 89, 90, 100, 101, 120};
        CHECK_EQ_INT(kjit__arch_for_device(90, l13, 12), 90);
        CHECK_EQ_INT(kjit__arch_for_device(121, l128, 9), 120);
        CHECK_EQ_INT(kjit__arch_for_device(103, l128, 9), 101);
        CHECK_EQ_INT(kjit__arch_for_device(89, l128, 9), 89);
        CHECK_EQ_INT(kjit__arch_for_device(130, l13, 12), 130); /* nothing runs there: its own, refused later */
        CHECK_EQ_INT(kjit__arch_for_device(95, l13, 12), 90);
        CHECK_EQ_INT(kjit__arch_for_device(121, NULL, 0), 121);
    }

    /* KJIT_LINEINFO=1 adds -lineinfo to the options (so to the cache key),
     * and a cubin with source lines still compiles; 0 or unset: not. */
    {
        char buf[64];
        const char *opts[KJIT_MAX_OPTIONS];
        unsetenv("KJIT_LINEINFO");
        int n0 = kjit__jit_options(90, buf, opts), has = 0;
        for (int i = 0; i < n0; ++i) has |= strcmp(opts[i], "-lineinfo") == 0;
        CHECK(!has);
        setenv("KJIT_LINEINFO", "0", 1);
        CHECK_EQ_INT(kjit__jit_options(90, buf, opts), n0);
        setenv("KJIT_LINEINFO", "1", 1);
        int n1 = kjit__jit_options(90, buf, opts);
        CHECK_EQ_INT(n1, n0 + 1);
        CHECK(n1 > 0 && strcmp(opts[n1 - 1], "-lineinfo") == 0);
        char *lowered = NULL;
        void *cubin = NULL;
        size_t len = 0;
        CHECK_STATUS(kjit__jit_compile("timestep_sinusoid.cuh", "kjit_sinusoid<float>", 90, &lowered, &cubin, &len),
                     KJIT_OK);
        CHECK(len > 4 && cubin && memcmp(cubin, "\177ELF", 4) == 0);
        free(lowered);
        free(cubin);
        unsetenv("KJIT_LINEINFO");
    }

    /* Every registered op's kernels, for two hidden sizes and every dtype, both archs. */
    const int archs[] = {90, 100};
    const kjit_dtype dts[] = {KJIT_BF16, KJIT_F32, KJIT_F16};
    const int hiddens[] = {256, 5376, 13};
    int compiled = 0;
    for (int oi = 0; oi < kjit_op_count(); ++oi)
        for (int hi = 0; hi < 3; ++hi)
            for (int di = 0; di < 3; ++di) {
                kjit_kernel_spec specs[64];
                int n = 0;
                CHECK_STATUS(kjit_op_kernels(kjit_op_name(oi), hiddens[hi], dts[di], specs, 64, &n), KJIT_OK);
                CHECK(n > 0 && n <= 64);
                for (int s = 0; s < n && s < 64; ++s)
                    for (int a = 0; a < 2; ++a) {
                        /* One arch per spec beyond the first hidden size keeps the run short. */
                        if (hi > 0 && a == 1) continue;
                        char *low = NULL;
                        void *cubin = NULL;
                        size_t len = 0;
                        int r = kjit__jit_compile(specs[s].template_file, specs[s].name_expr, archs[a], &low, &cubin, &len);
                        if (r) fprintf(stderr, "compile %s sm_%d: %s\n", specs[s].name_expr, archs[a], kjit_last_error());
                        CHECK_STATUS(r, KJIT_OK);
                        CHECK(len > 0 && low && low[0]);
                        compiled += r == KJIT_OK;
                        free(low);
                        free(cubin);
                    }
            }
    printf("test_jit: %d kernels compiled\n", compiled);

    /* Every candidate of the tuning space (kjit tune compiles them on the GPU
     * machine), for the benchmarked shape, sm_90. */
    int cands = 0;
    for (int mode = 1; mode <= 3; ++mode) {
        kjit_adaln_config f[KJIT_TUNE_MAX_FWD], b[KJIT_TUNE_MAX_BWD];
        const int nf = kjit__adaln_space_fwd(mode, 5376, KJIT_BF16, f);
        const int nb = kjit__adaln_space_bwd(mode, 5376, KJIT_BF16, 227 * 1024, b);
        for (int i = 0; i < nf + nb; ++i) {
            char fe[224], be[224], *low = NULL;
            void *cubin = NULL;
            size_t len = 0;
            kjit__adaln_exprs(mode, 5376, KJIT_BF16, i < nf ? &f[i] : &b[i - nf], fe, be, sizeof fe);
            const char *e = i < nf ? fe : be;
            int r = kjit__jit_compile("adaln.cuh", e, 90, &low, &cubin, &len);
            if (r) fprintf(stderr, "compile %s: %s\n", e, kjit_last_error());
            CHECK_STATUS(r, KJIT_OK);
            cands += r == KJIT_OK;
            free(low);
            free(cubin);
        }
    }
    printf("test_jit: %d tuning candidates compiled\n", cands);

    /* A name expression that does not instantiate: KJIT_ECOMPILE with NVRTC's log. */
    char *low = NULL;
    void *cubin = NULL;
    size_t len = 0;
    CHECK_STATUS(kjit__jit_compile("timestep_sinusoid.cuh", "kjit_sinusoid<no_such_type>", 90, &low, &cubin, &len),
                 KJIT_ECOMPILE);
    CHECK(strstr(kjit_last_error(), "no_such_type") != NULL);
    CHECK(low == NULL && cubin == NULL);
    CHECK_STATUS(kjit__jit_compile("no_such_file.cuh", "x", 90, &low, &cubin, &len), KJIT_ENOTFOUND);

    /* The template bundle (the cache key's source) covers every embedded file. */
    const kjit_template_file *files;
    int n_files = 0;
    CHECK_STATUS(kjit__templates(&files, &n_files), KJIT_OK);
    const char *bundle;
    size_t blen = 0, total = 0;
    CHECK_STATUS(kjit__templates_bundle(&bundle, &blen), KJIT_OK);
    for (int i = 0; i < n_files; ++i) total += files[i].len;
    CHECK(blen > total);
    return kjit_test_result("test_jit");
}
