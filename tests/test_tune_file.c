/* The tuning file and the launch-config table, no GPU: round trip, damaged
 * files ignored (the default used) and rebuilt by the next save, files of
 * another format ignored and never rewritten,
 * every kind of bad entry skipped, atomic saves (no temp file left, a failed
 * save leaves the old file), concurrent saves from 4 processes keeping every
 * entry; the tuning space; every default valid on three shared-memory sizes
 * and the fitted ones as measured; kjit_op_config_get / kjit_tune / the force hook
 * on a context without a GPU; a save releasing its lock though a process
 * forked meanwhile shares it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/ctx.h"
#include "core/tune_json.h"
#include "test_util.h"
#include "tune/config.h"
#include "tune/tune.h"
#include "tune/tune_file.h"

#define DEV "NVIDIA H200"
#define SMEM (232448 - 4096)

static kjit_tune_entry entry(const char *dev, int mode, int h, kjit_dtype dt, int rpc, int pf, int grid, int bpf,
                             int accs)
{
    kjit_tune_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.device, sizeof e.device, "%s", dev);
    e.mode = mode, e.hidden = h, e.dtype = dt;
    e.cfg = (kjit_adaln_config){rpc, pf, grid, bpf, accs};
    e.fwd_us = 100.5, e.bwd_us = 200.25, e.default_fwd_us = 110, e.default_bwd_us = 230, e.tune_seconds = 1.5;
    e.n_rows = 3;
    const long long rows[3] = {32768, 4097, 1024};
    for (int i = 0; i < 3; ++i) {
        e.rows[i] = rows[i];
        e.fwd_us_rows[i] = 10.0 * (i + 1), e.bwd_us_rows[i] = 20.0 * (i + 1);
        e.default_fwd_us_rows[i] = 11.0 * (i + 1), e.default_bwd_us_rows[i] = 23.0 * (i + 1);
    }
    e.fwd_candidates = 24, e.bwd_candidates = 9, e.tuned_at = 1700000000;
    return e;
}

static int same_entry(const kjit_tune_entry *a, const kjit_tune_entry *b)
{
    int ok = kjit__tune_entry_same_key(a, b) && kjit__adaln_config_equal(&a->cfg, &b->cfg) && a->fwd_us == b->fwd_us &&
             a->bwd_us == b->bwd_us && a->default_fwd_us == b->default_fwd_us &&
             a->default_bwd_us == b->default_bwd_us && a->tune_seconds == b->tune_seconds && a->n_rows == b->n_rows &&
             a->fwd_candidates == b->fwd_candidates && a->bwd_candidates == b->bwd_candidates &&
             a->tuned_at == b->tuned_at;
    for (int i = 0; ok && i < a->n_rows; ++i)
        ok = a->rows[i] == b->rows[i] && a->fwd_us_rows[i] == b->fwd_us_rows[i] &&
             a->bwd_us_rows[i] == b->bwd_us_rows[i] && a->default_fwd_us_rows[i] == b->default_fwd_us_rows[i] &&
             a->default_bwd_us_rows[i] == b->default_bwd_us_rows[i];
    return ok;
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char p[8192];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static char *read_named(const char *dir, const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = calloc((size_t)n + 1, 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = '\0';
    fclose(f);
    return s;
}

static char *read_text(const char *dir) { return read_named(dir, KJIT_TUNE_FILE); }

/* Every name in dir other than tune.json and tune.lock. */
static int stray_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strcmp(de->d_name, KJIT_TUNE_FILE) ||
            !strcmp(de->d_name, KJIT_TUNE_LOCK))
            continue;
        fprintf(stderr, "stray file in the cache dir: %s\n", de->d_name);
        ++n;
    }
    closedir(d);
    return n;
}

