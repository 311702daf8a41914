// flash_decode's split rule (choose_splits) and plan: the fewest splits whose
// waves fill the device's CTA slots to 95% of the best count's, each split at
// least 2 tiles of 64 keys, counted by the ranges that get keys, then the
// shortest ranges those waves allow; num_splits overrides within [1, 128]
// and the tiles; query rows packed 16 or 32 to a CTA (s_q x GQA group).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "backends/flash_decode/flash_decode.h"

namespace attn::flash_decode {
namespace {

double fill(int64_t units, int splits, int64_t slots) {
  const double waves = static_cast<double>(units * splits) / static_cast<double>(slots);
  return waves / std::ceil(waves);
}

TEST(DecodeSplits, FillWavesWithTheFewestSplits) {
  // Batch 64 x 8 KV heads on 132 SMs x 3 CTAs: one split is 1.29 waves (65%
  // full), two 2.59 (86%), three 3.88 (97%).
  EXPECT_EQ(choose_splits(512, 128, 396), 3);
  // One sequence, 8 KV heads, 128k keys: about one full wave.
  const int s = choose_splits(8, 2048, 396);
  EXPECT_GE(fill(8, s, 396), 0.95 * 0.99);
  EXPECT_LE(8 * s, 396);
  // Units that fill whole waves already: one split.
  EXPECT_EQ(choose_splits(396, 1000, 396), 1);
  EXPECT_EQ(choose_splits(792, 1000, 396), 1);
  // Short sequences: at least 2 tiles per split, so 7 tiles allow three.
  EXPECT_EQ(choose_splits(8, 7, 396), 3);
  EXPECT_LE(choose_splits(8, 32, 396), 16);
  EXPECT_EQ(choose_splits(8, 1, 396), 1);
  // 31 splits of 128 tiles are 26 ranges of 5 (79% of 264 slots), so not
  // enough; 32 ranges of 4 fill 97%. Over 132 SMs, 16 ranges of 8.
  EXPECT_EQ(choose_splits(8, 128, 264), 32);
  EXPECT_EQ(choose_splits(8, 128, 132), 16);
  // Within the same waves, the shortest ranges: 31 splits of 512 tiles are
  // ranges of 17 (94% of 264 slots, enough), 32 of 16 still one wave.
  EXPECT_EQ(choose_splits(8, 512, 264), 32);
  EXPECT_EQ(choose_splits(8, 2048, 264), 33);  // 32 ranges of 63 and one of 32, not 32 of 64
  // Never more than kMaxSplits, whatever the slots.
  EXPECT_LE(choose_splits(1, 1 << 20, 100000), kMaxSplits);
  for (int64_t units : {1, 7, 100, 395, 397, 1000})
    for (int64_t tiles : {0, 1, 4, 64, 4096}) {
      const int n = choose_splits(units, tiles, 396);
      EXPECT_GE(n, 1);
      EXPECT_LE(n, std::max<int64_t>(tiles / 2, 1));
    }
}

// plan()'s count (H100: 132 SMs, 264 slots of two CTAs): below a wave of
// units one CTA per SM, paged or not; more than 16 rows per KV head keep
// the slots' count where that splits the keys anyway (b 1 and b 8 with 8
// KV heads), not where one CTA per unit already fills the SMs (b 16: 128
// units), except from 128 tiles (8k keys) on.
TEST(DecodeSplits, SplitCountBelowAWave) {
  EXPECT_EQ(split_count(8, 128, 132, 264, false), 16);
  EXPECT_EQ(split_count(8, 128, 132, 264, true), 32);
  EXPECT_EQ(split_count(64, 128, 132, 264, false), 2);
  EXPECT_EQ(split_count(64, 128, 132, 264, true), 4);
  for (bool many_rows : {false, true}) EXPECT_EQ(split_count(128, 32, 132, 264, many_rows), 1);
  EXPECT_EQ(choose_splits(128, 32, 264), 2);  // what the slots alone would split it into
  EXPECT_EQ(split_count(128, 128, 132, 264, false), 1);
  EXPECT_EQ(split_count(128, 128, 132, 264, true), 2);
  EXPECT_EQ(split_count(128, 512, 132, 264, true), 2);
  // From a wave on, the slots' count for all.
  for (bool many_rows : {false, true}) EXPECT_EQ(split_count(512, 128, 132, 396, many_rows), 3);
}

TEST(DecodeSplits, PlanPacksQueryRowsAndHonoursNumSplits) {
  Problem p;
  p.device = Device::cpu();  // plan() asks the device only when it chooses the splits
  p.batch = 2;
  p.s_q = 4;
  p.s_kv = 10000;  // 157 tiles
  p.h_q = 32;
  p.h_kv = 2;  // a group of 16: 4 x 16 = 64 rows, 2 CTAs of 32
  p.d_qk = p.d_v = 128;
  EXPECT_EQ(plan(p, 5).row_blocks, 2);
  EXPECT_EQ(plan(p, 5).m_blocks, 2);
  p.d_qk = p.d_v = 256;  // wide rows: 4 CTAs of 16
  EXPECT_EQ(plan(p, 5).row_blocks, 1);
  EXPECT_EQ(plan(p, 5).m_blocks, 4);
  p.d_qk = p.d_v = 128;
  EXPECT_EQ(plan(p, 5).splits, 5);
  EXPECT_EQ(plan(p, 1000).splits, kMaxSplits);
  p.s_kv = 100;  // 2 tiles: at most 2 splits when asked
  EXPECT_EQ(plan(p, 7).splits, 2);
  p.s_q = 1;
  p.h_kv = 32;  // no GQA: one row per KV head
  EXPECT_EQ(plan(p, 1).m_blocks, 1);
  EXPECT_EQ(plan(p, 1).row_blocks, 1);
  p.h_q = 64;
  p.h_kv = 8;  // 4 tokens x 8 heads: 32 rows, one CTA
  p.s_q = 4;
  EXPECT_EQ(plan(p, 1).row_blocks, 2);
  EXPECT_EQ(plan(p, 1).m_blocks, 1);
  p.s_q = 5;  // 40 rows: two CTAs of 32
  EXPECT_EQ(plan(p, 1).m_blocks, 2);
}

// A partial result per warp (no merge in the decode kernel) where a CTA's
// rows are at most 8 over at most 8 tiles a split, and the splits' parts
// fit the combine's loads at once (64 at d_v 128, 32 at 256, 128 at 64);
// one split never has parts; the workspace holds every part.
TEST(DecodeSplits, PartsPerWarpWhereRowsAreFew) {
  EXPECT_EQ(combine_loads_at_once(128), 64);
  EXPECT_EQ(part_count(16, 32, 4, 128), kDecodeWarps);  // one token, GQA 4, 2k keys in 16 splits
  EXPECT_EQ(part_count(16, 128, 8, 128), kDecodeWarps);  // 8k keys: 8 tiles a split
  EXPECT_EQ(part_count(16, 129, 8, 128), 1);
  EXPECT_EQ(part_count(2, 32, 4, 128), 1);  // 16 tiles a split: the merge is a small share
  EXPECT_EQ(part_count(17, 32, 4, 128), 1);  // 68 parts: two round trips
  EXPECT_EQ(part_count(16, 32, 16, 128), 1);  // 16 rows: the merge costs less than four parts
  EXPECT_EQ(part_count(1, 2, 4, 128), 1);
  EXPECT_EQ(part_count(8, 16, 1, 256), kDecodeWarps);
  EXPECT_EQ(part_count(9, 16, 1, 256), 1);
  EXPECT_EQ(part_count(32, 64, 4, 64), kDecodeWarps);
  Problem p;
  p.device = Device::cpu();
  p.batch = p.total_q = 1;
  p.s_q = 1;
  p.s_kv = 2048;
  p.h_q = 32;
  p.h_kv = 8;
  p.d_qk = p.d_v = 128;
  const Plan pl = plan(p, 16);
  EXPECT_EQ(pl.parts, kDecodeWarps);
  EXPECT_EQ(pl.partial_results(), 64);
  EXPECT_EQ(workspace_bytes(p, pl), 64 * 32 * (128 + 1) * 4);
  p.s_q = p.total_q = 4;  // 16 rows
  EXPECT_EQ(plan(p, 16).parts, 1);
}

// Two row blocks per CTA where one-block CTAs would fill the GPU, or half
// its SMs over 8k keys or more, or from 32k keys at any batch (a simulated
// H100: 132 SMs, one slot each as plan() counts a simulated device): h 64/8
// with 4 tokens is 32 rows, two one-block CTAs per KV head.
TEST(DecodeSplits, TwoRowBlocksWhereOneBlockCtasFillTheGpu) {
  setenv("ATTN_SIMULATE_DEVICE", "sm90", 1);
  Problem p;
  p.device = Device::cuda(0);
  p.s_q = 4;
  p.s_kv = 8192;
  p.h_q = 64;
  p.h_kv = 8;
  p.d_qk = p.d_v = 128;
  p.batch = 64;  // 2 x 8 x 64 = 1024 one-block CTAs >= 132
  const Plan big = plan(p);
  p.batch = 1;  // 16 < 132: the lighter CTAs, split further
  const Plan small = plan(p);
  p.batch = 8;  // 128 one-block CTAs, half the SMs or more, over 128 tiles: two row blocks
  const Plan eight = plan(p);
  p.s_kv = 2048;  // 32 tiles: one block
  const Plan eight_short = plan(p);
  p.batch = 1;
  p.s_kv = 32768;  // 512 tiles: two blocks at any batch, split over the SMs
  const Plan one_long = plan(p);
  p.s_kv = 8192;
  p.batch = 64;
  p.d_qk = p.d_v = 256;  // wide rows: one block whatever the batch
  const Plan wide = plan(p);
  unsetenv("ATTN_SIMULATE_DEVICE");
  EXPECT_EQ(big.row_blocks, 2);
  EXPECT_EQ(big.m_blocks, 1);
  EXPECT_EQ(small.row_blocks, 1);
  EXPECT_EQ(small.m_blocks, 2);
  EXPECT_GT(small.splits, 1);
  EXPECT_EQ(eight.row_blocks, 2);
  EXPECT_EQ(eight.m_blocks, 1);
  EXPECT_GT(eight.splits, 1);
  EXPECT_EQ(eight_short.row_blocks, 1);
  EXPECT_EQ(eight_short.m_blocks, 2);
  EXPECT_EQ(one_long.row_blocks, 2);
  EXPECT_EQ(one_long.m_blocks, 1);
  EXPECT_EQ(one_long.splits, 16);  // 8 CTAs' keys over 132 slots
  EXPECT_EQ(wide.row_blocks, 1);
  EXPECT_EQ(wide.m_blocks, 2);
}

}  // namespace
}  // namespace attn::flash_decode
