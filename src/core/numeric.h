// Host-side conversions between attn's storage dtypes and double, for the CPU
// reference, the tools and tests. Round-to-nearest-even, NaN and inf preserved.
#pragma once

#include <cstdint>
#include <cstring>

#include "attn/tensor.h"

namespace attn::detail {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

// Reads element `offset` (in elements) of a floating/integer buffer as double.
double load_as_double(const void* base, DType t, int64_t offset);
// Writes `x` rounded to t at element `offset`.
void store_from_double(void* base, DType t, int64_t offset, double x);

}  // namespace attn::detail
