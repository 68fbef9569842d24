/* Self-test of the fp64 references: known sinusoid values, central
 * finite-difference checks of every gradient, exhaustive bf16/fp16
 * rounding checks, error metrics and RNG. Exits 0 when all checks pass,
 * 1 otherwise, printing each failing check with both values. */
#include "ref.h"

#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long checks, fails;

/* Counts a check; on failure prints it (the first 50) with both values. */
static void __attribute__((format(printf, 4, 5)))
check_close(double got, double want, double tol, const char *fmt, ...)
{
    checks++;
    if (fabs(got - want) <= tol || (isinf(got) && got == want))
        return;
    if (fails++ < 50) {
        va_list ap;
        va_start(ap, fmt);
        printf("FAIL ");
        vprintf(fmt, ap);
        printf(": got %.17g want %.17g (tol %.3g)\n", got, want, tol);
        va_end(ap);
    }
}

static void __attribute__((format(printf, 3, 4)))
check_bits(unsigned got, unsigned want, const char *fmt, ...)
{
    checks++;
    if (got == want)
        return;
    if (fails++ < 50) {
        va_list ap;
        va_start(ap, fmt);
        printf("FAIL ");
        vprintf(fmt, ap);
        printf(": got 0x%04x want 0x%04x\n", got, want);
        va_end(ap);
    }
}

static void test_sinusoid(void)
{
    const float t[3] = {0.0f, 1.0f, 999.5f};
    double a[3 * 7], b[3 * 7], out[4];
    ref_sinusoid(t, 3, 7, 0, 1.0, 1.0, 10000.0, a);
    ref_sinusoid(t, 3, 7, 1, 1.0, 1.0, 10000.0, b);
    for (int j = 0; j < 3; j++) {
        check_close(a[j], 0, 0, "sinusoid t=0 sin col %d", j);
        check_close(a[3 + j], 1, 0, "sinusoid t=0 cos col %d", 3 + j);
    }
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) {
            check_close(b[i * 7 + j], a[i * 7 + 3 + j], 0, "sinusoid flip row %d col %d", i, j);
            check_close(b[i * 7 + 3 + j], a[i * 7 + j], 0, "sinusoid flip row %d col %d", i, 3 + j);
        }
        check_close(a[i * 7 + 6], 0, 0, "sinusoid odd d last col row %d", i);
        check_close(b[i * 7 + 6], 0, 0, "sinusoid odd d flip last col row %d", i);
    }
    ref_sinusoid(t + 1, 1, 4, 0, 1.0, 1.0, 10000.0, out);
    const double want4[4] = {0.8414709848078965, 9.999999983333334e-05, 0.5403023058681398,
                             0.999999995};
    for (int j = 0; j < 4; j++)
        check_close(out[j], want4[j], 1e-16, "sinusoid d=4 t=1 col %d", j);
    double *big = ref_alloc(2 * 256, sizeof *big);
    const float tb[2] = {500.0f, 999.5f};
    ref_sinusoid(tb, 2, 256, 1, 0.0, 1.0, 10000.0, big);
    check_close(big[37], -0.94473531070846068683, 1e-13, "sinusoid d=256 t=500 cos j=37");
    check_close(big[128 + 37], -0.32783409325539686203, 1e-13, "sinusoid d=256 t=500 sin j=37");
    check_close(big[256], 0.88996123960508772997, 1e-13, "sinusoid d=256 t=999.5 cos j=0");
    check_close(big[256 + 128], 0.45603617400440464061, 1e-13, "sinusoid d=256 t=999.5 sin j=0");
    check_close(big[257], 0.98098378057482115211, 1e-13, "sinusoid d=256 t=999.5 cos j=1");
    check_close(big[256 + 129], 0.19408972731479413987, 1e-13, "sinusoid d=256 t=999.5 sin j=1");
    free(big);
    out[0] = out[1] = NAN;
    ref_sinusoid(t + 2, 1, 1, 0, 1.0, 1.0, 10000.0, out);
    check_close(out[0], 0, 0, "sinusoid d=1 column");
    check_close(isnan(out[1]), 1, 0, "sinusoid d=1 writes one column");
}

/* Every bit pattern: exact decode (fp16 against ldexp), round trip, and the
 * rounding of the midpoint to the next pattern up (ties to even), of the
 * float just below it and of the float just above it. */
