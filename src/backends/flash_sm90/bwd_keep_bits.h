// flash_sm90's backward with dropout: where a thread's keep bits come from
// and where they land (bwd_mainloop.cuh's keep_word and kept). A lane holds
// elements (i, hr, e) of S^T among 64 queries: key row lane / 4 + 8 hr of its
// warp's 16, query column 8 i + 2 (lane % 4) + e. One Philox block covers
// (query, 4 consecutive keys), which four lanes hold (k = lane / 4 % 4), so
// each of the four draws the blocks of two query pairs and they trade them.
// Host and device: tests/backends/test_sm90_keep_bits.cpp replays the trade
// on the CPU against include/attn/philox.h.
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE

namespace attn::flash_sm90 {

// The nibble of a lane's drawn word that holds the 4 keys' bits of block
// (query pair ii of its two, key quad hr, column e).
ATTN_HOST_DEVICE constexpr int keep_nibble(int ii, int hr, int e) { return 4 * ii + 2 * hr + e; }

// The query (from the tile's m0) of the blocks a lane draws for (ii, e).
ATTN_HOST_DEVICE constexpr int keep_query(int lane, int ii, int e) {
  return 8 * (2 * ((lane >> 2) & 3) + ii) + 2 * (lane & 3) + e;
}

// The lane that drew query pair kk (queries i = 2 kk, 2 kk + 1) for this lane.
ATTN_HOST_DEVICE constexpr int keep_source_lane(int lane, int kk) { return 16 * (lane >> 4) + 4 * kk + (lane & 3); }

// This lane's share of that lane's word: key k's bit of every nibble at once,
// moved to query pair kk's place (bit 4 nibble + kk).
ATTN_HOST_DEVICE constexpr uint32_t keep_gather(uint32_t theirs, int lane, int kk) {
  return ((theirs >> ((lane >> 2) & 3)) & 0x11111111u) << kk;
}

// Element (i, hr, e)'s bit in the gathered word (i < 8).
ATTN_HOST_DEVICE constexpr int keep_bit(int i, int hr, int e) { return 4 * keep_nibble(i % 2, hr, e) + i % 8 / 2; }

}  // namespace attn::flash_sm90