static void test_space(void)
{
    kjit_adaln_config f[KJIT_TUNE_MAX_FWD], b[KJIT_TUNE_MAX_BWD], d;
    for (int mode = 1; mode <= 3; ++mode) {
        kjit__adaln_config_default(mode, 5376, KJIT_BF16, &d);
        /* rpc 4 with pf 2, 3 stages 12 or 16 rows: 129 / 172 KB for
         * norm_modulate, over KJIT_DEFAULT_SMEM for the two-input ops. */
        const int nf = kjit__adaln_space_fwd(mode, 5376, KJIT_BF16, f);
        CHECK_EQ_INT(nf, mode == 1 ? 39 : 33);
        /* The fused op's four rows per stage: pf 2, 3 with accs 2 do not fit. */
        const int nb = kjit__adaln_space_bwd(mode, 5376, KJIT_BF16, SMEM, b);
        CHECK_EQ_INT(nb, mode == 3 ? 10 : 12);
        int has_f = 0, has_b = 0;
        for (int i = 0; i < nf; ++i) {
            has_f |= kjit__adaln_config_equal(&f[i], &d);
            CHECK_EQ_INT(kjit__adaln_config_check(mode, 5376, KJIT_BF16, &f[i], SMEM, NULL, 0), KJIT_OK);
            CHECK_EQ_INT(f[i].bwd_pf, d.bwd_pf);
            CHECK_EQ_INT(f[i].accs, d.accs);
        }
        for (int i = 0; i < nb; ++i) {
            has_b |= kjit__adaln_config_equal(&b[i], &d);
            CHECK_EQ_INT(b[i].rpc, d.rpc);
            CHECK_EQ_INT(b[i].grid_per_sm, d.grid_per_sm);
        }
        CHECK(has_f && has_b);
    }
    /* fp32 at 16384: 512 threads per row, so no rpc 4; a row is 64 KiB, so
     * rpc 1 stages at most 3 rows (pf <= 2) and rpc 2 none within
     * KJIT_DEFAULT_SMEM: 1 + 3 * 3 + 1 + 3 candidates. */
    CHECK_EQ_INT(kjit__adaln_tpr(16384, KJIT_F32), 512);
    CHECK_EQ_INT(kjit__adaln_space_fwd(1, 16384, KJIT_F32, f), 14);
    for (int i = 0; i < 14; ++i) {
        CHECK(f[i].rpc * 512 <= 1024);
        CHECK(kjit__adaln_fwd_smem(1, 16384, KJIT_F32, &f[i]) <= KJIT_DEFAULT_SMEM);
    }
    /* A device with less shared memory: the default is fitted, pf first. */
    kjit__adaln_config_default(3, 5376, KJIT_BF16, &d);
    CHECK(kjit__adaln_bwd_smem(3, 5376, KJIT_BF16, &d) <= KJIT_DEFAULT_SMEM);
    kjit__adaln_config_fit(3, 5376, KJIT_BF16, &d, 99 * 1024);
    CHECK(kjit__adaln_bwd_smem(3, 5376, KJIT_BF16, &d) <= 99 * 1024);
    CHECK(kjit__adaln_fwd_smem(3, 5376, KJIT_BF16, &d) <= 99 * 1024);
    /* Fused at 16384 bf16: one stage of its four rows is 128 KiB, accs 2 adds
     * 320 KiB: only pf 0 accs 0 fits, and the default comes down to it. */
    kjit_adaln_config c = {1, 0, 0, 0, 2};
    CHECK_EQ_INT(kjit__adaln_bwd_smem(3, 16384, KJIT_BF16, &c), 458752);
    CHECK_EQ_INT(kjit__adaln_space_bwd(3, 16384, KJIT_BF16, SMEM, b), 1);
    CHECK_EQ_INT(b[0].bwd_pf, 0);
    CHECK_EQ_INT(b[0].accs, 0);
    /* 5376 bf16: two stages of norm_modulate's two rows plus w * (1 + scale). */
    kjit__adaln_config_default(1, 5376, KJIT_BF16, &d);
    CHECK_EQ_INT(d.bwd_pf, 1);
    CHECK_EQ_INT(kjit__adaln_bwd_smem(1, 5376, KJIT_BF16, &d), 2 * 2 * 10752 + 5376 * 4);
    CHECK_EQ_INT(kjit__adaln_config_check(3, 16384, KJIT_BF16, &c, SMEM, NULL, 0), KJIT_EINVAL);
    /* Nothing fits at 16384 fp32 (one stage of four rows is 256 KiB): bwd_pf 0
     * accs 0 stays valid (the generic backward runs it), and is the space. */
    c = (kjit_adaln_config){1, 0, 0, 0, 0};
    CHECK(kjit__adaln_bwd_smem(3, 16384, KJIT_F32, &c) > SMEM);
    CHECK_EQ_INT(kjit__adaln_config_check(3, 16384, KJIT_F32, &c, SMEM, NULL, 0), KJIT_OK);
    CHECK_EQ_INT(kjit__adaln_space_bwd(3, 16384, KJIT_F32, SMEM, b), 1);
    c.accs = 1;
    CHECK_EQ_INT(kjit__adaln_config_check(3, 16384, KJIT_F32, &c, SMEM, NULL, 0), KJIT_EINVAL);
    c = (kjit_adaln_config){1, 0, 0, 0, 2};
    /* The forward's stages too: rpc 4, pf 3 at 16384 bf16 is 512 KiB. */
    {
        const kjit_adaln_config big_fwd = {4, 3, 1, 0, 0};
        char why[160] = "";
        CHECK_EQ_INT(kjit__adaln_fwd_smem(1, 16384, KJIT_BF16, &big_fwd), 524288);
        CHECK_EQ_INT(kjit__adaln_config_check(1, 16384, KJIT_BF16, &big_fwd, SMEM, why, sizeof why), KJIT_EINVAL);
        CHECK(strstr(why, "rpc 4 pf 3") != NULL);
        CHECK_EQ_INT(kjit__adaln_config_check(1, 16384, KJIT_BF16, &big_fwd, 0, NULL, 0), KJIT_OK);
    }
    /* Every default, fitted to this and to smaller devices (what tune.c
     * allows: the opt-in limit less 4 KiB, for the H200's 223 KiB, sm_80's
     * 163 KiB, sm_86 / sm_120's 99 KiB), is a valid config within the
     * device's shared memory, with no row ahead in a full grid;
     * a two-input op never keeps a
     * persistent grid without its row ahead (slower than one CTA per row);
     * and the defaults measured on 2026-12-02 stay what they were fitted to. */
    static const kjit_dtype dts[] = {KJIT_BF16, KJIT_F16, KJIT_F32};
    static const size_t smems[] = {KJIT_DEFAULT_SMEM, 227 * 1024 - 4096, 163 * 1024 - 4096, 99 * 1024 - 4096};
    for (int mode = 1; mode <= 3; ++mode)
        for (int h = 8; h <= KJIT_TUNE_FAST_MAX_HIDDEN; h += 8)
            for (int k = 0; k < 3; ++k)
                for (int m = 0; m < 4; ++m) {
                    kjit__adaln_config_default(mode, h, dts[k], &d);
                    kjit__adaln_config_fit(mode, h, dts[k], &d, smems[m]);
                    char why[160] = "";
                    if (kjit__adaln_config_check(mode, h, dts[k], &d, smems[m], why, sizeof why) != KJIT_OK ||
                        (d.pf > 0 && d.grid_per_sm == 0) ||
                        (mode != 1 && d.pf == 0 && (d.grid_per_sm || d.rpc != 1))) {
                        fprintf(stderr, "default mode %d h %d %s smem %zu: %s (rpc %d pf %d grid %d)\n", mode, h,
                                kjit_dtype_name(dts[k]), smems[m], why, d.rpc, d.pf, d.grid_per_sm);
                        kjit_test_failures++;
                    }
                }
    static const struct { int mode, h; kjit_dtype dt; kjit_adaln_config c; } fitted[] = {
        {1, 5376, KJIT_BF16, {4, 1, 1, 1, 1}}, {1, 5376, KJIT_F16, {2, 1, 2, 1, 1}},
        {1, 4096, KJIT_F16, {4, 1, 1, 1, 1}},  {1, 4096, KJIT_F32, {2, 1, 2, 1, 1}},
        {1, 8192, KJIT_F32, {2, 1, 2, 1, 1}},  {1, 8192, KJIT_BF16, {2, 1, 2, 2, 1}},
        {2, 5376, KJIT_BF16, {1, 0, 0, 1, 0}}, {2, 8192, KJIT_F32, {1, 1, 4, 1, 0}},
        {3, 5376, KJIT_BF16, {1, 0, 0, 1, 1}}, {3, 8192, KJIT_F16, {2, 1, 2, 1, 1}},
        {3, 8192, KJIT_F32, {1, 0, 0, 0, 1}},  {3, 4096, KJIT_BF16, {1, 0, 0, 3, 0}},
        {3, 4096, KJIT_F32, {1, 0, 0, 2, 0}}};
    for (size_t i = 0; i < sizeof fitted / sizeof fitted[0]; ++i) {
        kjit__adaln_config_default(fitted[i].mode, fitted[i].h, fitted[i].dt, &d);
        if (!kjit__adaln_config_equal(&d, &fitted[i].c)) {
            fprintf(stderr, "default mode %d h %d %s: rpc %d pf %d grid %d bwd_pf %d accs %d\n", fitted[i].mode,
                    fitted[i].h, kjit_dtype_name(fitted[i].dt), d.rpc, d.pf, d.grid_per_sm, d.bwd_pf, d.accs);
            kjit_test_failures++;
        }
    }
    /* What `kjit prewarm --space` compiles is what the tuner builds: every
     * candidate's forward and backward, the default's among them, once. */
    CHECK_EQ_INT((int)kjit__arch_tune_smem(90), 232448 - 4096);
    CHECK_EQ_INT((int)kjit__arch_tune_smem(86), 101376 - 4096);
    CHECK_EQ_INT((int)kjit__arch_tune_smem(1), (int)KJIT_DEFAULT_SMEM);
    for (int mode = 1; mode <= 3; ++mode) {
        static kjit_kernel_spec sp[KJIT_TUNE_MAX_SPECS];
        const int ns = kjit__tune_space_specs(mode, 5376, KJIT_BF16, kjit__arch_tune_smem(90), sp, KJIT_TUNE_MAX_SPECS);
        CHECK(ns > 8 && ns < KJIT_TUNE_MAX_SPECS);
        char fe[224], be[224];
        kjit__adaln_config_default(mode, 5376, KJIT_BF16, &d);
        kjit__adaln_exprs(mode, 5376, KJIT_BF16, &d, fe, be, sizeof fe);
        int has_fe = 0, has_be = 0, dups = 0;
        for (int i = 0; i < ns; ++i) {
            has_fe |= !strcmp(sp[i].name_expr, fe), has_be |= !strcmp(sp[i].name_expr, be);
            CHECK(!strcmp(sp[i].op, kjit__adaln_mode_name(mode)));
            for (int k = 0; k < i; ++k) dups += !strcmp(sp[i].name_expr, sp[k].name_expr);
        }
        CHECK(has_fe && has_be && dups == 0);
        const int nb = kjit__adaln_space_bwd(mode, 5376, KJIT_BF16, kjit__arch_tune_smem(90), b);
        CHECK(ns >= nb);
    }
    /* What a plain `kjit prewarm --arch A` compiles for an AdaLN op is what
     * A's devices launch with the default config: fitted to their shared
     * memory. It listed kjit_op_kernels' (the unfitted default for 200 KiB
     * of shared memory a block), which an sm_86 card does not launch for
     * 9509 of 18432 keys, nor an H200 the fused op's fast fp32 backward
     * at many hidden sizes from 12296 up (its 223 KiB stage rows that 200
     * KiB does not). */
    {
        static const int archs[] = {75, 80, 86, 89, 90, 100, 120};
        static kjit_kernel_spec fit[64];
        int missing = 0;
        for (size_t ai = 0; ai < sizeof archs / sizeof archs[0]; ++ai) {
            const size_t sm = kjit__arch_tune_smem(archs[ai]);
            for (int mode = 1; mode <= 3; ++mode)
                for (int h = 8; h <= KJIT_TUNE_FAST_MAX_HIDDEN; h += h < 1024 ? 8 : 264)
                    for (int k = 0; k < 3; ++k) {
                        const int nf = kjit__adaln_kernels_fit(mode, h, dts[k], sm, fit, 64);
                        CHECK(nf > 0 && nf <= 64);
                        kjit__adaln_config_default(mode, h, dts[k], &d);
                        kjit__adaln_config_fit(mode, h, dts[k], &d, sm);
                        char fe[224], be[224];
                        kjit__adaln_exprs(mode, h, dts[k], &d, fe, be, sizeof fe);
                        const int bwd_fast = kjit__adaln_bwd_smem(mode, h, dts[k], &d) <= sm;
                        int has_fe = 0, has_be = 0;
                        for (int i = 0; i < nf && i < 64; ++i)
                            has_fe |= !strcmp(fit[i].name_expr, fe), has_be |= !strcmp(fit[i].name_expr, be);
                        if (!has_fe || (bwd_fast && !has_be)) {
                            if (!missing++)
                                fprintf(stderr, "sm_%d %s h %d %s: the launched %s not in prewarm's list\n",
                                        archs[ai], kjit__adaln_mode_name(mode), h, kjit_dtype_name(dts[k]),
                                        has_fe ? be : fe);
                        }
                    }
        }
        CHECK_EQ_INT(missing, 0);
    }
    /* Ranges. */
    const kjit_adaln_config bad[] = {{0, 0, 0, 0, 0},  {16, 0, 0, 0, 0}, {5, 0, 0, 0, 0}, {1, 4, 0, 0, 0},
                                     {1, -1, 0, 0, 0}, {1, 0, -1, 0, 0}, {1, 0, 65, 0, 0}, {1, 0, 0, 4, 0},
                                     {1, 0, 0, -1, 0}, {1, 0, 0, 0, 3}, {1, 0, 0, 0, -1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        char why[128] = "";
        CHECK_EQ_INT(kjit__adaln_config_check(1, 5376, KJIT_BF16, &bad[i], SMEM, why, sizeof why), KJIT_EINVAL);
        CHECK(why[0] != '\0');
    }
    c = (kjit_adaln_config){1, 0, 0, 0, 0};
    CHECK_EQ_INT(kjit__adaln_config_check(1, 5377, KJIT_BF16, &c, 0, NULL, 0), KJIT_EINVAL);
    CHECK_EQ_INT(kjit__adaln_config_check(1, 16392, KJIT_BF16, &c, 0, NULL, 0), KJIT_EINVAL);
    CHECK_EQ_INT(kjit__adaln_config_check(1, 5376, KJIT_I32, &c, 0, NULL, 0), KJIT_EINVAL);
    CHECK_EQ_INT(kjit__adaln_config_check(4, 5376, KJIT_BF16, &c, 0, NULL, 0), KJIT_EINVAL);
    CHECK_EQ_INT(kjit__adaln_mode("fused"), 3);
    CHECK_EQ_INT(kjit__adaln_mode("timestep_sinusoid"), 0);
    CHECK_EQ_INT(kjit__adaln_mode(NULL), 0);
}

static void test_round_trip(const char *dir)
{
    kjit_tune_entry in[3] = {
        entry(DEV, 1, 5376, KJIT_BF16, 2, 1, 4, 2, 1),
        entry(DEV, 3, 3072, KJIT_F16, 4, 0, 0, 0, 2),
        entry("Other GPU", 1, 5376, KJIT_BF16, 1, 0, 1, 1, 0),
    };
    CHECK_STATUS(kjit__tune_file_update(dir, in, 3), KJIT_OK);
    CHECK_EQ_INT(stray_files(dir), 0);
    kjit_tune_list l = {0};
    int bad = -1;
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &bad, NULL, 0), KJIT_TUNE_FILE_OK);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(l.n, 3);
    for (size_t i = 0; i < l.n && i < 3; ++i) CHECK(same_entry(&l.v[i], &in[i]));
    kjit__tune_list_free(&l);
    /* Same key: replaced, not added. */
    kjit_tune_entry up = entry(DEV, 1, 5376, KJIT_BF16, 1, 0, 2, 0, 0);
    CHECK_STATUS(kjit__tune_file_update(dir, &up, 1), KJIT_OK);
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &bad, NULL, 0), KJIT_TUNE_FILE_OK);
    CHECK_EQ_INT(l.n, 3);
    CHECK(l.n == 3 && same_entry(&l.v[0], &up));
    kjit__tune_list_free(&l);
    /* An invalid entry is refused and the file left as it was. */
    char *before = read_text(dir);
    kjit_tune_entry inv = entry(DEV, 2, 5376, KJIT_BF16, 0, 0, 0, 0, 0);
    CHECK_STATUS(kjit__tune_file_update(dir, &inv, 1), KJIT_EINVAL);
    char *after = read_text(dir);
    CHECK(before && after && !strcmp(before, after));
    free(before), free(after);
    CHECK_STATUS(kjit__tune_file_update("", &up, 1), KJIT_EINVAL);

    /* The table of a device takes its entries only, as STORED. */
    kjit_tune_table *t = kjit__tune_table_new(DEV, SMEM, 0);
    CHECK_EQ_INT(kjit__tune_table_load(t, dir), 2);
    kjit_adaln_config c, d;
    CHECK_EQ_INT(kjit__tune_table_get(t, 1, 5376, KJIT_BF16, &c, NULL), KJIT_CONFIG_STORED);
    CHECK(kjit__adaln_config_equal(&c, &up.cfg));
    CHECK_EQ_INT(kjit__tune_table_get(t, 3, 3072, KJIT_F16, &c, NULL), KJIT_CONFIG_STORED);
    CHECK(kjit__adaln_config_equal(&c, &in[1].cfg));
    CHECK_EQ_INT(kjit__tune_table_get(t, 2, 5376, KJIT_BF16, &c, NULL), KJIT_CONFIG_DEFAULT);
    kjit__adaln_config_default(2, 5376, KJIT_BF16, &d);
    CHECK(kjit__adaln_config_equal(&c, &d));
    /* Forced wins and clears back; tuned replaces stored. */
    kjit_adaln_config f = {4, 1, 1, 2, 2};
    CHECK_STATUS(kjit__tune_table_set(t, 1, 5376, KJIT_BF16, &f, KJIT_CONFIG_FORCED), KJIT_OK);
    CHECK_EQ_INT(kjit__tune_table_get(t, 1, 5376, KJIT_BF16, &c, NULL), KJIT_CONFIG_FORCED);
    CHECK(kjit__adaln_config_equal(&c, &f));
    CHECK_STATUS(kjit__tune_table_set(t, 1, 5376, KJIT_BF16, NULL, KJIT_CONFIG_FORCED), KJIT_OK);
    CHECK_EQ_INT(kjit__tune_table_get(t, 1, 5376, KJIT_BF16, &c, NULL), KJIT_CONFIG_STORED);
    CHECK_STATUS(kjit__tune_table_set(t, 1, 5376, KJIT_BF16, &f, KJIT_CONFIG_TUNED), KJIT_OK);
    CHECK_EQ_INT(kjit__tune_table_get(t, 1, 5376, KJIT_BF16, &c, NULL), KJIT_CONFIG_TUNED);
    f.rpc = 16;
    CHECK_STATUS(kjit__tune_table_set(t, 1, 5376, KJIT_BF16, &f, KJIT_CONFIG_FORCED), KJIT_EINVAL);
    kjit__tune_table_free(t);
    t = kjit__tune_table_new("Other GPU", SMEM, 0);
    CHECK_EQ_INT(kjit__tune_table_load(t, dir), 1);
    kjit__tune_table_free(t);
    /* No device name: nothing stored applies. */
    t = kjit__tune_table_new("", SMEM, 0);
    CHECK_EQ_INT(kjit__tune_table_load(t, dir), 0);
    kjit__tune_table_free(t);
    /* A stored config within the template's range but beyond this device's
     * shared memory is ignored by the table (the default is used). */
    kjit_tune_entry big = entry(DEV, 3, 16384, KJIT_BF16, 1, 0, 0, 0, 2);
    CHECK_STATUS(kjit__tune_file_update(dir, &big, 1), KJIT_OK);
    t = kjit__tune_table_new(DEV, SMEM, 0);
    CHECK_EQ_INT(kjit__tune_table_load(t, dir), 2);
    CHECK_EQ_INT(kjit__tune_table_get(t, 3, 16384, KJIT_BF16, &c, NULL), KJIT_CONFIG_DEFAULT);
    kjit__tune_table_free(t);
}

