// Host conversions between storage dtypes and double (see numeric.h).
#include "core/numeric.h"

#include <cmath>

namespace attn::detail {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -mag : mag;
  }
  if (exp == 31) return bits_to_float(sign | 0x7F800000u | (mant << 13));
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t float_to_half(float f) {
  const uint32_t u = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return sign | (abs > 0x7F800000u ? 0x7E00u : 0x7C00u);  // NaN / inf
  if (abs >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520: overflow to inf
  if (abs < 0x38800000u) {                        // below 2^-14: subnormal half
    // value = abs_float; half subnormal unit = 2^-24. Round to nearest even.
    const float mag = bits_to_float(abs);
    const float scaled = mag * 16777216.0f;  // exact: power-of-two scaling
    const float r = std::nearbyint(scaled);  // default rounding mode: nearest even
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t m = abs - (112u << 23);  // rebias exponent
  m += 0xFFFu + ((m >> 13) & 1u);   // round to nearest even on the 13 dropped bits
  return sign | static_cast<uint16_t>(m >> 13);
}

namespace {

// double -> float rounded to odd: inexact results get their last mantissa bit
// set. A second rounding (float -> half/bf16, to nearest even) of a
// round-to-odd value equals one correct rounding of the double, because float
// keeps more than two extra bits (Boldo & Melquiond). Avoids rare 1-ulp errors.
float round_to_odd_float(double x) {
  float f = static_cast<float>(x);
  if (!std::isfinite(f) || static_cast<double>(f) == x) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  return bits_to_float(float_to_bits(f) | 1u);
}

}  // namespace

double load_as_double(const void* base, DType t, int64_t offset) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[offset];
    case DType::f64: return static_cast<const double*>(base)[offset];
    case DType::f16: return half_to_float(static_cast<const uint16_t*>(base)[offset]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(base)[offset]);
    case DType::i32: return static_cast<const int32_t*>(base)[offset];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(base)[offset]);
    case DType::u8:
    case DType::boolean: return static_cast<const uint8_t*>(base)[offset];
  }
  return 0.0;
}

void store_from_double(void* base, DType t, int64_t offset, double x) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[offset] = static_cast<float>(x); return;
    case DType::f64: static_cast<double*>(base)[offset] = x; return;
    case DType::f16: static_cast<uint16_t*>(base)[offset] = float_to_half(round_to_odd_float(x)); return;
    case DType::bf16: static_cast<uint16_t*>(base)[offset] = float_to_bf16(round_to_odd_float(x)); return;
    case DType::i32: static_cast<int32_t*>(base)[offset] = static_cast<int32_t>(x); return;
    case DType::i64: static_cast<int64_t*>(base)[offset] = static_cast<int64_t>(x); return;
    case DType::u8:
    case DType::boolean: static_cast<uint8_t*>(base)[offset] = static_cast<uint8_t>(x != 0.0); return;
  }
}

}  // namespace attn::detail
