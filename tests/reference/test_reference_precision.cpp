// Reduced-precision inputs: the reference reads bf16/fp16/fp32 values exactly,
// computes in fp64 and rounds each output once, so its results equal the fp64
// computation on the rounded inputs, rounded to the dtype (lse: fp32). The
// backward takes out as given (SEMANTICS.md), so the fp64 run's backward is
// given the same rounded out.
#include <gtest/gtest.h>

#include <string>

#include "reference/reference_test_util.h"

namespace attn::reftest {
namespace {

void expect_rounded_fp64(const Data& data, const Options& o, DType t, QkvFormat f, const std::string& what) {
  Spec spec;
  spec.format = f;
  spec.dbias = data.bias.defined();
  spec.dtype = t;
  const Result low = run_reference(data, o, spec);
  const Data exact_inputs = rounded(data, t);
  spec.dtype = DType::f64;
  spec.given_out = &low.out;
  const Result wide = run_reference(exact_inputs, o, spec);
  spec.given_out = nullptr;
  const DType bias_t = data.bias.follow_q ? t : data.bias.dtype;
  EXPECT_TRUE(identical(low.out, round_to(wide.out, t))) << what << " out";
  EXPECT_TRUE(identical(low.lse, wide.lse)) << what << " lse";
  EXPECT_TRUE(identical(low.dq, round_to(wide.dq, t))) << what << " dq";
  EXPECT_TRUE(identical(low.dk, round_to(wide.dk, t))) << what << " dk";
  EXPECT_TRUE(identical(low.dv, round_to(wide.dv, t))) << what << " dv";
  EXPECT_TRUE(identical(low.dbias, round_to(wide.dbias, bias_t))) << what << " dbias";
  // The rounding matters: the unrounded inputs give other outputs.
  EXPECT_FALSE(identical(low.out, round_to(run_reference(data, o, spec).out, t)) &&
               identical(low.dq, round_to(run_reference(data, o, spec).dq, t)))
      << what << ": inputs were not rounded, so the case cannot tell";
}

TEST(ReferencePrecision, LowPrecisionEqualsRoundedFp64) {
  const Dims n{2, 5, 6, 4, 2, 3, 4};
  Data d = make_data(n, 51, -2.0, 2.0);
  d.len_q = {5, 3};
  d.len_kv = {4, 6};
  Options o;
  o.mask = MaskType::padding_causal_bottom_right;
  o.softcap = 1.5;
  o.dropout_p = 0.2;
  o.seed = 3;
  for (DType t : {DType::bf16, DType::f16, DType::f32}) {
    for (bool bias_in_f32 : {false, true}) {
      Data with_bias = d;
      with_bias.bias = random_broadcast4({1, n.h_q, n.s_q, n.s_kv}, 52);
      with_bias.bias.follow_q = !bias_in_f32;
      with_bias.bias.dtype = DType::f32;
      for (QkvFormat f : {QkvFormat::bshd, QkvFormat::thd})
        expect_rounded_fp64(with_bias, o, t, f,
                            std::string(dtype_name(t)) + (bias_in_f32 ? " f32 bias " : " bias ") + format_name(f));
    }
  }
}

}  // namespace
}  // namespace attn::reftest
