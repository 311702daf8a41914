// The reference on cases small enough to work out by hand: each expected value
// is a closed form written in the test (softmax of two scores is a sigmoid, a
// single visible key gives p = 1, ...), including rows that see no key.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "reference/reference_test_util.h"

namespace attn::reftest {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTol = 1e-14;
// Gradients use the lse the forward stored in fp32 (SEMANTICS.md "Backward"):
// p = exp(s - lse) carries its rounding, ~6e-8 relative.
constexpr double kGradTol = 1e-7;

Data tiny(Dims n, std::vector<double> q, std::vector<double> k, std::vector<double> v, std::vector<double> dout) {
  Data d;
  d.dims = n;
  d.q = std::move(q);
  d.k = std::move(k);
  d.v = std::move(v);
  d.dout = std::move(dout);
  return d;
}

Options scaled(double scale, MaskType mask = MaskType::no_mask) {
  Options o;
  o.softmax_scale = scale;
  o.mask = mask;
  return o;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tol = what[0] == 'd' ? kGradTol : kTol;  // dq, dk, dv, dbias
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << what << "[" << i << "]";
}

// One query, two keys: p is a sigmoid of the score difference, and every
// gradient has a closed form in p0 * p1.
TEST(ReferenceHand, OneQueryTwoKeys) {
  // q = (1, 2); k0 = (1, 0), k1 = (0, 1); scale 0.5 -> x = (0.5, 1.0).
  const Data d = tiny({1, 1, 2, 1, 1, 2, 2}, {1, 2}, {1, 0, 0, 1}, {1, 2, 3, -1}, {0.5, -1});
  const Result r = run_reference(d, scaled(0.5), {});
  const double p0 = 1.0 / (1.0 + std::exp(0.5)), p1 = 1.0 - p0;
  expect_near_all(r.out, {p0 * 1 + p1 * 3, p0 * 2 + p1 * -1}, "out");
  EXPECT_NEAR(r.lse[0], std::log(std::exp(0.5) + std::exp(1.0)), 1e-7);  // lse is stored as fp32
  // dv_j = p_j dout; dp = (dout.v0, dout.v1) = (-1.5, 2.5); ds0 = p0 p1 (dp0 - dp1) = -4 p0 p1.
  const double g = p0 * p1;
  expect_near_all(r.dv, {p0 * 0.5, -p0, p1 * 0.5, -p1}, "dv");
  expect_near_all(r.dq, {0.5 * -4 * g, 0.5 * 4 * g}, "dq");                       // scale * sum_j ds_j k_j
  expect_near_all(r.dk, {0.5 * -4 * g * 1, 0.5 * -4 * g * 2, 0.5 * 4 * g * 1, 0.5 * 4 * g * 2}, "dk");
}

// Causal, s = 2: the first query sees only the first key (out = v0), the
// second sees both.
TEST(ReferenceHand, CausalTwoByTwo) {
  // q0 = (1, 0), q1 = (0, 1); k0 = (2, 0), k1 = (1, 1); scale 1.
  const Data d = tiny({1, 2, 2, 1, 1, 2, 2}, {1, 0, 0, 1}, {2, 0, 1, 1}, {1, 0, 0, 1}, {1, 1, 1, -1});
  const Result r = run_reference(d, scaled(1.0, MaskType::causal), {});
  // Row 0: x00 = 2, single key. Row 1: x10 = 0, x11 = 1.
  const double p10 = 1.0 / (1.0 + std::numbers::e), p11 = 1.0 - p10;
  expect_near_all(r.out, {1, 0, p10, p11}, "out");
  EXPECT_NEAR(r.lse[0], 2.0, 1e-7);
  EXPECT_NEAR(r.lse[1], std::log(1.0 + std::numbers::e), 1e-7);
  // Row 0 has one key: p = 1, ds = 0 -> dq0 = 0. Row 1: dp = (1, -1), ds10 = 2 p10 p11 = -ds11.
  const double ds = 2 * p10 * p11;
  expect_near_all(r.dq, {0, 0, ds * 2 - ds * 1, -ds * 1}, "dq");
  expect_near_all(r.dk, {ds * 0, ds * 1, -ds * 0, -ds * 1}, "dk");
  expect_near_all(r.dv, {1 + p10 * 1, 1 + p10 * -1, p11 * 1, p11 * -1}, "dv");
}

// Bottom-right causal with s_q = 3 > s_kv = 1: shift = -2, so only the last
// query sees the key. The others write out = 0, lse = -inf, zero gradients.
TEST(ReferenceHand, FullyMaskedRowsAndSingleKey) {
  const Data d = tiny({1, 3, 1, 1, 1, 2, 2}, {1, 2, 3, 4, 5, 6}, {0.5, -1}, {7, 8}, {1, 2, 3, 4, 5, 6});
  const Result r = run_reference(d, scaled(1.0, MaskType::causal_bottom_right), {});
  expect_near_all(r.out, {0, 0, 0, 0, 7, 8}, "out");
  EXPECT_EQ(r.lse[0], -kInf);
  EXPECT_EQ(r.lse[1], -kInf);
  EXPECT_NEAR(r.lse[2], 5 * 0.5 - 6, 1e-7);
  expect_near_all(r.dq, {0, 0, 0, 0, 0, 0}, "dq");  // one key: p = 1, ds = 0
  expect_near_all(r.dk, {0, 0}, "dk");
  expect_near_all(r.dv, {5, 6}, "dv");  // only the last query's dout
}

// s_q = 1 and s_kv = 1 together, with top-left causal (the pair is visible).
TEST(ReferenceHand, SingleQuerySingleKey) {
  const Data d = tiny({1, 1, 1, 1, 1, 3, 1}, {1, -1, 2}, {0.25, 0.5, 1}, {-3}, {2});
  const Result r = run_reference(d, scaled(2.0, MaskType::causal), {});
  expect_near_all(r.out, {-3}, "out");
  EXPECT_NEAR(r.lse[0], 2.0 * (0.25 - 0.5 + 2), 1e-7);
  expect_near_all(r.dq, {0, 0, 0}, "dq");
  expect_near_all(r.dk, {0, 0, 0}, "dk");
  expect_near_all(r.dv, {2}, "dv");
}

// A boolean mask (true = visible) that leaves a row empty, and an additive
// mask whose row is all -inf: both rows give out = 0, lse = -inf, no NaN.
TEST(ReferenceHand, ArbitraryMasks) {
  const Data base = tiny({1, 2, 2, 1, 1, 1, 1}, {1, 2}, {1, 0}, {10, 20}, {1, 1});
  for (DType mask_dtype : {DType::boolean, DType::u8}) {
    Data d = base;
    d.mask.shape = {1, 1, 2, 2};
    d.mask.values = {1, 0, 0, 0};
    d.mask.follow_q = false;
    d.mask.dtype = mask_dtype;
    const Result r = run_reference(d, scaled(1.0, MaskType::arbitrary), {});
    expect_near_all(r.out, {10, 0}, "bool out");
    EXPECT_NEAR(r.lse[0], 1.0, 1e-7);
    EXPECT_EQ(r.lse[1], -kInf);
    expect_near_all(r.dq, {0, 0}, "bool dq");
    expect_near_all(r.dv, {1, 0}, "bool dv");  // only row 0 reaches v0; nobody sees v1
  }
  {
    Data d = base;
    d.mask.shape = {1, 1, 2, 2};
    const double log3 = float(std::log(3.0));  // the mask is stored as fp32
    d.mask.values = {0, log3, -kInf, -kInf};
    d.mask.follow_q = false;
    d.mask.dtype = DType::f32;
    const Result r = run_reference(d, scaled(1.0, MaskType::arbitrary), {});
    // Row 0: scores (1 + 0, 0 + log 3) -> weights (e, 3) / (e + 3).
    const double p0 = std::numbers::e / (std::numbers::e + std::exp(log3));
    expect_near_all(r.out, {p0 * 10 + (1 - p0) * 20, 0}, "additive out");
    EXPECT_NEAR(r.lse[0], std::log(std::numbers::e + 3), 1e-6);
    EXPECT_EQ(r.lse[1], -kInf);
    EXPECT_EQ(r.dq[1], 0.0);
  }
}

// Softcap: s = c tanh(x / c); its derivative 1 - tanh^2 scales dq and dk.
TEST(ReferenceHand, Softcap) {
  // x = (q.k0, q.k1) = (2, -1) with scale 1; c = 1.5.
  const Data d = tiny({1, 1, 2, 1, 1, 1, 1}, {1}, {2, -1}, {1, 0}, {1});
  Options o = scaled(1.0);
  o.softcap = 1.5;
  const Result r = run_reference(d, o, {});
  const double t0 = std::tanh(2 / 1.5), t1 = std::tanh(-1 / 1.5);
  const double s0 = 1.5 * t0, s1 = 1.5 * t1;
  const double p0 = 1 / (1 + std::exp(s1 - s0)), p1 = 1 - p0;
  expect_near_all(r.out, {p0}, "out");
  EXPECT_NEAR(r.lse[0], std::log(std::exp(s0) + std::exp(s1)), 1e-6);
  // dp = (1, 0), ds0 = p0 p1 = -ds1; dx_j = ds_j (1 - t_j^2).
  const double dx0 = p0 * p1 * (1 - t0 * t0), dx1 = -p0 * p1 * (1 - t1 * t1);
  expect_near_all(r.dq, {dx0 * 2 + dx1 * -1}, "dq");
  expect_near_all(r.dk, {dx0 * 1, dx1 * 1}, "dk");
}

// A bias broadcast over batch, heads and queries is added to every row; dbias
// sums ds over the broadcast dimensions.
TEST(ReferenceHand, BroadcastBiasAndItsGradient) {
  // Two queries, both with q = 0 (x = 0): scores are the bias (0, log 2) for both.
  Data d = tiny({1, 2, 2, 1, 1, 1, 1}, {0, 0}, {1, 1}, {3, 6}, {1, 2});
  d.bias.shape = {1, 1, 1, 2};
  d.bias.values = {0, std::log(2.0)};
  Spec spec;
  spec.dbias = true;
  const Result r = run_reference(d, scaled(1.0), spec);
  expect_near_all(r.out, {3 * (1.0 / 3) + 6 * (2.0 / 3), 5}, "out");
  // dp = dout_i * v = (3, 6) dout_i; D = 5 dout_i; ds = p (dp - D) = dout_i (-2/3, 2/3).
  expect_near_all(r.dbias, {-2.0 / 3 * (1 + 2), 2.0 / 3 * (1 + 2)}, "dbias");
}

// ALiBi adds -slope |i + shift - j|; without a causal mask the alignment is
// bottom-right (shift = s_kv - s_q).
TEST(ReferenceHand, Alibi) {
  Data d = tiny({1, 1, 3, 1, 1, 1, 1}, {0}, {0, 0, 0}, {1, 2, 4}, {1});
  d.alibi = {0.5};
  const Result r = run_reference(d, scaled(1.0), {});
  // shift = 2: distances (2, 1, 0) -> scores (-1, -0.5, 0).
  const double w0 = std::exp(-1.0), w1 = std::exp(-0.5), w2 = 1.0, sum = w0 + w1 + w2;
  expect_near_all(r.out, {(w0 * 1 + w1 * 2 + w2 * 4) / sum}, "out");
  EXPECT_NEAR(r.lse[0], std::log(sum), 1e-7);
  // Top-left causal: shift = 0, the one query sees key 0 only (distance 0).
  const Result c = run_reference(d, scaled(1.0, MaskType::causal), {});
  expect_near_all(c.out, {1}, "causal out");
  EXPECT_NEAR(c.lse[0], 0.0, 1e-7);
}

// GQA: two query heads share one KV head; with a single key each head's out
// is v, and dv sums the query heads' dout.
TEST(ReferenceHand, GroupedQueryHeadsShareKv) {
  const Data d = tiny({1, 1, 1, 2, 1, 1, 2}, {1, 2}, {1}, {3, 4}, {1, 10, 100, 1000});
  const Result r = run_reference(d, scaled(1.0), {});
  expect_near_all(r.out, {3, 4, 3, 4}, "out");
  EXPECT_NEAR(r.lse[0], 1.0, 1e-7);
  EXPECT_NEAR(r.lse[1], 2.0, 1e-7);
  expect_near_all(r.dv, {101, 1010}, "dv");
}

// Zero-sized sequences: no keys (every row empty) or no queries (dk, dv = 0).
TEST(ReferenceHand, EmptySequences) {
  {
    const Data d = tiny({1, 2, 0, 1, 1, 1, 1}, {1, 2}, {}, {}, {1, 1});
    const Result r = run_reference(d, scaled(1.0), {});
    expect_near_all(r.out, {0, 0}, "out");
    EXPECT_EQ(r.lse[0], -kInf);
    EXPECT_EQ(r.lse[1], -kInf);
    expect_near_all(r.dq, {0, 0}, "dq");
  }
  {
    const Data d = tiny({1, 0, 2, 1, 1, 1, 1}, {}, {1, 2}, {3, 4}, {});
    const Result r = run_reference(d, scaled(1.0), {});
    expect_near_all(r.dk, {0, 0}, "dk");
    expect_near_all(r.dv, {0, 0}, "dv");
  }
}

}  // namespace
}  // namespace attn::reftest
