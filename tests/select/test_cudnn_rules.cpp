// The cudnn backend's predicted limits and its translation of attn's masks into
// cuDNN's vocabulary: pure functions, checked without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "attn/attn.h"
#include "backends/cudnn/cudnn.h"
#include "backends/cudnn/cudnn_graph.h"
#include "backends/cudnn/cudnn_rules.h"

namespace attn::cudnn {
namespace {

Problem problem(int64_t d_qk = 128, int64_t d_v = 128) {
  Problem p;
  p.device = Device::cuda(0);
  p.dtype = DType::bf16;
  p.batch = 2;
  p.s_q = p.s_kv = 512;
  p.total_q = p.total_kv = 1024;
  p.h_q = 16;
  p.h_kv = 4;
  p.d_qk = d_qk;
  p.d_v = d_v;
  return p;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

constexpr int kV919 = 91900;

TEST(CudnnRules, TheLeftWindowBoundIsPassedExclusively) {
  Problem p = problem();
  p.window_left = 0;
  p.window_right = 0;
  MaskPlan m = mask_plan(p);
  EXPECT_TRUE(m.diagonal);
  EXPECT_EQ(m.left_bound, 1) << "attn's inclusive left 0 is cuDNN's exclusive bound 1";
  EXPECT_EQ(m.right_bound, 0);
  p.window_left = 63;
  p.window_right = 64;
  m = mask_plan(p);
  EXPECT_EQ(m.left_bound, 64);
  EXPECT_EQ(m.right_bound, 64);
  p.window_left = -1;
  p.window_right = -1;
  m = mask_plan(p);
  EXPECT_FALSE(m.diagonal);
  EXPECT_EQ(m.left_bound, -1);
}

TEST(CudnnRules, ThdAndPaddingUseSequenceLengths) {
  Problem p = problem();
  EXPECT_FALSE(mask_plan(p).padding);
  p.has_seqlens = true;
  EXPECT_TRUE(mask_plan(p).padding);
  p.qkv_format = QkvFormat::thd;
  EXPECT_TRUE(mask_plan(p).ragged);
  // A band with s_q > s_kv needs explicit (full) lengths in cuDNN.
  Problem q = problem();
  q.s_q = 600;
  q.window_left = -1;
  q.window_right = 0;
  q.bottom_right = true;
  EXPECT_TRUE(mask_plan(q).padding);
  EXPECT_TRUE(mask_plan(q).bottom_right);
}

// A view whose base address or a stride is not a multiple of 16 bytes (a
// storage offset of one bf16 element) is refused here, so selection moves on
// instead of cuDNN failing when it runs the graph.
TEST(CudnnRules, RowsAlignedToLessThan16BytesAreRefused) {
  const auto sm90 = simulated_device("sm90");
  for (int align : {8, 4, 2}) {
    Problem p = problem();
    p.row_alignment_bytes = align;
    const std::string r = joined(static_reasons(p, sm90, kV919));
    EXPECT_NE(r.find("aligned to " + std::to_string(align) + " bytes"), std::string::npos) << r;
    EXPECT_NE(r.find("cudnn needs 16"), std::string::npos) << r;
  }
  EXPECT_TRUE(static_reasons(problem(), sm90, kV919).empty());
}

TEST(CudnnRules, HeadDimsPerArchitecture) {
  const auto sm80 = simulated_device("sm80"), sm90 = simulated_device("sm90");
  EXPECT_TRUE(static_reasons(problem(128, 128), sm80, kV919).empty());
  const std::string r80 = joined(static_reasons(problem(192, 128), sm80, kV919));
  EXPECT_NE(r80.find("head_dim_qk=192 > 128 on sm80"), std::string::npos) << r80;
  EXPECT_TRUE(static_reasons(problem(192, 128), sm90, kV919).empty());
  EXPECT_TRUE(static_reasons(problem(256, 256), sm90, kV919).empty());
  const std::string odd = joined(static_reasons(problem(100, 100), sm90, kV919));
  EXPECT_NE(odd.find("not a multiple of 8"), std::string::npos) << odd;
}

TEST(CudnnRules, FeaturesCudnnLacksAreNamed) {
  const auto sm90 = simulated_device("sm90");
  Problem p = problem();
  p.dtype = DType::f32;
  EXPECT_NE(joined(static_reasons(p, sm90, kV919)).find("bfloat16 or float16"), std::string::npos);
  p = problem();
  p.mask = MaskType::arbitrary;
  EXPECT_NE(joined(static_reasons(p, sm90, kV919)).find("arbitrary"), std::string::npos);
  p = problem();
  p.softcap = 30;
  EXPECT_NE(joined(static_reasons(p, sm90, kV919)).find("softcap"), std::string::npos);
  p = problem();
  p.bias = BiasType::alibi;
  EXPECT_NE(joined(static_reasons(p, sm90, kV919)).find("ALiBi"), std::string::npos);
  p = problem();
  p.device = Device::cpu();
  EXPECT_NE(joined(static_reasons(p, sm90, kV919)).find("CUDA tensors"), std::string::npos);
}

TEST(CudnnRules, BottomRightExcludesBiasAndDropout) {
  const auto sm90 = simulated_device("sm90");
  Problem p = problem();
  p.s_q = 256;  // s_q != s_kv: the alignment matters
  p.window_right = 0;
  p.bottom_right = true;
  EXPECT_TRUE(static_reasons(p, sm90, kV919).empty());
  p.dropout_p = 0.1;
  EXPECT_NE(joined(static_reasons(p, sm90, kV919)).find("bottom-right"), std::string::npos);
}

TEST(CudnnRules, BottomRightWithEqualLengthsIsTopLeft) {
  const auto sm90 = simulated_device("sm90");
  Problem p = problem();  // s_q == s_kv, no per-sequence lengths
  p.window_right = 0;
  p.bottom_right = true;
  EXPECT_FALSE(mask_plan(p).bottom_right);
  p.dropout_p = 0.1;  // allowed: the band is the top-left one
  EXPECT_TRUE(static_reasons(p, sm90, kV919).empty());
  p.has_seqlens = true;  // padded sequences may differ in length: the alignment matters again
  EXPECT_TRUE(mask_plan(p).bottom_right);
}

TEST(CudnnRules, VersionRequirements) {
  const auto sm90 = simulated_device("sm90");
  Problem p = problem();
  p.window_left = 64;
  p.window_right = 0;
  const std::string old = joined(static_reasons(p, sm90, 90100));
  EXPECT_NE(old.find("window needs cuDNN >= 9.2; loaded 9.1.0"), std::string::npos) << old;
  EXPECT_TRUE(static_reasons(p, sm90, kV919).empty());
}

TEST(CudnnRules, BiasShapesAndGradients) {
  const auto sm90 = simulated_device("sm90");
  Problem p = problem();
  p.bias = BiasType::post_scale_bias;
  p.bias_dtype = DType::bf16;
  p.bias_shape = {1, 16, 512, 512};
  EXPECT_TRUE(static_reasons(p, sm90, kV919).empty());
  p.pass = Pass::backward;
  p.bias_grad = true;
  EXPECT_TRUE(static_reasons(p, sm90, kV919).empty());
  p.bias_shape = {2, 16, 512, 512};
  EXPECT_NE(joined(static_reasons(p, sm90, kV919)).find("dbias only for [1, h_q"), std::string::npos);
  p.bias_grad = false;
  p.bias_shape = {1, 1, 1, 512};
  EXPECT_NE(joined(static_reasons(p, sm90, kV919)).find("broadcasts over a sequence"), std::string::npos);
}

TEST(CudnnRules, AForwardWithDropoutNeedsItsBackwardOnCudnnToo) {
  const auto sm90 = simulated_device("sm90");
  Problem p = problem();
  p.dropout_p = 0.1;
  p.bias = BiasType::post_scale_bias;
  p.bias_dtype = DType::bf16;
  p.bias_shape = {1, 16, 512, 512};
  EXPECT_TRUE(backend().supports(p, sm90).empty());
  p.bias_shape = {2, 16, 512, 512};  // forward fine, but no dbias for this shape
  EXPECT_TRUE(static_reasons(p, sm90, kV919).empty());
  const std::string r = joined(backend().supports(p, sm90));
  EXPECT_NE(r.find("dropout: cuDNN draws its own pattern"), std::string::npos) << r;
}

TEST(CudnnRules, EmptyRowsAreFoundWithoutLengths) {
  Problem p = problem();
  EXPECT_FALSE(may_have_empty_rows(p));
  p.window_right = 0;  // causal top-left with s_q == s_kv: every row sees itself
  EXPECT_FALSE(may_have_empty_rows(p));
  p.bottom_right = true;  // bottom-right causal with s_q > s_kv: the first rows see nothing
  p.s_q = 600;
  EXPECT_TRUE(may_have_empty_rows(p));
  p = problem();
  p.window_left = 10;  // left window top-left with s_q > s_kv: late rows see nothing
  p.s_q = 600;
  p.s_kv = 100;
  EXPECT_TRUE(may_have_empty_rows(p));
  p = problem();
  p.has_seqlens = true;
  EXPECT_TRUE(may_have_empty_rows(p));
}

TEST(CudnnRules, ThdBackwardIsRefusedWithTheForwardKept) {
  const auto sm90 = simulated_device("sm90");
  Problem p = problem();
  p.qkv_format = QkvFormat::thd;
  p.has_seqlens = true;
  EXPECT_TRUE(static_reasons(p, sm90, kV919).empty()) << joined(static_reasons(p, sm90, kV919));
  p.pass = Pass::backward;
  const std::string why = joined(static_reasons(p, sm90, kV919));
  EXPECT_NE(why.find("qkv_format=thd backward: cuDNN's ragged backward read memory past the sequences"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("flash_sm90, flash_sm80 and unfused run it"), std::string::npos) << why;
}

TEST(CudnnRules, SoftmaxSinksByVersionFormatAndMaxLogit) {
  const auto sm90 = simulated_device("sm90");
  for (SoftmaxType t : {SoftmaxType::off_by_one, SoftmaxType::learnable}) {
    Problem p = problem();
    p.softmax_type = t;
    EXPECT_TRUE(static_reasons(p, sm90, kV919).empty()) << joined(static_reasons(p, sm90, kV919));
    const std::string old = joined(static_reasons(p, sm90, 91200));
    EXPECT_NE(old.find("needs cuDNN >= 9.13; loaded 9.12.0"), std::string::npos) << old;
    p.pass = Pass::backward;
    p.sink_grad = t == SoftmaxType::learnable;
    EXPECT_TRUE(static_reasons(p, sm90, kV919).empty()) << joined(static_reasons(p, sm90, kV919));
    p.deterministic = true;
    const std::string det = joined(static_reasons(p, sm90, kV919));
    EXPECT_EQ(det.find("deterministic backward with dsink") != std::string::npos, p.sink_grad) << det;
    p = problem();
    p.softmax_type = t;
    p.return_max_logit = true;
    const std::string both = joined(static_reasons(p, sm90, kV919));
    EXPECT_NE(both.find("Max, where attn reads the max logit, includes the sink"), std::string::npos) << both;
  }
  Problem p = problem();
  p.return_max_logit = true;  // without a sink: from cuDNN's per-row Max
  EXPECT_TRUE(static_reasons(p, sm90, kV919).empty()) << joined(static_reasons(p, sm90, kV919));
}

TEST(CudnnRules, PlanKeysTellApartWhatChangesTheGraph) {
  GraphSpec a;
  a.batch = 2;
  a.scale = 0.0883883f;
  GraphSpec b = a;
  b.scale = 0.08838835f;  // prints like a at 6 digits, is another graph
  EXPECT_NE(a.key(), b.key());
  b = a;
  b.q.stride[2] = 3 * 128;  // the same shapes, other strides
  EXPECT_NE(a.key(), b.key());
  b = a;
  b.dropout_p = 0.1f;
  EXPECT_NE(a.key(), b.key());
  for (bool GraphSpec::*flag : {&GraphSpec::sink, &GraphSpec::dsink, &GraphSpec::max_sum_exp}) {
    b = a;
    b.*flag = true;
    EXPECT_NE(a.key(), b.key());
  }
  b = a;
  EXPECT_EQ(a.key(), b.key());
}

TEST(CudnnRules, ExplainListsCudnnWithItsReasons) {
  Problem p = problem(192, 128);
  const auto verdicts = explain(p, simulated_device("sm80"), Policy{});
  bool seen = false;
  for (const Verdict& v : verdicts)
    if (v.backend == "cudnn") {
      seen = true;
      EXPECT_TRUE(v.in_build);
      EXPECT_NE(joined(v.reasons).find("192 > 128 on sm80"), std::string::npos);
    }
  EXPECT_TRUE(seen);
  EXPECT_GE(library_version(), 90000) << "this build links cuDNN 9: " << version_string();
}

}  // namespace
}  // namespace attn::cudnn
