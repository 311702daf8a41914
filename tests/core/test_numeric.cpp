// Host dtype conversions (src/core/numeric.h): bf16 and fp16 round to nearest
// even, handle subnormals, overflow, infinities and NaN, and round-trip every
// bit pattern; load_as_double / store_from_double for every dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "core/numeric.h"

namespace attn::detail {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Numeric, Bf16RoundTripsEveryBitPattern) {
  for (uint32_t h = 0; h <= 0xFFFFu; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    const uint16_t back = float_to_bf16(f);
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(bf16_to_float(back))) << std::hex << h;
    else
      EXPECT_EQ(back, h) << std::hex << h;
  }
}

TEST(Numeric, HalfRoundTripsEveryBitPattern) {
  for (uint32_t h = 0; h <= 0xFFFFu; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    const uint16_t back = float_to_half(f);
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(half_to_float(back))) << std::hex << h;
    else
      EXPECT_EQ(back, h) << std::hex << h;
  }
}

TEST(Numeric, HalfDecodesKnownValues) {
  EXPECT_EQ(half_to_float(0x3C00), 1.0f);
  EXPECT_EQ(half_to_float(0xC000), -2.0f);
  EXPECT_EQ(half_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(half_to_float(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(half_to_float(0x7C00), kInf);
  EXPECT_EQ(half_to_float(0xFC00), -kInf);
  EXPECT_TRUE(std::isnan(half_to_float(0x7E00)));
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
}

TEST(Numeric, HalfRoundsToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even (down)
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(3.0f, -11)), 0x3C02);      // tie -> even (up)
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);  // above tie
  EXPECT_EQ(float_to_half(-1.0f - std::ldexp(3.0f, -11)), 0xBC02);
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65519.0f), 0x7BFF);   // below the midpoint to 65536
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);   // the midpoint rounds to even: inf
  EXPECT_EQ(float_to_half(1e10f), 0x7C00);
  EXPECT_EQ(float_to_half(-1e10f), 0xFC00);
  EXPECT_EQ(float_to_half(kInf), 0x7C00);
  EXPECT_EQ((float_to_half(std::numeric_limits<float>::quiet_NaN()) & 0x7C00), 0x7C00);
  EXPECT_NE((float_to_half(std::numeric_limits<float>::quiet_NaN()) & 0x03FF), 0);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
}

TEST(Numeric, HalfSubnormals) {
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);                // tie -> even: 0
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25) + std::ldexp(1.0f, -40)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);                // 1.5 units -> 2
  EXPECT_EQ(float_to_half(std::ldexp(1023.5f, -24)), 0x0400);             // rounds up into the normals
  EXPECT_EQ(float_to_half(-std::ldexp(5.0f, -24)), 0x8005);
  EXPECT_EQ(float_to_half(1e-30f), 0x0000);
  EXPECT_EQ(float_to_half(-1e-30f), 0x8000);
}

TEST(Numeric, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);   // tie -> even (down)
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3F82);   // tie -> even (up)
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // overflows to inf
  EXPECT_EQ(float_to_bf16(kInf), 0x7F80);
  EXPECT_EQ(float_to_bf16(-kInf), 0xFF80);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  // A NaN whose payload sits only in the dropped bits stays NaN (not inf).
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(bits_to_float(0x7F800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(bits_to_float(0xFFC00000u)))));
  // Subnormal floats keep their exponent in bf16: exact ones stay exact.
  EXPECT_EQ(float_to_bf16(bits_to_float(0x00010000u)), 0x0001);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x00018000u)), 0x0002);  // tie -> even
}

