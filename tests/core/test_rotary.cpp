// attn::rotary on the CPU (include/attn/rotary.h): the rotation and its
// transpose from the definition on random data, the pass-through channels,
// in place, packed positions, and the checks' errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "attn/error.h"
#include "attn/rotary.h"

namespace attn {
namespace {

// x [b=2, s=5, h=3, d=6] bshd, angles [8, 1, 1, 4] (r = 4: channels 4, 5 copied).
struct Case {
  std::vector<float> x, out, freqs;
  Case() : x(2 * 5 * 3 * 6), out(x.size()), freqs(8 * 4) {
    std::mt19937 gen(std::random_device{}());
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (float& v : x) v = u(gen);
    for (float& v : freqs) v = 4.f * u(gen);
  }
  RotaryArgs args(bool backward) {
    RotaryArgs a;
    a.x = make_view(x.data(), DType::f32, {2, 5, 3, 6});
    a.out = make_view(out.data(), DType::f32, {2, 5, 3, 6});
    a.freqs = make_view(freqs.data(), DType::f32, {8, 1, 1, 4});
    a.format = QkvFormat::bshd;
    a.backward = backward;
    return a;
  }
};

TEST(Rotary, CpuMatchesTheDefinitionForwardAndTransposed) {
  for (bool backward : {false, true}) {
    Case c;
    rotary(c.args(backward));
    for (int b = 0; b < 2; ++b)
      for (int s = 0; s < 5; ++s)
        for (int h = 0; h < 3; ++h) {
          const int base = ((b * 5 + s) * 3 + h) * 6;
          const float* a = &c.freqs[s * 4];
          for (int i = 0; i < 2; ++i) {
            const double xi = c.x[base + i], xj = c.x[base + i + 2];
            const double oi = backward ? xi * std::cos(a[i]) + xj * std::sin(a[i + 2])
                                       : xi * std::cos(a[i]) - xj * std::sin(a[i]);
            const double oj = backward ? xj * std::cos(a[i + 2]) - xi * std::sin(a[i])
                                       : xj * std::cos(a[i + 2]) + xi * std::sin(a[i + 2]);
            EXPECT_NEAR(c.out[base + i], oi, 2e-6);
            EXPECT_NEAR(c.out[base + i + 2], oj, 2e-6);
          }
          EXPECT_EQ(c.out[base + 4], c.x[base + 4]);
          EXPECT_EQ(c.out[base + 5], c.x[base + 5]);
        }
  }
}

TEST(Rotary, TransposeUndoesTheRotationInPlace) {
  // With TE's angles (both halves equal) the rotation is orthogonal: its
  // transpose is its inverse. Both passes in place (out = x).
  Case c;
  for (int p = 0; p < 8; ++p)
    for (int i = 0; i < 2; ++i) c.freqs[p * 4 + i + 2] = c.freqs[p * 4 + i];
  const std::vector<float> original = c.x;
  for (bool backward : {false, true}) {
    RotaryArgs a = c.args(backward);
    a.out = a.x;
    rotary(a);
    if (!backward) EXPECT_NE(c.x, original);
  }
  for (size_t i = 0; i < c.x.size(); ++i) EXPECT_NEAR(c.x[i], original[i], 1e-5) << i;
}

TEST(Rotary, PackedPositionsRestartPerSequence) {
  // thd: sequences [0, 2) and [2, 5), token 5 past the last: copied.
  std::vector<float> x(6 * 2, 1.f), out(x.size()), freqs(4 * 2);
  for (int p = 0; p < 4; ++p) freqs[2 * p] = freqs[2 * p + 1] = 0.5f * static_cast<float>(p);
  const std::vector<int32_t> cu = {0, 2, 5};
  RotaryArgs a;
  a.x = make_view(x.data(), DType::f32, {6, 1, 2});
  a.out = make_view(out.data(), DType::f32, {6, 1, 2});
  a.freqs = make_view(freqs.data(), DType::f32, {4, 2});
  a.cu_seqlens = make_view(const_cast<int32_t*>(cu.data()), DType::i32, {3});
  a.format = QkvFormat::thd;
  rotary(a);
  const int pos[6] = {0, 1, 0, 1, 2, -1};
  for (int t = 0; t < 6; ++t) {
    const double ang = pos[t] < 0 ? 0.0 : 0.5 * pos[t];
    EXPECT_NEAR(out[2 * t], std::cos(ang) - std::sin(ang), 1e-6) << t;
    EXPECT_NEAR(out[2 * t + 1], std::cos(ang) + std::sin(ang), 1e-6) << t;
  }
}

TEST(Rotary, ChecksNameTheProblem) {
  Case c;
  RotaryArgs a = c.args(false);
  a.freqs = make_view(c.freqs.data(), DType::f32, {4, 1, 1, 4});  // 4 positions, sequence of 5
  try {
    rotary(a);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.info().what.find("freqs cover 4 positions, the sequence has 5"), std::string::npos) << e.what();
    EXPECT_FALSE(e.info().fix.empty());
  }
  a = c.args(false);
  a.format = QkvFormat::thd;
  EXPECT_THROW(rotary(a), Error);  // rank 4 for thd
  a = c.args(false);
  a.out = make_view(c.out.data(), DType::f32, {2, 5, 3, 6}, {90, 18, 6, 2}, Device::cpu());
  EXPECT_THROW(rotary(a), Error);  // strided last dimension
}

}  // namespace
}  // namespace attn
