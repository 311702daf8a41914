// flash_sm90's backward with dropout (bwd_keep_bits.h): the lanes' Philox
// draws and their trade, replayed on the CPU for a warp's 32 lanes, give each
// lane the keep bit of every element it holds exactly as attn::dropout_keep
// (the rule every backend follows) decides it. A wrong byte, shift or
// source lane would drop another element than the reference does.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>

#include "attn/philox.h"
#include "backends/flash_sm90/bwd_keep_bits.h"

namespace attn::flash_sm90 {
namespace {

TEST(Sm90KeepBits, EveryLaneGetsTheReferenceDecisionOfEachOfItsElements) {
  std::mt19937_64 rng(20261128);
  for (int trial = 0; trial < 24; ++trial) {
    const uint64_t seed = rng();
    const auto offset = static_cast<uint32_t>(rng());
    const auto bh = static_cast<uint32_t>(rng() % 4096);
    const int m0 = 64 * static_cast<int>(rng() % 300), key0 = 64 * static_cast<int>(rng() % 300);
    const int warp = static_cast<int>(rng() % 4);
    const uint32_t threshold = dropout_threshold(trial % 3 == 0 ? 0.5 : trial % 3 == 1 ? 0.1 : 0.9);
    std::array<uint32_t, 32> mine{};
    for (int lane = 0; lane < 32; ++lane) {  // as keep_word draws them
      const uint32_t oct0 = static_cast<uint32_t>(key0 + 16 * warp) >> 3;
      mine[lane] = keep_drawn(lane, m0, oct0, bh, seed, offset, threshold);
    }
    for (int lane = 0; lane < 32; ++lane) {
      uint32_t keep = 0u;
      for (int i = 0; i < 8; ++i) keep |= keep_gather(mine[keep_source_lane(lane, i)], lane, i);
      // S^T's layout: key row lane / 4 (+ 8 for hr) of the warp's 16, query
      // column 8 i + 2 (lane % 4) + e of the 64.
      for (int i = 0; i < 8; ++i)
        for (int hr = 0; hr < 2; ++hr)
          for (int e = 0; e < 2; ++e) {
            const auto query = static_cast<uint32_t>(m0 + 8 * i + 2 * (lane & 3) + e);
            const auto key = static_cast<uint32_t>(key0 + 16 * warp + (lane >> 2) + 8 * hr);
            EXPECT_EQ(((keep >> keep_bit(i, hr, e)) & 1u) != 0, dropout_keep(seed, offset, bh, query, key, threshold))
                << "trial " << trial << " lane " << lane << " element (" << i << ", " << hr << ", " << e << ")";
          }
    }
  }
}

// The gathered word's places are a permutation: no two elements share a bit.
TEST(Sm90KeepBits, ElementsHaveDistinctBits) {
  uint64_t seen = 0;
  for (int i = 0; i < 8; ++i)
    for (int hr = 0; hr < 2; ++hr)
      for (int e = 0; e < 2; ++e) {
        const int bit = keep_bit(i, hr, e);
        ASSERT_GE(bit, 0);
        ASSERT_LT(bit, 32);
        EXPECT_EQ((seen >> bit) & 1u, 0u) << "element (" << i << ", " << hr << ", " << e << ")";
        seen |= uint64_t{1} << bit;
      }
  EXPECT_EQ(seen, 0xffffffffull);
}

}  // namespace
}  // namespace attn::flash_sm90