/* A file whose text is `text`: read as `state` with `n_ok` entries and
 * `n_bad` skipped; the table uses the defaults for what is not valid; the
 * next save rebuilds a valid file keeping the valid entries. */
static void expect_file(const char *dir, const char *what, const char *text, kjit_tune_file_state state, int n_ok,
                        int n_bad)
{
    write_file(dir, KJIT_TUNE_FILE, text);
    kjit_tune_list l = {0};
    int bad = -1;
    kjit_tune_file_state st = kjit__tune_file_read(dir, &l, &bad, NULL, 0);
    if ((int)st != (int)state || (int)l.n != n_ok || bad != n_bad) {
        fprintf(stderr, "%s: state %d, %zu entries, %d bad; expected %d, %d, %d\n", what, (int)st, l.n, bad,
                (int)state, n_ok, n_bad);
        kjit_test_failures++;
    }
    kjit__tune_list_free(&l);
    kjit_tune_table *t = kjit__tune_table_new(DEV, SMEM, 0);
    CHECK_EQ_INT(kjit__tune_table_load(t, dir), n_ok);
    kjit_adaln_config c, d;
    kjit__adaln_config_default(2, 1024, KJIT_F32, &d);
    CHECK_EQ_INT(kjit__tune_table_get(t, 2, 1024, KJIT_F32, &c, NULL), KJIT_CONFIG_DEFAULT);
    CHECK(kjit__adaln_config_equal(&c, &d));
    kjit__tune_table_free(t);
    kjit_tune_entry e = entry(DEV, 2, 1024, KJIT_F32, 2, 1, 2, 1, 1);
    if (state == KJIT_TUNE_FILE_FOREIGN) {
        /* A newer kjit's file: never rewritten (that would drop its
         * entries); the save fails naming the file, which keeps its bytes. */
        CHECK_STATUS(kjit__tune_file_update(dir, &e, 1), KJIT_EIO);
        CHECK(strstr(kjit_last_error(), KJIT_TUNE_FILE) && strstr(kjit_last_error(), "does not read"));
        char *now = read_text(dir);
        CHECK(now && !strcmp(now, text));
        free(now);
        CHECK_EQ_INT(stray_files(dir), 0);
        char p[4200];
        snprintf(p, sizeof p, "%.4000s/%s", dir, KJIT_TUNE_FILE);
        unlink(p);
        return;
    }
    CHECK_STATUS(kjit__tune_file_update(dir, &e, 1), KJIT_OK);
    /* A damaged file with content is kept beside the new one, byte for byte
     * (the last one only); no other state leaves that name. */
    char *kept = read_named(dir, KJIT_TUNE_DAMAGED);
    if (state == KJIT_TUNE_FILE_DAMAGED && text[0]) {
        if (!kept || strcmp(kept, text)) {
            fprintf(stderr, "%s: the damaged file was not kept as %s\n", what, KJIT_TUNE_DAMAGED);
            kjit_test_failures++;
        }
        char p[4200];
        snprintf(p, sizeof p, "%.4000s/%s", dir, KJIT_TUNE_DAMAGED);
        unlink(p);
    } else if (kept) {
        fprintf(stderr, "%s: a %s was left\n", what, KJIT_TUNE_DAMAGED);
        kjit_test_failures++;
    }
    free(kept);
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &bad, NULL, 0), KJIT_TUNE_FILE_OK);
    CHECK_EQ_INT(bad, 0);
    if ((int)l.n != n_ok + 1) {
        fprintf(stderr, "%s: rebuilt file has %zu entries, expected %d\n", what, l.n, n_ok + 1);
        kjit_test_failures++;
    }
    kjit__tune_list_free(&l);
    t = kjit__tune_table_new(DEV, SMEM, 0);
    kjit__tune_table_load(t, dir);
    CHECK_EQ_INT(kjit__tune_table_get(t, 2, 1024, KJIT_F32, &c, NULL), KJIT_CONFIG_STORED);
    CHECK(kjit__adaln_config_equal(&c, &e.cfg));
    kjit__tune_table_free(t);
    CHECK_EQ_INT(stray_files(dir), 0);
}

#define HEAD "{\"format\":1,\"kjit\":\"" KJIT_VERSION_STRING "\",\"entries\":["
#define GOOD_FIELDS                                                                                           \
    "\"device\":\"" DEV "\",\"op\":\"norm_modulate\",\"hidden\":5376,\"dtype\":\"bf16\",\"fwd\":{\"rpc\":2,\"pf\":1," \
    "\"grid_per_sm\":2},\"bwd\":{\"bwd_pf\":1,\"accs\":1}}"
#define GOOD "{" GOOD_FIELDS
/* An entry of gated_residual 3072 bf16 with one field replaced. */
#define E(fwd, bwd, extra)                                                                                    \
    "{\"device\":\"" DEV "\",\"op\":\"gated_residual\",\"hidden\":3072,\"dtype\":\"bf16\",\"fwd\":{" fwd "},\"bwd\":{" bwd \
    "}" extra "}"
#define FWD_OK "\"rpc\":1,\"pf\":0,\"grid_per_sm\":0"
#define BWD_OK "\"bwd_pf\":1,\"accs\":0"

