// Where a 16-byte chunk of a 2-byte-element tile lives in shared memory. The
// XOR swizzle spreads the 8 rows an `ldmatrix` phase reads (one chunk column)
// over 8 distinct 16-byte bank groups, for any row length of 4 chunks times n.
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE

namespace attn::sm80 {

// A kRows x kCols tile of 2-byte elements, stored row after row in 16-byte
// chunks (8 elements). Chunk c of row r is stored at chunk index
// r * kChunks + phys(r, c):
// - in each full group of 8 chunks, phys = c ^ (r & 7): row r's group starts
//   at bank group (r * kChunks) % 8, which is 0 or 4; the XOR by r % 8 makes
//   8 consecutive rows land on 8 distinct bank groups either way;
// - a trailing group of 4 chunks (head dims 32, 96, 160: kChunks % 8 == 4)
//   uses phys = c ^ ((r >> 1) & 3): row starts alternate between bank group 0
//   and 4, and the XOR separates the pairs of rows that share a start.
// tests/gpu/test_sm80_primitives.cu proves both properties for every tile used.
template <int kRows, int kCols>
struct SwizzledTile {
  static constexpr int kChunks = kCols / 8;  // 16-byte chunks per row
  static constexpr int kFull = kChunks & ~7;  // chunks in full groups of 8
  static constexpr int kRowBytes = kCols * 2;
  static constexpr int kBytes = kRows * kRowBytes;
  static_assert(kCols % 32 == 0, "rows must be a multiple of 4 chunks (64 bytes)");
  static_assert(kRows % 8 == 0, "the swizzle repeats every 8 rows");

  // Chunk index (multiply by 16 for bytes) of logical chunk c of row r.
  ATTN_HOST_DEVICE static constexpr int chunk(int r, int c) {
    const int phys = c < kFull ? (c ^ (r & 7)) : kFull + ((c - kFull) ^ ((r >> 1) & 3));
    return r * kChunks + phys;
  }
  ATTN_HOST_DEVICE static constexpr int byte_offset(int r, int c) { return chunk(r, c) * 16; }

  // Offsets relative to a thread's first chunk without a register per chunk.
  // In a tile of whole groups of 8 chunks, rows 8 apart share their swizzle
  // and a chunk's index within its group is c ^ (r % 8); so when c0's low bits
  // are clear of j's (c0 a multiple of 8, or of j's power-of-two range),
  //   byte_offset(r + 8 m, c0 + j) + b
  //     == ((byte_offset(r, c0) + b) ^ (j % 8) * 16) + (j / 8) * 128 + 8 m * kRowBytes
  // for a byte b < 16 within the chunk: one XOR with a constant per j and
  // immediate offsets, where one hoisted address per chunk held registers
  // across the backward's loop (and spilled). tests/kernels/test_sm80_swizzle.cpp
  // checks the identity for the tiles and steps the kernels use.
  static constexpr bool kXorSteps = kFull == kChunks;
  // Whether stepped() covers kBlocks blocks from c0 = w * kBlocks (every warp
  // layout's column start): a power of two keeps c0's low bits clear of j's,
  // and so does a multiple of 8.
  template <int kBlocks>
  static constexpr bool kStepsBlocks = kXorSteps && (kBlocks % 8 == 0 || (kBlocks & (kBlocks - 1)) == 0);
  ATTN_HOST_DEVICE static constexpr uint32_t stepped(uint32_t at, int j, int m) {
    return (at ^ static_cast<uint32_t>((j % 8) * 16)) + static_cast<uint32_t>((j / 8) * 128 + 8 * m * kRowBytes);
  }
};

// The addresses one lane reads in a warp's ldmatrix sweep over a tile: rows
// R + rl (R a multiple of 8, rl the lane's row 0..15) and chunks 2 pair + ch
// (ch the lane's 0 or 1). Since R % 8 == 0 leaves the swizzle unchanged, each
// address is one of 4 per-lane registers (6 with a trailing group) plus a
// compile-time offset, which ldmatrix takes as an immediate: unrolled loops
// need no other address registers (hoisted addresses cost spills otherwise).
template <class Tile>
struct LaneAddresses {
  static constexpr bool kHasFull = Tile::kFull > 0;
  static constexpr bool kHasTail = Tile::kChunks != Tile::kFull;
  uint32_t full[4] = {0, 0, 0, 0};  // chunk pairs 0..3 of a full group of 8
  uint32_t tail[2] = {0, 0};        // chunk pairs 0, 1 of the trailing group of 4

  ATTN_HOST_DEVICE LaneAddresses(uint32_t base, int rl, int ch) {
    if constexpr (kHasFull)
      for (int q = 0; q < 4; ++q) full[q] = base + Tile::byte_offset(rl, 2 * q + ch);
    if constexpr (kHasTail)
      for (int q = 0; q < 2; ++q) tail[q] = base + Tile::byte_offset(rl, Tile::kFull + 2 * q + ch);
  }

  // Address of row R + rl, chunk 2 pair + ch.
  ATTN_HOST_DEVICE uint32_t at(int R, int pair) const {
    if (2 * pair < Tile::kFull) return full[pair % 4] + R * Tile::kRowBytes + (pair / 4) * 128;
    return tail[pair - Tile::kFull / 2] + R * Tile::kRowBytes;
  }
};

// The addresses one lane reads in a warp's ldmatrix sweep down a tile: fixed
// chunk pairs (kPairs of them from chunk pair pair0, the warp's columns; ch the
// lane's 0 or 1) and rows R + rl for R a multiple of 8, which leaves the
// swizzle unchanged. The transposed reads (ldmatrix.trans of a k x cols tile,
// k along rows) step this way; the row offset is an immediate.
template <class Tile, int kPairs>
struct ColumnAddresses {
  uint32_t col[kPairs];

  ATTN_HOST_DEVICE ColumnAddresses(uint32_t base, int rl, int ch, int pair0) {
    for (int q = 0; q < kPairs; ++q) col[q] = base + Tile::byte_offset(rl, 2 * (pair0 + q) + ch);
  }

  // Address of row R + rl, chunk 2 (pair0 + q) + ch.
  ATTN_HOST_DEVICE uint32_t at(int R, int q) const { return col[q] + R * Tile::kRowBytes; }
};

}  // namespace attn::sm80
