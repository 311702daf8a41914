// Dropout's random bits: Philox 4x32-10 (Salmon et al., SC'11), a counter-based
// generator, so the keep/drop decision of every (b, h, i, j) is a pure function
// of (seed, offset, b, h, i, j) and every backend drops the same elements.
//
// The contract (docs/SEMANTICS.md, "Dropout"), which GPU kernels reproduce bit for bit:
//   key     = (lo32(seed), hi32(seed))
//   counter = (j / 4, i, b * h_q + h, offset)       i, j: positions inside sequence b
//   r       = philox4x32_10(counter, key)[j % 4]
//   keep    = r >= dropout_threshold(p)              threshold = floor(p * 2^32)
// Kept probabilities are scaled by 1 / (1 - p).
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE

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
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
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

// floor(p * 2^32) for 0 <= p < 1; a random word below it means "drop".
inline uint32_t dropout_threshold(double p) {
  if (p <= 0.0) return 0u;
  const double t = p * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<uint32_t>(t);
}

// bh = b * h_q + h (query head); i, j: positions inside sequence b.
ATTN_HOST_DEVICE bool dropout_keep(uint64_t seed, uint32_t offset, uint32_t bh, uint32_t i,
                                   uint32_t j, uint32_t threshold) {
  const PhiloxBlock r = philox4x32_10(PhiloxBlock{{j >> 2, i, bh, offset}},
                                      static_cast<uint32_t>(seed),
                                      static_cast<uint32_t>(seed >> 32));
  return r.x[j & 3u] >= threshold;
}

}  // namespace attn
