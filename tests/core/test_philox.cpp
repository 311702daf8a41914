// The dropout generator (include/attn/philox.h): Philox 4x32-10 against the
// Random123 known-answer vectors, the threshold's edge cases, the counter
// layout of dropout_keep, and the keep rate it yields.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "attn/philox.h"

namespace attn {
namespace {

struct Kat {
  PhiloxBlock ctr;
  uint32_t k0, k1;
  PhiloxBlock expected;
};

// Random123's kat_vectors for philox4x32 with 10 rounds.
TEST(Philox, Random123KnownAnswers) {
  const Kat kats[] = {
      {{{0u, 0u, 0u, 0u}}, 0u, 0u, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& kat : kats) {
    const PhiloxBlock r = philox4x32_10(kat.ctr, kat.k0, kat.k1);
    for (int w = 0; w < 4; ++w)
      EXPECT_EQ(r.x[w], kat.expected.x[w]) << "word " << w << " of ctr " << std::hex << kat.ctr.x[0];
  }
}

TEST(Philox, ThresholdEdgeCases) {
  EXPECT_EQ(dropout_threshold(0.0), 0u);
  EXPECT_EQ(dropout_threshold(-0.5), 0u);
  EXPECT_EQ(dropout_threshold(1e-300), 0u);                 // rounds down to keep-all
  EXPECT_EQ(dropout_threshold(std::ldexp(1.0, -16)), 1u);   // one 16-bit value dropped
  EXPECT_EQ(dropout_threshold(std::ldexp(3.0, -17)), 1u);   // 1.5 -> floor
  EXPECT_EQ(dropout_threshold(0.25), 0x4000u);
  EXPECT_EQ(dropout_threshold(0.5), 0x8000u);
  EXPECT_EQ(dropout_threshold(0.1), 6553u);                 // floor(0.1 * 2^16)
  EXPECT_EQ(dropout_threshold(1.0 - std::ldexp(1.0, -15)), 0xFFFEu);
  EXPECT_EQ(dropout_threshold(1.0 - std::ldexp(1.0, -17)), 0xFFFFu);  // saturates, no overflow
  EXPECT_EQ(dropout_threshold(1.0), 0xFFFFu);
}

TEST(Philox, ThresholdZeroKeepsEverything) {
  for (uint32_t i = 0; i < 64; ++i)
    for (uint32_t j = 0; j < 64; ++j) EXPECT_TRUE(dropout_keep(42, 0, 3, i, j, 0u));
}

// keep(b, h, i, j) reads 16 bits of word j % 8 / 2 of the block at counter
// (j / 8, i, bh, offset) keyed by (lo32(seed), hi32(seed)): the low half for
// even j, the high half for odd j, as SEMANTICS.md states.
TEST(Philox, KeepUsesTheDocumentedCounterLayout) {
  const uint64_t seed = 0x0123456789abcdefull;
  const uint32_t offset = 0xdeadbeefu, bh = 77;
  const uint32_t threshold = dropout_threshold(0.5);
  for (uint32_t i = 0; i < 5; ++i)
    for (uint32_t j = 0; j < 29; ++j) {
      const PhiloxBlock r = philox4x32_10(PhiloxBlock{{j / 8, i, bh, offset}}, 0x89abcdefu, 0x01234567u);
      const uint32_t draw = (r.x[j % 8 / 2] >> (16 * (j % 2))) & 0xFFFFu;
      EXPECT_EQ(dropout_keep(seed, offset, bh, i, j, threshold), draw >= threshold) << i << "," << j;
    }
  // Each argument changes the decisions: the generator sees all of them.
  auto pattern = [&](uint64_t s, uint32_t off, uint32_t bh_, uint32_t i) {
    uint64_t bits = 0;
    for (uint32_t j = 0; j < 64; ++j) bits |= uint64_t(dropout_keep(s, off, bh_, i, j, threshold)) << j;
    return bits;
  };
  const uint64_t base = pattern(seed, offset, bh, 0);
  EXPECT_NE(base, pattern(seed ^ (1ull << 40), offset, bh, 0));  // high word of the seed
  EXPECT_NE(base, pattern(seed ^ 1ull, offset, bh, 0));
  EXPECT_NE(base, pattern(seed, offset + 1, bh, 0));
  EXPECT_NE(base, pattern(seed, offset, bh + 1, 0));
  EXPECT_NE(base, pattern(seed, offset, bh, 1));
}

// The fraction kept is 1 - p, in every place of a block (j % 8), within 6 sigma.
TEST(Philox, KeepRateMatchesProbability) {
  for (double p : {0.1, 0.5, 0.9}) {
    const uint32_t threshold = dropout_threshold(p);
    int64_t kept[8] = {}, total[8] = {};
    for (uint32_t bh = 0; bh < 4; ++bh)
      for (uint32_t i = 0; i < 64; ++i)
        for (uint32_t j = 0; j < 128; ++j) {
          kept[j % 8] += dropout_keep(0x5eedull + bh, 7, bh, i, j, threshold);
          ++total[j % 8];
        }
    for (int lane = 0; lane < 8; ++lane) {
      const double rate = double(kept[lane]) / double(total[lane]);
      const double sigma = std::sqrt(p * (1 - p) / double(total[lane]));
      EXPECT_NEAR(rate, 1.0 - p, 6 * sigma) << "p=" << p << " lane " << lane;
    }
  }
}

}  // namespace
}  // namespace attn
