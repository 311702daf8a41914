// The byte order of flash_sm80's fp32 dQ accumulator rows (plain C++: the
// kernels, the convert pass and the CPU tests share it).
//
// Rows are [token][d_qk] floats with the 8-float (32-byte) chunks of each row
// permuted within every 4 chunks (128 bytes) by the row's workspace token:
// chunk j of token t lies at chunk j ^ (t % 4). The backward stages dQ in
// shared memory in exactly this order and hands it to one bulk reduce-add (a
// linear copy, bwd_dq.cuh); 8 consecutive rows written together then fall in
// the 4 different bank groups of 128 bytes (row strides are multiples of
// 128 bytes, d_qk being a multiple of 32), so the stores have no conflicts.
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE

namespace attn::flash {

// Where column c of token t's accumulator row lies in that row.
ATTN_HOST_DEVICE constexpr int dq_swizzle(int64_t t, int c) { return c ^ ((static_cast<int>(t) & 3) << 3); }

// The same for column col0 + 8 na + 2 (lane % 4) of an mma.sync accumulator
// (a warp's block of NA 8-column blocks from col0 = w * 8 NA) in a row whose
// token t has t % 4 == sw. Where col0 is a multiple of 32 (NA % 4 == 0) the
// place is one of four per-thread bases plus a constant: (na % 4) ^ sw picks
// the base, the rest of na is an immediate offset.
template <int NA>
ATTN_HOST_DEVICE constexpr int dq_column(int col0, int na, int sw, int lane) {
  if constexpr (NA % 4 == 0)
    return col0 + 2 * (lane & 3) + 8 * (((na & 3) ^ sw) + (na & ~3));
  else
    return ((col0 + 8 * na) ^ (sw << 3)) + 2 * (lane & 3);
}

}  // namespace attn::flash