static void test_format(const char *name, uint16_t (*to)(float), float (*from)(uint16_t),
                        unsigned inf, int is_fp16)
{
    for (unsigned p = 0; p < 0x10000u; p++) {
        unsigned a = p & 0x7fffu;
        float v = from((uint16_t)p);
        if (a > inf) {
            unsigned back = to(v);
            check_close(isnan(v), 1, 0, "%s 0x%04x decodes to NaN", name, p);
            check_close((back & 0x7fffu) > inf && (back & 0x8000u) == (p & 0x8000u), 1, 0,
                        "%s NaN 0x%04x re-encodes as NaN 0x%04x", name, p, back);
            continue;
        }
        if (is_fp16) {
            unsigned e = a >> 10, m = a & 0x3ffu;
            double want = e == 31 ? INFINITY : e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24);
            check_close(v, p & 0x8000u ? -want : want, 0, "%s decode 0x%04x", name, p);
        }
        check_bits(to(v), p, "%s round trip 0x%04x", name, p);
        check_close(signbit(v) != 0, (p & 0x8000u) != 0, 0, "%s sign of 0x%04x", name, p);
        if (a == inf)
            continue;
        double next = a + 1 == inf ? 2.0 * v - from((uint16_t)(p - 1)) : from((uint16_t)(p + 1));
        check_close(fabs(next) > fabs(v), 1, 0, "%s 0x%04x < next", name, p);
        float mid = (float)((v + next) / 2);
        check_close(mid, (v + next) / 2, 0, "%s midpoint of 0x%04x exact in fp32", name, p);
        check_bits(to(mid), p & 1u ? p + 1 : p, "%s tie above 0x%04x", name, p);
        check_bits(to(nextafterf(mid, v)), p, "%s below tie above 0x%04x", name, p);
        check_bits(to(nextafterf(mid, (float)next)), p + 1, "%s above tie above 0x%04x", name, p);
    }
}