static void test_damaged(const char *dir)
{
    /* A valid file, then cut in half. */
    kjit_tune_entry e = entry(DEV, 1, 5376, KJIT_BF16, 2, 1, 4, 2, 1);
    CHECK_STATUS(kjit__tune_file_update(dir, &e, 1), KJIT_OK);
    char *full = read_text(dir);
    CHECK(full != NULL);
    if (full) {
        full[strlen(full) / 2] = '\0';
        expect_file(dir, "truncated", full, KJIT_TUNE_FILE_DAMAGED, 0, 0);
        free(full);
    }
    expect_file(dir, "empty", "", KJIT_TUNE_FILE_DAMAGED, 0, 0);
    expect_file(dir, "garbage", "\x01\x02\xff not json", KJIT_TUNE_FILE_DAMAGED, 0, 0);
    expect_file(dir, "array", "[1,2,3]", KJIT_TUNE_FILE_DAMAGED, 0, 0);
    expect_file(dir, "format 3", "{\"format\":3,\"kjit\":\"" KJIT_VERSION_STRING "\",\"entries\":[" GOOD "]}",
                KJIT_TUNE_FILE_FOREIGN, 0, 0);
    /* Format 2: each entry names its kjit version; one that does not is skipped. */
    expect_file(dir, "format 2, no entry version", "{\"format\":2,\"entries\":[" GOOD "]}", KJIT_TUNE_FILE_OK, 0, 1);
    expect_file(dir, "format 2", "{\"format\":2,\"entries\":[{\"kjit\":\"" KJIT_VERSION_STRING "\"," GOOD_FIELDS "]}",
                KJIT_TUNE_FILE_OK, 1, 0);
    /* Another version's entries (format 1 or 2) are not used, not judged. */
    expect_file(dir, "other kjit", "{\"format\":1,\"kjit\":\"0.0.9\",\"entries\":[" GOOD "]}", KJIT_TUNE_FILE_OK,
                0, 0);
    /* Not a format any kjit writes: damaged (rebuilt), not a newer kjit's. */
    expect_file(dir, "format 0", "{\"format\":0,\"entries\":[]}", KJIT_TUNE_FILE_DAMAGED, 0, 0);
    expect_file(dir, "format -1", "{\"format\":-1,\"entries\":[]}", KJIT_TUNE_FILE_DAMAGED, 0, 0);
    expect_file(dir, "format 2.5", "{\"format\":2.5,\"entries\":[]}", KJIT_TUNE_FILE_DAMAGED, 0, 0);
    expect_file(dir, "format 1e400", "{\"format\":1e400,\"entries\":[]}", KJIT_TUNE_FILE_DAMAGED, 0, 0);
    expect_file(dir, "format 1e9", "{\"format\":1e9,\"entries\":[]}", KJIT_TUNE_FILE_DAMAGED, 0, 0);
    expect_file(dir, "format 7", "{\"format\":7,\"entries\":[]}", KJIT_TUNE_FILE_FOREIGN, 0, 0);
    expect_file(dir, "format as string", "{\"format\":\"1\",\"kjit\":\"" KJIT_VERSION_STRING "\",\"entries\":[]}",
                KJIT_TUNE_FILE_DAMAGED, 0, 0);
    expect_file(dir, "no kjit", "{\"format\":1,\"entries\":[]}", KJIT_TUNE_FILE_DAMAGED, 0, 0);
    expect_file(dir, "entries object", "{\"format\":1,\"kjit\":\"" KJIT_VERSION_STRING "\",\"entries\":{}}",
                KJIT_TUNE_FILE_DAMAGED, 0, 0);
    expect_file(dir, "good", HEAD GOOD "]}", KJIT_TUNE_FILE_OK, 1, 0);
    expect_file(dir, "good, white space after", HEAD GOOD "]}\n \t\r\n", KJIT_TUNE_FILE_OK, 1, 0);
    /* Two files run together (a torn concatenation): the second's entries
     * would be dropped by the next save without a word. */
    expect_file(dir, "two objects", HEAD GOOD "]}" HEAD GOOD "]}", KJIT_TUNE_FILE_DAMAGED, 0, 0);
    expect_file(dir, "trailing text", HEAD GOOD "]} x", KJIT_TUNE_FILE_DAMAGED, 0, 0);
    expect_file(dir, "entries twice", HEAD GOOD "],\"entries\":5}", KJIT_TUNE_FILE_DAMAGED, 0, 0);
    { /* ... and a NUL then text after the object (it passed as the end). */
        static const char t[] = HEAD GOOD "]}\0junk";
        kjit_tune_list l = {0};
        int nb = -1;
        CHECK_EQ_INT(kjit__tune_parse(t, sizeof t - 1, &l, &nb, NULL, 0), KJIT_TUNE_FILE_DAMAGED);
        CHECK_EQ_INT((int)l.n, 0);
        kjit__tune_list_free(&l);
    }
    { /* A raw NUL inside a string (kjit writes none) would cut a device
       * name the same way: "<device>\0zz" read as this device's. */
        static const char t[] = HEAD "{\"device\":\"" DEV "\0zz\",\"op\":\"norm_modulate\",\"hidden\":5376,"
                                "\"dtype\":\"bf16\",\"fwd\":{\"rpc\":2,\"pf\":1,\"grid_per_sm\":2},\"bwd\":{\"bwd_pf\":1,"
                                "\"accs\":1}}]}";
        kjit_tune_list l = {0};
        int nb = -1;
        CHECK_EQ_INT(kjit__tune_parse(t, sizeof t - 1, &l, &nb, NULL, 0), KJIT_TUNE_FILE_DAMAGED);
        CHECK_EQ_INT((int)l.n, 0);
        kjit__tune_list_free(&l);
    }
    /* A \u0000 (kjit writes none) would cut a device name: "H200\u0000x"
     * read as this device's. */
    expect_file(dir, "device with \\u0000", HEAD "{\"device\":\"" DEV "\\u0000x\",\"op\":\"norm_modulate\",\"hidden\":5376,"
                "\"dtype\":\"bf16\",\"fwd\":{\"rpc\":2,\"pf\":1,\"grid_per_sm\":2},\"bwd\":{\"bwd_pf\":1,\"accs\":1}}]}",
                KJIT_TUNE_FILE_DAMAGED, 0, 0);
    { /* A valid launch outside the tuning space (rpc 3; pf 3 on a full
       * grid is not even one): read, but not used by a context. */
        static const char *const outside[] = {"\"rpc\":3,\"pf\":0,\"grid_per_sm\":0", "\"rpc\":1,\"pf\":2,\"grid_per_sm\":3"};
        for (int i = 0; i < 2; ++i) {
            char text[2048];
            snprintf(text, sizeof text, HEAD "%s]}", i ? E("\"rpc\":1,\"pf\":2,\"grid_per_sm\":3", BWD_OK, "")
                                                      : E("\"rpc\":3,\"pf\":0,\"grid_per_sm\":0", BWD_OK, ""));
            write_file(dir, KJIT_TUNE_FILE, text);
            kjit_tune_list l = {0};
            int nb = -1;
            CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &nb, NULL, 0), KJIT_TUNE_FILE_OK);
            CHECK_EQ_INT((int)l.n, 1);
            kjit__tune_list_free(&l);
            kjit_tune_table *t = kjit__tune_table_new(DEV, SMEM, 0);
            if (kjit__tune_table_load(t, dir) != 0) {
                fprintf(stderr, "a config outside the tuning space was loaded: %s\n", outside[i]);
                kjit_test_failures++;
            }
            kjit__tune_table_free(t);
        }
        /* the same entry inside it (rpc 1 pf 0 grid 0) is loaded */
        char text[2048];
        snprintf(text, sizeof text, HEAD "%s]}", E(FWD_OK, BWD_OK, ""));
        write_file(dir, KJIT_TUNE_FILE, text);
        kjit_tune_table *t = kjit__tune_table_new(DEV, SMEM, 0);
        CHECK_EQ_INT(kjit__tune_table_load(t, dir), 1);
        kjit__tune_table_free(t);
    }
    /* A format 1 file's entries that are not objects: skipped, not kept
     * as another version's. */
    expect_file(dir, "other kjit, not objects", "{\"format\":1,\"kjit\":\"0.0.9\",\"entries\":[5,\"s\",null]}",
                KJIT_TUNE_FILE_OK, 0, 3);
    /* Bad entries, each next to a good one: skipped, the good one kept. */
    static const char *const bad[] = {
        "5",
        "\"x\"",
        "{}",
        "{\"device\":7,\"op\":\"gated_residual\",\"hidden\":3072,\"dtype\":\"bf16\",\"fwd\":{" FWD_OK "},\"bwd\":{" BWD_OK "}}",
        "{\"device\":\"\",\"op\":\"gated_residual\",\"hidden\":3072,\"dtype\":\"bf16\",\"fwd\":{" FWD_OK "},\"bwd\":{" BWD_OK "}}",
        /* a control byte (an escape for the terminal --show prints to) */
        "{\"device\":\"\\u001b[31mRED\",\"op\":\"gated_residual\",\"hidden\":3072,\"dtype\":\"bf16\",\"fwd\":{" FWD_OK
        "},\"bwd\":{" BWD_OK "}}",
        "{\"device\":\"NV\xc3\xa9\",\"op\":\"gated_residual\",\"hidden\":3072,\"dtype\":\"bf16\",\"fwd\":{" FWD_OK
        "},\"bwd\":{" BWD_OK "}}",
        "{\"device\":\"" DEV "\",\"op\":\"timestep_sinusoid\",\"hidden\":3072,\"dtype\":\"bf16\",\"fwd\":{" FWD_OK
        "},\"bwd\":{" BWD_OK "}}",
        "{\"device\":\"" DEV "\",\"op\":\"gated_residual\",\"hidden\":\"3072\",\"dtype\":\"bf16\",\"fwd\":{" FWD_OK
        "},\"bwd\":{" BWD_OK "}}",
        "{\"device\":\"" DEV "\",\"op\":\"gated_residual\",\"hidden\":3073,\"dtype\":\"bf16\",\"fwd\":{" FWD_OK
        "},\"bwd\":{" BWD_OK "}}",
        "{\"device\":\"" DEV "\",\"op\":\"gated_residual\",\"hidden\":32768,\"dtype\":\"bf16\",\"fwd\":{" FWD_OK
        "},\"bwd\":{" BWD_OK "}}",
        "{\"device\":\"" DEV "\",\"op\":\"gated_residual\",\"hidden\":3072,\"dtype\":\"int32\",\"fwd\":{" FWD_OK
        "},\"bwd\":{" BWD_OK "}}",
        "{\"device\":\"" DEV "\",\"op\":\"gated_residual\",\"hidden\":3072,\"dtype\":\"bf16\",\"fwd\":[1],\"bwd\":{" BWD_OK
        "}}",
        E("\"rpc\":\"1\",\"pf\":0,\"grid_per_sm\":0", BWD_OK, ""),
        E("\"rpc\":1.5,\"pf\":0,\"grid_per_sm\":0", BWD_OK, ""),
        E("\"rpc\":0,\"pf\":0,\"grid_per_sm\":0", BWD_OK, ""),
        E("\"rpc\":16,\"pf\":0,\"grid_per_sm\":0", BWD_OK, ""),
        E("\"rpc\":1e300,\"pf\":0,\"grid_per_sm\":0", BWD_OK, ""),
        E("\"rpc\":1,\"pf\":4,\"grid_per_sm\":0", BWD_OK, ""),
        E("\"rpc\":1,\"pf\":0,\"grid_per_sm\":-1", BWD_OK, ""),
        E("\"rpc\":1,\"pf\":0,\"grid_per_sm\":1000000", BWD_OK, ""),
        E("\"rpc\":1,\"pf\":0", BWD_OK, ""),
        E(FWD_OK, "\"bwd_pf\":4,\"accs\":0", ""),
        E(FWD_OK, "\"bwd_pf\":1,\"accs\":3", ""),
        E(FWD_OK, "\"bwd_pf\":1,\"accs\":null", ""),
        E(FWD_OK, "\"bwd_pf\":true,\"accs\":0", ""),
        /* a used field given twice: cJSON reads the first, Python's json the last */
        E("\"rpc\":1,\"rpc\":2,\"pf\":0,\"grid_per_sm\":0", BWD_OK, ""),
        E(FWD_OK, "\"bwd_pf\":1,\"accs\":0,\"accs\":1", ""),
        "{\"device\":\"" DEV "\",\"op\":\"gated_residual\",\"hidden\":3072,\"hidden\":-1,\"dtype\":\"bf16\",\"fwd\":{" FWD_OK
        "},\"bwd\":{" BWD_OK "}}",
        /* fp32 at 16384: 512 threads per row, rpc 4 would be 2048 threads. */
        "{\"device\":\"" DEV "\",\"op\":\"gated_residual\",\"hidden\":16384,\"dtype\":\"fp32\",\"fwd\":{"
        "\"rpc\":4,\"pf\":0,\"grid_per_sm\":0},\"bwd\":{" BWD_OK "}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        char text[2048], what[32];
        snprintf(text, sizeof text, HEAD GOOD ",%s]}", bad[i]);
        snprintf(what, sizeof what, "bad entry %zu", i);
        expect_file(dir, what, text, KJIT_TUNE_FILE_OK, 1, 1);
    }
    /* Diagnostics of the wrong type are dropped, the entry kept. */
    expect_file(dir, "bad diagnostics",
                HEAD E(FWD_OK, BWD_OK, ",\"fwd_us\":\"fast\",\"rows\":[1,2],\"fwd_us_rows\":[1]") "]}", KJIT_TUNE_FILE_OK, 1,
                0);
    /* A directory in its place: unreadable, not damaged (no save can
     * rename over it), left as it is; a save fails (EIO) and says why. */
    char p[4200];
    snprintf(p, sizeof p, "%.4000s/%s", dir, KJIT_TUNE_FILE);
    unlink(p);
    CHECK(mkdir(p, 0700) == 0);
    kjit_tune_list l = {0};
    int nb = 0;
    char why[512] = "unset";
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &nb, why, sizeof why), KJIT_TUNE_FILE_UNREADABLE);
    CHECK(strcmp(why, "a directory") == 0); /* the reason, for kjit tune --show */
    CHECK_STATUS(kjit__tune_file_update(dir, &e, 1), KJIT_EIO);
    CHECK(strstr(kjit_last_error(), "tune.json") != NULL && strstr(kjit_last_error(), "a directory") != NULL);
    rmdir(p);
    CHECK_EQ_INT(stray_files(dir), 0);
    /* A FIFO in its place: ignored at once (an open without O_NONBLOCK
     * waited for a writer forever; the alarm fails the test instead), and a
     * save replaces it with the file. */
    CHECK(mkfifo(p, 0600) == 0);
    alarm(20);
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &nb, why, sizeof why), KJIT_TUNE_FILE_DAMAGED);
    CHECK(strstr(why, "not a regular file") != NULL);
    CHECK_STATUS(kjit__tune_file_update(dir, &e, 1), KJIT_OK);
    alarm(0);
    struct stat st;
    CHECK(lstat(p, &st) == 0 && S_ISREG(st.st_mode));
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &nb, NULL, 0), KJIT_TUNE_FILE_OK);
    kjit__tune_list_free(&l);
    memset(&l, 0, sizeof l);
    unlink(p);
    CHECK_EQ_INT(stray_files(dir), 0);
    /* No file at all. */
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &nb, why, sizeof why), KJIT_TUNE_FILE_MISSING);
    CHECK_EQ_INT((int)strlen(why), 0);
    CHECK_EQ_INT(kjit__tune_file_read("", &l, &nb, NULL, 0), KJIT_TUNE_FILE_MISSING);
    CHECK_EQ_INT(l.n, 0);
}

/* 4 processes x 10 saves of distinct entries into one file. */
/* Two kjit versions sharing a cache keep each other's results: another
 * version's entries survive this one's saves as they were written, and are
 * never used here. */
/* Many entries read in linear time (each was compared with every one
 * before it: 34 s for 100,000), a later entry of a key replacing the
 * earlier one in its place. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_many_entries(void)
{
    enum { N = 100000 };
    const size_t cap = (size_t)N * 256 + 4096;
    char *t = malloc(cap);
    CHECK(t != NULL);
    if (!t) return;
    size_t len = (size_t)snprintf(t, cap, "%s", HEAD);
    for (int i = 0; i < N + 2; ++i) /* entries N and N + 1 repeat 0 and 1 with rpc 1 */
        len += (size_t)snprintf(t + len, cap - len,
                                "%s{\"device\":\"GPU %d\",\"op\":\"norm_modulate\",\"hidden\":5376,\"dtype\":\"bf16\","
                                "\"fwd\":{\"rpc\":%d,\"pf\":1,\"grid_per_sm\":2},\"bwd\":{\"bwd_pf\":1,\"accs\":1}}",
                                i ? "," : "", i % N, i < N ? 2 : 1);
    len += (size_t)snprintf(t + len, cap - len, "]}");
    kjit_tune_list l = {0};
    int bad = -1;
    const double t0 = now_s();
    CHECK_EQ_INT(kjit__tune_parse(t, len, &l, &bad, NULL, 0), KJIT_TUNE_FILE_OK);
    const double secs = now_s() - t0;
    CHECK_EQ_INT((int)l.n, N);
    CHECK_EQ_INT(bad, 0);
    CHECK(l.n == N && l.v[0].cfg.rpc == 1 && l.v[1].cfg.rpc == 1 && l.v[2].cfg.rpc == 2 && !strcmp(l.v[1].device, "GPU 1"));
    CHECK(secs < 10);
    printf("%d entries parsed in %.2f s\n", N + 2, secs);
    kjit__tune_list_free(&l);
    free(t);
}

