// The shared case builder: visible-pair counts (by brute force and by closed
// formulas), tensor shapes per format, random inputs, poison, copies.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "attn/attn.h"
#include "testing/case.h"

namespace attn::testing {
namespace {

bool causal(MaskType m) {
  return m == MaskType::causal || m == MaskType::causal_bottom_right || m == MaskType::padding_causal ||
         m == MaskType::padding_causal_bottom_right;
}

// DESIGN.md's rule applied to every (i, j) pair, independently of mask_rule.h.
int64_t brute_force_pairs(const CaseSpec& s) {
  const std::vector<int64_t> lq = lengths_q(s), lkv = lengths_kv(s);
  const bool top_left = s.mask == MaskType::causal || s.mask == MaskType::padding_causal;
  const int64_t left = s.window.left, right = causal(s.mask) ? 0 : s.window.right;
  int64_t n = 0;
  for (size_t b = 0; b < lq.size(); ++b) {
    const int64_t shift = top_left ? 0 : lkv[b] - lq[b];
    for (int64_t i = 0; i < lq[b]; ++i)
      for (int64_t j = 0; j < lkv[b]; ++j)
        n += (left < 0 || i + shift - left <= j) && (right < 0 || j <= i + shift + right);
  }
  return n * s.h_q;
}

CaseSpec bshd(int64_t b, int64_t s_q, int64_t s_kv, int64_t h, MaskType m, Window w = {}) {
  CaseSpec s;
  s.batch = b;
  s.s_q = s_q;
  s.s_kv = s_kv;
  s.h_q = s.h_kv = h;
  s.mask = m;
  s.window = w;
  return s;
}

TEST(VisiblePairs, ClosedForms) {
  EXPECT_EQ(visible_pairs(bshd(2, 5, 7, 3, MaskType::no_mask)), 2 * 3 * 5 * 7);
  EXPECT_EQ(visible_pairs(bshd(1, 9, 9, 2, MaskType::causal)), 2 * 9 * 10 / 2);
  // Bottom-right, s_q < s_kv: row i sees keys 0 .. i + 4.
  EXPECT_EQ(visible_pairs(bshd(1, 3, 7, 1, MaskType::causal_bottom_right)), 5 + 6 + 7);
  // Top-left, s_q > s_kv: row i sees min(i + 1, 3) keys.
  EXPECT_EQ(visible_pairs(bshd(1, 7, 3, 1, MaskType::causal)), 1 + 2 + 3 * 5);
  // Bottom-right, s_q > s_kv: the first s_q - s_kv rows see nothing.
  EXPECT_EQ(visible_pairs(bshd(1, 7, 3, 1, MaskType::causal_bottom_right)), 1 + 2 + 3);
  // Causal with window (2, 0): at most 3 keys per row.
  EXPECT_EQ(visible_pairs(bshd(1, 6, 6, 1, MaskType::causal, {2, 0})), 1 + 2 + 3 * 4);
  // A window under no_mask is bottom-right aligned; (1, 1) on 4x4 is a band of width 3.
  EXPECT_EQ(visible_pairs(bshd(1, 4, 4, 1, MaskType::no_mask, {1, 1})), 2 + 3 + 3 + 2);
  // Causal clips the right side to 0 whatever the window says.
  EXPECT_EQ(visible_pairs(bshd(1, 6, 6, 1, MaskType::causal, {2, 5})), 1 + 2 + 3 * 4);
}

TEST(VisiblePairs, PackedSequencesCountEachSequenceAlone) {
  CaseSpec s;
  s.format = QkvFormat::thd;
  s.batch = 4;
  s.seqlens_q = {1, 0, 77, 300};
  s.h_q = 8;
  s.h_kv = 2;
  s.mask = MaskType::padding_causal;
  s.window = {31, 0};
  int64_t rows = 0;
  for (int64_t len : s.seqlens_q)
    for (int64_t i = 0; i < len; ++i) rows += std::min<int64_t>(i + 1, 32);
  EXPECT_EQ(visible_pairs(s), rows * 8);
  EXPECT_EQ(visible_pairs(s), brute_force_pairs(s));
  s.d_qk = 192;
  s.d_v = 128;
  EXPECT_DOUBLE_EQ(forward_flops(s), 4.0 * 160 * rows * 8);
  EXPECT_DOUBLE_EQ(backward_flops(s), 2.5 * forward_flops(s));
}

// Closed form, 128 bits: 2^32 x 2^32 pairs wrapped int64 to 0 ("0 visible
// pairs"), and a per-row loop or per-sequence list made these slow or huge.
TEST(VisiblePairs, PastInt64AndHugeBatches) {
  CaseSpec s;
  s.s_q = s.s_kv = int64_t{1} << 32;
  s.h_q = s.h_kv = 1;
  EXPECT_EQ(decimal(visible_pairs_wide(s)), "18446744073709551616");  // 2^64
  EXPECT_THROW(visible_pairs(s), Error);
  s.mask = MaskType::causal;
  s.h_q = s.h_kv = 3;
  EXPECT_EQ(decimal(visible_pairs_wide(s)), "27670116117006778368");  // 3 * 2^32 (2^32 + 1) / 2
  CaseSpec many;
  many.batch = 2147483647;
  many.s_q = many.s_kv = 512;
  EXPECT_EQ(visible_pairs(many), int64_t{2147483647} * 512 * 512 * 8);
  many.format = QkvFormat::thd;
  EXPECT_EQ(rows_q(many), 512);
  EXPECT_EQ(tokens_q(many), int64_t{2147483647} * 512);
  EXPECT_EQ(decimal(0), "0");
}

TEST(VisiblePairs, MatchesBruteForceOnRandomProblems) {
  std::mt19937_64 rng(3);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const MaskType masks[] = {MaskType::no_mask, MaskType::causal, MaskType::causal_bottom_right, MaskType::padding,
                            MaskType::padding_causal, MaskType::padding_causal_bottom_right, MaskType::arbitrary};
  for (int trial = 0; trial < 300; ++trial) {
    CaseSpec s;
    s.format = static_cast<QkvFormat>(pick(0, 2));
    s.batch = pick(1, 3);
    s.s_q = pick(0, 20);
    s.s_kv = pick(0, 20);
    s.h_q = pick(1, 3);
    s.mask = masks[pick(0, 6)];
    s.window = {pick(-1, 24), pick(-1, 24)};  // also windows wider than the sequences
    if (s.format == QkvFormat::thd || pick(0, 1)) {
      for (int64_t b = 0; b < s.batch; ++b) {
        s.seqlens_q.push_back(pick(0, s.format == QkvFormat::thd ? 20 : s.s_q));
        s.seqlens_kv.push_back(pick(0, s.format == QkvFormat::thd ? 20 : s.s_kv));
      }
    }
    EXPECT_EQ(visible_pairs(s), brute_force_pairs(s)) << "trial " << trial;
  }
}

TEST(MakeCase, ShapesPerFormat) {
  CaseSpec s = bshd(2, 5, 7, 4, MaskType::causal);
  s.h_kv = 2;
  s.d_qk = 24;
  s.d_v = 16;
  s.backward = true;
  Case c = make_case(s, Device::cpu(), 1);
  EXPECT_EQ(c.q.shape(), (std::vector<int64_t>{2, 5, 4, 24}));
  EXPECT_EQ(c.k.shape(), (std::vector<int64_t>{2, 7, 2, 24}));
  EXPECT_EQ(c.v.shape(), (std::vector<int64_t>{2, 7, 2, 16}));
  EXPECT_EQ(c.out.shape(), (std::vector<int64_t>{2, 5, 4, 16}));
  EXPECT_EQ(c.lse.shape(), (std::vector<int64_t>{2, 4, 5}));
  EXPECT_EQ(c.dk.shape(), c.k.shape());
  EXPECT_FALSE(c.cu_seqlens_q.view().defined());

  s.format = QkvFormat::sbhd;
  c = make_case(s, Device::cpu(), 1);
  EXPECT_EQ(c.q.shape(), (std::vector<int64_t>{5, 2, 4, 24}));
  EXPECT_EQ(c.dv.shape(), (std::vector<int64_t>{7, 2, 2, 16}));
  EXPECT_EQ(c.lse.shape(), (std::vector<int64_t>{2, 4, 5}));

  s.format = QkvFormat::thd;
  s.batch = 3;
  s.seqlens_q = {1, 0, 6};
  s.seqlens_kv = {2, 3, 0};
  c = make_case(s, Device::cpu(), 1);
  EXPECT_EQ(c.q.shape(), (std::vector<int64_t>{7, 4, 24}));
  EXPECT_EQ(c.v.shape(), (std::vector<int64_t>{5, 2, 16}));
  EXPECT_EQ(c.lse.shape(), (std::vector<int64_t>{4, 7}));
  EXPECT_EQ(c.cu_seqlens_q.to_doubles(), (std::vector<double>{0, 1, 1, 7}));
  EXPECT_EQ(c.cu_seqlens_kv.to_doubles(), (std::vector<double>{0, 2, 5, 5}));
  EXPECT_EQ(c.opts.max_seqlen_q, 6);
  EXPECT_EQ(c.opts.max_seqlen_kv, 3);
}

TEST(MakeCase, RandomInputsPoisonedOutputsAndBoundViews) {
  CaseSpec s = bshd(2, 8, 8, 4, MaskType::no_mask);
  s.bias = BiasType::post_scale_bias;
  s.backward = true;
  const Case c = make_case(s, Device::cpu(), 5);
  for (const TensorBuffer* b : {&c.q, &c.k, &c.v, &c.dout})
    for (double x : b->to_doubles()) ASSERT_TRUE(x >= -1.0 && x <= 1.0) << x;
  for (double x : c.bias.to_doubles()) ASSERT_TRUE(std::abs(x) <= 0.5) << x;
  EXPECT_EQ(c.bias.shape(), (std::vector<int64_t>{1, 4, 8, 8}));
  for (const TensorBuffer* b : {&c.out, &c.lse, &c.dq, &c.dk, &c.dv, &c.dbias})
    for (double x : b->to_doubles()) ASSERT_TRUE(std::isnan(x));
  EXPECT_EQ(c.fwd.in.q.data, c.q.data());
  EXPECT_EQ(c.fwd.out.data, c.out.data());
  EXPECT_EQ(c.fwd.lse.data, c.lse.data());  // backward needs the forward's lse
  EXPECT_EQ(c.bwd.dbias.data, c.dbias.data());
  EXPECT_EQ(c.bwd.in.bias.data, c.bias.data());
  // Different seeds draw different inputs; the same seed the same ones.
  EXPECT_NE(make_case(s, Device::cpu(), 6).q.to_doubles(), c.q.to_doubles());
  EXPECT_EQ(make_case(s, Device::cpu(), 5).q.to_doubles(), c.q.to_doubles());
}

TEST(MakeCase, AlibiSlopesAndArbitraryMask) {
  CaseSpec s = bshd(2, 4, 6, 8, MaskType::arbitrary);
  s.bias = BiasType::alibi;
  const Case c = make_case(s, Device::cpu(), 2);
  const std::vector<double> slopes = c.alibi_slopes.to_doubles();
  ASSERT_EQ(slopes.size(), 8u);
  EXPECT_DOUBLE_EQ(slopes[0], 0.5);
  EXPECT_DOUBLE_EQ(slopes[7], std::exp2(-8.0));
  EXPECT_EQ(c.attn_mask.shape(), (std::vector<int64_t>{2, 1, 4, 6}));
  EXPECT_FALSE(c.fwd.lse.defined());  // neither return_lse nor backward
  EXPECT_FALSE(c.bwd.dq.defined());
}

TEST(MakeCase, RejectsInconsistentLengths) {
  CaseSpec s = bshd(3, 8, 8, 2, MaskType::padding);
  s.seqlens_q = {1, 2};
  EXPECT_THROW(make_case(s, Device::cpu(), 0), Error);
  s.seqlens_q = {1, -2, 3};
  EXPECT_THROW(make_case(s, Device::cpu(), 0), Error);
}

TEST(CopyInputs, SameValuesFreshPoisonOtherDtype) {
  CaseSpec s = bshd(1, 6, 6, 2, MaskType::causal);
  s.backward = true;
  Case c = make_case(s, Device::cpu(), 9);
  c.out.fill_zero();
  const Case same = copy_inputs_to(c, Device::cpu());
  EXPECT_NE(same.q.data(), c.q.data());
  EXPECT_EQ(same.q.to_doubles(), c.q.to_doubles());
  EXPECT_EQ(same.dout.to_doubles(), c.dout.to_doubles());
  for (double x : same.out.to_doubles()) ASSERT_TRUE(std::isnan(x));
  const Case wide = copy_inputs_to(c, Device::cpu(), DType::f64);
  EXPECT_EQ(wide.spec.dtype, DType::f64);
  EXPECT_EQ(wide.q.view().dtype, DType::f64);
  EXPECT_EQ(wide.dq.view().dtype, DType::f64);
  EXPECT_EQ(wide.lse.view().dtype, DType::f32);
  EXPECT_EQ(wide.k.to_doubles(), c.k.to_doubles());  // bf16 values are exact in fp64
}

// problem_of (no tensors) derives what validation derives from real tensors.
TEST(ProblemOf, MatchesValidationOfARealCase) {
  std::vector<CaseSpec> specs;
  specs.push_back(bshd(2, 5, 7, 4, MaskType::causal_bottom_right, {3, -1}));
  CaseSpec padded = bshd(2, 9, 9, 4, MaskType::padding_causal);
  padded.seqlens_q = {3, 9};
  padded.bias = BiasType::post_scale_bias;
  padded.backward = true;
  specs.push_back(padded);
  CaseSpec packed;
  packed.format = QkvFormat::thd;
  packed.batch = 3;
  packed.seqlens_q = {1, 0, 12};
  packed.h_q = 6;
  packed.h_kv = 3;
  packed.d_qk = 48;
  packed.d_v = 32;
  packed.mask = MaskType::padding_causal_bottom_right;
  packed.bias = BiasType::alibi;
  packed.softcap = 30;
  packed.dropout_p = 0.1;
  packed.return_lse = true;
  specs.push_back(packed);
  for (const CaseSpec& s : specs) {
    const Case c = make_case(s, Device::cpu(), 0);
    const Pass pass = s.backward ? Pass::backward : Pass::forward;
    const Problem real = s.backward ? validate_backward(c.opts, c.bwd) : validate_forward(c.opts, c.fwd);
    const Problem derived = problem_of(s, pass, Device::cpu());
    EXPECT_EQ(describe_problem(derived), describe_problem(real));
    EXPECT_EQ(derived.has_seqlens, real.has_seqlens);
    EXPECT_EQ(derived.bias_shape, real.bias_shape);
    EXPECT_EQ(derived.bias_grad, real.bias_grad);
  }
}

TEST(ProblemOf, ReportsValidationErrors) {
  CaseSpec s = bshd(1, 8, 8, 6, MaskType::no_mask);
  s.h_kv = 4;
  try {
    problem_of(s, Pass::forward, Device::cuda(0));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("h_q is not a multiple of h_kv"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attn::testing
