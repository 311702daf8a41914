// bounded_sequence (core/sequence_bounds.h): what the GPU kernels derive from
// cu_seqlens they read unchecked. Valid values pass unchanged; any other value
// stays inside the tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "core/sequence_bounds.h"

namespace attn {
namespace {

TEST(SequenceBounds, ValidPackedValuesPassUnchanged) {
  // Sequences of 3, 0 and 7 tokens in 12 (two tokens past the last), max 7.
  const int32_t cu[] = {0, 3, 3, 10};
  for (int b = 0; b < 3; ++b) {
    const SequenceBounds s = bounded_sequence(cu[b], cu[b + 1], true, 12, 7);
    EXPECT_EQ(s.start, cu[b]);
    EXPECT_EQ(s.len, cu[b + 1] - cu[b]);
  }
}

TEST(SequenceBounds, ValidPaddedValuesPassUnchanged) {
  // A padded batch of 3 x 8 positions with true lengths 8, 1, 0.
  const int32_t cu[] = {0, 8, 9, 9};
  for (int b = 0; b < 3; ++b) {
    const SequenceBounds s = bounded_sequence(cu[b], cu[b + 1], false, 0, 8);
    EXPECT_EQ(s.start, 0);
    EXPECT_EQ(s.len, cu[b + 1] - cu[b]);
  }
}

TEST(SequenceBounds, PackedValuesStayInsideTheTokens) {
  const int tokens = 100, max_len = 40;
  const int big = std::numeric_limits<int32_t>::max(), small = std::numeric_limits<int32_t>::min();
  const int values[] = {small, -5, 0, 1, 39, 40, 41, 99, 100, 101, 500, big};
  for (int lo : values)
    for (int hi : values) {
      const SequenceBounds s = bounded_sequence(lo, hi, true, tokens, max_len);
      SCOPED_TRACE(std::to_string(lo) + " .. " + std::to_string(hi));
      EXPECT_GE(s.start, 0);
      EXPECT_LE(s.start, tokens);
      EXPECT_GE(s.len, 0);
      EXPECT_LE(s.len, max_len);
      EXPECT_LE(s.start + s.len, tokens);
      // Within the bounds the values are kept: start is lo, and the length is
      // hi - lo wherever that fits.
      if (lo >= 0 && lo <= tokens) EXPECT_EQ(s.start, lo);
      if (lo >= 0 && hi >= lo && hi <= tokens && hi - lo <= max_len) EXPECT_EQ(s.len, hi - lo);
      // Past the room, the length is what fits.
      if (lo >= 0 && lo <= tokens && hi >= lo)
        EXPECT_EQ(s.len, std::min<int64_t>(int64_t{hi} - lo, std::min(max_len, tokens - lo)));
    }
}

TEST(SequenceBounds, PaddedLengthsStayInsideThePaddedDimension) {
  const int values[] = {std::numeric_limits<int32_t>::min(), -9, 0, 3, 8, 9, 1000, std::numeric_limits<int32_t>::max()};
  for (int lo : values)
    for (int hi : values) {
      const SequenceBounds s = bounded_sequence(lo, hi, false, 0, 8);
      EXPECT_EQ(s.start, 0);
      EXPECT_GE(s.len, 0);
      EXPECT_LE(s.len, 8);
      const int64_t diff = int64_t{hi} - lo;
      if (diff >= 0 && diff <= 8) EXPECT_EQ(s.len, diff);
    }
}

TEST(SequenceBounds, NoTokensNoSequence) {
  const SequenceBounds s = bounded_sequence(3, 9, true, 0, 16);
  EXPECT_EQ(s.start, 0);
  EXPECT_EQ(s.len, 0);
}

TEST(SequenceBounds, SequenceHoldingFindsEveryPackedToken) {
  // Sequences of 3, 0, 1 and 7 tokens from token 2, cu_seqlens read with a
  // stride of 2 (the odd entries are not cu_seqlens' and are never read as such).
  const int32_t cu[] = {2, -1, 5, -1, 5, -1, 6, -1, 13};
  const int64_t holder[] = {-1, -1, 0, 0, 0, 2, 3, 3, 3, 3, 3, 3, 3, -1, -1};
  for (int64_t t = 0; t < 15; ++t) EXPECT_EQ(sequence_holding(cu, 2, 4, t), holder[t]) << "token " << t;
  EXPECT_EQ(sequence_holding(cu, 2, 0, 3), -1);  // no sequence
}

}  // namespace
}  // namespace attn
