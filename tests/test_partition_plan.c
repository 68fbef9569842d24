/* The backward partition's plan (src/ops/partition.c): a function of N, R,
 * the op and H alone (it fixes the order of every parameter-gradient sum,
 * so a change here changes bits), within its workspace bounds, and the
 * public workspace query agrees with what a backward carves. */
#include <stdio.h>
#include <string.h>

#include "core/ctx.h"
#include "kjit.h"
#include "ops/partition.h"
#include "test_util.h"

/* The fewest rows per chunk of each adaln op (src/ops/adaln.c), and of the
 * gather. */
static const int min_chunk[4] = {16, 16, 16, 32};
static const int max_chunks[4] = {256, 256, 256, 128};
static const int ngrad[4] = {0, 2, 1, 3};

static void test_chunks(void)
{
    kjit_part_plan pl;
    /* norm_modulate at 4097 rows: ceil(4097 / 256) = 17 rows, 241 chunks. */
    kjit__part_plan(&pl, 4097, 9, 2, 5376, 1, 16, 256);
    CHECK_EQ_INT(pl.chunk, 17);
    CHECK_EQ_INT(pl.chunks, 241);
    /* The fused op: at most 128 chunks, of at least 32 rows: 33 rows, 125
     * chunks, one wave at one CTA per SM. */
    kjit__part_plan(&pl, 4097, 9, 3, 5376, 1, 32, 128);
    CHECK_EQ_INT(pl.chunk, 33);
    CHECK_EQ_INT(pl.chunks, 125);
    /* At 32768 rows: 128-row chunks (the 256-chunk cap) for norm_modulate
     * and gated_residual; the fused op's 128-chunk cap (its 7 partial rows
     * per chunk would fit 195 in 28 MiB): 256 rows, 128 chunks. */
    for (int m = 1; m <= 3; ++m) {
        kjit__part_plan(&pl, 32768, 9, ngrad[m], 5376, m != 2, min_chunk[m], max_chunks[m]);
        CHECK_EQ_INT(pl.chunk, m == 3 ? 256 : 128);
        CHECK_EQ_INT(pl.chunks, m == 3 ? 128 : 256);
    }
    /* No rows: one (empty) chunk of the minimum size. */
    kjit__part_plan(&pl, 0, 9, 2, 5376, 1, 16, 256);
    CHECK_EQ_INT(pl.chunks, 1);
    /* Never more than the cap (at most 256: the finisher's column sums take
     * at most 8 groups of 32), never fewer rows than the minimum, and the partials
     * within 28 MiB, over a sweep of shapes. */
    const long long ns[] = {1, 15, 16, 17, 33, 1023, 4097, 8191, 32768, 65537, 1 << 20};
    const int hs[] = {8, 1000, 5376, 16384};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; ++i)
        for (size_t j = 0; j < sizeof hs / sizeof hs[0]; ++j)
            for (int ng = 1; ng <= 8; ++ng)
                for (int mc = 16; mc <= 32; mc += 16) {
                    const int cap = mc == 32 ? 128 : 256;
                    kjit__part_plan(&pl, ns[i], 9, ng, hs[j], ng <= 3, mc, cap);
                    CHECK(pl.chunks >= 1 && pl.chunks <= cap);
                    CHECK(pl.chunk >= mc);
                    CHECK(pl.chunk * pl.chunks >= (ns[i] > 0 ? ns[i] : 1));
                    CHECK_LE((double)pl.chunks * (2 * ng + (ng <= 3)) * hs[j] * 4, (double)(28 << 20));
                }
}

static void test_query_matches(void)
{
    /* kjit_adaln_workspace sizes the plan the backward carves, with the
     * op's own minimum chunk. */
    const long long ns[] = {1, 100, 4097, 32768};
    const long long rs[] = {1, 9, 4096};
    for (int m = 1; m <= 3; ++m)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; ++i)
            for (size_t j = 0; j < sizeof rs / sizeof rs[0]; ++j) {
                size_t bytes = 0;
                CHECK_STATUS(kjit_adaln_workspace((kjit_adaln_op)m, ns[i], 5376, rs[j], &bytes), KJIT_OK);
                kjit_part_plan pl;
                kjit__part_plan(&pl, ns[i], rs[j], ngrad[m], 5376, m != 2, min_chunk[m], max_chunks[m]);
                CHECK_EQ_INT((long long)bytes, (long long)pl.bytes);
                if (ns[i] == 32768) CHECK_LE(bytes, 32e6);
            }
}

/* Where a training forward builds the partition (src/ops/partition.c): in
 * its own launch, beside it (kjit_part_beside), or neither (the three build
 * launches first). H = 5376 bf16 rows (10752 bytes), norm_modulate's default
 * forward: a persistent grid of 896-thread blocks (28 warps). */
static void test_build_place(void)
{
    kjit_ctx c;
    memset(&c, 0, sizeof c);
    c.pdl = 1, c.part_small = 1;
    kjit_part_plan pl;
    kjit_partition pt;
    const size_t row = 5376 * 2, smem = 86016;
    /* 4097 rows: 17 tiles, one per warp: inside the forward's launch. */
    kjit__part_plan(&pl, 4097, 9, 2, 5376, 1, 16, 256);
    kjit__part_carve(&pl, 0, &pt, NULL, NULL);
    CHECK_EQ_INT(pt.tiles, 17);
    CHECK_EQ_INT(kjit__part_inline_smem(&c, &pt, 896, row, smem, 1), 17 * 9 * 4);
    /* 8192 and 32768 rows: 32 and 128 tiles, more than one per warp of a
     * persistent grid: not inside, beside it. */
    const int64_t rows[2] = {8192, 32768};
    for (int i = 0; i < 2; ++i) {
        kjit__part_plan(&pl, rows[i], 9, 2, 5376, 1, 16, 256);
        kjit__part_carve(&pl, 0, &pt, NULL, NULL);
        CHECK_EQ_INT(kjit__part_inline_smem(&c, &pt, 896, row, smem, 1), 0);
        CHECK_EQ_INT(kjit__part_beside_smem(&c, &pt, row), (long long)pt.tiles * 9 * 4);
        /* Not without programmatic launch, the one-CTA build, or rows of 4 KiB. */
        c.pdl = 0;
        CHECK_EQ_INT(kjit__part_beside_smem(&c, &pt, row), 0);
        c.pdl = 1, c.part_small = 0;
        CHECK_EQ_INT(kjit__part_beside_smem(&c, &pt, row), 0);
        c.part_small = 1;
        CHECK_EQ_INT(kjit__part_beside_smem(&c, &pt, 4095), 0);
        CHECK_EQ_INT(kjit__part_beside_smem(&c, &pt, 4096), (long long)pt.tiles * 9 * 4);
    }
    /* Counters past 48 KiB (R = 4000): neither. */
    kjit__part_plan(&pl, 32768, 4000, 2, 5376, 1, 16, 256);
    kjit__part_carve(&pl, 0, &pt, NULL, NULL);
    CHECK(pt.tiles * 4000 * 4 > 48 * 1024);
    CHECK_EQ_INT(kjit__part_beside_smem(&c, &pt, row), 0);
    CHECK_EQ_INT(kjit__part_inline_smem(&c, &pt, 896, row, smem, 1), 0);
}

int main(void)
{
    test_chunks();
    test_query_matches();
    test_build_place();
    return kjit_test_result("test_partition_plan");
}
