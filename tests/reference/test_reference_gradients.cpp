// The reference backward against central differences of its forward in fp64:
// dq, dk, dv (and dbias) of the loss sum(out * dout), feature by feature.
// Dropout is a fixed function of (seed, offset), so differences stay valid.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "reference/reference_test_util.h"

namespace attn::reftest {
namespace {

// Central differences with eps = 1e-5 are good to ~1e-10 here; the analytic
// gradient uses the fp32 lse the forward stored (SEMANTICS.md "Backward"), ~1e-7.
constexpr double kTol = 1e-6;

void expect_matches_differences(const Data& d, const Options& opts) {
  expect_gradients_match_differences(d, opts, 1e-5, kTol);
}

Dims small_gqa() { return {2, 3, 4, 4, 2, 3, 2}; }  // b, s_q, s_kv, h_q, h_kv, d_qk != d_v

TEST(ReferenceGradients, PlainGqaDifferentHeadDims) {
  expect_matches_differences(make_data(small_gqa(), 1), Options{});
}

TEST(ReferenceGradients, SoftcapWithFullBias) {
  const Dims n = small_gqa();
  Data d = make_data(n, 2, -2.0, 2.0);  // large enough scores for the cap to bend
  d.bias = random_broadcast4({n.b, n.h_q, n.s_q, n.s_kv}, 3);
  Options o;
  o.softcap = 0.8;
  expect_matches_differences(d, o);
}

TEST(ReferenceGradients, BroadcastBiasSumsOverBroadcastDims) {
  const Dims n = small_gqa();
  Data d = make_data(n, 4);
  d.bias = random_broadcast4({1, n.h_q, 1, n.s_kv}, 5);
  expect_matches_differences(d, Options{});
  d.bias = random_broadcast4({n.b, 1, 1, n.s_kv}, 6);
  expect_matches_differences(d, Options{});
  // A bias constant along the keys shifts every score of a row alike: softmax
  // ignores it, so its gradient (sum_j ds_ij) vanishes.
  d.bias = random_broadcast4({n.b, 1, n.s_q, 1}, 7);
  Spec spec;
  spec.dbias = true;
  for (double g : run_reference(d, Options{}, spec).dbias) EXPECT_NEAR(g, 0.0, 1e-15);
}

// A bias shared by all batches and heads gets the sum of the gradients that
// the same values, repeated into a full bias, get one by one. 40 query rows
// span more than one block of the reference's dbias pass.
TEST(ReferenceGradients, SharedBiasGradientIsTheSumOfFullOnes) {
  const Dims n{2, 40, 9, 4, 2, 3, 2};
  Data shared = make_data(n, 15);
  shared.len_q = {40, 33};
  shared.len_kv = {9, 6};
  shared.bias = random_broadcast4({1, 1, n.s_q, n.s_kv}, 16);
  Data full = shared;
  full.bias.shape = {n.b, n.h_q, n.s_q, n.s_kv};
  full.bias.values.clear();
  for (int64_t b = 0; b < n.b; ++b)
    for (int64_t h = 0; h < n.h_q; ++h)
      full.bias.values.insert(full.bias.values.end(), shared.bias.values.begin(), shared.bias.values.end());
  Options o;
  o.mask = MaskType::padding_causal_bottom_right;
  o.dropout_p = 0.2;
  Spec spec;
  spec.format = QkvFormat::thd;
  spec.dbias = true;
  const Result rs = run_reference(shared, o, spec), rf = run_reference(full, o, spec);
  EXPECT_TRUE(identical(rs.dq, rf.dq));
  std::vector<double> sum(shared.bias.values.size(), 0.0);
  for (size_t e = 0; e < rf.dbias.size(); ++e) sum[e % sum.size()] += rf.dbias[e];
  EXPECT_LE(max_abs_diff(rs.dbias, sum), 1e-13);
  EXPECT_GT(max_abs(sum), 1e-3);
}

TEST(ReferenceGradients, AlibiWithCausalBottomRightAndWindow) {
  const Dims n{2, 3, 5, 2, 1, 2, 3};
  Data d = make_data(n, 7);
  d.alibi = {0.5, 0.25};
  Options o;
  o.mask = MaskType::causal_bottom_right;
  o.window = {2, -1};
  expect_matches_differences(d, o);
  d.alibi = {0.5, 0.25, 1.0, 0.125};  // per batch [b, h_q]
  d.alibi_per_batch = true;
  expect_matches_differences(d, o);
}

TEST(ReferenceGradients, WindowsBothWays) {
  for (const Dims n : {Dims{1, 5, 3, 2, 2, 2, 2}, Dims{1, 3, 6, 2, 2, 2, 2}}) {
    Options o;
    o.window = {1, 1};  // no_mask: bottom-right aligned
    expect_matches_differences(make_data(n, 8), o);
    o.mask = MaskType::causal;  // top-left, right clipped to 0
    o.window = {1, 2};
    expect_matches_differences(make_data(n, 9), o);
  }
}

TEST(ReferenceGradients, Dropout) {
  Data d = make_data(small_gqa(), 10);
  Options o;
  o.dropout_p = 0.3;
  o.seed = 0x1234abcd5678ull;
  o.offset = 17;
  expect_matches_differences(d, o);
}

TEST(ReferenceGradients, PaddedSequencesWithEverything) {
  const Dims n{3, 4, 5, 2, 1, 3, 2};
  Data d = make_data(n, 11, -1.5, 1.5);
  d.len_q = {4, 2, 0};
  d.len_kv = {3, 5, 2};
  d.bias = random_broadcast4({n.b, 1, n.s_q, n.s_kv}, 12);
  Options o;
  o.mask = MaskType::padding_causal_bottom_right;
  o.window = {2, -1};
  o.softcap = 1.2;
  o.dropout_p = 0.25;
  o.seed = 99;
  expect_matches_differences(d, o);
}

TEST(ReferenceGradients, AdditiveArbitraryMask) {
  const Dims n{1, 3, 4, 2, 2, 2, 2};
  Data d = make_data(n, 13);
  d.mask = random_broadcast4({1, n.h_q, n.s_q, n.s_kv}, 14);
  d.mask.values[1] = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < 4; ++j) d.mask.values[d.mask.index(0, 1, 2, j)] = -std::numeric_limits<double>::infinity();
  d.mask.follow_q = false;
  d.mask.dtype = DType::f64;
  Options o;
  o.mask = MaskType::arbitrary;
  expect_matches_differences(d, o);
}

}  // namespace
}  // namespace attn::reftest
