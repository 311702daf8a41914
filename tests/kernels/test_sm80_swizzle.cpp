// SwizzledTile::stepped (src/kernels/sm80/swizzle.h) against byte_offset: the
// XOR-and-offset form of a thread's chunk addresses that stage_block uses,
// for every tile and block count flash_sm80 stages through (read off its
// configs, so a new table row is covered), and where it must not be used.
#include <gtest/gtest.h>

#include <cstdint>

#include "backends/flash_sm80/bwd_config.h"
#include "backends/flash_sm80/bwd_table.h"
#include "backends/flash_sm80/fwd_config.h"
#include "backends/flash_sm80/fwd_table.h"
#include "kernels/sm80/swizzle.h"

namespace attn::sm80 {
namespace {

// Every row block start r0 (a multiple of 8), lane row 0..7, byte within the
// chunk, and column blocks j < n from c0 = w * n (warp w of the tile's
// column split owns n blocks of 8 columns), over all rows of the tile.
template <class Tile>
int mismatches(int n) {
  int bad = 0;
  for (int w = 0; w * n < Tile::kChunks; ++w)
    for (int r0 = 0; r0 < 16; r0 += 8)
      for (int lr = 0; lr < 8; ++lr)
        for (int b = 0; b < 16; b += 4) {
          const int c0 = w * n;
          const uint32_t at = Tile::byte_offset(r0 + lr, c0) + b;
          for (int m = 0; 8 * m + r0 + lr < Tile::kBytes / Tile::kRowBytes; ++m)
            for (int j = 0; j < n; ++j)
              bad += Tile::stepped(at, j, m) != static_cast<uint32_t>(Tile::byte_offset(r0 + lr + 8 * m, c0 + j) + b);
        }
  return bad;
}

// stage_block's choice for (Tile, NA): stepped only where the identity holds.
template <class Tile, int NA>
void expect_stepped_exact(const char* what, int dqk, int dv) {
  if constexpr (Tile::template kStepsBlocks<NA>)
    EXPECT_EQ(mismatches<Tile>(NA), 0) << what << " of d " << dqk << "/" << dv << ", " << NA << " blocks";
}

// The backward's staged tiles of one build (BwdConfig) of a table row.
template <class C>
void expect_bwd_stepped_exact(int dqk, int dv) {
  expect_stepped_exact<SwizzledTile<C::kBlockM, C::kBlockN>, C::kNAS>("backward P/dS", dqk, dv);
  expect_stepped_exact<SwizzledTile<C::kBlockN, C::kHeadDimQK>, C::kNAK>("backward dK", dqk, dv);
  expect_stepped_exact<SwizzledTile<C::kBlockN, C::kHeadDimV>, C::kNAV>("backward dV", dqk, dv);
}

TEST(Sm80Swizzle, SteppedMatchesByteOffsetWhereStageBlockUsesIt) {
  using flash_sm80::BwdConfig;
  using flash_sm80::FwdConfig;
  int rows = 0;
  // Each row's build and, for rows with dropout apart, its dropout build.
#define ATTN_CHECK_BWD(dqk, dv)                                                                        \
  {                                                                                                    \
    expect_bwd_stepped_exact<BwdConfig<dqk, dv>>(dqk, dv);                                             \
    expect_bwd_stepped_exact<BwdConfig<dqk, dv, flash_sm80::bwd_has_dropout_build(dqk, dv)>>(dqk, dv); \
    ++rows;                                                                                            \
  }
  ATTN_FLASH_SM80_BWD_TABLE(ATTN_CHECK_BWD)
#undef ATTN_CHECK_BWD
#define ATTN_CHECK_FWD(dqk, dv)                                                                                   \
  {                                                                                                               \
    using C = FwdConfig<dqk, dv>;                                                                                 \
    expect_stepped_exact<SwizzledTile<C::kBlockM, dv>, C::kColBlocksO>("forward O", dqk, dv);                     \
    using N = FwdConfig<dqk, dv, ATTN_SM80_FWD_NARROW(dqk) ? flash_sm80::FwdBuild::narrow : flash_sm80::FwdBuild::wide>; \
    expect_stepped_exact<SwizzledTile<N::kBlockM, dv>, N::kColBlocksO>("forward O, narrow", dqk, dv);             \
    ++rows;                                                                                                       \
  }
  ATTN_FLASH_SM80_FWD_TABLE(ATTN_CHECK_FWD)
#undef ATTN_CHECK_FWD
  EXPECT_EQ(rows, 16);
  // The backward's loop stages P and dS stepped at every head dim (the point).
  EXPECT_TRUE((SwizzledTile<64, 128>::kStepsBlocks<4>));
  EXPECT_TRUE((SwizzledTile<64, 64>::kStepsBlocks<2>));
}

TEST(Sm80Swizzle, SteppedRefusedWhereTheIdentityFails) {
  // A trailing group of 4 chunks swizzles by (r / 2) % 4: no stepping there,
  // and the identity indeed fails.
  EXPECT_FALSE((SwizzledTile<128, 96>::kXorSteps));
  EXPECT_FALSE((SwizzledTile<128, 160>::kXorSteps));
  EXPECT_GT((mismatches<SwizzledTile<128, 96>>(12)), 0);
  // 6 blocks from c0 = 6 (d 192's dK with 4 column warps) cross bits the XOR
  // touches even in whole groups: refused, and the identity fails.
  EXPECT_FALSE((SwizzledTile<64, 192>::kStepsBlocks<6>));
  EXPECT_GT((mismatches<SwizzledTile<64, 192>>(6)), 0);
}

}  // namespace
}  // namespace attn::sm80