/* Microseconds a lookup in a table of 9 * nh keys (h = 8, 16, ..., 8 nh
 * for every op and dtype, set as tuned), over every key set and as many
 * not set; *ok counts the lookups that found what they should. */
static double table_lookup_us(int nh, int *ok, int *keys)
{
    static const kjit_dtype acts[3] = {KJIT_BF16, KJIT_F16, KJIT_F32};
    kjit_tune_table *t = kjit__tune_table_new(DEV, SMEM, 0);
    *ok = *keys = 0;
    if (!t) return 0;
    for (int mode = 1; mode <= 3; ++mode)
        for (int a = 0; a < 3; ++a)
            for (int k = 1; k <= nh; ++k) {
                kjit_adaln_config c;
                kjit__adaln_config_default(mode, 8 * k, acts[a], &c);
                kjit__adaln_config_fit(mode, 8 * k, acts[a], &c, SMEM);
                *keys += kjit__tune_table_set(t, mode, 8 * k, acts[a], &c, KJIT_CONFIG_TUNED) == KJIT_OK;
            }
    int lookups = 0;
    const int reps = 2000 / nh > 1 ? 2000 / nh : 1; /* about as many lookups for any nh */
    const double t0 = now_s();
    for (int r = 0; r < reps; ++r)
        for (int mode = 1; mode <= 3; ++mode)
            for (int a = 0; a < 3; ++a)
                for (int k = 1; k <= nh; ++k) {
                    kjit_adaln_config c, want;
                    kjit__adaln_config_default(mode, 8 * k, acts[a], &want);
                    kjit__adaln_config_fit(mode, 8 * k, acts[a], &want, SMEM);
                    *ok += kjit__tune_table_get(t, mode, 8 * k, acts[a], &c, NULL) == KJIT_CONFIG_TUNED &&
                           !memcmp(&c, &want, sizeof c);
                    *ok += kjit__tune_table_get(t, mode, 8 * k + 4, acts[a], &c, NULL) == KJIT_CONFIG_DEFAULT;
                    lookups += 2;
                }
    const double us = (now_s() - t0) * 1e6 / lookups;
    *ok /= reps;
    kjit__tune_table_free(t);
    return us;
}

/* A context's table with many keys (as a large tuning file could give):
 * every key set is found with its config, every key not set is not, and a
 * lookup costs about what it does in a small table (a scan of 18,000 keys
 * took 40x longer, 2026-12-05). */
static void test_table_many_keys(void)
{
    int ok_small, keys_small, ok_big, keys_big;
    const double small = table_lookup_us(2, &ok_small, &keys_small);
    const double big = table_lookup_us(2000, &ok_big, &keys_big);
    CHECK_EQ_INT(keys_small, 18);
    CHECK_EQ_INT(ok_small, 2 * 18);
    CHECK_EQ_INT(keys_big, 18000);
    CHECK_EQ_INT(ok_big, 2 * 18000);
    CHECK(big < 10 * small + 1.0);
    printf("lookups: %.2f us in a table of %d keys, %.2f us in one of %d\n", small, keys_small, big, keys_big);
}

/* A save that would make the file larger than a reader takes (it would
 * then read as damaged, and the save after that empty it) is refused,
 * the file left as it was. */
static void test_too_big(const char *dir)
{
    const size_t pad = (4u << 20) - 200;
    char *t = malloc(pad + 256);
    CHECK(t != NULL);
    if (!t) return;
    int n = snprintf(t, 256, "{\"format\":2,\"entries\":[{\"kjit\":\"0.0.9\",\"pad\":\"");
    memset(t + n, 'x', pad - (size_t)n - 64);
    snprintf(t + pad - 64, 256, "\"}]}");
    write_file(dir, KJIT_TUNE_FILE, t);
    kjit_tune_list l = {0};
    int nb = -1;
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &nb, NULL, 0), KJIT_TUNE_FILE_OK); /* under the cap: read */
    CHECK_EQ_INT((int)l.n_other, 1);
    kjit__tune_list_free(&l);
    kjit_tune_entry e = entry(DEV, 1, 5376, KJIT_BF16, 2, 1, 4, 2, 1);
    CHECK_STATUS(kjit__tune_file_update(dir, &e, 1), KJIT_EIO);
    CHECK(strstr(kjit_last_error(), "more than the 4194304 a reader takes") != NULL);
    char *after = read_text(dir);
    CHECK(after && !strcmp(after, t));
    free(after);
    free(t);
}

/* The cap counts the newline a save writes after the text: a text of
 * exactly the cap would make a file one byte over it, which every reader
 * takes for damaged and the next save empties. */
static void test_cap_exact(const char *dir)
{
    const size_t cap = 4u << 20;
    char *t = malloc(cap + 256);
    CHECK(t != NULL);
    if (!t) return;
    kjit_tune_entry e = entry(DEV, 1, 5376, KJIT_BF16, 2, 1, 4, 2, 1);
    size_t pad = cap - 4096;
    for (int round = 0; round < 2; ++round) {
        int n = snprintf(t, 256, "{\"format\":2,\"entries\":[{\"kjit\":\"0.0.9\",\"pad\":\"");
        memset(t + n, 'x', pad);
        snprintf(t + n + pad, 256, "\"}]}");
        if (round == 1) break;
        /* What a save of e into this file would print: pad set so that it
         * is exactly the cap. */
        kjit_tune_list l = {0};
        int nb = -1;
        CHECK_EQ_INT(kjit__tune_parse(t, strlen(t), &l, &nb, NULL, 0), KJIT_TUNE_FILE_OK);
        CHECK_STATUS(kjit__tune_list_put(&l, &e), KJIT_OK);
        char *text = kjit__tune_print(&l);
        CHECK(text != NULL);
        if (text) pad += cap - strlen(text);
        free(text);
        kjit__tune_list_free(&l);
    }
    write_file(dir, KJIT_TUNE_FILE, t);
    kjit_tune_list l = {0};
    int nb = -1;
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &nb, NULL, 0), KJIT_TUNE_FILE_OK);
    CHECK_STATUS(kjit__tune_list_put(&l, &e), KJIT_OK);
    char *text = kjit__tune_print(&l);
    CHECK(text && strlen(text) == cap); /* the boundary itself */
    free(text);
    kjit__tune_list_free(&l);
    CHECK_STATUS(kjit__tune_file_update(dir, &e, 1), KJIT_EIO);
    CHECK(strstr(kjit_last_error(), "would grow to 4194305 bytes") != NULL);
    char *after = read_text(dir);
    CHECK(after && !strcmp(after, t));
    free(after);
    free(t);
}

/* A file that cannot be read whole (here: no descriptor left to open it
 * with, as EACCES or EIO would also do) says nothing of its content: it is
 * ignored, and a save leaves it as it is instead of replacing it with this
 * process's entries alone. */
static void test_unreadable(const char *dir)
{
    kjit_tune_entry keep = entry(DEV, 1, 1024, KJIT_BF16, 2, 1, 4, 2, 1);
    kjit_tune_entry add = entry(DEV, 1, 2048, KJIT_BF16, 2, 1, 4, 2, 1);
    char p[4200];
    snprintf(p, sizeof p, "%.4000s/%s", dir, KJIT_TUNE_FILE);
    unlink(p);
    CHECK_STATUS(kjit__tune_file_update(dir, &keep, 1), KJIT_OK);
    char *before = read_text(dir);
    CHECK(before != NULL);
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
    struct rlimit low = old;
    low.rlim_cur = 256;
    if (low.rlim_cur > old.rlim_cur) low.rlim_cur = old.rlim_cur;
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    /* Every descriptor taken, then one given back: the save's lock takes
     * it, and the read of the file finds none (EMFILE). */
    int fds[256], nf = 0;
    while (nf < 256 && (fds[nf] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) ++nf;
    CHECK(nf > 0 && nf < 256 && errno == EMFILE);
    close(fds[--nf]);
    const int rc = kjit__tune_file_update(dir, &add, 1);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", kjit_last_error());
    kjit_tune_list l = {0};
    int nb = -1;
    /* And a read alone, with no descriptor for it. */
    const int fd_last = open("/dev/null", O_RDONLY | O_CLOEXEC);
    const kjit_tune_file_state st = kjit__tune_file_read(dir, &l, &nb, NULL, 0);
    if (fd_last >= 0) close(fd_last);
    kjit__tune_list_free(&l);
    while (nf > 0) close(fds[--nf]);
    CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0);
    CHECK_STATUS(rc, KJIT_EIO);
    CHECK(strstr(msg, "could not be read") != NULL && strstr(msg, "left as it is") != NULL);
    CHECK_EQ_INT(st, KJIT_TUNE_FILE_UNREADABLE);
    char *after = read_text(dir);
    CHECK(before && after && !strcmp(before, after)); /* the 1024 entry kept, nothing written */
    free(before), free(after);
    CHECK_EQ_INT(stray_files(dir), 0);
    unlink(p);
}

/* kjit_tune's KJIT_EIO means "tuned, not saved" only with a tuned config:
 * an EIO before the tuning ended (an unreadable template directory) leaves
 * the result zeroed, and the CLI and the server must report a failure, not
 * a result of zeros. */
static void test_tuned_or_not(void)
{
    kjit_tune_result r;
    memset(&r, 0, sizeof r);
    CHECK_EQ_INT(kjit__tune_result_tuned(KJIT_EIO, &r), 0);
    CHECK_EQ_INT(kjit__tune_result_tuned(KJIT_EINVAL, &r), 0);
    CHECK_EQ_INT(kjit__tune_result_tuned(KJIT_OK, &r), 1);
    r.config.source = KJIT_CONFIG_TUNED;
    CHECK_EQ_INT(kjit__tune_result_tuned(KJIT_EIO, &r), 1);
    CHECK_EQ_INT(kjit__tune_result_tuned(KJIT_ECUDA, &r), 0);
}

