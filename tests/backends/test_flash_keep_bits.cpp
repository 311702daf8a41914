// Dropout's keep bits in the mma score layout (src/backends/flash/keep_bits_layout.h,
// used by flash_sm80's forward and backward and flash_sm90's forward and wide
// backward tiles): a warp's draws and the quads' trade, replayed on the CPU,
// give each lane the keep bit of every score it holds exactly as
// attn::dropout_keep decides it. A wrong byte, shift or block index would drop
// another element than the reference does.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>

#include "attn/philox.h"
#include "backends/flash/keep_bits_layout.h"

namespace attn::flash {
namespace {

// What KeepBits::compute does on the device, the shuffles replaced by reads
// of the other lanes' drawn words.
template <int MA, int NA>
void replay_warp(int row0, int n0, uint32_t bh, uint64_t seed, uint32_t offset, uint32_t threshold,
                 std::array<std::array<uint32_t, KeepLayout<MA, NA>::kWords>, 32>& words) {
  using L = KeepLayout<MA, NA>;
  uint32_t drawn[32][L::kDrawnWords];
  for (int lane = 0; lane < 32; ++lane) L::draw(lane, row0, n0, bh, seed, offset, threshold, drawn[lane]);
  for (int lane = 0; lane < 32; ++lane) {
    uint32_t word[L::kWords] = {};
    for (int src = 0; src < 4; ++src)
      for (int w = 0; w < L::kDrawnWords; ++w) L::take(drawn[(lane & ~3) | src][w] >> (2 * (lane & 3)), src, w, word);
    for (int w = 0; w < L::kWords; ++w) words[lane][w] = word[w];
  }
}

template <int MA, int NA>
void expect_reference_decisions() {
  using L = KeepLayout<MA, NA>;
  std::mt19937_64 rng(20261129 + MA * 100 + NA);
  for (int trial = 0; trial < 12; ++trial) {
    const uint64_t seed = rng();
    const auto offset = static_cast<uint32_t>(rng());
    const auto bh = static_cast<uint32_t>(rng() % 4096);
    const int row0 = 16 * static_cast<int>(rng() % 500), n0 = 8 * static_cast<int>(rng() % 500);
    const uint32_t threshold = dropout_threshold(trial % 3 == 0 ? 0.5 : trial % 3 == 1 ? 0.1 : 0.9);
    std::array<std::array<uint32_t, L::kWords>, 32> words{};
    replay_warp<MA, NA>(row0, n0, bh, seed, offset, threshold, words);
    for (int lane = 0; lane < 32; ++lane)
      for (int ma = 0; ma < MA; ++ma)
        for (int na = 0; na < NA; ++na)
          for (int e = 0; e < 4; ++e) {  // e = 2 half + column
            const auto i = static_cast<uint32_t>(row0 + 16 * ma + 8 * (e / 2) + (lane >> 2));
            const auto j = static_cast<uint32_t>(n0 + 8 * na + 2 * (lane & 3) + e % 2);
            const int b = L::bit(ma, na, e);
            EXPECT_EQ(((words[lane][b / 32] >> (b % 32)) & 1u) != 0, dropout_keep(seed, offset, bh, i, j, threshold))
                << "MA " << MA << " NA " << NA << " trial " << trial << " lane " << lane << " (" << ma << ", " << na
                << ", " << e << ")";
          }
  }
}

// The kernels' shapes: flash_sm80's backward (NA 2 and 4), flash_sm90's wide
// backward (1 x 4) and forward (1 x 10 / 14 / 16), flash_sm80's forward (MA 2-4).
TEST(FlashKeepBits, EveryLaneGetsTheReferenceDecisionOfEachOfItsScores) {
  expect_reference_decisions<1, 2>();
  expect_reference_decisions<2, 2>();
  expect_reference_decisions<1, 4>();
  expect_reference_decisions<2, 4>();
  expect_reference_decisions<1, 10>();
  expect_reference_decisions<1, 14>();
  expect_reference_decisions<1, 16>();
  expect_reference_decisions<4, 8>();
  expect_reference_decisions<2, 16>();
}

// A thread's bits are a permutation of its scores: no two share a bit.
TEST(FlashKeepBits, ScoresHaveDistinctBits) {
  using L = KeepLayout<2, 6>;
  std::array<bool, 32 * L::kWords> seen{};
  for (int ma = 0; ma < 2; ++ma)
    for (int na = 0; na < 6; ++na)
      for (int e = 0; e < 4; ++e) {
        const int b = L::bit(ma, na, e);
        ASSERT_GE(b, 0);
        ASSERT_LT(b, 32 * L::kWords);
        EXPECT_FALSE(seen[b]) << "(" << ma << ", " << na << ", " << e << ")";
        seen[b] = true;
      }
}

}  // namespace
}  // namespace attn::flash
