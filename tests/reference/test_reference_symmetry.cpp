// Symmetries the reference must respect exactly: the same data in bshd, sbhd
// and thd (packed, with empty and unequal sequences, vs padded with cu_seqlens),
// strided views vs contiguous ones, GQA vs MHA with repeated K/V heads, any
// thread count; and agreement with a naive forward written from the spec.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "reference/reference_test_util.h"

namespace attn::reftest {
namespace {

void expect_identical(const Result& a, const Result& b, const std::string& what) {
  EXPECT_TRUE(identical(a.out, b.out)) << what << ": out differs by " << max_abs_diff(a.out, b.out);
  EXPECT_TRUE(identical(a.lse, b.lse)) << what << ": lse differs by " << max_abs_diff(a.lse, b.lse);
  EXPECT_TRUE(identical(a.dq, b.dq)) << what << ": dq differs by " << max_abs_diff(a.dq, b.dq);
  EXPECT_TRUE(identical(a.dk, b.dk)) << what << ": dk differs by " << max_abs_diff(a.dk, b.dk);
  EXPECT_TRUE(identical(a.dv, b.dv)) << what << ": dv differs by " << max_abs_diff(a.dv, b.dv);
  EXPECT_TRUE(identical(a.dbias, b.dbias)) << what << ": dbias differs by " << max_abs_diff(a.dbias, b.dbias);
}

// The out and lse of the reference equal the naive forward's (lse is stored as fp32).
void expect_matches_naive(const Data& d, const Options& o, const Result& r, const std::string& what) {
  const Result n = naive_forward(d, o);
  EXPECT_LE(max_abs_diff(r.out, n.out), 1e-12) << what;
  ASSERT_EQ(r.lse.size(), n.lse.size());
  for (size_t i = 0; i < n.lse.size(); ++i) {
    if (std::isinf(n.lse[i]))
      EXPECT_EQ(r.lse[i], n.lse[i]) << what << " lse[" << i << "]";
    else
      EXPECT_NEAR(r.lse[i], n.lse[i], 1e-6 * (1 + std::abs(n.lse[i]))) << what << " lse[" << i << "]";
  }
}

// Unequal sequences, one without queries and one without keys.
Data ragged_data(uint64_t seed) {
  const Dims n{4, 5, 6, 4, 2, 3, 5};
  Data d = make_data(n, seed);
  d.len_q = {3, 0, 5, 2};
  d.len_kv = {4, 2, 0, 6};
  d.bias = random_broadcast4({n.b, n.h_q, n.s_q, n.s_kv}, seed + 1);
  return d;
}

Options everything() {
  Options o;
  o.mask = MaskType::padding_causal_bottom_right;
  o.window = {3, -1};
  o.softcap = 2.0;
  o.dropout_p = 0.2;
  o.seed = 0xfeedfacecafebeefull;
  o.offset = 3;
  return o;
}

TEST(ReferenceSymmetry, PaddedBshdSbhdEqualPackedThd) {
  const Data d = ragged_data(21);
  for (MaskType mask : {MaskType::padding, MaskType::padding_causal, MaskType::padding_causal_bottom_right}) {
    Options o = everything();
    o.mask = mask;
    Spec spec;
    spec.dbias = true;
    const Result bshd = run_reference(d, o, spec);
    spec.format = QkvFormat::sbhd;
    const Result sbhd = run_reference(d, o, spec);
    spec.format = QkvFormat::thd;
    const Result thd = run_reference(d, o, spec);
    expect_identical(bshd, sbhd, std::string("sbhd ") + mask_name(mask));
    expect_identical(bshd, thd, std::string("thd ") + mask_name(mask));
    expect_matches_naive(d, o, bshd, mask_name(mask));
    // The empty sequences: no queries -> nothing reaches sequence 1's keys;
    // no keys -> sequence 2's queries write 0 and -inf.
    for (int64_t j = 0; j < d.dims.s_kv; ++j)
      for (int64_t c = 0; c < d.dims.d_v; ++c) EXPECT_EQ(bshd.dv[d.iv(1, j, 0, c)], 0.0);
    for (int64_t i = 0; i < d.dims.s_q; ++i) {
      EXPECT_EQ(bshd.lse[d.il(2, 0, i)], -std::numeric_limits<double>::infinity());
      EXPECT_EQ(bshd.out[d.io(2, i, 0, 0)], 0.0);
    }
  }
}

// causal and padding_causal mean the same in thd: sequence boundaries always apply.
TEST(ReferenceSymmetry, ThdCausalEqualsPaddingCausal) {
  const Data d = ragged_data(22);
  Options a = everything(), b = everything();
  a.mask = MaskType::causal;
  b.mask = MaskType::padding_causal;
  Spec spec;
  spec.format = QkvFormat::thd;
  spec.dbias = true;
  expect_identical(run_reference(d, a, spec), run_reference(d, b, spec), "thd causal vs padding_causal");
}

TEST(ReferenceSymmetry, DenseFormatsAgree) {
  const Dims n{2, 4, 7, 2, 2, 4, 4};
  Data d = make_data(n, 23);
  d.alibi = {0.3, 0.7};
  Options o;
  o.window = {2, 1};
  Spec spec;
  const Result bshd = run_reference(d, o, spec);
  spec.format = QkvFormat::sbhd;
  expect_identical(bshd, run_reference(d, o, spec), "sbhd");
  spec.format = QkvFormat::thd;  // equal lengths, no padding mask: thd still sees sequence boundaries
  expect_identical(bshd, run_reference(d, o, spec), "thd");
  expect_matches_naive(d, o, bshd, "dense");
}

TEST(ReferenceSymmetry, StridedViewsEqualContiguous) {
  const Data d = ragged_data(24);
  for (QkvFormat f : {QkvFormat::bshd, QkvFormat::sbhd, QkvFormat::thd}) {
    Spec spec;
    spec.format = f;
    spec.dbias = true;
    const Result contiguous = run_reference(d, everything(), spec);
    spec.strided = true;
    expect_identical(contiguous, run_reference(d, everything(), spec), std::string("strided ") + format_name(f));
  }
}

TEST(ReferenceSymmetry, PackedQkvEqualsSeparateTensors) {
  const Dims n{2, 5, 5, 3, 3, 4, 4};
  Data d = make_data(n, 25);
  d.len_q = {5, 3};
  d.len_kv = {4, 5};
  Options o;
  o.mask = MaskType::padding_causal;
  o.dropout_p = 0.1;
  o.seed = 5;
  expect_identical(run_reference(d, o, {}), run_reference_packed_qkv(d, o), "packed qkv");
}

// GQA equals MHA with each K/V head repeated for its query heads; GQA's dk, dv
// are the sums of MHA's over each group.
TEST(ReferenceSymmetry, GqaEqualsMhaWithRepeatedHeads) {
  const Dims g{2, 3, 5, 6, 2, 3, 2};  // 3 query heads per KV head
  const Data gqa = make_data(g, 26);
  Dims m = g;
  m.h_kv = g.h_q;
  Data mha = gqa;
  mha.dims = m;
  mha.k.assign(static_cast<size_t>(m.b * m.s_kv * m.h_kv * m.d_qk), 0.0);
  mha.v.assign(static_cast<size_t>(m.b * m.s_kv * m.h_kv * m.d_v), 0.0);
  for (int64_t b = 0; b < g.b; ++b)
    for (int64_t j = 0; j < g.s_kv; ++j)
      for (int64_t h = 0; h < g.h_q; ++h) {
        for (int64_t c = 0; c < g.d_qk; ++c) mha.k[mha.ik(b, j, h, c)] = gqa.k[gqa.ik(b, j, h / 3, c)];
        for (int64_t c = 0; c < g.d_v; ++c) mha.v[mha.iv(b, j, h, c)] = gqa.v[gqa.iv(b, j, h / 3, c)];
      }
  Options o;
  o.mask = MaskType::causal_bottom_right;
  o.dropout_p = 0.3;  // dropout is indexed by the query head: the same in both
  o.seed = 77;
  for (QkvFormat f : {QkvFormat::bshd, QkvFormat::thd}) {
    Spec spec;
    spec.format = f;
    const Result rg = run_reference(gqa, o, spec), rm = run_reference(mha, o, spec);
    EXPECT_TRUE(identical(rg.out, rm.out));
    EXPECT_TRUE(identical(rg.lse, rm.lse));
    EXPECT_TRUE(identical(rg.dq, rm.dq));
    std::vector<double> dk_sum(rg.dk.size(), 0.0), dv_sum(rg.dv.size(), 0.0);
    for (int64_t b = 0; b < g.b; ++b)
      for (int64_t j = 0; j < g.s_kv; ++j)
        for (int64_t h = 0; h < g.h_q; ++h) {
          for (int64_t c = 0; c < g.d_qk; ++c) dk_sum[gqa.ik(b, j, h / 3, c)] += rm.dk[mha.ik(b, j, h, c)];
          for (int64_t c = 0; c < g.d_v; ++c) dv_sum[gqa.iv(b, j, h / 3, c)] += rm.dv[mha.iv(b, j, h, c)];
        }
    EXPECT_LE(max_abs_diff(rg.dk, dk_sum), 1e-13) << format_name(f);
    EXPECT_LE(max_abs_diff(rg.dv, dv_sum), 1e-13) << format_name(f);
  }
}

TEST(ReferenceSymmetry, ThreadCountDoesNotChangeAnyBit) {
  const Data d = ragged_data(27);
  Data broadcast = d;
  broadcast.bias = random_broadcast4({1, d.dims.h_q, 1, d.dims.s_kv}, 28);  // dbias sums over b and i
  for (const Data* data : std::vector<const Data*>{&d, &broadcast}) {
    Spec spec;
    spec.format = QkvFormat::thd;
    spec.dbias = true;
    Result one;
    {
      ScopedEnv env("ATTN_NUM_THREADS", "1");
      one = run_reference(*data, everything(), spec);
    }
    for (const char* threads : {"2", "3", "8"}) {
      ScopedEnv env("ATTN_NUM_THREADS", threads);
      expect_identical(one, run_reference(*data, everything(), spec), std::string("threads=") + threads);
    }
  }
}

// Every mask type with and without a window against the naive forward.
TEST(ReferenceSymmetry, EveryMaskMatchesNaiveForward) {
  const Dims n{2, 5, 7, 2, 1, 3, 2};
  const MaskType masks[] = {MaskType::no_mask, MaskType::causal, MaskType::causal_bottom_right,
                            MaskType::padding, MaskType::padding_causal, MaskType::padding_causal_bottom_right};
  for (MaskType mask : masks) {
    for (Window w : {Window{-1, -1}, Window{1, 2}, Window{0, 0}, Window{-1, 1}, Window{2, -1}}) {
      for (bool swap : {false, true}) {  // s_q < s_kv and s_q > s_kv
        Dims dims = n;
        if (swap) std::swap(dims.s_q, dims.s_kv);
        Data d = make_data(dims, 29);
        if (mask == MaskType::padding || mask == MaskType::padding_causal ||
            mask == MaskType::padding_causal_bottom_right) {
          d.len_q = {dims.s_q, dims.s_q - 2};
          d.len_kv = {dims.s_kv - 3, dims.s_kv};
        }
        Options o;
        o.mask = mask;
        o.window = w;
        Spec spec;
        spec.backward = false;
        const Result r = run_reference(d, o, spec);
        expect_matches_naive(d, o, r,
                             std::string(mask_name(mask)) + " window (" + std::to_string(w.left) + "," +
                                 std::to_string(w.right) + ")" + (swap ? " s_q > s_kv" : ""));
      }
    }
  }
}

}  // namespace
}  // namespace attn::reftest
