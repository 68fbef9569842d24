#include "ops/overlap.h"

#include "core/error.h"
#include "kjit.h"

typedef __int128 wide;

kjit_span kjit__span_rows(const char *name, const void *p, int64_t stride, int64_t rows, int64_t h, size_t es,
                          int out)
{
    /* A single row's stride is never used: its width stands for it. */
    kjit_span s = {name, (uintptr_t)p, rows > 1 ? stride * (int64_t)es : h * (int64_t)es, rows, h * (int64_t)es, out, -1};
    return s;
}

kjit_span kjit__span_bytes(const char *name, const void *p, size_t bytes, int out)
{
    kjit_span s = {name, (uintptr_t)p, (int64_t)bytes, 1, (int64_t)bytes, out, -1};
    return s;
}

static wide floor_div(wide a, wide b) /* b > 0 */
{
    wide q = a / b;
    return q * b > a ? q - 1 : q;
}

/* Rows of a and b, one pitch P for both: row i of a is [i P, i P + wa),
 * row j of b is [d + j P, d + j P + wb) (d = b - a); they meet iff
 * -wb < d + k P < wa for k = j - i, which holds for k in [kmin, kmax]. */
static int same_pitch(wide d, wide P, int64_t ra, wide wa, int64_t rb, wide wb)
{
    const wide kmin = floor_div(-wb - d, P) + 1;
    const wide kmax = -floor_div(d - wa, P) - 1; /* ceil((wa - d) / P) - 1 */
    const wide lo = kmin > -(wide)(ra - 1) ? kmin : -(wide)(ra - 1);
    const wide hi = kmax < (wide)(rb - 1) ? kmax : (wide)(rb - 1);
    return lo <= hi;
}

int kjit__spans_overlap(const kjit_span *a, const kjit_span *b)
{
    if (a->rows <= 0 || b->rows <= 0 || a->width <= 0 || b->width <= 0) return 0;
    /* The ranges that hold them: apart (the common case), no overlap. */
    const wide d = (wide)b->p - (wide)a->p;
    const wide ea = (wide)(a->rows - 1) * a->pitch + a->width, eb = d + (wide)(b->rows - 1) * b->pitch + b->width;
    if (!(d < ea && 0 < eb)) return 0;
    /* A single row takes the other's pitch: its rows beyond the first do
     * not exist, so any pitch describes it. */
    if (a->rows == 1 || b->rows == 1 || a->pitch == b->pitch) {
        const wide P = a->rows > 1 ? a->pitch : b->pitch;
        return same_pitch(d, P > 0 ? P : 1, a->rows, a->width, b->rows, b->width);
    }
    /* Different pitches: each row of the one with fewer rows (a table
     * against activations, say) as a single row against the other; past
     * KJIT_SPAN_ROWS_EXACT rows, by the ranges alone. */
    const kjit_span *f = a->rows <= b->rows ? a : b, *m = f == a ? b : a;
    if (f->rows > KJIT_SPAN_ROWS_EXACT) return 1;
    const wide fd = (wide)m->p - (wide)f->p; /* m relative to f */
    for (int64_t i = 0; i < f->rows; ++i)
        if (same_pitch(fd - (wide)i * f->pitch, m->pitch, 1, f->width, m->rows, m->width)) return 1;
    return 0;
}

enum { MAX_CHECKED = 32 };

int kjit__spans_check(const char *op, const kjit_span *s, int n)
{
    /* Each span's range [lo, hi) once (empty: hi = lo); a pair whose
     * ranges do not meet, the usual case, costs two compares. */
    wide lo[MAX_CHECKED], hi[MAX_CHECKED];
    if (n > MAX_CHECKED) return kjit__fail(KJIT_EINVAL, "%s: %d operands, at most %d checked", op, n, MAX_CHECKED);
    for (int i = 0; i < n; ++i) {
        lo[i] = (wide)s[i].p;
        hi[i] = s[i].rows > 0 && s[i].width > 0 ? lo[i] + (wide)(s[i].rows - 1) * s[i].pitch + s[i].width : lo[i];
    }
    for (int i = 0; i < n; ++i) {
        if (!s[i].out) continue;
        for (int j = 0; j < n; ++j) {
            if (j == i || (s[j].out && j < i)) continue; /* each pair of outputs once */
            if (!(lo[j] < hi[i] && lo[i] < hi[j]) || !kjit__spans_overlap(&s[i], &s[j])) continue;
            const int same = s[i].p == s[j].p && s[i].rows == s[j].rows && s[i].width == s[j].width &&
                             (s[i].rows <= 1 || s[i].pitch == s[j].pitch);
            if (same && s[i].alias == j) continue;
            return kjit__fail(KJIT_EINVAL, "%s: %s overlaps %s %s%s", op, s[i].name, s[j].out ? "output" : "input",
                              s[j].name,
                              s[i].alias == j ? " (in place, give it exactly as that input: the same pointer and "
                                                "row stride)"
                                              : "");
        }
    }
    return KJIT_OK;
}
