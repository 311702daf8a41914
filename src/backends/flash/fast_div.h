// Division by a divisor fixed at the launch, as a multiply and a shift: a
// runtime integer division compiles to a chain of about 20 dependent
// instructions (I2F, MUFU.RCP, F2I and their corrections), which sat on the
// decode kernel's paths (a paged row's address; H100, one CTA per SM: 0.7x
// the contiguous cache's speed on the same addresses).
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE

namespace attn::flash {

// n / d as the high word of n * magic, shifted right by shift (magic 0: d 1).
struct FastDiv {
  uint32_t magic = 0;
  int shift = 0;
};

// m = ceil(2^p / d) with p = 31 + ceil(log2(d)), so floor(n * m / 2^p) = n / d
// for every 0 <= n < 2^31 (the error n * (m d - 2^p) / 2^p stays below 1 / d).
inline FastDiv make_fast_div(int d) {
  FastDiv f;
  if (d <= 1) return f;
  int log2 = 0;
  while ((int64_t{1} << log2) < d) ++log2;
  const int p = 31 + log2;
  f.magic = static_cast<uint32_t>(((uint64_t{1} << p) + static_cast<uint64_t>(d) - 1) / static_cast<uint64_t>(d));
  f.shift = p - 32;
  return f;
}

// n / d for 0 <= n < 2^31, f = make_fast_div(d).
ATTN_HOST_DEVICE int fast_div(const FastDiv& f, int n) {
#ifdef __CUDA_ARCH__
  const uint32_t hi = __umulhi(static_cast<uint32_t>(n), f.magic);
#else
  const auto hi = static_cast<uint32_t>((uint64_t{static_cast<uint32_t>(n)} * f.magic) >> 32);
#endif
  return f.magic ? static_cast<int>(hi >> f.shift) : n;
}

}  // namespace attn::flash