static float f32_from_bits(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static void test_conversions(void)
{
    float snan = f32_from_bits(0xff800001u);
    test_format("bf16", ref_float_to_bf16, ref_bf16_to_float, 0x7f80u, 0);
    test_format("fp16", ref_float_to_fp16, ref_fp16_to_float, 0x7c00u, 1);
    check_bits(ref_float_to_bf16(1.0f), 0x3f80u, "bf16(1.0)");
    check_bits(ref_float_to_fp16(1.0f), 0x3c00u, "fp16(1.0)");
    check_bits(ref_float_to_fp16(65504.0f), 0x7bffu, "fp16(65504)");
    check_bits(ref_float_to_fp16(65519.996f), 0x7bffu, "fp16(65519.996)");
    check_bits(ref_float_to_fp16(65520.0f), 0x7c00u, "fp16(65520)");
    check_bits(ref_float_to_fp16(-1e9f), 0xfc00u, "fp16(-1e9)");
    check_bits(ref_float_to_fp16(1.0f + 0x1p-11f), 0x3c00u, "fp16(1 + 2^-11) tie to even");
    check_bits(ref_float_to_fp16(1.0f + 0x3p-11f), 0x3c02u, "fp16(1 + 3*2^-11) tie to even");
    check_bits(ref_float_to_fp16(0x1p-25f), 0x0000u, "fp16(2^-25) tie to even");
    check_bits(ref_float_to_fp16(0x3p-25f), 0x0002u, "fp16(3*2^-25) tie to even");
    check_bits(ref_float_to_fp16(0x1p-14f), 0x0400u, "fp16(2^-14)");
    check_bits(ref_float_to_fp16(-0.0f), 0x8000u, "fp16(-0)");
    check_bits(ref_float_to_fp16(NAN) & 0x7e00u, 0x7e00u, "fp16(NaN) quiet");
    check_bits(ref_float_to_fp16(snan) & 0xfe00u, 0xfe00u, "fp16(-sNaN 0xff800001) quiet NaN");
    check_bits(ref_float_to_bf16(snan) & 0xffc0u, 0xffc0u, "bf16(-sNaN 0xff800001) quiet NaN");
    check_bits(ref_float_to_bf16(1.0f + 0x1p-8f), 0x3f80u, "bf16(1 + 2^-8) tie to even");
    check_bits(ref_float_to_bf16(1.0f + 0x3p-8f), 0x3f82u, "bf16(1 + 3*2^-8) tie to even");
    check_bits(ref_float_to_bf16(FLT_MAX), 0x7f80u, "bf16(FLT_MAX)");
    check_bits(ref_float_to_bf16(-INFINITY), 0xff80u, "bf16(-inf)");
    check_bits(ref_float_to_bf16(0x1p-149f), 0x0000u, "bf16(min fp32 subnormal)");
    check_close(ref_fp16_to_float(0x0001u), 0x1p-24, 0, "fp16 0x0001");
    check_close(ref_fp16_to_float(0x7bffu), 65504, 0, "fp16 0x7bff");
    check_close(ref_bf16_to_float(0x3f80u), 1, 0, "bf16 0x3f80");
}

static void test_metrics_rng(void)
{
    const double ref[2] = {3, 4}, same[2] = {3, 4}, zero[2] = {0, 0}, off[2] = {3, 5},
                 bad[2] = {3, NAN};
    check_close(ref_rel_err(same, ref, 2), 0, 0, "rel_err equal");
    check_close(ref_rel_err(zero, ref, 2), 1, 1e-16, "rel_err zero out");
    check_close(ref_rel_err(off, ref, 2), 0.2, 1e-16, "rel_err off by one");
    check_close(ref_rel_err(bad, ref, 2), INFINITY, 0, "rel_err NaN");
    check_close(ref_rel_err(same, zero, 2), 5, 1e-15, "rel_err zero ref");
    check_close(ref_max_abs_err(off, ref, 2), 1, 0, "max_abs_err");
    check_close(ref_max_abs_err(bad, ref, 2), INFINITY, 0, "max_abs_err NaN");
    ref_acc acc = {0, 0};
    ref_acc_add(&acc, 1e16);
    ref_acc_add(&acc, 1.0);
    ref_acc_add(&acc, -1e16);
    check_close(ref_acc_value(&acc), 1, 0, "compensated sum 1e16 + 1 - 1e16");

    ref_rng g1, g2;
    ref_rng_seed(&g1, 7);
    ref_rng_seed(&g2, 7);
    for (int i = 0; i < 5; i++)
        check_close((double)(ref_rng_u64(&g1) == ref_rng_u64(&g2)), 1, 0, "rng repeat draw %d", i);
    ref_rng_seed(&g2, 8);
    check_close((double)(ref_rng_u64(&g1) != ref_rng_u64(&g2)), 1, 0, "rng seeds differ");
    enum { M = 200000 };
    double *a = ref_alloc(M, sizeof *a);
    ref_fill_normal(&g1, a, M, 0.0, 1.0);
    ref_acc s = {0, 0}, s2 = {0, 0};
    for (int i = 0; i < M; i++) {
        ref_acc_add(&s, a[i]);
        ref_acc_add(&s2, a[i] * a[i]);
    }
    check_close(ref_acc_value(&s) / M, 0, 0.01, "normal mean");
    check_close(ref_acc_value(&s2) / M, 1, 0.02, "normal variance");
    int seen[3] = {0, 0, 0}, in_range = 1;
    for (int i = 0; i < 1000; i++) {
        double u = ref_rng_uniform(&g1);
        in_range &= u >= 0 && u < 1;
        seen[ref_rng_below(&g1, 3)]++;
    }
    check_close(in_range, 1, 0, "uniform in [0, 1)");
    check_close(seen[0] > 250 && seen[1] > 250 && seen[2] > 250, 1, 0, "below(3) covers 0..2");
    free(a);
}

/* Hand-computed forwards on N=2, H=3, R=2 with exact binary values (eps = 1:
 * rstd = 1/2 and 1/4), outputs padded to a row stride of 4 and pre-filled
 * with NaN so a write outside the region shows. */
static void test_forward_values(void)
{
    const int64_t idx[2] = {1, 0};
    const double x[6] = {1, 2, 2, 3, 6, 0}, w[3] = {1, 2, -1};
    const double shift[6] = {10, 20, 30, 1, 2, 3}, scale[6] = {0, 1, 0.5, -0.5, 0, 2};
    const double res[6] = {1, 2, 3, 4, 5, 6}, y[6] = {1, 1, 2, 2, 0, -1};
    const double gate[6] = {1, 2, 3, 0.5, -1, 0};
    const double want_nm[6] = {1.25, 4, 0, 10.75, 26, 30}, want_gr[6] = {1.5, 1, 3, 6, 5, 3};
    double out[8], h[8], fused[8], nm_h[8];
    for (int i = 0; i < 8; i++)
        out[i] = h[i] = fused[i] = NAN;
    ref_norm_modulate_fwd(2, 3, 2, x, 3, w, shift, 3, scale, 3, idx, 1.0, out, 4);
    for (int i = 0; i < 6; i++)
        check_close(out[i / 3 * 4 + i % 3], want_nm[i], 0, "norm_modulate fwd [%d][%d]", i / 3,
                    i % 3);
    check_close(isnan(out[3]) && isnan(out[7]), 1, 0, "norm_modulate fwd leaves padding");
    ref_gated_residual_fwd(2, 3, 2, res, 3, y, 3, gate, 3, idx, out, 4);
    for (int i = 0; i < 6; i++)
        check_close(out[i / 3 * 4 + i % 3], want_gr[i], 0, "gated_residual fwd [%d][%d]", i / 3,
                    i % 3);
    check_close(isnan(out[3]) && isnan(out[7]), 1, 0, "gated_residual fwd leaves padding");
    ref_gated_residual_norm_modulate_fwd(2, 3, 2, res, 3, y, 3, gate, 3, w, shift, 3, scale, 3, idx,
                                         1.0, h, 4, fused, 4);
    ref_norm_modulate_fwd(2, 3, 2, out, 4, w, shift, 3, scale, 3, idx, 1.0, nm_h, 4);
    for (int i = 0; i < 6; i++) {
        int k = i / 3 * 4 + i % 3;
        check_close(h[k], want_gr[i], 0, "fused fwd h [%d][%d]", i / 3, i % 3);
        check_close(fused[k], nm_h[k], 0, "fused fwd out [%d][%d]", i / 3, i % 3);
    }
    check_close(isnan(h[3]) && isnan(h[7]) && isnan(fused[3]) && isnan(fused[7]), 1, 0,
                "fused fwd leaves padding");
}

/* A problem for the gradient checks. Table chunks follow the model's
 * chunk(6) layout: shift, scale, gate = chunks 0, 1, 2 of emb (row stride
 * LDE); gradients land in the same chunks of demb (row stride LDG). Every
 * 2-D buffer is padded so a stride mix-up shows. Row R-1 of the tables is
 * never indexed, so its gradients must be exactly what the FD gives: 0. */
enum { N = 7, H = 13, R = 4, K = 6, LDX = H + 2, LDO = H + 4, LDE = K * H + 1, LDG = K * H + 3 };
#define STEP 1e-6

struct prob {
    int64_t idx[N];
    double x[N * LDX], res[N * LDX], y[N * LDX], emb[R * LDE], w[H], gw[(K + 1) * N * LDO];
    double eps;
    int null_w; /* backward gets w = NULL (w holds ones) */
};

/* max |a - b| over the N x H region of two LDO-strided buffers. */
static double region_diff(const double *a, const double *b)
{
    double m = 0;
    for (int i = 0; i < N; i++)
        m = fmax(m, ref_max_abs_err(a + i * LDO, b + i * LDO, H));
    return m;
}

static double dot(const double *a, int64_t lda, const double *b, int64_t ldb)
{
    ref_acc s = {0, 0};
    for (int i = 0; i < N; i++)
        for (int j = 0; j < H; j++)
            ref_acc_add(&s, a[i * lda + j] * b[i * ldb + j]);
    return ref_acc_value(&s);
}

static double loss_gather(const struct prob *p)
{
    double out[K][N * LDO];
    const double *tab[K];
    double *outp[K];
    int64_t ldt[K], ldo[K];
    for (int q = 0; q < K; q++) {
        tab[q] = p->emb + q * H;
        outp[q] = out[q];
        ldt[q] = LDE;
        ldo[q] = LDO;
    }
    ref_adaln_row_gather_fwd(N, H, R, K, tab, ldt, p->idx, outp, ldo);
    double l = 0;
    for (int q = 0; q < K; q++)
        l += dot(out[q], LDO, p->gw + q * N * LDO, LDO);
    return l;
}

static double loss_nm(const struct prob *p)
{
    double out[N * LDO];
    ref_norm_modulate_fwd(N, H, R, p->x, LDX, p->w, p->emb, LDE, p->emb + H, LDE, p->idx, p->eps,
                          out, LDO);
    return dot(out, LDO, p->gw, LDO);
}

static double loss_gr(const struct prob *p)
{
    double out[N * LDO];
    ref_gated_residual_fwd(N, H, R, p->res, LDX, p->y, LDX, p->emb + 2 * H, LDE, p->idx, out, LDO);
    return dot(out, LDO, p->gw, LDO);
}

static double loss_fused(const struct prob *p)
{
    double h[N * LDO], out[N * LDO];
    ref_gated_residual_norm_modulate_fwd(N, H, R, p->res, LDX, p->y, LDX, p->emb + 2 * H, LDE, p->w,
                                         p->emb, LDE, p->emb + H, LDE, p->idx, p->eps, h, LDO, out,
                                         LDO);
    return dot(h, LDO, p->gw + N * LDO, LDO) + dot(out, LDO, p->gw, LDO);
}

/* Central differences of loss over param[rows][cols] (stride ld) against
 * grad (stride ldg). */
static void fd_check(const char *what, double (*loss)(const struct prob *), struct prob *p,
                     double *param, int rows, int cols, int64_t ld, const double *grad, int64_t ldg)
{
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double *v = &param[i * ld + j], v0 = *v, up = v0 + STEP, dn = v0 - STEP;
            *v = up;
            double lp = loss(p);
            *v = dn;
            double lm = loss(p);
            *v = v0;
            double fd = (lp - lm) / (up - dn), an = grad[i * ldg + j];
            check_close(an, fd, 1e-6 * (1 + fabs(fd)), "%s%s[%d][%d] vs FD", what,
                        p->null_w ? " (w NULL)" : "", i, j);
        }
}