static void test_other_versions(const char *dir)
{
    write_file(dir, KJIT_TUNE_FILE,
               "{\"format\":2,\"entries\":[{\"kjit\":\"9.9.9\",\"device\":\"" DEV "\",\"op\":\"norm_modulate\","
               "\"hidden\":5376,\"dtype\":\"bf16\",\"fwd\":{\"rpc\":2,\"pf\":1,\"grid_per_sm\":2},\"bwd\":{\"bwd_pf\":1,"
               "\"accs\":1},\"a_field_of_its_own\":[1,2]},"
               "{\"kjit\":\"0.0.1\",\"device\":\"" DEV "\",\"op\":\"norm_modulate\",\"hidden\":5376,\"rpc\":99},"
               "{\"kjit\":\"0.0.2\",\"kjit\":\"" KJIT_VERSION_STRING "\",\"op\":\"twice\"}]}");
    kjit_tune_list l = {0};
    int bad = -1;
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &bad, NULL, 0), KJIT_TUNE_FILE_OK);
    CHECK_EQ_INT((int)l.n, 0);
    CHECK_EQ_INT((int)l.n_other, 3);
    CHECK_EQ_INT(bad, 0);
    kjit__tune_list_free(&l);
    /* This version's table does not take them. */
    kjit_tune_table *t = kjit__tune_table_new(DEV, SMEM, 0);
    CHECK_EQ_INT(kjit__tune_table_load(t, dir), 0);
    kjit__tune_table_free(t);
    /* This version saves the same key: both versions' entries then stand. */
    kjit_tune_entry e = entry(DEV, 1, 5376, KJIT_BF16, 1, 0, 0, 0, 1);
    CHECK_STATUS(kjit__tune_file_update(dir, &e, 1), KJIT_OK);
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &bad, NULL, 0), KJIT_TUNE_FILE_OK);
    CHECK_EQ_INT((int)l.n, 1);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT((int)l.n_other, 3);
    CHECK(l.n == 1 && same_entry(&l.v[0], &e));
    int kept_field = 0, kept_odd = 0, kept_twice = 0;
    for (size_t i = 0; i < l.n_other; ++i) {
        kept_field |= strstr(l.other[i], "\"9.9.9\"") && strstr(l.other[i], "\"a_field_of_its_own\":[1,2]");
        kept_odd |= strstr(l.other[i], "\"0.0.1\"") && strstr(l.other[i], "\"rpc\":99");
        /* An entry with "kjit" twice is the first's version's, with one "kjit". */
        kept_twice |= strstr(l.other[i], "\"twice\"") && strstr(l.other[i], "\"kjit\":\"0.0.2\"") &&
                      !strstr(l.other[i], "\"kjit\":\"" KJIT_VERSION_STRING "\"");
    }
    CHECK(kept_field && kept_odd && kept_twice);
    kjit__tune_list_free(&l);
    /* And so through a second save. */
    CHECK_STATUS(kjit__tune_file_update(dir, &e, 1), KJIT_OK);
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &bad, NULL, 0), KJIT_TUNE_FILE_OK);
    CHECK_EQ_INT((int)l.n, 1);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT((int)l.n_other, 3);
    kjit__tune_list_free(&l);
    char *text = read_text(dir);
    CHECK(text && strstr(text, "\"format\":\t2") && strstr(text, "\"kjit\":\t\"" KJIT_VERSION_STRING "\""));
    free(text);
    t = kjit__tune_table_new(DEV, SMEM, 0);
    CHECK_EQ_INT(kjit__tune_table_load(t, dir), 1);
    kjit_adaln_config c;
    CHECK_EQ_INT(kjit__tune_table_get(t, 1, 5376, KJIT_BF16, &c, NULL), KJIT_CONFIG_STORED);
    CHECK(kjit__adaln_config_equal(&c, &e.cfg));
    kjit__tune_table_free(t);
    CHECK_EQ_INT(stray_files(dir), 0);
}

/* A directory whose path leaves no room for the file's names: refused
 * before anything is created (a cut path named "tune.l" and "tune.j"). */
static void test_long_path(const char *dir)
{
    /* 4088 bytes: the directory fits in PATH_MAX, dir/tune.json does not. */
    char deep[4096];
    int n = snprintf(deep, sizeof deep, "%s", dir);
    const int want = 4088;
    while (n < want) {
        int k = want - n - 1 > 200 ? 200 : want - n - 1;
        if (want - n - 1 - k == 1) --k; /* never leave a single byte */
        deep[n] = '/';
        memset(deep + n + 1, 'd', (size_t)k);
        n += 1 + k;
        deep[n] = '\0';
        if (mkdir(deep, 0700) != 0) {
            fprintf(stderr, "mkdir of a %d-byte path: %s\n", n, strerror(errno));
            CHECK(0);
            return;
        }
    }
    CHECK_EQ_INT((int)strlen(deep), want);
    kjit_tune_entry e = entry(DEV, 1, 5376, KJIT_BF16, 2, 1, 4, 2, 1);
    CHECK_STATUS(kjit__tune_file_update(deep, &e, 1), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "too long") != NULL);
    CHECK_EQ_INT(stray_files(deep), 0);
    kjit_tune_list l = {0};
    int nb = 0;
    char why[256] = "";
    CHECK_EQ_INT(kjit__tune_file_read(deep, &l, &nb, why, sizeof why), KJIT_TUNE_FILE_MISSING);
    CHECK(strstr(why, "longer than") != NULL); /* kjit tune --show says so, not "no tuning file" */
    CHECK_EQ_INT((int)l.n, 0);
}

static void test_concurrent(const char *dir)
{
    enum { PROCS = 4, EACH = 10 };
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; ++p) {
        pids[p] = fork();
        if (pids[p] == 0) {
            int fails = 0;
            for (int i = 0; i < EACH; ++i) {
                kjit_tune_entry e = entry(DEV, 1 + i % 3, 8 * (1 + p * EACH + i), KJIT_BF16, 1, i % 2, 0, 0, 0);
                fails += kjit__tune_file_update(dir, &e, 1) != KJIT_OK;
            }
            _exit(fails ? 1 : 0);
        }
        CHECK(pids[p] > 0);
    }
    for (int p = 0; p < PROCS; ++p) {
        int st = 0;
        waitpid(pids[p], &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    kjit_tune_list l = {0};
    int bad = 0;
    CHECK_EQ_INT(kjit__tune_file_read(dir, &l, &bad, NULL, 0), KJIT_TUNE_FILE_OK);
    CHECK_EQ_INT(l.n, PROCS * EACH);
    for (int p = 0; p < PROCS; ++p)
        for (int i = 0; i < EACH; ++i) {
            int found = 0;
            for (size_t k = 0; k < l.n; ++k)
                found |= l.v[k].hidden == 8 * (1 + p * EACH + i) && l.v[k].mode == 1 + i % 3 && l.v[k].cfg.pf == i % 2;
            if (!found) {
                fprintf(stderr, "concurrent saves: entry of process %d, save %d lost\n", p, i);
                kjit_test_failures++;
            }
        }
    kjit__tune_list_free(&l);
    CHECK_EQ_INT(stray_files(dir), 0);
}

/* A process forked while a save holds the lock (a trainer's data-loader
 * worker forked by another thread) shares the lock's open file, and so its
 * flock, for as long as it lives: the save must release the lock itself,
 * not leave that to close, or every later save waits for the child. The
 * save runs on a thread; the fork comes the moment the lock is seen held.
 * A child that did not inherit the lock's descriptor (the save had ended
 * first) proves nothing: tried again, up to 200 times. */
typedef struct save_arg {
    const char *dir;
    int rc;
    int done; /* atomic: the save has returned */
} save_arg;

static void *save_thread(void *p)
{
    save_arg *a = p;
    kjit_tune_entry e = entry(DEV, 2, 4096, KJIT_F16, 2, 1, 2, 1, 0);
    a->rc = kjit__tune_file_update(a->dir, &e, 1);
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* In the child: 1 when one of its descriptors is the open file at path. */
static int holds_file(const char *path)
{
    struct stat want, st;
    if (stat(path, &want) != 0) return 0;
    for (int fd = 0; fd < 1024; ++fd)
        if (fstat(fd, &st) == 0 && st.st_dev == want.st_dev && st.st_ino == want.st_ino) return 1;
    return 0;
}

static void test_fork_during_save(const char *base)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/fork", base);
    CHECK(mkdir(dir, 0700) == 0);
    /* Saves long enough to be caught: a file of 6000 entries (3.6 MB). */
    enum { N = 6000 };
    kjit_tune_entry *many = calloc(N, sizeof *many);
    CHECK(many != NULL);
    if (!many) return;
    for (int i = 0; i < N; ++i) {
        char dev[32];
        snprintf(dev, sizeof dev, "GPU %d", i / 2048);
        many[i] = entry(dev, 1, 8 * (1 + i % 2048), KJIT_BF16, 1, 0, 0, 0, 0);
    }
    CHECK_STATUS(kjit__tune_file_update(dir, many, N), KJIT_OK);
    free(many);
    char lock[4300];
    snprintf(lock, sizeof lock, "%s/%s", dir, KJIT_TUNE_LOCK);
    int caught = 0;
    for (int attempt = 0; attempt < 200 && !caught; ++attempt) {
        save_arg a = {dir, -1, 0};
        pthread_t th;
        CHECK(pthread_create(&th, NULL, save_thread, &a) == 0);
        pid_t child = -1;
        int report[2];
        CHECK(pipe(report) == 0);
        /* Poll the lock until the save holds it, then fork; a save that
         * has returned first ends the attempt. */
        while (child < 0 && !__atomic_load_n(&a.done, __ATOMIC_ACQUIRE)) {
            const int fd = open(lock, O_RDWR | O_CLOEXEC);
            if (fd < 0) continue;
            if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
                flock(fd, LOCK_UN);
                close(fd);
                struct timespec ts = {0, 20000};
                nanosleep(&ts, NULL);
                continue;
            }
            close(fd);
            child = fork();
            if (child == 0) {
                const char held = (char)('0' + holds_file(lock));
                if (write(report[1], &held, 1) != 1) _exit(2);
                sleep(20); /* killed by the parent */
                _exit(0);
            }
        }
        pthread_join(th, NULL);
        CHECK_STATUS(a.rc, KJIT_OK);
        char held = '0';
        if (child > 0) CHECK(read(report[0], &held, 1) == 1);
        close(report[0]);
        close(report[1]);
        if (held == '1') {
            caught = 1;
            /* The save has returned; its lock must be free now, while the
             * child still lives. */
            const int fd = open(lock, O_RDWR | O_CLOEXEC);
            CHECK(fd >= 0);
            const int free_now = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0;
            if (!free_now)
                fprintf(stderr, "fork during a save: the lock is still held after the save returned (%s)\n",
                        strerror(errno));
            CHECK(free_now);
            if (fd >= 0) close(fd);
            if (free_now) printf("fork during a save: caught on attempt %d; the lock free after the save\n", attempt + 1);
        }
        if (child > 0) {
            kill(child, SIGKILL);
            waitpid(child, NULL, 0);
        }
    }
    CHECK(caught);
    CHECK_EQ_INT(stray_files(dir), 0);
}

/* A save that fails (the process's file-size limit: the temp file's write
 * fails) returns KJIT_EIO naming the step, and leaves the old file as it was
 * and no temp file; one whose lock cannot be opened (a directory in its
 * place) fails before anything is written. */
static void test_failed_save(const char *base)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/fail", base);
    CHECK(mkdir(dir, 0700) == 0);
    kjit_tune_entry first = entry(DEV, 1, 5376, KJIT_BF16, 2, 1, 4, 2, 1);
    CHECK_STATUS(kjit__tune_file_update(dir, &first, 1), KJIT_OK);
    char *before = read_text(dir);
    CHECK(before != NULL);
    if (!before) return;
    /* The old file fits the limit; the new one, with 8 entries more, not. */
    const rlim_t cap = (rlim_t)strlen(before) + 64;
    kjit_tune_entry more[8];
    for (int i = 0; i < 8; ++i) more[i] = entry(DEV, 1, 1024 * (i + 1), KJIT_F16, 1, 0, 0, 0, 0);
    int report[2];
    CHECK(pipe(report) == 0);
    const pid_t child = fork();
    if (child == 0) {
        /* EFBIG from the write instead of SIGXFSZ. */
        signal(SIGXFSZ, SIG_IGN);
        const struct rlimit lim = {cap, cap};
        int ok = setrlimit(RLIMIT_FSIZE, &lim) == 0 && kjit__tune_file_update(dir, more, 8) == KJIT_EIO &&
                 strstr(kjit_last_error(), ": write failed: File too large") != NULL;
        if (!ok) fprintf(stderr, "failed save: %s\n", kjit_last_error());
        kjit_test_child_exit(report[1], ok);
    }
    CHECK(kjit_test_child_passed(child, report[0], report[1]));
    char *after = read_text(dir);
    CHECK(before && after && !strcmp(before, after));
    CHECK_EQ_INT(stray_files(dir), 0);
    free(before);
    free(after);

    char dir2[4300], lock[4400];
    snprintf(dir2, sizeof dir2, "%s/nolock", base);
    snprintf(lock, sizeof lock, "%s/%s", dir2, KJIT_TUNE_LOCK);
    CHECK(mkdir(dir2, 0700) == 0 && mkdir(lock, 0700) == 0);
    CHECK_STATUS(kjit__tune_file_update(dir2, &first, 1), KJIT_EIO);
    CHECK(strstr(kjit_last_error(), "cannot open the lock") != NULL);
    char *none = read_text(dir2);
    CHECK(none == NULL);
    free(none);
    CHECK_EQ_INT(stray_files(dir2), 0);
    rmdir(lock);
}

