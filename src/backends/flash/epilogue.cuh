// The end of a query tile: O / sum (times dropout's 1 / (1 - p)) rounded to T,
// staged through shared memory so global stores are whole 16-byte chunks
// along each row, and lse per row. Also the empty case: a tile whose rows see
// no key writes out = 0 and lse = -inf without touching K or V.
#pragma once

#include <cstdint>

#include "kernels/sm80/mma.cuh"

namespace attn::flash {

// Writes a warp's accumulator block (16 MA rows from row0, a multiple of 8;
// NA blocks of 8 columns from col0, a multiple of 8 NA as every warp layout
// here gives), each row times its scale (O by 1 / sum here; the backward's P,
// dS, dK and dV), rounded to T, into the swizzled tile at smem. The caller
// syncs before other threads read it.
template <typename T, class Tile, int MA, int NA>
__device__ __forceinline__ void stage_block(char* smem, const float (&acc)[MA][NA][4], const float (&row_scale)[MA][2],
                                            int row0, int col0, int lane) {
  // Column block col0 / 8 + na is exactly 16-byte chunk col0 / 8 + na of the row.
  // Where the swizzle allows (swizzle.h, stepped), one address per thread.
  constexpr bool kStepped = Tile::template kStepsBlocks<NA>;
  const uint32_t at = Tile::byte_offset(row0 + (lane >> 2), col0 / 8) + 4 * (lane & 3);
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + 16 * ma + 8 * h + (lane >> 2);
#pragma unroll
      for (int na = 0; na < NA; ++na) {
        const uint32_t v =
            sm80::pack2<T>(acc[ma][na][2 * h] * row_scale[ma][h], acc[ma][na][2 * h + 1] * row_scale[ma][h]);
        const uint32_t off = kStepped ? Tile::stepped(at, na, 2 * ma + h)
                                      : Tile::byte_offset(r, col0 / 8 + na) + 4 * (lane & 3);
        *reinterpret_cast<uint32_t*>(smem + off) = v;
      }
    }
}

// stage_block with one scale for every row (the backward's P, dS, dK, dV).
template <typename T, class Tile, int MA, int NA>
__device__ __forceinline__ void stage_block(char* smem, const float (&acc)[MA][NA][4], float scale, int row0, int col0,
                                            int lane) {
  float row_scale[MA][2];
#pragma unroll
  for (int ma = 0; ma < MA; ++ma) row_scale[ma][0] = row_scale[ma][1] = scale;
  stage_block<T, Tile>(smem, acc, row_scale, row0, col0, lane);
}

// Copies rows [0, valid_rows) of the staged tile to dst (row r at dst + r * row_stride).
template <class Tile, int kRows, int kThreads, typename T>
__device__ __forceinline__ void store_tile(T* dst, int64_t row_stride, const char* smem, int valid_rows, int tid) {
  constexpr int kTotal = kRows * Tile::kChunks;
#pragma unroll
  for (int idx = tid; idx < kTotal; idx += kThreads) {
    const int r = idx / Tile::kChunks, c = idx % Tile::kChunks;
    if (r < valid_rows)
      *reinterpret_cast<uint4*>(dst + r * row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(smem + Tile::byte_offset(r, c));
  }
}

// out = 0 for rows [0, valid_rows) of a tile with kCols columns.
template <int kCols, int kRows, int kThreads, typename T>
__device__ __forceinline__ void store_zeros(T* dst, int64_t row_stride, int valid_rows, int tid) {
  constexpr int kChunks = kCols / 8;
  for (int idx = tid; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    if (r < valid_rows) *reinterpret_cast<uint4*>(dst + r * row_stride + c * 8) = make_uint4(0, 0, 0, 0);
  }
}

}  // namespace attn::flash
