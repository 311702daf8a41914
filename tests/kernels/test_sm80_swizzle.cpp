// SwizzledTile::stepped (src/kernels/sm80/swizzle.h) against byte_offset: the
// XOR-and-offset form of a thread's chunk addresses that stage_block uses, for
// every tile and warp layout the flash_sm80 kernels stage through, and the
// tiles where it must not be used (a trailing group of 4 chunks).
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/sm80/swizzle.h"

namespace attn::sm80 {
namespace {

// Every row block start r0 (a multiple of 8), lane row 0..7, byte within the
// chunk, and column blocks j < n from c0 = w * n (the warp layouts: warp w of
// the tile's column split owns n blocks of 8 columns).
template <class Tile>
int mismatches(int n) {
  int bad = 0;
  for (int w = 0; w * n < Tile::kChunks; ++w)
    for (int r0 = 0; r0 < 16; r0 += 8)
      for (int lr = 0; lr < 8; ++lr)
        for (int b = 0; b < 16; b += 4) {
          const int c0 = w * n;
          const uint32_t at = Tile::byte_offset(r0 + lr, c0) + b;
          for (int m = 0; 8 * m + r0 + lr < (Tile::kBytes / Tile::kRowBytes); ++m)
            for (int j = 0; j < n; ++j)
              bad += Tile::stepped(at, j, m) != static_cast<uint32_t>(Tile::byte_offset(r0 + lr + 8 * m, c0 + j) + b);
        }
  return bad;
}

TEST(Sm80Swizzle, SteppedMatchesByteOffsetForStagedTiles) {
  // Backward P / dS (64 x 128, 64 x 64; 2 or 4 blocks per warp), dK / dV
  // (key tiles x head dims, 4, 8 or 16 blocks), forward O (128 x d, all columns).
  EXPECT_EQ((mismatches<SwizzledTile<64, 128>>(4)), 0);
  EXPECT_EQ((mismatches<SwizzledTile<64, 64>>(2)), 0);
  EXPECT_EQ((mismatches<SwizzledTile<128, 64>>(4)), 0);
  EXPECT_EQ((mismatches<SwizzledTile<128, 128>>(8)), 0);
  EXPECT_EQ((mismatches<SwizzledTile<64, 256>>(16)), 0);
  EXPECT_EQ((mismatches<SwizzledTile<64, 192>>(8)), 0);
  EXPECT_EQ((mismatches<SwizzledTile<128, 256>>(32)), 0);
  EXPECT_EQ((mismatches<SwizzledTile<128, 64>>(8)), 0);
  EXPECT_EQ((mismatches<SwizzledTile<128, 128>>(16)), 0);
  EXPECT_EQ((mismatches<SwizzledTile<128, 192>>(24)), 0);
  EXPECT_TRUE((SwizzledTile<64, 128>::kXorSteps));
}

TEST(Sm80Swizzle, SteppedRefusedWhereTheIdentityFails) {
  // A trailing group of 4 chunks swizzles by (r / 2) % 4: stage_block must take
  // the per-chunk path there (kXorSteps false), and the identity indeed fails.
  EXPECT_FALSE((SwizzledTile<128, 96>::kXorSteps));
  EXPECT_FALSE((SwizzledTile<128, 160>::kXorSteps));
  EXPECT_GT((mismatches<SwizzledTile<128, 96>>(12)), 0);
  // Blocks that do not start on a multiple of their count (6 blocks at c0 = 6)
  // break it even in whole groups: stage_block steps only power-of-two counts
  // or multiples of 8.
  EXPECT_GT((mismatches<SwizzledTile<64, 192>>(6)), 0);
}

}  // namespace
}  // namespace attn::sm80
