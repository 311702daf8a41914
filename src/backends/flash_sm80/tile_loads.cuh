// Global -> shared copies of one tile (Q, K or V rows of one head) with
// cp.async: every thread moves 16-byte chunks, neighbouring threads along a
// row (coalesced), rows past the sequence's end zero-filled.
#pragma once

#include <cstdint>

#include "kernels/sm80/cp_async.cuh"

namespace attn::flash_sm80 {

// How kThreads threads cover a tile: kPerRow threads per row (the largest
// power of two dividing the row's chunks, at most 32), each taking kEach
// chunks kPerRow apart, kRowStep rows per pass. kRowStep is a multiple of 8,
// so every pass sees the same swizzle: one address per chunk a thread owns
// plus compile-time offsets, and one global pointer advanced by a stride.
// (Addresses precomputed for every chunk of a tile would stay live across the
// main loop and spill.)
template <class Tile, int kRows, int kThreads>
struct TileCopy {
  static constexpr int kChunks = Tile::kChunks;
  // At most kThreads / 8, so that a pass covers 8 rows (the narrow d 256
  // forward: 128 threads copy 512-byte rows, 16 threads per row).
  static constexpr int kPerRowMax = kThreads / 8 < 32 ? kThreads / 8 : 32;
  static constexpr int kPerRow = (kChunks & -kChunks) > kPerRowMax ? kPerRowMax : (kChunks & -kChunks);
  static constexpr int kEach = kChunks / kPerRow;
  static constexpr int kRowStep = kThreads / kPerRow;
  static constexpr int kPasses = kRows / kRowStep;
  static_assert(kRowStep % 8 == 0 && kRows % kRowStep == 0, "passes must repeat the swizzle and cover the tile");
};

// Rows [0, kRows) of a tile whose row r starts at src + r * row_stride; rows
// >= valid_rows are zero-filled (a zero V row times a zero probability is 0;
// stale shared memory could hold NaN bits).
template <class Tile, int kRows, int kThreads, typename T>
__device__ __forceinline__ void load_tile(uint32_t dst, const T* src, int64_t row_stride, int valid_rows, int tid) {
  using C = TileCopy<Tile, kRows, kThreads>;
  const int r0 = tid / C::kPerRow, c0 = tid % C::kPerRow;
  const T* g = src + r0 * row_stride + c0 * 8;
#pragma unroll
  for (int pass = 0; pass < C::kPasses; ++pass) {
    const bool valid = r0 + pass * C::kRowStep < valid_rows;
#pragma unroll
    for (int e = 0; e < C::kEach; ++e)
      sm80::cp_async_16(dst + Tile::byte_offset(r0, c0 + e * C::kPerRow) + pass * C::kRowStep * Tile::kRowBytes,
                        g + e * C::kPerRow * 8, valid);
    g += C::kRowStep * row_stride;
  }
}

}  // namespace attn::flash_sm80
