// A NaN in q, k or v stays visible: it reaches exactly the rows (and for v,
// the columns) that read it, as PyTorch's SDPA and the flash backends give,
// never a clean zero row that reads as "no visible key".
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "attn/attn.h"
#include "testing/tensor_buffer.h"

namespace attn {
namespace {

using testing::TensorBuffer;

constexpr int64_t kS = 4, kD = 8;  // bshd 1 x 4 x 1 x 8, causal
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Outputs {
  std::vector<double> out, lse;
};

// The reference's forward on q, k, v (row-major [1, 4, 1, 8] doubles).
Outputs forward_reference(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v) {
  TensorBuffer tq(DType::f64, {1, kS, 1, kD}), tk(DType::f64, {1, kS, 1, kD}), tv(DType::f64, {1, kS, 1, kD});
  TensorBuffer out(DType::f64, {1, kS, 1, kD}), lse(DType::f32, {1, 1, kS});
  tq.copy_from(q);
  tk.copy_from(k);
  tv.copy_from(v);
  out.fill_zero();
  lse.fill_zero();
  Options o;
  o.mask = MaskType::causal;
  ForwardArgs a;
  a.in.q = tq.view();
  a.in.k = tk.view();
  a.in.v = tv.view();
  a.out = out.view();
  a.lse = lse.view();
  Policy policy;
  policy.forced = "reference";
  forward(o, a, RunContext{}, policy);
  return {out.to_doubles(), lse.to_doubles()};
}

std::vector<double> random_values(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> x(kS * kD);
  for (double& e : x) e = u(rng);
  return x;
}

bool row_has_nan(const std::vector<double>& out, int64_t row) {
  for (int64_t c = 0; c < kD; ++c)
    if (std::isnan(out[row * kD + c])) return true;
  return false;
}

TEST(ReferenceNaN, AQueryRowWithNaNComesBackNaN) {
  std::vector<double> q = random_values(1);
  const std::vector<double> k = random_values(2), v = random_values(3);
  q[2 * kD + 0] = kNaN;  // q[0, 2, 0, 0]
  const Outputs r = forward_reference(q, k, v);
  for (int64_t i = 0; i < kS; ++i) {
    EXPECT_EQ(row_has_nan(r.out, i), i == 2) << "row " << i;
    EXPECT_EQ(std::isnan(r.lse[i]), i == 2) << "lse of row " << i;
  }
  for (int64_t c = 0; c < kD; ++c) EXPECT_TRUE(std::isnan(r.out[2 * kD + c])) << "column " << c;
}

TEST(ReferenceNaN, AKeyWithNaNReachesTheRowsThatSeeIt) {
  const std::vector<double> q = random_values(4), v = random_values(6);
  std::vector<double> k = random_values(5);
  k[1 * kD + 3] = kNaN;  // key 1: causal rows 1, 2, 3 see it, row 0 does not
  const Outputs r = forward_reference(q, k, v);
  for (int64_t i = 0; i < kS; ++i) EXPECT_EQ(row_has_nan(r.out, i), i >= 1) << "row " << i;
  EXPECT_FALSE(std::isnan(r.lse[0]));
}

TEST(ReferenceNaN, AValueWithNaNReachesItsColumnInTheRowsThatSeeIt) {
  const std::vector<double> q = random_values(7), k = random_values(8);
  std::vector<double> v = random_values(9);
  v[2 * kD + 5] = kNaN;  // value 2, column 5: rows 2 and 3 see key 2
  const Outputs r = forward_reference(q, k, v);
  for (int64_t i = 0; i < kS; ++i)
    for (int64_t c = 0; c < kD; ++c)
      EXPECT_EQ(std::isnan(r.out[i * kD + c]), i >= 2 && c == 5) << "row " << i << ", column " << c;
  for (int64_t i = 0; i < kS; ++i) EXPECT_FALSE(std::isnan(r.lse[i])) << "lse does not read v";
}

}  // namespace
}  // namespace attn
