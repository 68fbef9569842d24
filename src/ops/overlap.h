/* Which of a call's memory operands share bytes. Every op refuses a call
 * whose outputs overlap each other or any input, except the in-place pairs
 * an op documents (an output given exactly as one input: same base, same
 * row stride); inputs may overlap each other (they are only read). */
#ifndef KJIT_OVERLAP_H
#define KJIT_OVERLAP_H

#include <stddef.h>
#include <stdint.h>

/* rows rows of width bytes, row r at p + r * pitch bytes (pitch >= width
 * when rows > 1; a plain byte range is one row). rows <= 0 or width <= 0:
 * no memory. */
typedef struct kjit_span {
    const char *name;
    uintptr_t p;
    int64_t pitch, rows, width;
    int out;   /* written by the call */
    int alias; /* out: the index of the input it may be given as, or -1 */
} kjit_span;

/* A row-strided operand: rows of h elements of es bytes, stride elements. */
kjit_span kjit__span_rows(const char *name, const void *p, int64_t stride, int64_t rows, int64_t h, size_t es,
                          int out);
/* A contiguous range of bytes. */
kjit_span kjit__span_bytes(const char *name, const void *p, size_t bytes, int out);

/* Spans of different pitches are compared row by row when the smaller has
 * at most this many rows (a table, R <= 65535, against activations). */
#define KJIT_SPAN_ROWS_EXACT 65536

/* 1 when a and b share a byte: exact, except for two spans of different
 * pitches that both have more than KJIT_SPAN_ROWS_EXACT rows, compared by the
 * ranges that hold them (rows that interleave without sharing a byte then
 * count as overlapping). */
int kjit__spans_overlap(const kjit_span *a, const kjit_span *b);

/* KJIT_EINVAL naming both operands of the first overlap (op: the message's
 * prefix) where one is written, unless it is that output's documented
 * alias given exactly (same base and pitch); else KJIT_OK. */
int kjit__spans_check(const char *op, const kjit_span *s, int n);

#endif
