// Comparison with the reference: DESIGN.md's tolerances, NaN and infinity handling.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "testing/compare.h"

namespace attn::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(Tolerance, FollowsTheDesign) {
  EXPECT_DOUBLE_EQ(tolerance_for(DType::bf16, false).atol, 2e-2);
  EXPECT_DOUBLE_EQ(tolerance_for(DType::bf16, true).rtol, 5e-2);
  EXPECT_DOUBLE_EQ(tolerance_for(DType::bf16, true).frob, 1e-2);
  EXPECT_DOUBLE_EQ(tolerance_for(DType::f16, false).atol, 1e-2);
  EXPECT_DOUBLE_EQ(tolerance_for(DType::f16, true).atol, 2.5e-2);
  EXPECT_DOUBLE_EQ(tolerance_for(DType::f32, true).atol, 1e-5);
  EXPECT_LT(tolerance_for(DType::f64, true).atol, 1e-5);
}

TEST(Compare, IdenticalPasses) {
  const Comparison c = compare({1, -2, 0.5}, {1, -2, 0.5}, {1e-3, 1e-3, 1e-3});
  EXPECT_TRUE(c.pass);
  EXPECT_EQ(c.max_abs, 0.0);
  EXPECT_EQ(c.rel_frobenius, 0.0);
  EXPECT_EQ(c.count, 3);
}

TEST(Compare, ElementwiseBoundIsAtolPlusRtolTimesRef) {
  const Tolerance t{0.1, 0.1, 1.0};
  EXPECT_TRUE(compare({10.0 + 1.09}, {10.0}, t).pass);  // 1.09 <= 0.1 + 1.0
  const Comparison c = compare({10.0 + 1.2, 1.0}, {10.0, 1.0}, t);
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.bad, 1);
  EXPECT_NEAR(c.max_abs, 1.2, 1e-12);
  EXPECT_NEAR(c.max_rel, 0.12, 1e-12);
}

TEST(Compare, FrobeniusBoundCatchesSmallErrorsEverywhere) {
  std::vector<double> ref(100, 1.0), x(100, 1.05);
  const Comparison c = compare(x, ref, {0.1, 0.0, 1e-2});  // each within atol, 5% overall
  EXPECT_EQ(c.bad, 0);
  EXPECT_NEAR(c.rel_frobenius, 0.05, 1e-12);
  EXPECT_FALSE(c.pass);
}

TEST(Compare, NaNInOutputFails) {
  const Comparison c = compare({1.0, kNaN}, {1.0, 2.0}, {1.0, 1.0, 1.0});
  EXPECT_EQ(c.nan, 1);
  EXPECT_FALSE(c.pass);
  EXPECT_FALSE(compare({kNaN}, {kNaN}, {1.0, 1.0, 1.0}).pass);
}

TEST(Compare, MatchingInfinitiesAreEqual) {
  const Comparison c = compare({-kInf, 0.5}, {-kInf, 0.5}, {1e-6, 1e-6, 1e-6});
  EXPECT_TRUE(c.pass);
  EXPECT_EQ(c.max_abs, 0.0);
  EXPECT_FALSE(compare({-kInf}, {0.5}, {1.0, 1.0, 1.0}).pass);  // an lse that should be finite
  EXPECT_FALSE(compare({0.5}, {-kInf}, {1.0, 1.0, 1.0}).pass);  // a row that should be empty
  EXPECT_FALSE(compare({kInf}, {-kInf}, {1.0, 1.0, 1.0}).pass);
}

TEST(Compare, SizeMismatchFails) { EXPECT_FALSE(compare({1.0}, {1.0, 2.0}, {1.0, 1.0, 1.0}).pass); }

TEST(Compare, AllZeroReference) {
  EXPECT_TRUE(compare({0.0, 0.0}, {0.0, 0.0}, {1e-6, 1e-6, 1e-6}).pass);
  EXPECT_FALSE(compare({0.0, 1e-3}, {0.0, 0.0}, {1e-2, 1e-2, 1e-6}).pass);  // ||x|| itself > frob
}

}  // namespace
}  // namespace attn::testing
