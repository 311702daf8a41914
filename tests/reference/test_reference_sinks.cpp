// Softmax sinks and the max logit in the reference (SEMANTICS.md "Softmax
// sinks", "Max logit"): against the naive forward written from the formulas,
// central differences for dq, dk, dv and dsink, rows that see no key, and the
// identities that pin the definitions (off-by-one is a learnable sink of 0; a
// very large sink takes all the probability).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "attn/attn.h"
#include "reference/reference_test_util.h"
#include "testing/tensor_buffer.h"

namespace attn::reftest {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using testing::TensorBuffer;

Options with_softmax(SoftmaxType t, MaskType mask = MaskType::no_mask, Window w = {}) {
  Options o;
  o.softmax_type = t;
  o.mask = mask;
  o.window = w;
  return o;
}

// Sink logits exactly representable in fp32 (the sink is stored as float32),
// so central differences with a power-of-two step stay exact in the input.
std::vector<double> dyadic_sinks(int64_t h_q) {
  std::vector<double> s;
  for (int64_t h = 0; h < h_q; ++h) s.push_back(-0.75 + 0.5 * static_cast<double>(h));
  return s;
}

TEST(ReferenceSinks, ForwardMatchesTheFormulasInEveryFormat) {
  const Dims n{3, 5, 7, 4, 2, 6, 3};
  Data d = make_data(n, 11, -1.5, 1.5);
  d.len_q = {5, 0, 3};
  d.len_kv = {7, 4, 0};  // sequence 1 has no queries, sequence 2 no keys (every row empty)
  d.sink = dyadic_sinks(n.h_q);
  for (SoftmaxType t : {SoftmaxType::vanilla, SoftmaxType::off_by_one, SoftmaxType::learnable})
    for (QkvFormat f : {QkvFormat::bshd, QkvFormat::sbhd, QkvFormat::thd}) {
      Data dd = d;
      if (t != SoftmaxType::learnable) dd.sink.clear();
      const Options o = with_softmax(t, MaskType::padding_causal_bottom_right, {2, 0});
      Spec spec;
      spec.format = f;
      spec.backward = false;
      spec.max_logit = true;
      const Result got = run_reference(dd, o, spec);
      const Result want = naive_forward(dd, o);
      const std::string what = std::string(softmax_type_name(t)) + " " + format_name(f);
      EXPECT_LE(max_abs_diff(got.out, want.out), 1e-12) << what;
      EXPECT_LE(max_abs_diff(got.lse, want.lse), 1e-6) << what;  // lse is stored as fp32
      EXPECT_LE(max_abs_diff(got.max_logit, want.max_logit), 1e-6) << what;
      // Rows that see no key: out 0 and lse = the sink logit.
      const std::vector<double> sinks = sink_logits(dd, o);
      for (int64_t h = 0; h < n.h_q; ++h)
        for (int64_t i = 0; i < n.s_q; ++i) EXPECT_EQ(got.lse[dd.il(2, h, i)], float(sinks[h])) << what;
    }
}

TEST(ReferenceSinks, OffByOneIsALearnableSinkOfZero) {
  const Dims n{2, 6, 6, 4, 4, 8, 8};
  Data d = make_data(n, 12);
  const Result off = run_reference(d, with_softmax(SoftmaxType::off_by_one, MaskType::causal), Spec{});
  d.sink.assign(static_cast<size_t>(n.h_q), 0.0);
  Spec spec;
  spec.dsink = true;
  const Result learn = run_reference(d, with_softmax(SoftmaxType::learnable, MaskType::causal), spec);
  EXPECT_TRUE(identical(off.out, learn.out));
  EXPECT_TRUE(identical(off.lse, learn.lse));
  EXPECT_TRUE(identical(off.dq, learn.dq));
  EXPECT_TRUE(identical(off.dk, learn.dk));
  EXPECT_TRUE(identical(off.dv, learn.dv));
  // And the sink changes the result: off-by-one is not vanilla.
  d.sink.clear();
  const Result vanilla = run_reference(d, with_softmax(SoftmaxType::vanilla, MaskType::causal), Spec{});
  EXPECT_GT(max_abs_diff(vanilla.out, off.out), 1e-3);
}

TEST(ReferenceSinks, ALargeSinkTakesAllTheProbability) {
  const Dims n{1, 4, 4, 2, 1, 4, 4};
  Data d = make_data(n, 13);
  d.sink = {40.0, -40.0};
  Spec spec;
  spec.backward = false;
  const Result r = run_reference(d, with_softmax(SoftmaxType::learnable), spec);
  for (int64_t i = 0; i < n.s_q; ++i) {
    EXPECT_NEAR(r.lse[d.il(0, 0, i)], 40.0, 1e-5);
    for (int64_t c = 0; c < n.d_v; ++c) EXPECT_LT(std::abs(r.out[d.io(0, i, 0, c)]), 1e-15);
  }
  d.sink.clear();
  const Result plain = run_reference(d, Options{}, spec);
  for (int64_t i = 0; i < n.s_q; ++i)  // head 1's sink of -40 changes nothing visible at 1e-15
    for (int64_t c = 0; c < n.d_v; ++c) EXPECT_NEAR(r.out[d.io(0, i, 1, c)], plain.out[d.io(0, i, 1, c)], 1e-15);
}

// dq, dk, dv and dsink against central differences of sum(out * dout), with
// a step of 2^-14: q, k, v are fp64, the sink values fp32-exact.
void expect_gradients(const Data& d, const Options& o, const std::string& what) {
  expect_gradients_match_differences(d, o, 1.0 / 16384, 2e-6, what);
}

TEST(ReferenceSinks, GradientsMatchDifferences) {
  const Dims n{2, 4, 5, 4, 2, 3, 2};  // GQA, d_qk != d_v
  Data d = make_data(n, 14, -1.5, 1.5);
  d.sink = dyadic_sinks(n.h_q);
  expect_gradients(d, with_softmax(SoftmaxType::learnable), "learnable");
  expect_gradients(d, with_softmax(SoftmaxType::learnable, MaskType::causal, {1, 0}), "learnable causal window");
  Options capped = with_softmax(SoftmaxType::learnable);
  capped.softcap = 0.9;
  expect_gradients(d, capped, "learnable softcap");
  Options dropped = with_softmax(SoftmaxType::learnable, MaskType::causal_bottom_right);
  dropped.dropout_p = 0.3;
  dropped.seed = 5;
  expect_gradients(d, dropped, "learnable dropout");
  d.sink.clear();
  expect_gradients(d, with_softmax(SoftmaxType::off_by_one, MaskType::causal), "off-by-one");
}

TEST(ReferenceSinks, PaddedAndEmptyRowsContributeNothing) {
  const Dims n{2, 4, 4, 2, 1, 3, 3};
  Data d = make_data(n, 15);
  d.len_q = {4, 3};
  d.len_kv = {0, 4};  // sequence 0: every row sees no key
  d.sink = {0.5, -0.25};
  Spec spec;
  spec.dsink = true;
  const Options o = with_softmax(SoftmaxType::learnable, MaskType::padding);
  const Result r = run_reference(d, o, spec);
  for (int64_t h = 0; h < n.h_q; ++h)
    for (int64_t i = 0; i < n.s_q; ++i) {
      EXPECT_EQ(r.lse[d.il(0, h, i)], float(d.sink[h]));
      for (int64_t c = 0; c < n.d_v; ++c) EXPECT_EQ(r.out[d.io(0, i, h, c)], 0.0);
      for (int64_t c = 0; c < n.d_qk; ++c) EXPECT_EQ(r.dq[d.iq(0, i, h, c)], 0.0);
    }
  // dsink counts sequence 1's rows only: equal to the call without sequence 0.
  Data one = make_data({1, 4, 4, 2, 1, 3, 3}, 0);
  const auto copy_batch = [](const std::vector<double>& from, size_t per_batch) {
    return std::vector<double>(from.begin() + static_cast<std::ptrdiff_t>(per_batch), from.end());
  };
  one.q = copy_batch(d.q, d.q.size() / 2);
  one.k = copy_batch(d.k, d.k.size() / 2);
  one.v = copy_batch(d.v, d.v.size() / 2);
  one.dout = copy_batch(d.dout, d.dout.size() / 2);
  one.len_q = {3};
  one.len_kv = {4};
  one.sink = d.sink;
  const Result alone = run_reference(one, o, spec);
  EXPECT_LE(max_abs_diff(r.dsink, alone.dsink), 1e-12);
  EXPECT_GT(max_abs(alone.dsink), 1e-3);
}

TEST(ReferenceSinks, MaxLogitIsTheLargestVisibleScorePerHead) {
  const Dims n{2, 3, 5, 2, 1, 4, 4};
  Data d = make_data(n, 16, -2.0, 2.0);
  d.alibi = {0.5, 0.25};
  Options o;
  o.mask = MaskType::causal;
  o.softcap = 1.5;
  Spec spec;
  spec.backward = false;
  spec.max_logit = true;
  const Result r = run_reference(d, o, spec);
  const Result want = naive_forward(d, o);
  EXPECT_LE(max_abs_diff(r.max_logit, want.max_logit), 1e-6);
  for (double m : r.max_logit) EXPECT_TRUE(std::isfinite(m) && std::abs(m) <= 1.5) << m;  // within the cap
  // No visible pair at all: -inf.
  d.len_q = {3, 3};
  d.len_kv = {0, 0};
  o.mask = MaskType::padding;
  o.softcap = 0;
  const Result none = run_reference(d, o, spec);
  for (double m : none.max_logit) EXPECT_EQ(m, -kInf);
}

TEST(ReferenceSinks, NaNStaysVisibleInMaxLogitAndSinkRows) {
  // bshd 1 x 3 x 2 x 4; a NaN in head 1's query row 2 (run_reference takes NaN
  // outputs for unwritten ones, so this calls the API directly).
  TensorBuffer q(DType::f64, {1, 3, 2, 4}), k(DType::f64, {1, 3, 2, 4}), v(DType::f64, {1, 3, 2, 4});
  TensorBuffer out(DType::f64, {1, 3, 2, 4}), lse(DType::f32, {1, 2, 3}), max_logit(DType::f32, {2});
  TensorBuffer sink(DType::f32, {2});
  std::vector<double> qv(24, 0.25), kv(24, -0.5), vv(24, 1.0);
  qv[(2 * 2 + 1) * 4] = std::nan("");
  q.copy_from(qv);
  k.copy_from(kv);
  v.copy_from(vv);
  sink.copy_from({0.5, 0.5});
  Options o;
  o.softmax_type = SoftmaxType::learnable;
  ForwardArgs a;
  a.in.q = q.view();
  a.in.k = k.view();
  a.in.v = v.view();
  a.in.sink = sink.view();
  a.out = out.view();
  a.lse = lse.view();
  a.max_logit = max_logit.view();
  Policy policy;
  policy.forced = "reference";
  forward(o, a, RunContext{}, policy);
  const std::vector<double> m = max_logit.to_doubles(), l = lse.to_doubles(), x = out.to_doubles();
  EXPECT_NEAR(m[0], -0.5 * 0.5, 1e-7);  // q.k = 4 * 0.25 * -0.5, scaled by 1/2
  EXPECT_TRUE(std::isnan(m[1]));
  EXPECT_TRUE(std::isnan(l[1 * 3 + 2]));  // lse [b, h, s]: head 1, row 2
  EXPECT_FALSE(std::isnan(l[1 * 3 + 1]));
  EXPECT_TRUE(std::isnan(x[(2 * 2 + 1) * 4]));
  EXPECT_FALSE(std::isnan(x[(2 * 2 + 0) * 4]));
}

}  // namespace
}  // namespace attn::reftest
