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
#include "attn/philox.h"

// #pragma unroll on the device (keep_word's SASS depends on it); host
// compilers do not know it.
#if defined(__CUDA_ARCH__)
#define ATTN_KEEP_UNROLL _Pragma("unroll")
#else
#define ATTN_KEEP_UNROLL
#endif

namespace attn::flash_sm90 {

// The nibble of a lane's drawn word that holds the 4 keys' bits of block
// (query pair ii of its two, key quad hr, column e).
ATTN_HOST_DEVICE constexpr int keep_nibble(int ii, int hr, int e) { return 4 * ii + 2 * hr + e; }

// The query (from the tile's m0) of the blocks a lane draws for (ii, e).
ATTN_HOST_DEVICE constexpr int keep_query(int lane, int ii, int e) {
  return 8 * (2 * ((lane >> 2) & 3) + ii) + 2 * (lane & 3) + e;
}

// A lane's drawn word: the keep bits of its 8 blocks, nibble keep_nibble(ii,
// hr, e) for block (query m0 + keep_query(lane, ii, e), key quad quad0 + 2
// hr), quad0 its key rows' first quad (both halves of the warp's 16 rows).
ATTN_HOST_DEVICE uint32_t keep_drawn(int lane, int m0, uint32_t quad0, uint32_t bh, uint64_t seed, uint32_t offset,
                                     uint32_t threshold) {
  uint32_t mine = 0u;
  ATTN_KEEP_UNROLL
  for (int ii = 0; ii < 2; ++ii)
    ATTN_KEEP_UNROLL
    for (int e = 0; e < 2; ++e)
      ATTN_KEEP_UNROLL
      for (int hr = 0; hr < 2; ++hr) {
        const uint32_t query = static_cast<uint32_t>(m0 + keep_query(lane, ii, e));
        const PhiloxBlock r = philox4x32_10(PhiloxBlock{{quad0 + 2 * hr, query, bh, offset}},
                                            static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
        uint32_t bits = 0u;
        ATTN_KEEP_UNROLL
        for (int x = 0; x < 4; ++x) bits |= (r.x[x] >= threshold ? 1u : 0u) << x;
        mine |= bits << (4 * keep_nibble(ii, hr, e));
      }
  return mine;
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

#undef ATTN_KEEP_UNROLL
