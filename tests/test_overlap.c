/* kjit__spans_overlap against a byte map: random spans (rows, pitch, width,
 * offset) in a small window, of one pitch or of two, each exact. Then the
 * cases the map cannot hold: one buffer of activations and table rows of
 * another pitch past 2^31 elements (exact), two views of different pitches
 * past KJIT_SPAN_ROWS_EXACT rows each (by their ranges), far apart
 * pointers and offsets near the top of the address space. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kjit.h"
#include "ops/overlap.h"
#include "ref.h"
#include "test_util.h"

enum { WIN = 4096 };

static void mark(unsigned char *m, const kjit_span *s, uintptr_t base)
{
    for (int64_t r = 0; r < s->rows; ++r)
        for (int64_t c = 0; c < s->width; ++c) m[s->p - base + (uintptr_t)(r * s->pitch + c)] = 1;
}

static kjit_span draw(ref_rng *g, uintptr_t base, int64_t pitch)
{
    kjit_span s = {"s", 0, 0, 0, 0, 0, -1};
    s.rows = 1 + (int64_t)ref_rng_below(g, 6);
    s.width = 1 + (int64_t)ref_rng_below(g, 96);
    s.pitch = pitch ? pitch : s.width + (int64_t)ref_rng_below(g, 96);
    if (s.pitch < s.width) s.width = s.pitch;
    const int64_t extent = (s.rows - 1) * s.pitch + s.width;
    s.p = base + (uintptr_t)ref_rng_below(g, (uint64_t)(WIN - extent));
    return s;
}

int main(void)
{
    ref_rng g;
    ref_rng_seed(&g, kjit_test_seed("test_overlap"));
    static unsigned char ma[WIN], mb[WIN];
    const uintptr_t base = 1 << 20;
    long exact = 0, mixed = 0, hits = 0;
    for (int it = 0; it < 200000; ++it) {
        const int same = it % 2 == 0;
        const int64_t pitch = same ? 1 + (int64_t)ref_rng_below(&g, 160) : 0;
        kjit_span a = draw(&g, base, pitch), b = draw(&g, base, pitch);
        memset(ma, 0, sizeof ma), memset(mb, 0, sizeof mb);
        mark(ma, &a, base), mark(mb, &b, base);
        int truth = 0;
        for (int i = 0; i < WIN && !truth; ++i) truth = ma[i] && mb[i];
        const int got = kjit__spans_overlap(&a, &b), sym = kjit__spans_overlap(&b, &a);
        hits += truth;
        CHECK_EQ_INT(got, sym);
        if (a.pitch == b.pitch || a.rows == 1 || b.rows == 1) exact++;
        else mixed++;
        if (got != truth) {
            fprintf(stderr, "a {p +%lu rows %lld pitch %lld width %lld} b {p +%lu rows %lld pitch %lld width %lld}: "
                    "%d, bytes say %d\n", (unsigned long)(a.p - base), (long long)a.rows, (long long)a.pitch,
                    (long long)a.width, (unsigned long)(b.p - base), (long long)b.rows, (long long)b.pitch,
                    (long long)b.width, got, truth);
            kjit_test_failures++;
            if (kjit_test_failures > 10) return kjit_test_result("test_overlap");
        }
    }
    /* One buffer: activations of pitch S in columns [0, 264), a table of
     * pitch 1049 S (3 rows) in columns [528, 792) and then over columns
     * [200, 464); bf16, past 2^31 elements. */
    const int64_t S = (1LL << 20) + 8;
    kjit_span acts = kjit__span_rows("x", (void *)base, S, 2100, 264, 2, 0);
    kjit_span tab = kjit__span_rows("shift", (void *)(base + 528 * 2), 1049 * S, 3, 264, 2, 1);
    CHECK(!kjit__spans_overlap(&acts, &tab) && !kjit__spans_overlap(&tab, &acts));
    tab.p = base + 200 * 2;
    CHECK(kjit__spans_overlap(&acts, &tab) && kjit__spans_overlap(&tab, &acts));
    tab.p = base + 528 * 2 + (uintptr_t)(2099 * S + 10) * 2; /* one row past: no row of x there */
    tab.rows = 1;
    CHECK(!kjit__spans_overlap(&acts, &tab));
    /* Different pitches, both past KJIT_SPAN_ROWS_EXACT rows: by their
     * ranges, so interleaved views that share no byte count. */
    kjit_span p1 = kjit__span_rows("p1", (void *)base, 256, KJIT_SPAN_ROWS_EXACT + 1, 64, 2, 1);
    kjit_span p2 = kjit__span_rows("p2", (void *)(base + 256), 512, KJIT_SPAN_ROWS_EXACT + 1, 64, 2, 0);
    CHECK(kjit__spans_overlap(&p1, &p2));
    p2.rows = KJIT_SPAN_ROWS_EXACT; /* the smaller within the limit: exact */
    CHECK(!kjit__spans_overlap(&p1, &p2));
    /* No memory (no rows or no width) overlaps nothing. */
    kjit_span x = kjit__span_rows("x", (void *)base, 64, 4, 64, 2, 0), z = x;
    z.rows = 0;
    CHECK(!kjit__spans_overlap(&x, &z) && !kjit__spans_overlap(&z, &x));
    CHECK(kjit__spans_overlap(&x, &x));
    /* Far apart and near the top of the address space: no overflow. */
    const uintptr_t top = UINTPTR_MAX - ((uintptr_t)1 << 32);
    kjit_span hi = kjit__span_rows("hi", (void *)top, 1LL << 20, 2048, 4096, 2, 0);
    kjit_span lo = kjit__span_rows("lo", (void *)(uintptr_t)4096, 1LL << 20, 2048, 4096, 2, 1);
    CHECK(!kjit__spans_overlap(&hi, &lo) && !kjit__spans_overlap(&lo, &hi));
    kjit_span in = kjit__span_bytes("in", (void *)(top + (2047ULL << 21) + 100), 8, 0); /* inside hi's last row */
    CHECK(kjit__spans_overlap(&hi, &in) && kjit__spans_overlap(&in, &hi));
    kjit_span gap = kjit__span_bytes("gap", (void *)(top + (2046ULL << 21) + 8192), 8, 0); /* between two rows */
    CHECK(!kjit__spans_overlap(&hi, &gap) && !kjit__spans_overlap(&gap, &hi));
    /* kjit__spans_check: inputs may overlap each other; an output may not,
     * unless it is its documented alias given exactly. */
    kjit_span s[3] = {kjit__span_rows("x", (void *)base, 64, 4, 64, 2, 0),
                      kjit__span_rows("y", (void *)base, 64, 4, 64, 2, 0),
                      kjit__span_rows("out", (void *)(base + 4096), 64, 4, 64, 2, 1)};
    CHECK_EQ_INT(kjit__spans_check("op", s, 3), 0);
    s[2].p = base;
    CHECK_EQ_INT(kjit__spans_check("op", s, 3), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "op: out overlaps input x") != NULL);
    s[1].p = base + 8192, s[2].alias = 0;
    CHECK_EQ_INT(kjit__spans_check("op", s, 3), 0);
    s[2].pitch *= 2;
    CHECK_EQ_INT(kjit__spans_check("op", s, 3), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "(in place, give it exactly as that input") != NULL);
    kjit_span many[33];
    for (int i = 0; i < 33; ++i) many[i] = kjit__span_bytes("b", (void *)(base + (uintptr_t)i * 64), 64, i == 0);
    CHECK_EQ_INT(kjit__spans_check("op", many, 32), 0);
    CHECK_EQ_INT(kjit__spans_check("op", many, 33), KJIT_EINVAL);
    CHECK(strstr(kjit_last_error(), "33 operands, at most 32") != NULL);
    printf("overlap: %ld span pairs of one pitch, %ld of two, all exact; %ld overlapping\n", exact, mixed, hits);
    return kjit_test_result("test_overlap");
}