// Random finite floats: the result is a nearest representable value, and on a
// tie the even one (checked against both neighbours, in double).
template <typename Encode, typename Decode>
void expect_nearest_even(Encode encode, Decode decode, uint16_t max_finite) {
  std::mt19937 rng(1234);
  const double max_value = decode(max_finite);
  for (int n = 0; n < 200000; ++n) {
    const float f = bits_to_float(rng());
    if (!std::isfinite(f) || std::abs(double(f)) >= max_value) continue;
    const uint16_t h = encode(f);
    const double got = decode(h), x = f;
    const uint16_t mag = h & 0x7FFF;
    for (int step : {-1, 1}) {
      if ((mag == 0 && step < 0) || (mag == max_finite && step > 0)) continue;
      const double other = decode(static_cast<uint16_t>((h & 0x8000) | (mag + step)));
      const double d_got = std::abs(got - x), d_other = std::abs(other - x);
      ASSERT_LE(d_got, d_other) << "f=" << f << " got bits " << std::hex << h;
      if (d_got == d_other) {
        ASSERT_EQ(mag & 1, 0) << "tie not to even: f=" << f;
      }
    }
  }
}

TEST(Numeric, RandomFloatsRoundToNearestEven) {
  expect_nearest_even([](float f) { return float_to_half(f); }, [](uint16_t h) { return double(half_to_float(h)); },
                      0x7BFF);
  expect_nearest_even([](float f) { return float_to_bf16(f); }, [](uint16_t h) { return double(bf16_to_float(h)); },
                      0x7F7F);
}

TEST(Numeric, LoadAndStoreEveryDtype) {
  unsigned char cell[16] = {};
  const struct {
    DType t;
    double in, out;
  } cases[] = {
      {DType::f64, 0.1, 0.1},
      {DType::f32, 0.1, double(0.1f)},
      {DType::bf16, 1.0 + std::ldexp(3.0, -8), 1.0 + std::ldexp(1.0, -6)},
      {DType::f16, 65504.0, 65504.0},
      {DType::f16, 1e6, std::numeric_limits<double>::infinity()},
      {DType::i32, -7.0, -7.0},
      {DType::i64, 1099511627776.0, 1099511627776.0},
      {DType::u8, 1.0, 1.0},
      {DType::boolean, 0.0, 0.0},
  };
  for (const auto& c : cases) {
    store_from_double(cell, c.t, 1, c.in);  // element 1: offsets count elements
    EXPECT_EQ(load_as_double(cell, c.t, 1), c.out) << dtype_name(c.t);
  }
  store_from_double(cell, DType::f32, 0, std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(std::isnan(load_as_double(cell, DType::f32, 0)));
}

}  // namespace
}  // namespace attn::detail

namespace attn::detail {
namespace {

// store_from_double rounds once, from the double: no double rounding through
// float (1 + 2^-11 + 2^-40 is just above a half-way point of fp16).
TEST(Numeric, StoreFromDoubleRoundsOnceFromTheDouble) {
  uint16_t cell = 0;
  store_from_double(&cell, DType::f16, 0, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40));
  EXPECT_EQ(half_to_float(cell), 1.0f + std::ldexp(1.0f, -10));
  store_from_double(&cell, DType::f16, 0, -(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)));
  EXPECT_EQ(half_to_float(cell), -(1.0f + std::ldexp(1.0f, -10)));
  store_from_double(&cell, DType::bf16, 0, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40));
  EXPECT_EQ(bf16_to_float(cell), 1.0f + std::ldexp(1.0f, -7));
  store_from_double(&cell, DType::bf16, 0, 1.0 + std::ldexp(1.0, -8));  // an exact tie stays even
  EXPECT_EQ(bf16_to_float(cell), 1.0f);
  // Random doubles: the stored value is a nearest neighbour (ties to even).
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  for (int n = 0; n < 100000; ++n) {
    const double x = std::ldexp(mant(rng), static_cast<int>(rng() % 20) - 10) * ((rng() & 1) ? -1 : 1);
    for (DType t : {DType::f16, DType::bf16}) {
      store_from_double(&cell, t, 0, x);
      const double got = load_as_double(&cell, t, 0);
      const uint16_t mag = cell & 0x7FFF;
      for (int step : {-1, 1}) {
        uint16_t other_bits = static_cast<uint16_t>((cell & 0x8000) | (mag + step));
        const double other = load_as_double(&other_bits, t, 0);
        ASSERT_LE(std::abs(got - x), std::abs(other - x)) << "x=" << x;
        if (std::abs(got - x) == std::abs(other - x)) ASSERT_EQ(mag & 1, 0) << "x=" << x;
      }
    }
  }
}

}  // namespace
}  // namespace attn::detail
