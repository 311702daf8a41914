// Dropout's random bits: Philox 4x32-10 (Salmon et al., SC'11), a counter-based
// generator, so the keep/drop decision of every (b, h, i, j) is a pure function
// of (seed, offset, b, h, i, j) and every backend drops the same elements.
//
// The contract (docs/SEMANTICS.md, "Dropout"), which GPU kernels reproduce bit for bit:
//   key     = (lo32(seed), hi32(seed))
//   counter = (j / 8, i, b * h_q + h, offset)       i, j: positions inside sequence b
//   w       = philox4x32_10(counter, key)[j % 8 / 2]
//   r       = 16 bits of w: bits 0-15 for even j, 16-31 for odd j
//   keep    = r >= dropout_threshold(p)              threshold = floor(p * 2^16)
// Kept probabilities are scaled by 1 / (1 - p). 16 bits per element (one block
// per 8 keys) halve the Philox work of 32 and keep p exact to 2^-16; the
// kernels are bound by that work under dropout.
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE, ATTN_DEVICE_UNROLL

namespace attn {

struct PhiloxBlock {
  uint32_t x[4];
};

ATTN_HOST_DEVICE uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
}

ATTN_HOST_DEVICE PhiloxBlock philox4x32_10(PhiloxBlock ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  ATTN_DEVICE_UNROLL
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = philox_mulhilo(kMul0, ctr.x[0], &hi0);
    const uint32_t lo1 = philox_mulhilo(kMul1, ctr.x[2], &hi1);
    ctr = PhiloxBlock{{hi1 ^ ctr.x[1] ^ k0, lo1, hi0 ^ ctr.x[3] ^ k1, lo0}};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return ctr;
}

// floor(p * 2^16) for 0 <= p < 1; a 16-bit draw below it means "drop".
inline uint32_t dropout_threshold(double p) {
  if (p <= 0.0) return 0u;
  const double t = p * 65536.0;
  return t >= 65535.0 ? 0xFFFFu : static_cast<uint32_t>(t);
}

// The keep bits of keys 8 block .. 8 block + 7 of row i as bits 0-7: one
// Philox block. bh = b * h_q + h (query head); i: position inside sequence b.
ATTN_HOST_DEVICE uint32_t dropout_keep_block(uint64_t seed, uint32_t offset, uint32_t bh, uint32_t i,
                                             uint32_t block, uint32_t threshold) {
  const PhiloxBlock r = philox4x32_10(PhiloxBlock{{block, i, bh, offset}}, static_cast<uint32_t>(seed),
                                      static_cast<uint32_t>(seed >> 32));
  uint32_t bits = 0u;
  ATTN_DEVICE_UNROLL
  for (int x = 0; x < 4; ++x) {
    bits |= ((r.x[x] & 0xFFFFu) >= threshold ? 1u : 0u) << (2 * x);
    bits |= ((r.x[x] >> 16) >= threshold ? 1u : 0u) << (2 * x + 1);
  }
  return bits;
}

// Element (i, j)'s decision; j: position inside sequence b.
ATTN_HOST_DEVICE bool dropout_keep(uint64_t seed, uint32_t offset, uint32_t bh, uint32_t i,
                                   uint32_t j, uint32_t threshold) {
  return (dropout_keep_block(seed, offset, bh, i, j >> 3, threshold) >> (j & 7u)) & 1u;
}

}  // namespace attn
