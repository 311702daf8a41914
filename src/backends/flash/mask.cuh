// The visibility mask on a tile of scores (include/attn/mask_rule.h), run on
// boundary tiles only: invisible pairs become -inf. Three forms: by bounds,
// by a word of bits per row, and key by key.
//
// Register layout (mma.cuh): s[ma][na][2 * half + e] is row
// row0 + 16 ma + 8 half + lane / 4, column n0 + 8 na + 2 (lane % 4) + e.
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"
#include "backends/flash/params.h"
#include "backends/flash/tile_ranges.h"

namespace attn::flash {

// Pairs outside a row's visible keys become -inf (boundary tiles only). The
// ranges are recomputed here rather than kept in registers across the loop.
// Key j of element s[ma][na][e] is n0 + 2 (lane % 4) + c with c = 8 na +
// e % 2 known at compile time, so each row's range becomes bounds on c, and
// an element costs two compares with constants and a select (the masked
// tile of a d 64 flash_sm90 forward: 267 instructions, 480 key by key).
// kCheckBegin = false: the caller knows no row's first key lies past n0 (a
// causal diagonal, a sequence's last tile), so only the ends cut: one
// compare per element fewer.
template <bool kCheckBegin = true, int MA, int NA>
__device__ __forceinline__ void apply_mask(float (&s)[MA][NA][4], const FwdParams& p, const SeqExtent& seq, int row0,
                                           int n0, int lane) {
  const int col0 = n0 + 2 * (lane & 3);
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const KeyRange<int> keys = row_keys(p, seq, row0 + 16 * ma + 8 * h + (lane >> 2));
      const int begin = keys.begin - col0, end = keys.end - col0;  // visible c: [begin, end)
#pragma unroll
      for (int na = 0; na < NA; ++na)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if ((kCheckBegin && 8 * na + e < begin) || 8 * na + e >= end) s[ma][na][2 * h + e] = -INFINITY;
    }
}

// The bits of a row's first `count` accumulator elements (count <= 0: none;
// PTX's shl gives 0 for shifts of 32 or more, so a count >= 32 sets all).
__device__ __forceinline__ uint32_t prefix_bits(int count) {
  uint32_t bits;
  asm("shl.b32 %0, 1, %1;" : "=r"(bits) : "r"(max(count, 0)));
  return bits - 1u;
}

// Row h of accumulator block s[ma]: the elements whose bit in `visible` is
// clear become -inf.
template <int MA, int NA>
__device__ __forceinline__ void mask_row_by_bits(float (&s)[MA][NA][4], int ma, int h, uint32_t visible) {
  static_assert(2 * NA <= 32, "one word of bits per row");
#pragma unroll
  for (int k = 0; k < 2 * NA; ++k)
    if (!(visible & (1u << k))) s[ma][k / 2][2 * h + k % 2] = -INFINITY;
}

// The same mask tested key by key: the backward's form on the rows whose
// loops the bits form below spills (bwd_config.h, kMaskBits). (apply_mask's
// bounds form, in the backward, moved ptxas to 24-28 B of spills in the
// sm_80 d 128 loop, which has none with this one.)
template <int MA, int NA>
__device__ __forceinline__ void apply_mask_by_key(float (&s)[MA][NA][4], const FwdParams& p, const SeqExtent& seq,
                                                  int row0, int n0, int lane) {
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const KeyRange<int> keys = row_keys(p, seq, row0 + 16 * ma + 8 * h + (lane >> 2));
#pragma unroll
      for (int na = 0; na < NA; ++na)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = n0 + 8 * na + 2 * (lane & 3) + e;
          if (!keys.contains(j)) s[ma][na][2 * h + e] = -INFINITY;
        }
    }
}

// apply_mask as bits: per row one word of the elements before the row's end
// minus those before its begin, tested bit by bit. Tests of consecutive bits
// of one word compile to R2P, seven predicates per instruction, instead of
// one ISETP per element (FlashAttention 4's mask does the same). The bounds
// are row_key_begin() and row_key_end(), in 32 bits: with row_keys()'s 64-bit
// bounds per row the backward gains nothing over the key-by-key mask.
// kCheckBegin = false as in apply_mask (only the ends cut; begin 0 clears no
// bit): faster in flash_sm90's causal forward at d 64 on the H100.
// With both ends: the backward's masked tiles (bwd_config.h, kMaskBits).
template <bool kCheckBegin = true, int MA, int NA>
__device__ __forceinline__ void apply_mask_bits(float (&s)[MA][NA][4], const FwdParams& p, const SeqExtent& seq,
                                                int row0, int n0, int lane) {
  const int col0 = n0 + 2 * (lane & 3);
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 16 * ma + 8 * h + (lane >> 2);
      const int begin = kCheckBegin ? row_key_begin(p, seq, row) - col0 : 0, end = row_key_end(p, seq, row) - col0;
      mask_row_by_bits(s, ma, h, prefix_bits(accumulator_prefix(end)) & ~prefix_bits(accumulator_prefix(begin)));
    }
}

}  // namespace attn::flash
