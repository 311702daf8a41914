// flash_sm90's backward with the wide tiles (d_qk 192 and 256): the two
// consumers split d, and consumer_column (bwd_config.h) places each one's
// 8-column accumulator blocks. Every column of dK, dV and dQ belongs to
// exactly one consumer, and dQ's staging (bwd_mainloop.cuh's stage_dq)
// may take a block's place in the accumulator row as dq_column's 32-column
// group form, which holds where block i's column is block i & ~3's plus
// 8 (i % 4) and that base is a multiple of 32.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/flash/dq_layout.h"
#include "backends/flash_sm90/bwd_config.h"
#include "backends/flash_sm90/bwd_table.h"

namespace attn::flash_sm90 {
namespace {

// Each column of [0, kWidth) in exactly one consumer's blocks.
template <class Cols>
void expect_columns_split(const char* tensor) {
  SCOPED_TRACE(tensor);
  std::vector<int> hits(Cols::kWidth, 0);
  for (int wg = 0; wg < 2; ++wg)
    for (int i = 0; i < Cols::kCols / 8; ++i) {
      const int c = consumer_column<Cols>(wg, i);
      ASSERT_EQ(c % 8, 0) << "wg " << wg << " block " << i;
      ASSERT_TRUE(c >= 0 && c + 8 <= Cols::kWidth) << "wg " << wg << " block " << i << " at " << c;
      for (int j = 0; j < 8; ++j) ++hits[c + j];
    }
  for (int c = 0; c < Cols::kWidth; ++c) EXPECT_EQ(hits[c], 1) << "column " << c;
}

// dQ's blocks (dK's columns): the group form stage_dq uses equals the swizzle.
template <class Cols>
void expect_dq_groups() {
  for (int wg = 0; wg < 2; ++wg)
    for (int i = 0; i < Cols::kCols / 8; ++i) {
      const int base = consumer_column<Cols>(wg, i & ~3);
      ASSERT_EQ(base % 32, 0) << "wg " << wg << " block " << i;
      ASSERT_EQ(consumer_column<Cols>(wg, i), base + 8 * (i & 3)) << "wg " << wg << " block " << i;
      for (int64_t t = 0; t < 8; ++t)
        for (int lane = 0; lane < 32; ++lane)
          ASSERT_EQ(flash::dq_column<4>(base, i & 3, static_cast<int>(t & 3), lane),
                    flash::dq_swizzle(t, consumer_column<Cols>(wg, i) + 2 * (lane & 3)))
              << "wg " << wg << " block " << i << " token " << t << " lane " << lane;
    }
}

TEST(Sm90BwdColumns, WideTilesSplitEveryColumnOnceAndStageDqInGroups) {
  int wide_rows = 0;
#define ATTN_CHECK_ROW(dqk, dv)                                          \
  if constexpr (BwdConfig<dqk, dv>::kWide) {                             \
    SCOPED_TRACE("d_qk " #dqk ", d_v " #dv);                             \
    expect_columns_split<typename BwdConfig<dqk, dv>::ColsK>("dK, dQ");  \
    expect_columns_split<typename BwdConfig<dqk, dv>::ColsV>("dV");      \
    expect_dq_groups<typename BwdConfig<dqk, dv>::ColsK>();              \
    ++wide_rows;                                                         \
  }
  ATTN_FLASH_SM90_BWD_TABLE(ATTN_CHECK_ROW)
#undef ATTN_CHECK_ROW
  EXPECT_EQ(wide_rows, 3) << "the table's wide rows: 192/128, 192, 256";
}

// The plain wide build splits S and dP by product where d_qk == d_v, and
// frees dO early only with one Q / dO stage (d 256: measured faster there,
// slower with d 192's two stages); the score-changing and dropout builds
// keep the split by keys.
TEST(Sm90BwdColumns, ProductSplitAndEarlyDoFollowTheTable) {
  std::vector<std::string> split, early;
#define ATTN_CHECK_ROW(dqk, dv)                                                               \
  {                                                                                           \
    using Cfg = BwdConfig<dqk, dv>;                                                           \
    if (bwd_split_by_product<Cfg>(false, false)) split.push_back(#dqk "/" #dv);               \
    if (bwd_early_do<Cfg>(false, false)) early.push_back(#dqk "/" #dv);                       \
    for (const bool mods : {false, true})                                                     \
      for (const bool dropout : {false, true}) {                                              \
        if (!mods && !dropout) continue;                                                      \
        EXPECT_FALSE(bwd_split_by_product<Cfg>(mods, dropout)) << #dqk "/" #dv;               \
        EXPECT_FALSE(bwd_early_do<Cfg>(mods, dropout)) << #dqk "/" #dv;                       \
      }                                                                                       \
    if (bwd_early_do<Cfg>(false, false)) EXPECT_EQ(Cfg::kStages, 1) << "one Q / dO stage";  \
  }
  ATTN_FLASH_SM90_BWD_TABLE(ATTN_CHECK_ROW)
#undef ATTN_CHECK_ROW
  EXPECT_EQ(split, (std::vector<std::string>{"192/192", "256/256"}));
  EXPECT_EQ(early, (std::vector<std::string>{"256/256"}));
}

}  // namespace
}  // namespace attn::flash_sm90
