// Dropout's keep bits in the mma layout of a score tile (flash/dropout_bits.cuh's
// KeepBits): which Philox blocks a lane draws and where each element's bit
// lands after the quad's trade. A thread's s[ma][na][2 * half + e] is row
// row0 + 16 ma + 8 half + lane / 4, column n0 + 8 na + 2 (lane % 4) + e; one
// Philox block (include/attn/philox.h) covers keys 8 (j / 8) .. + 7 of a row,
// the 8 columns of block na, which the 4 lanes of a quad hold 2 each.
// Host and device: tests/backends/test_flash_keep_bits.cpp replays a warp's
// draws and trade on the CPU against attn::dropout_keep.
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE, ATTN_DEVICE_UNROLL
#include "attn/philox.h"

namespace attn::flash {

template <int MA, int NA>
struct KeepLayout {
  static constexpr int kBits = MA * NA * 4, kWords = (kBits + 31) / 32;
  // The quad's blocks t = (2 ma + half) NA + na; lane q draws t = 4 u + q
  // into byte u of its drawn words: a quarter of them.
  static constexpr int kBlocks = MA * 2 * NA, kDrawn = kBlocks / 4, kDrawnWords = (kDrawn + 3) / 4;
  static_assert(kBlocks % 4 == 0, "the quad's blocks split over its 4 lanes");

  // Element (ma, na, 2 half + e)'s bit in a thread's words. Bits 2 half and
  // 2 half + 1 of a block are neighbours in one word: a trade moves both.
  ATTN_HOST_DEVICE static constexpr int bit(int ma, int na, int e) { return (ma * NA + na) * 4 + e; }

  // This lane's draws: the keep bits of its blocks' 8 keys, byte u of
  // `drawn` for block 4 u + lane % 4.
  ATTN_HOST_DEVICE static void draw(int lane, int row0, int n0, uint32_t bh, uint64_t seed, uint32_t offset,
                                    uint32_t threshold, uint32_t (&drawn)[kDrawnWords]) {
    ATTN_DEVICE_UNROLL
    for (int w = 0; w < kDrawnWords; ++w) drawn[w] = 0u;
    ATTN_DEVICE_UNROLL
    for (int u = 0; u < kDrawn; ++u) {
      const int t = 4 * u + (lane & 3), na = t % NA, row = t / NA;  // row = 2 ma + half
      const auto i = static_cast<uint32_t>(row0 + 8 * row + (lane >> 2));
      const auto block = static_cast<uint32_t>(n0 + 8 * na) >> 3;
      drawn[u / 4] |= dropout_keep_block(seed, offset, bh, i, block, threshold) << (8 * (u % 4));
    }
  }

  // Takes this lane's 2 bits of every byte of word w drawn by quad lane src
  // (`theirs`, already shifted right by 2 (lane % 4)) into its keep words.
  ATTN_HOST_DEVICE static void take(uint32_t theirs, int src, int w, uint32_t (&word)[kWords]) {
    ATTN_DEVICE_UNROLL
    for (int by = 0; by < 4 && 4 * w + by < kDrawn; ++by) {
      const int t = 4 * (4 * w + by) + src, na = t % NA, row = t / NA;
      const int b = bit(row / 2, na, 2 * (row % 2));
      word[b / 32] |= (theirs >> (8 * by) & 3u) << (b % 32);
    }
  }
};

}  // namespace attn::flash
