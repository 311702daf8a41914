// The flash library's dQ accumulator layout (dq_layout.h): the permutation of a
// row's chunks is a bijection that keeps 8-float chunks whole (the convert
// pass reads two float4 per chunk), the per-fragment form dq_column equals
// dq_swizzle for every warp column split of every backward build (read off
// the table, dropout builds included), and the 8 rows a warp's stage stores
// write together spread over the 4 bank groups of 128 bytes.
#include <gtest/gtest.h>

#include <vector>

#include "backends/flash_sm80/bwd_config.h"
#include "backends/flash/dq_layout.h"
#include "backends/flash_sm80/bwd_table.h"

namespace attn::flash_sm80 {
namespace {

TEST(Sm80DqLayout, EachRowIsAPermutationOfWholeChunks) {
  for (int d : {32, 64, 96, 128, 160, 192, 256})
    for (int64_t t = 0; t < 9; ++t) {
      std::vector<int> hits(d, 0);
      for (int c = 0; c < d; ++c) {
        const int at = flash::dq_swizzle(t, c);
        ASSERT_GE(at, 0);
        ASSERT_LT(at, d) << "d " << d << " t " << t << " c " << c;
        ++hits[at];
        EXPECT_EQ(at - at % 8, flash::dq_swizzle(t, c - c % 8)) << "chunk of c " << c << " split";
        EXPECT_EQ(at / 32, c / 32) << "columns leave their 128 bytes";
      }
      for (int x : hits) ASSERT_EQ(x, 1) << "d " << d << " t " << t;
    }
}

// Every (warp column block w, na, lane, token) of a build with NA blocks per
// warp and kWarpsDQ warps along d.
template <int NA, int kWarpsDQ>
int column_mismatches() {
  int bad = 0;
  for (int w = 0; w < kWarpsDQ; ++w)
    for (int64_t t = 0; t < 8; ++t)
      for (int lane = 0; lane < 32; ++lane)
        for (int na = 0; na < NA; ++na) {
          const int col0 = w * 8 * NA;
          bad += flash::dq_column<NA>(col0, na, static_cast<int>(t & 3), lane) != flash::dq_swizzle(t, col0 + 8 * na + 2 * (lane & 3));
        }
  return bad;
}

template <class Cfg>
void check_build(const char* name) {
  SCOPED_TRACE(name);
  EXPECT_EQ((column_mismatches<Cfg::kNAQ, Cfg::kWarpsDQ>()), 0);
  // A warp's stores of one 8-column block: lanes 4 i .. 4 i + 3 write row
  // r0 + i (i < 8), 8 bytes each. Row stride kD * 4 bytes is a multiple of
  // 128, so the bank group of a 32-byte piece is its chunk position mod 4:
  // each group must take exactly two of the 8 rows (256 bytes, 2 wavefronts).
  static_assert(Cfg::kHeadDimQK * 4 % 128 == 0, "row strides are whole bank cycles");
  for (int64_t t0 = 0; t0 < 4; ++t0)
    for (int c = 0; c < Cfg::kHeadDimQK; c += 8) {
      int per_group[4] = {0, 0, 0, 0};
      for (int i = 0; i < 8; ++i) ++per_group[(flash::dq_swizzle(t0 + i, c) / 8) % 4];
      for (int g : per_group) EXPECT_EQ(g, 2) << "t0 " << t0 << " column " << c;
    }
}

TEST(Sm80DqLayout, FragmentColumnsMatchAndStoresSpreadOverBanks) {
#define ATTN_CHECK_DQ(dqk, dv)                                              \
  check_build<BwdConfig<dqk, dv>>("bwd " #dqk "/" #dv);                     \
  if constexpr (bwd_has_dropout_build(dqk, dv))                             \
    check_build<BwdConfig<dqk, dv, true>>("bwd " #dqk "/" #dv " dropout build");
  ATTN_FLASH_SM80_BWD_TABLE(ATTN_CHECK_DQ)
#undef ATTN_CHECK_DQ
}

}  // namespace
}  // namespace attn::flash_sm80
