// flash_sm90's backward with dropout: where a thread's keep bits come from
// and where they land (bwd_mainloop.cuh's keep_word and kept). A lane holds
// elements (i, hr, e) of S^T among 64 queries: key row lane / 4 + 8 hr of its
// warp's 16, query column 8 i + 2 (lane % 4) + e. One Philox block covers
// (query, 8 consecutive keys), which the 8 lanes with the same lane % 4 hold
// (key g = lane / 4), so each of the 8 draws the blocks of one query pair
// (i = g) for both key halves and they trade them.
// Host and device: tests/backends/test_sm90_keep_bits.cpp replays the trade
// on the CPU against include/attn/philox.h.
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE, ATTN_DEVICE_UNROLL
#include "attn/philox.h"

namespace attn::flash_sm90 {

// The query (from the tile's m0) of the blocks a lane draws for column e.
ATTN_HOST_DEVICE constexpr int keep_query(int lane, int e) { return 8 * (lane >> 2) + 2 * (lane & 3) + e; }

// A lane's drawn word: the keep bits of its 4 blocks, byte 2 e + hr for block
// (query m0 + keep_query(lane, e), keys 8 (oct0 + hr) .. + 7), oct0 the
// first 8 of its warp's 16 key rows.
ATTN_HOST_DEVICE uint32_t keep_drawn(int lane, int m0, uint32_t oct0, uint32_t bh, uint64_t seed, uint32_t offset,
                                     uint32_t threshold) {
  uint32_t mine = 0u;
  ATTN_DEVICE_UNROLL
  for (int e = 0; e < 2; ++e)
    ATTN_DEVICE_UNROLL
    for (int hr = 0; hr < 2; ++hr) {
      const auto query = static_cast<uint32_t>(m0 + keep_query(lane, e));
      mine |= dropout_keep_block(seed, offset, bh, query, oct0 + hr, threshold) << (8 * (2 * e + hr));
    }
  return mine;
}

// The lane that drew query pair i (queries 8 i + 2 (lane % 4), + 1) for this lane.
ATTN_HOST_DEVICE constexpr int keep_source_lane(int lane, int i) { return 4 * i + (lane & 3); }

// This lane's share of that lane's word: key g's bit of every byte at once,
// moved to query pair i's place (bit 8 byte + i).
ATTN_HOST_DEVICE constexpr uint32_t keep_gather(uint32_t theirs, int lane, int i) {
  return ((theirs >> (lane >> 2)) & 0x01010101u) << i;
}

// Element (i, hr, e)'s bit in the gathered word (i < 8).
ATTN_HOST_DEVICE constexpr int keep_bit(int i, int hr, int e) { return 8 * (2 * e + hr) + i % 8; }

}  // namespace attn::flash_sm90