/* The public calls on a context without a GPU. */
static void test_ctx(const char *dir)
{
    kjit_ctx_options o;
    kjit_ctx_options_init(&o);
    CHECK_EQ_INT(o.tune, 0);
    o.device = KJIT_NO_DEVICE;
    o.cache_dir = dir;
    o.tune = 1;
    kjit_ctx *ctx = NULL;
    CHECK_STATUS(kjit_ctx_create(&ctx, &o), KJIT_OK);
    if (!ctx) return;
    kjit_op_config c;
    kjit_adaln_config d;
    /* Stored entries are for a device: a context without one uses the defaults. */
    static const char *const ops[3] = {"norm_modulate", "gated_residual", "gated_residual_norm_modulate"};
    for (int m = 1; m <= 3; ++m) {
        CHECK_STATUS(kjit_op_config_get(ctx, ops[m - 1], 5376, KJIT_BF16, &c), KJIT_OK);
        kjit__adaln_config_default(m, 5376, KJIT_BF16, &d);
        CHECK_EQ_INT(c.source, KJIT_CONFIG_DEFAULT);
        CHECK(c.rpc == d.rpc && c.pf == d.pf && c.grid_per_sm == d.grid_per_sm && c.bwd_pf == d.bwd_pf &&
              c.accs == d.accs);
    }
    /* Off the fast path: the generic path's config. */
    CHECK_STATUS(kjit_op_config_get(ctx, "norm_modulate", 13, KJIT_F32, &c), KJIT_OK);
    CHECK(c.pf == 0 && c.bwd_pf == 0 && c.accs == 0 && c.source == KJIT_CONFIG_DEFAULT);
    CHECK_STATUS(kjit_op_config_get(ctx, "fused", 5376, KJIT_BF16, &c), KJIT_OK);
    CHECK_STATUS(kjit_op_config_get(NULL, "norm_modulate", 5376, KJIT_BF16, &c), KJIT_EINVAL);
    CHECK_STATUS(kjit_op_config_get(ctx, "norm_modulate", 5376, KJIT_BF16, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_op_config_get(ctx, NULL, 5376, KJIT_BF16, &c), KJIT_EINVAL);
    CHECK_STATUS(kjit_op_config_get(ctx, "timestep_sinusoid", 256, KJIT_F32, &c), KJIT_EINVAL);
    CHECK_STATUS(kjit_op_config_get(ctx, "norm_modulate", 5376, KJIT_I32, &c), KJIT_EINVAL);
    CHECK_STATUS(kjit_op_config_get(ctx, "norm_modulate", 0, KJIT_BF16, &c), KJIT_EINVAL);
    /* The force hook. */
    kjit_adaln_config f = {2, 0, 4, 2, 1};
    CHECK_STATUS(kjit__tune_force(ctx, "gated_residual", 3072, KJIT_BF16, &f), KJIT_OK);
    CHECK_STATUS(kjit_op_config_get(ctx, "gated_residual", 3072, KJIT_BF16, &c), KJIT_OK);
    CHECK(c.source == KJIT_CONFIG_FORCED && c.rpc == 2 && c.pf == 0 && c.grid_per_sm == 4 && c.bwd_pf == 2 &&
          c.accs == 1);
    f.accs = 3;
    CHECK_STATUS(kjit__tune_force(ctx, "gated_residual", 3072, KJIT_BF16, &f), KJIT_EINVAL);
    CHECK_STATUS(kjit__tune_force(ctx, "gated_residual", 3073, KJIT_BF16, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit__tune_force(ctx, "timestep_sinusoid", 3072, KJIT_BF16, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit__tune_force(ctx, "gated_residual", 3072, KJIT_BF16, NULL), KJIT_OK);
    CHECK_STATUS(kjit_op_config_get(ctx, "gated_residual", 3072, KJIT_BF16, &c), KJIT_OK);
    CHECK_EQ_INT(c.source, KJIT_CONFIG_DEFAULT);
    /* The tuner needs a device; bad keys are refused first. */
    CHECK_STATUS(kjit_tune(ctx, "norm_modulate", 5376, KJIT_BF16, NULL), KJIT_ENODRIVER);
    CHECK_STATUS(kjit_tune(ctx, "norm_modulate", 13, KJIT_BF16, NULL), KJIT_EUNSUPPORTED);
    CHECK_STATUS(kjit_tune(ctx, "norm_modulate", 16392, KJIT_BF16, NULL), KJIT_EUNSUPPORTED);
    CHECK_STATUS(kjit_tune(ctx, "adaln_row_gather", 5376, KJIT_BF16, NULL), KJIT_EINVAL);
    CHECK_STATUS(kjit_tune(NULL, "norm_modulate", 5376, KJIT_BF16, NULL), KJIT_EINVAL);
    kjit_ctx_destroy(ctx);
    /* A memory-only cache. */
    o.cache_dir = "";
    ctx = NULL;
    CHECK_STATUS(kjit_ctx_create(&ctx, &o), KJIT_OK);
    CHECK_STATUS(kjit_op_config_get(ctx, "norm_modulate", 5376, KJIT_BF16, &c), KJIT_OK);
    kjit_ctx_destroy(ctx);
}

/* The keep-aside of a damaged file: a link in tune.json's place is not
 * kept (its target is someone else's file, left as it is) and replaced; a
 * damaged file that cannot be kept (a directory holds the kept name) is not
 * replaced: the save fails, naming both, and the file keeps its bytes. */
static void test_keep_damaged(const char *dir)
{
    char p[4200], k[4200], target[4200];
    snprintf(p, sizeof p, "%.4000s/%s", dir, KJIT_TUNE_FILE);
    snprintf(k, sizeof k, "%.4000s/%s", dir, KJIT_TUNE_DAMAGED);
    snprintf(target, sizeof target, "%.4000s/elsewhere.json", dir);
    kjit_tune_entry e = entry(DEV, 2, 1024, KJIT_F32, 2, 1, 2, 1, 1);
    unlink(p);
    write_file(dir, "elsewhere.json", "{not json");
    CHECK(symlink(target, p) == 0);
    CHECK_STATUS(kjit__tune_file_update(dir, &e, 1), KJIT_OK);
    struct stat st;
    CHECK(lstat(p, &st) == 0 && S_ISREG(st.st_mode));
    CHECK(lstat(k, &st) != 0 && errno == ENOENT);
    char *t = read_named(dir, "elsewhere.json");
    CHECK(t && !strcmp(t, "{not json"));
    free(t);
    unlink(target);
    /* The kept name taken by a directory: nothing replaced. */
    write_file(dir, KJIT_TUNE_FILE, "{damaged");
    CHECK(mkdir(k, 0700) == 0);
    char inner[4300];
    snprintf(inner, sizeof inner, "%s/x", k);
    write_file(k, "x", "x");
    CHECK_STATUS(kjit__tune_file_update(dir, &e, 1), KJIT_EIO);
    CHECK(strstr(kjit_last_error(), "could not be kept as") && strstr(kjit_last_error(), "not saved"));
    t = read_text(dir);
    CHECK(t && !strcmp(t, "{damaged"));
    free(t);
    unlink(inner);
    CHECK(rmdir(k) == 0);
    /* Freed, the next save keeps it and writes the new file. */
    CHECK_STATUS(kjit__tune_file_update(dir, &e, 1), KJIT_OK);
    t = read_named(dir, KJIT_TUNE_DAMAGED);
    CHECK(t && !strcmp(t, "{damaged"));
    free(t);
    unlink(k);
    CHECK_EQ_INT(stray_files(dir), 0);
    unlink(p);
}

/* On every device size kjit knows (the shared memory of sm_75, sm_80,
 * sm_86 and sm_90), for every tuned shape: the default fitted to the device
 * (what the tuner starts from, and saves when nothing beats it) is a config
 * of the tuning space, so a stored result is used, not skipped at load; the
 * backward candidates are every (bwd_pf, accs) that fits beside the fitted
 * forward; and every forward candidate combined with every backward one
 * (what the tuner can save) is in the space. Before the backward list was
 * built from the fitted default, 2874 shapes' results were skipped at
 * 99 KiB and 827 at 163 KiB, and the backward had one candidate there. */
static void test_space_every_device(void)
{
    static const int sms[] = {75, 80, 86, 90};
    static const kjit_dtype dts[] = {KJIT_BF16, KJIT_F16, KJIT_F32};
    int bad_default = 0, bad_count = 0, bad_combo = 0, shapes = 0;
    for (size_t s = 0; s < sizeof sms / sizeof sms[0]; ++s) {
        const size_t smem = kjit__arch_tune_smem(sms[s]);
        CHECK(smem > 0);
        for (int mode = 1; mode <= 3; ++mode)
            for (size_t t = 0; t < sizeof dts / sizeof dts[0]; ++t)
                for (int h = 8; h <= KJIT_TUNE_FAST_MAX_HIDDEN; h += 8) {
                    kjit_adaln_config d, b[KJIT_TUNE_MAX_BWD];
                    kjit__adaln_config_default(mode, h, dts[t], &d);
                    kjit__adaln_config_fit(mode, h, dts[t], &d, smem);
                    ++shapes;
                    if (!kjit__adaln_config_in_space(mode, h, dts[t], &d, smem)) {
                        if (bad_default++ < 5)
                            fprintf(stderr, "sm_%d %s %d %s: the fitted default is not in the space\n", sms[s],
                                    kjit__adaln_mode_name(mode), h, kjit_dtype_name(dts[t]));
                    }
                    int fits = 0;
                    for (int pf = 0; pf <= 3; ++pf)
                        for (int a = 0; a <= 2; ++a) {
                            kjit_adaln_config c = d;
                            c.bwd_pf = pf, c.accs = a;
                            fits += kjit__adaln_config_check(mode, h, dts[t], &c, smem, NULL, 0) == KJIT_OK;
                        }
                    const int nb = kjit__adaln_space_bwd(mode, h, dts[t], smem, b);
                    if (nb != (fits ? fits : 1) && bad_count++ < 5)
                        fprintf(stderr, "sm_%d %s %d %s: %d backward candidates, %d fit\n", sms[s],
                                kjit__adaln_mode_name(mode), h, kjit_dtype_name(dts[t]), nb, fits);
                    /* The tuner's combinations, at a few shapes (all of them
                     * would take minutes). */
                    if (h % 1024) continue;
                    kjit_adaln_config f[KJIT_TUNE_MAX_FWD];
                    const int nf = kjit__adaln_space_fwd(mode, h, dts[t], f);
                    for (int i = -1; i < nf; ++i)
                        for (int j = 0; j < nb; ++j) {
                            kjit_adaln_config c = i < 0 ? d : f[i];
                            c.bwd_pf = b[j].bwd_pf, c.accs = b[j].accs;
                            if (!kjit__adaln_config_in_space(mode, h, dts[t], &c, smem) && bad_combo++ < 5)
                                fprintf(stderr, "sm_%d %s %d %s: rpc %d pf %d grid %d bwd_pf %d accs %d not in the "
                                        "space\n", sms[s], kjit__adaln_mode_name(mode), h,
                                        kjit_dtype_name(dts[t]), c.rpc, c.pf, c.grid_per_sm, c.bwd_pf, c.accs);
                        }
                }
    }
    CHECK_EQ_INT(shapes, 4 * 3 * 3 * (KJIT_TUNE_FAST_MAX_HIDDEN / 8));
    CHECK_EQ_INT(bad_default, 0);
    CHECK_EQ_INT(bad_count, 0);
    CHECK_EQ_INT(bad_combo, 0);
}

/* The tuner's candidate lists (kjit__adaln_tune_lists) on devices of every
 * size, for every tuned shape: within their room (a guard config past it
 * must stay untouched), the fitted default first, no forward half or
 * backward half twice, every forward candidate within the device's shared
 * memory, and every pair the tuner can save in the space. Before, a
 * forward candidate was dropped only when its whole config equalled the
 * fitted default, which never happened where fitting had changed the
 * backward half: 40 forward candidates in a list of 39 (a stack overflow
 * in kjit__tune_run; 2247 shapes and sizes, none at 227 or 163 KiB). */
static void test_tune_lists(void)
{
    static const size_t smems[] = {0, 32 * 1024, 48 * 1024, 60 * 1024, 95 * 1024, 159 * 1024, 223 * 1024};
    static const kjit_dtype dts[] = {KJIT_BF16, KJIT_F16, KJIT_F32};
    int bad = 0, lists = 0;
    for (size_t s = 0; s < sizeof smems / sizeof smems[0]; ++s)
        for (int mode = 1; mode <= 3; ++mode)
            for (size_t t = 0; t < sizeof dts / sizeof dts[0]; ++t)
                for (int h = 8; h <= KJIT_TUNE_FAST_MAX_HIDDEN; h += 8) {
                    kjit_adaln_config f[KJIT_TUNE_MAX_FWD + 2], b[KJIT_TUNE_MAX_BWD + 2], d;
                    memset(f, 0x5a, sizeof f), memset(b, 0x5a, sizeof b);
                    int nf = -1, nb = -1;
                    kjit__adaln_tune_lists(mode, h, dts[t], smems[s], f, &nf, b, &nb);
                    ++lists;
                    kjit__adaln_config_default(mode, h, dts[t], &d);
                    if (smems[s]) kjit__adaln_config_fit(mode, h, dts[t], &d, smems[s]);
                    const char *why = NULL;
                    const unsigned char *gf = (const unsigned char *)&f[KJIT_TUNE_MAX_FWD + 1];
                    const unsigned char *gb = (const unsigned char *)&b[KJIT_TUNE_MAX_BWD + 1];
                    for (size_t i = 0; i < sizeof f[0]; ++i)
                        if (gf[i] != 0x5a || gb[i] != 0x5a) why = "a config written past the room";
                    if (nf < 1 || nf > KJIT_TUNE_MAX_FWD || nb < 1 || nb > KJIT_TUNE_MAX_BWD)
                        why = "a count out of range";
                    else if (!kjit__adaln_config_equal(&f[0], &d) || !kjit__adaln_config_equal(&b[0], &d))
                        why = "the fitted default not first";
                    for (int i = 0; !why && i < nf; ++i) {
                        if (f[i].bwd_pf != d.bwd_pf || f[i].accs != d.accs) why = "a forward candidate's backward half";
                        if (smems[s] && kjit__adaln_fwd_smem(mode, h, dts[t], &f[i]) > smems[s])
                            why = "a forward candidate over the shared memory";
                        for (int j = 0; j < i; ++j)
                            if (f[j].rpc == f[i].rpc && f[j].pf == f[i].pf && f[j].grid_per_sm == f[i].grid_per_sm)
                                why = "a forward half twice";
                        for (int j = 0; j < nb && (h % 2048 == 0); ++j) {
                            kjit_adaln_config c = f[i];
                            c.bwd_pf = b[j].bwd_pf, c.accs = b[j].accs;
                            if (smems[s] && !kjit__adaln_config_in_space(mode, h, dts[t], &c, smems[s]))
                                why = "a pair not in the space";
                        }
                    }
                    for (int i = 0; !why && i < nb; ++i) {
                        if (b[i].rpc != d.rpc || b[i].pf != d.pf || b[i].grid_per_sm != d.grid_per_sm)
                            why = "a backward candidate's forward half";
                        for (int j = 0; j < i; ++j)
                            if (b[j].bwd_pf == b[i].bwd_pf && b[j].accs == b[i].accs) why = "a backward half twice";
                    }
                    if (why && bad++ < 5)
                        fprintf(stderr, "smem %zu %s %d %s: %s (%d forward, %d backward)\n", smems[s],
                                kjit__adaln_mode_name(mode), h, kjit_dtype_name(dts[t]), why, nf, nb);
                }
    CHECK_EQ_INT(lists, 7 * 3 * 3 * (KJIT_TUNE_FAST_MAX_HIDDEN / 8));
    CHECK_EQ_INT(bad, 0);
}

/* The tuner's rotation at its largest row count: 3 sets where one set is
 * larger than the L2, more for small rows so that the calls between two
 * uses of a set touch at least twice the L2 (before: always 3, so at
 * 32768 rows of 128 bf16 columns most timed calls found their inputs in
 * an H200's L2), at most one set per call of a timing (14). */
static void test_rotation_sets(void)
{
    const size_t mb = (size_t)1 << 20, l2 = 50 * mb;
    CHECK_EQ_INT(kjit__tune_rotation_sets(l2, (size_t)32768 * 10752 * 4), 3); /* 5376 bf16, 1.4 GB a set */
    CHECK_EQ_INT(kjit__tune_rotation_sets(l2, 50 * mb), 3);
    CHECK_EQ_INT(kjit__tune_rotation_sets(l2, (size_t)32768 * 256 * 4), 5); /* 128 bf16: 32 MiB a set */
    CHECK_EQ_INT(kjit__tune_rotation_sets(l2, 20 * mb), 6);
    CHECK_EQ_INT(kjit__tune_rotation_sets(l2, (size_t)32768 * 16 * 4), 14); /* 8 bf16: 2 MB a set */
    CHECK_EQ_INT(kjit__tune_rotation_sets(l2, 0), 14);
    /* Not reported: taken as 128 MB. */
    CHECK_EQ_INT(kjit__tune_rotation_sets(0, 64 * mb), 5);
    for (size_t b = 1; b < ((size_t)4 << 30); b = b * 3 + 7) {
        const int s = kjit__tune_rotation_sets(l2, b);
        CHECK(s >= 3 && s <= 14);
        CHECK(s == 14 || (double)(s - 1) * (double)b >= 2.0 * (double)l2);
        CHECK(s == 3 || (double)(s - 2) * (double)b < 2.0 * (double)l2);
    }
}

/* A context loading a damaged file says so once a process on stderr, even
 * without KJIT_LOG (its entries are not used: every tuned op silently
 * back at its default before), and not at all with KJIT_LOG=0; an empty
 * KJIT_LOG is unset. Each case in a fresh process (this binary run again
 * with --load: the once, and KJIT_LOG, are read once a process), stderr to
 * a file. Returns the warnings counted; *kept whether one promised the
 * tune.json.damaged copy. */
static int warnings_in_child(const char *dir, const char *log_value, int loads, int *kept)
{
    char err[4200], n[16];
    snprintf(err, sizeof err, "%s/stderr.txt", dir);
    snprintf(n, sizeof n, "%d", loads);
    const pid_t pid = fork();
    if (pid == 0) {
        const int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 2) < 0) _exit(3);
        if (log_value) setenv("KJIT_LOG", log_value, 1);
        else unsetenv("KJIT_LOG");
        execl("/proc/self/exe", "test_tune_file", "--load", dir, n, (char *)NULL);
        _exit(5);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) return -1;
    char *text = read_named(dir, "stderr.txt");
    int count = 0;
    *kept = 0;
    for (const char *q = text; q && (q = strstr(q, "kjit: warning: the tuning file ")); ++q) {
        const char *eol = strchr(q, '\n');
        const char *k = strstr(q, "keeping it as " KJIT_TUNE_DAMAGED);
        count += strstr(q, "is damaged (") && strstr(q, "its entries are not used") != NULL;
        *kept |= k && (!eol || k < eol);
    }
    free(text);
    unlink(err);
    return count;
}

/* The child's side: loads dir's file into a table n times. */
static int load_times(const char *dir, int n)
{
    for (int i = 0; i < n; ++i) {
        kjit_tune_table *t = kjit__tune_table_new(DEV, SMEM, 0);
        if (!t || kjit__tune_table_load(t, dir) != 0) return 4;
        kjit__tune_table_free(t);
    }
    return 0;
}

static void test_damaged_warning(const char *dir)
{
    int kept = -1;
    write_file(dir, KJIT_TUNE_FILE, "{\"format\":2,\"entries\":[");
    CHECK_EQ_INT(warnings_in_child(dir, NULL, 3, &kept), 1);
    CHECK_EQ_INT(kept, 1);
    CHECK_EQ_INT(warnings_in_child(dir, "1", 2, &kept), 1);
    CHECK_EQ_INT(warnings_in_child(dir, "", 2, &kept), 1);
    CHECK_EQ_INT(warnings_in_child(dir, "0", 2, &kept), 0);
    CHECK_EQ_INT(warnings_in_child(dir, "off", 2, &kept), 0);
    /* An empty file is damaged too, but a save keeps no copy of it. */
    write_file(dir, KJIT_TUNE_FILE, "");
    CHECK_EQ_INT(warnings_in_child(dir, NULL, 1, &kept), 1);
    CHECK_EQ_INT(kept, 0);
    /* A file that is fine, or none: nothing said. */
    write_file(dir, KJIT_TUNE_FILE, "{\"format\":2,\"entries\":[]}");
    CHECK_EQ_INT(warnings_in_child(dir, NULL, 1, &kept), 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, KJIT_TUNE_FILE);
    CHECK(unlink(path) == 0);
    CHECK_EQ_INT(warnings_in_child(dir, NULL, 1, &kept), 0);
    CHECK_EQ_INT(stray_files(dir), 0);
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--load")) return load_times(argv[2], atoi(argv[3]));
    char *dir = kjit_test_tmpdir();
    char sub[4][4096];
    for (int i = 0; i < 4; ++i) {
        snprintf(sub[i], sizeof sub[i], "%s/d%d", dir, i);
        CHECK(mkdir(sub[i], 0700) == 0);
    }
    test_space();
    test_space_every_device();
    test_tune_lists();
    test_rotation_sets();
    test_damaged_warning(sub[3]);
    test_round_trip(sub[0]);
    test_damaged(sub[1]);
    test_keep_damaged(sub[1]);
    test_concurrent(sub[2]);
    test_ctx(sub[3]);
    test_long_path(sub[0]);
    test_other_versions(sub[2]);
    test_many_entries();
    test_table_many_keys();
    test_too_big(sub[2]);
    test_cap_exact(sub[2]);
    test_tuned_or_not();
    test_unreadable(sub[1]);
    test_fork_during_save(sub[0]);
    test_failed_save(sub[0]);
    kjit_test_rmtree(dir);
    free(dir);
    return kjit_test_result("test_tune_file");
}