/* Number of entries of a[n] that are not NaN (outputs are pre-filled with
 * NaN, so this counts the entries a function wrote). */
static void check_written(const char *what, const double *a, size_t n, size_t want)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += isnan(a[i]) ? 0u : 1u;
    check_close((double)c, (double)want, 0, "%s entries written", what);
}

static void nan_fill(double *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = NAN;
}

static void grad_checks(struct prob *p)
{
    static double dx[N * LDO], dy[N * LDO], demb[R * LDG], dw[H], out1[N * LDO], out2[N * LDO],
        gbuf[K * N * LDO];
    const double *w = p->null_w ? NULL : p->w;
    double *gsh = demb, *gsc = demb + H, *ggt = demb + 2 * H;
    const double *tab[K], *dout[K];
    double *gout[K], *dtab[K];
    int64_t ldt[K], ldo[K], ldg[K];
    for (int q = 0; q < K; q++) {
        tab[q] = p->emb + q * H;
        gout[q] = gbuf + q * N * LDO;
        dout[q] = p->gw + q * N * LDO;
        dtab[q] = demb + q * H;
        ldt[q] = LDE;
        ldo[q] = LDO;
        ldg[q] = LDG;
    }
    nan_fill(gbuf, K * N * LDO);
    ref_adaln_row_gather_fwd(N, H, R, K, tab, ldt, p->idx, gout, ldo);
    for (int q = 0; q < K; q++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < H; j++)
                check_close(gout[q][i * LDO + j], tab[q][p->idx[i] * LDE + j], 0,
                            "gather out[%d][%d][%d]", q, i, j);
    check_written("gather out", gbuf, K * N * LDO, K * N * H);
    nan_fill(demb, R * LDG);
    ref_adaln_row_gather_bwd(N, H, R, K, dout, ldo, p->idx, dtab, ldg);
    fd_check("gather dtable", loss_gather, p, p->emb, R, K * H, LDE, demb, LDG);
    check_written("gather dtable", demb, R * LDG, R * K * H);

    nan_fill(dx, N * LDO);
    nan_fill(demb, R * LDG);
    nan_fill(dw, H);
    ref_norm_modulate_bwd(N, H, R, p->gw, LDO, p->x, LDX, w, p->emb + H, LDE, p->idx, p->eps, dx,
                          LDO, dw, gsh, LDG, gsc, LDG);
    fd_check("norm_modulate dx", loss_nm, p, p->x, N, H, LDX, dx, LDO);
    fd_check("norm_modulate dw", loss_nm, p, p->w, 1, H, H, dw, H);
    fd_check("norm_modulate dshift", loss_nm, p, p->emb, R, H, LDE, gsh, LDG);
    fd_check("norm_modulate dscale", loss_nm, p, p->emb + H, R, H, LDE, gsc, LDG);
    check_written("norm_modulate dx", dx, N * LDO, N * H);
    check_written("norm_modulate dshift+dscale", demb, R * LDG, R * 2 * H);
    ref_norm_modulate_bwd(N, H, R, p->gw, LDO, p->x, LDX, w, p->emb + H, LDE, p->idx, p->eps, dy,
                          LDO, NULL, gsh, LDG, gsc, LDG);
    check_close(region_diff(dy, dx), 0, 0, "norm_modulate dx with dw NULL");

    nan_fill(dx, N * LDO);
    nan_fill(dy, N * LDO);
    nan_fill(demb, R * LDG);
    ref_gated_residual_bwd(N, H, R, p->gw, LDO, p->y, LDX, p->emb + 2 * H, LDE, p->idx, dx, LDO,
                           dy, LDO, ggt, LDG);
    fd_check("gated_residual dres", loss_gr, p, p->res, N, H, LDX, dx, LDO);
    fd_check("gated_residual dy", loss_gr, p, p->y, N, H, LDX, dy, LDO);
    fd_check("gated_residual dgate", loss_gr, p, p->emb + 2 * H, R, H, LDE, ggt, LDG);
    check_written("gated_residual dgate", demb, R * LDG, R * H);

    nan_fill(dx, N * LDO);
    nan_fill(dy, N * LDO);
    nan_fill(demb, R * LDG);
    nan_fill(dw, H);
    ref_gated_residual_norm_modulate_bwd(N, H, R, p->gw + N * LDO, LDO, p->gw, LDO, p->res, LDX,
                                         p->y, LDX, p->emb + 2 * H, LDE, w, p->emb + H, LDE,
                                         p->idx, p->eps, dx, LDO, dy, LDO, ggt, LDG, dw, gsh, LDG,
                                         gsc, LDG);
    fd_check("fused dres", loss_fused, p, p->res, N, H, LDX, dx, LDO);
    fd_check("fused dy", loss_fused, p, p->y, N, H, LDX, dy, LDO);
    fd_check("fused dgate", loss_fused, p, p->emb + 2 * H, R, H, LDE, ggt, LDG);
    fd_check("fused dw", loss_fused, p, p->w, 1, H, H, dw, H);
    fd_check("fused dshift", loss_fused, p, p->emb, R, H, LDE, gsh, LDG);
    fd_check("fused dscale", loss_fused, p, p->emb + H, R, H, LDE, gsc, LDG);
    check_written("fused dres", dx, N * LDO, N * H);
    check_written("fused dy", dy, N * LDO, N * H);
    check_written("fused dgate+dshift+dscale", demb, R * LDG, R * 3 * H);

    if (!p->null_w)
        return;
    ref_norm_modulate_fwd(N, H, R, p->x, LDX, NULL, p->emb, LDE, p->emb + H, LDE, p->idx, p->eps,
                          out1, LDO);
    ref_norm_modulate_fwd(N, H, R, p->x, LDX, p->w, p->emb, LDE, p->emb + H, LDE, p->idx, p->eps,
                          out2, LDO);
    check_close(region_diff(out1, out2), 0, 0, "norm_modulate fwd w NULL vs ones");
    ref_gated_residual_norm_modulate_fwd(N, H, R, p->res, LDX, p->y, LDX, p->emb + 2 * H, LDE,
                                         NULL, p->emb, LDE, p->emb + H, LDE, p->idx, p->eps, dx,
                                         LDO, out1, LDO);
    ref_gated_residual_norm_modulate_fwd(N, H, R, p->res, LDX, p->y, LDX, p->emb + 2 * H, LDE,
                                         p->w, p->emb, LDE, p->emb + H, LDE, p->idx, p->eps, dy,
                                         LDO, out2, LDO);
    check_close(region_diff(out1, out2), 0, 0, "fused fwd w NULL vs ones");
}

static void test_grads(void)
{
    static struct prob p;
    ref_rng g;
    ref_rng_seed(&g, 42);
    for (int i = 0; i < N; i++)
        p.idx[i] = i < R - 1 ? R - 2 - i : (int64_t)ref_rng_below(&g, R - 1);
    ref_fill_normal(&g, p.x, N * LDX, 0.0, 1.0);
    ref_fill_normal(&g, p.res, N * LDX, 0.0, 1.0);
    ref_fill_normal(&g, p.y, N * LDX, 0.0, 1.0);
    ref_fill_normal(&g, p.emb, R * LDE, 0.0, 0.5);
    ref_fill_normal(&g, p.w, H, 1.0, 0.1);
    ref_fill_normal(&g, p.gw, (K + 1) * N * LDO, 0.0, 1.0);
    p.eps = 0.1;
    grad_checks(&p);
    for (int j = 0; j < H; j++)
        p.w[j] = 1.0;
    p.null_w = 1;
    grad_checks(&p);
}

int main(void)
{
    test_sinusoid();
    test_conversions();
    test_metrics_rng();
    test_forward_values();
    test_grads();
    printf("%ld checks, %ld failed\n", checks, fails);
    return fails ? 1 : 0;
}
