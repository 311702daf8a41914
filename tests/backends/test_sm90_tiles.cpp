// flash_sm90's query tiling (fwd_tiles.h): every row of a sequence belongs to
// exactly one tile, every row to write is written once, and the partial tile
// is a sequence's first, where a causal mask makes it cheapest.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "attn/mask_rule.h"
#include "backends/flash_sm90/fwd_tiles.h"

namespace attn::flash_sm90 {
namespace {

int tiles_per_sequence(int s_q, int kM) { return (s_q + kM - 1) / kM; }

// Checks one sequence's tiling; returns how often each row is computed as its own.
void check_sequence(int len_q, int s_q, int kM, bool packed) {
  SCOPED_TRACE("len_q " + std::to_string(len_q) + " s_q " + std::to_string(s_q) + " kM " + std::to_string(kM) +
               (packed ? " thd" : " bshd"));
  const int out_rows = packed ? len_q : s_q;
  std::vector<int> computed(len_q, 0), written(out_rows, 0);
  for (int idx = 0; idx < tiles_per_sequence(s_q, kM); ++idx) {
    const QueryTile t = query_tile(idx, kM, len_q, s_q, packed);
    ASSERT_GE(t.row_begin, 0);
    ASSERT_LE(t.row_begin, kM);
    ASSERT_LE(t.rows, kM);
    ASSERT_LE(t.rows_out, kM);
    ASSERT_GE(t.rows_out, t.rows);
    if (t.row_begin > 0 && t.row_begin < kM) ASSERT_EQ(t.m0 + t.row_begin, 0) << "only rows before the sequence are skipped";
    for (int r = t.row_begin; r < t.rows; ++r) {
      ASSERT_TRUE(t.m0 + r >= 0 && t.m0 + r < len_q) << "computed row " << t.m0 + r;
      ++computed[t.m0 + r];
    }
    for (int r = t.row_begin; r < t.rows_out; ++r) {
      ASSERT_TRUE(t.m0 + r >= 0 && t.m0 + r < out_rows) << "written row " << t.m0 + r;
      ++written[t.m0 + r];
    }
  }
  for (int r = 0; r < len_q; ++r) ASSERT_EQ(computed[r], 1) << "row " << r;
  for (int r = 0; r < out_rows; ++r) ASSERT_EQ(written[r], 1) << "row " << r;
}

TEST(Sm90Tiles, EveryRowOnceRandomLengths) {
  std::mt19937 rng(7);
  for (int kM : {64, 128, 192}) {
    for (int trial = 0; trial < 300; ++trial) {
      const int s_q = 1 + static_cast<int>(rng() % 2000);
      const int len_q = static_cast<int>(rng() % (s_q + 1));  // 0 included: an empty sequence
      check_sequence(len_q, s_q, kM, true);
      check_sequence(len_q, s_q, kM, false);
    }
    check_sequence(1, 1, kM, true);
    check_sequence(1, 1, kM, false);
    check_sequence(kM, kM, kM, true);
    check_sequence(kM + 1, 3 * kM, kM, true);
  }
}

TEST(Sm90Tiles, PartialTileIsTheFirst) {
  // 1024 rows in 192-row tiles: the first tile holds rows 0..63 at its end.
  const QueryTile first = query_tile(5, 192, 1024, 1024, false);
  EXPECT_EQ(first.m0, -128);
  EXPECT_EQ(first.row_begin, 128);
  EXPECT_EQ(first.rows, 192);
  const QueryTile last = query_tile(0, 192, 1024, 1024, false);
  EXPECT_EQ(last.m0, 832);
  EXPECT_EQ(last.row_begin, 0);
  EXPECT_EQ(last.rows, 192);
  // A padded batch (bshd with cu_seqlens): tiles end at s_q; the padding rows
  // past len_q are written (as zeros) but not computed.
  const QueryTile padded = query_tile(0, 128, 1000, 1024, false);
  EXPECT_EQ(padded.m0, 896);
  EXPECT_EQ(padded.rows, 104);
  EXPECT_EQ(padded.rows_out, 128);
  // thd: a sequence's tiles end at its own length; tiles past its start have nothing.
  const QueryTile none = query_tile(3, 128, 300, 1024, true);
  EXPECT_FALSE(none.has_rows());
  EXPECT_FALSE(none.writes());
}

// Causal cost in (kM x kN) tile products: the KV tiles some valid row of a
// query tile sees, summed over the tiles, as flash_sm90 schedules them.
int causal_tile_products(int len, int kM, int kN) {
  int products = 0;
  for (int idx = 0; idx < tiles_per_sequence(len, kM); ++idx) {
    const QueryTile t = query_tile(idx, kM, len, len, true);
    if (!t.has_rows()) continue;
    const KeyRange<int> top = visible_keys<int>(t.m0 + t.row_begin, len, len, 0, -1, 0);
    const KeyRange<int> bottom = visible_keys<int>(t.m0 + t.rows - 1, len, len, 0, -1, 0);
    products += (bottom.end - 1) / kN - top.begin / kN + 1;
  }
  return products;
}

TEST(Sm90Tiles, CausalCostOfTheFirstTilePartial) {
  // d 64's 192 x 128 tiles at 1024 causal rows: 1 + 2 + 4 + 5 + 7 + 8 = 27
  // products (the partial tile last would be 2 + 3 + 5 + 6 + 8 + 8 = 32).
  EXPECT_EQ(causal_tile_products(1024, 192, 128), 27);
  // Where kM = kN the count is the same either way: 1 + 2 + ... + 8.
  EXPECT_EQ(causal_tile_products(1024, 128, 128), 36);
}

// The walk takes every (sequence, head, tile) once, whatever the section size
// (the last section may hold fewer pairs), and within a section tile-major.
TEST(Sm90Tiles, WalkTakesEveryItemOnce) {
  for (int m_blocks : {1, 3, 16}) {
    for (int h_q : {1, 5, 16}) {
      for (int batch : {1, 3}) {
        const int pairs = h_q * batch;
        for (int section : {1, 2, 4, 7, pairs}) {
          SCOPED_TRACE(::testing::Message() << "m_blocks " << m_blocks << " h_q " << h_q << " batch " << batch
                                            << " section " << section);
          std::vector<int> seen(pairs * m_blocks, 0);
          for (int t = 0; t < pairs * m_blocks; ++t) {
            const WorkItem w = work_item(t, m_blocks, h_q, pairs, section);
            ASSERT_TRUE(w.b >= 0 && w.b < batch && w.h >= 0 && w.h < h_q && w.tile >= 0 && w.tile < m_blocks);
            ++seen[(w.b * h_q + w.h) * m_blocks + w.tile];
            // Inside its section an item comes after every heavier tile of the section's pairs.
            const int pair = w.b * h_q + w.h, first = pair / section * section;
            const int n = std::min(section, pairs - first);
            ASSERT_EQ(t, first * m_blocks + w.tile * n + (pair - first));
          }
          for (int i = 0; i < pairs * m_blocks; ++i) ASSERT_EQ(seen[i], 1) << "item " << i;
        }
      }
    }
  }
  // Section 1 is one pair's tiles side by side, heaviest (tile 0) first.
  const WorkItem w = work_item(5, 4, 3, 6, 1);
  EXPECT_EQ(w.b, 0);
  EXPECT_EQ(w.h, 1);
  EXPECT_EQ(w.tile, 1);
}

TEST(Sm90Tiles, SectionsOnlyUnderACausalMask) {
  // No mask, a two-sided or a left window: every tile of a pair costs about the same.
  EXPECT_EQ(fwd_section_pairs(1, -1, -1, 2048, 128, 128, 64), 1);
  EXPECT_EQ(fwd_section_pairs(1, 255, 0, 2048, 128, 128, 64), 1);
  EXPECT_EQ(fwd_section_pairs(1, 255, 255, 2048, 128, 128, 64), 1);
  // Causal: KV heads of 1 MiB (2048 x 256 x 2 bytes), 16 of them in 16 MiB,
  // 4 query heads each; held to the pairs there are.
  EXPECT_EQ(fwd_section_pairs(4, -1, 0, 2048, 128, 128, 64), 64);
  EXPECT_EQ(fwd_section_pairs(4, -1, 0, 2048, 128, 128, 1000), 64);
  EXPECT_EQ(fwd_section_pairs(1, -1, 0, 2048, 128, 128, 1000), 16);
  EXPECT_EQ(fwd_section_pairs(1, -1, 0, 16384, 128, 128, 16), 2);  // 8 MiB per KV head
  EXPECT_EQ(fwd_section_pairs(1, -1, 0, 1 << 20, 256, 256, 16), 1);  // one head over budget: still 1
}

}  // namespace
}  // namespace attn::flash_sm90
