// The backward contract (SEMANTICS.md "Backward"): the given out and lse are
// the forward's result. Split the keys into blocks, run each block's backward
// with the whole sequence's out and lse: dq sums, dk and dv concatenate, to the
// whole backward. This is what a context-parallel ring relies on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attn/attn.h"
#include "testing/case.h"

namespace attn {
namespace {

// Rows [start, start + n) of dim 1 of a contiguous [b, s, h, d] buffer, as a view.
TensorView seq_slice(const testing::TensorBuffer& t, int64_t start, int64_t n) {
  TensorView v = t.view();
  v.shape[1] = n;
  v.data = static_cast<unsigned char*>(v.data) + start * v.strides_elems[1] * dtype_size_bytes(v.dtype);
  return v;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

TEST(BackwardContract, KeyBlocksWithTheWholeLseSumToTheWholeGradient) {
  Policy ref;
  ref.forced = "reference";
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 3; ++trial) {
    testing::CaseSpec s;
    s.dtype = DType::f64;
    s.batch = 2;
    s.s_q = 7 + static_cast<int64_t>(rng() % 9);
    s.s_kv = 9 + static_cast<int64_t>(rng() % 12);
    s.h_q = 4;
    s.h_kv = 2;  // GQA: dk, dv sum over query heads inside each block too
    s.d_qk = 8;
    s.d_v = 5;
    s.softcap = trial == 2 ? 3.0 : 0.0;
    s.backward = true;
    testing::Case whole = testing::make_case(s, Device::cpu(), rng());
    forward(whole.opts, whole.fwd, {}, ref);
    backward(whole.opts, whole.bwd, {}, ref);
    const std::vector<double> dq = whole.dq.to_doubles(), dk = whole.dk.to_doubles(), dv = whole.dv.to_doubles();

    // Three blocks of keys at random cut points.
    int64_t cut1 = 1 + static_cast<int64_t>(rng() % (s.s_kv - 2));
    int64_t cut2 = cut1 + 1 + static_cast<int64_t>(rng() % (s.s_kv - cut1 - 1));
    const int64_t cuts[4] = {0, cut1, cut2, s.s_kv};
    std::vector<double> dq_sum(dq.size(), 0.0), dk_cat(dk.size(), 0.0), dv_cat(dv.size(), 0.0);
    std::vector<double> dq_own(dq.size(), 0.0);  // the same with each block's own lse/out
    for (int blk = 0; blk < 3; ++blk) {
      const int64_t start = cuts[blk], n = cuts[blk + 1] - cuts[blk];
      testing::TensorBuffer bdq(DType::f64, {s.batch, s.s_q, s.h_q, s.d_qk});
      testing::TensorBuffer bdk(DType::f64, {s.batch, n, s.h_kv, s.d_qk}), bdv(DType::f64, {s.batch, n, s.h_kv, s.d_v});
      bdq.fill_nan(), bdk.fill_nan(), bdv.fill_nan();
      BackwardArgs a = whole.bwd;  // the whole sequence's out and lse
      a.in.k = seq_slice(whole.k, start, n);
      a.in.v = seq_slice(whole.v, start, n);
      a.dq = bdq.view(), a.dk = bdk.view(), a.dv = bdv.view();
      backward(whole.opts, a, {}, ref);
      const std::vector<double> g = bdq.to_doubles(), gk = bdk.to_doubles(), gv = bdv.to_doubles();
      for (size_t i = 0; i < g.size(); ++i) dq_sum[i] += g[i];
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t j = 0; j < n; ++j) {
          std::copy_n(gk.begin() + (b * n + j) * s.h_kv * s.d_qk, s.h_kv * s.d_qk,
                      dk_cat.begin() + (b * s.s_kv + start + j) * s.h_kv * s.d_qk);
          std::copy_n(gv.begin() + (b * n + j) * s.h_kv * s.d_v, s.h_kv * s.d_v,
                      dv_cat.begin() + (b * s.s_kv + start + j) * s.h_kv * s.d_v);
        }

      // Contrast: the block's own forward result normalizes per block.
      testing::TensorBuffer bout(DType::f64, {s.batch, s.s_q, s.h_q, s.d_v});
      testing::TensorBuffer blse(DType::f32, {s.batch, s.h_q, s.s_q});
      ForwardArgs f;
      f.in = a.in, f.out = bout.view(), f.lse = blse.view();
      forward(whole.opts, f, {}, ref);
      a.out = bout.view(), a.lse = blse.view();
      backward(whole.opts, a, {}, ref);
      const std::vector<double> own = bdq.to_doubles();
      for (size_t i = 0; i < own.size(); ++i) dq_own[i] += own[i];
    }
    // fp64 everywhere but lse, which attn stores in fp32 (~6e-8 relative).
    SCOPED_TRACE("trial " + std::to_string(trial) + " cuts " + std::to_string(cut1) + "," + std::to_string(cut2));
    EXPECT_LT(max_abs_diff(dq_sum, dq), 1e-5);
    EXPECT_LT(max_abs_diff(dk_cat, dk), 1e-5);
    EXPECT_LT(max_abs_diff(dv_cat, dv), 1e-5);
    EXPECT_GT(max_abs_diff(dq_own, dq), 1e-3) << "per-block statistics should not reproduce the whole gradient";
  }
}

}  // namespace
}  // namespace attn
