// Softmax sinks and the max logit on every GPU backend that claims them,
// against the fp64 reference on fresh random inputs: each softmax type,
// forward (out, lse, max_logit) and backward (dq, dk, dv, dsink); bshd causal
// GQA with d_qk != d_v where a backend has it, thd with empty sequences, a
// length 1 and rows the window leaves without a key, a padded bshd batch,
// dropout, softcap and ALiBi, sinks without the max logit; every ordered pair of backends across the two
// passes; the deterministic backward repeats its dsink bitwise.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "attn/attn.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"

namespace attn {
namespace {

using testing::Case;
using testing::CaseSpec;

std::vector<CaseSpec> sink_cases() {
  std::vector<CaseSpec> cases;
  for (SoftmaxType t : {SoftmaxType::vanilla, SoftmaxType::off_by_one, SoftmaxType::learnable}) {
    CaseSpec gqa;  // bshd causal GQA, tiles not full
    gqa.batch = 2;
    gqa.s_q = gqa.s_kv = 200;
    gqa.h_q = 8;
    gqa.h_kv = 2;
    gqa.d_qk = gqa.d_v = 128;
    gqa.mask = MaskType::causal;
    gqa.softmax_type = t;
    gqa.return_max_logit = true;
    gqa.backward = true;
    cases.push_back(gqa);

    CaseSpec thd = testing::thd_edge_lengths(64, 31);  // lengths 1, 0, 77, 300; window (31, 0)
    thd.softmax_type = t;
    thd.return_max_logit = true;
    thd.backward = true;
    cases.push_back(thd);
  }
  CaseSpec padded;  // bshd with true lengths: padding rows get the sink's logit
  padded.batch = 3;
  padded.seqlens_q = {100, 1, 0};
  padded.seqlens_kv = {130, 40, 7};
  padded.s_q = 100;
  padded.s_kv = 130;
  padded.h_q = padded.h_kv = 4;
  padded.d_qk = padded.d_v = 64;
  padded.mask = MaskType::padding_causal_bottom_right;
  padded.window = {50, 0};
  padded.softmax_type = SoftmaxType::learnable;
  padded.return_max_logit = true;
  padded.backward = true;
  cases.push_back(padded);

  const CaseSpec learnable_gqa = cases[4];  // (vanilla, off-by-one, learnable) x (gqa, thd) above
  CaseSpec mods = learnable_gqa;  // with softcap and ALiBi
  mods.softcap = 30.0;
  mods.bias = BiasType::alibi;
  cases.push_back(mods);

  CaseSpec dropped = learnable_gqa;  // with dropout (attn's pattern)
  dropped.dropout_p = 0.2;
  dropped.seed = 77;
  cases.push_back(dropped);

  CaseSpec mla = learnable_gqa;  // d_qk != d_v
  mla.d_qk = 192;
  mla.d_v = 128;
  cases.push_back(mla);

  // Sinks without the max logit, which cudnn cannot give with a sink (its
  // per-row Max includes the sink's logit): both types, and the padded batch.
  for (const CaseSpec& with : {cases[2], learnable_gqa, padded}) {
    CaseSpec without = with;
    without.return_max_logit = false;
    cases.push_back(without);
  }
  return cases;
}

std::string describe(const CaseSpec& s) {
  return std::string(format_name(s.format)) + " " + softmax_type_name(s.softmax_type) + " d=" +
         std::to_string(s.d_qk) + "/" + std::to_string(s.d_v) + (s.softcap > 0 ? " softcap" : "") +
         (s.bias == BiasType::alibi ? " alibi" : "") + (s.dropout_p > 0 ? " dropout" : "") +
         (s.seqlens_q.empty() ? "" : " lengths");
}

class SoftmaxSinks : public ::testing::TestWithParam<std::string> {};

TEST_P(SoftmaxSinks, EveryTypeAgainstTheReference) {
  ATTN_REQUIRE_GPU();
  const std::string backend = GetParam();
  int ran = 0;
  uint64_t seed = 100;
  for (const CaseSpec& spec : sink_cases()) {
    ++seed;
    if (!testing::claims(backend, spec, Pass::forward) || !testing::claims(backend, spec, Pass::backward)) continue;
    if (spec.dropout_p > 0 && backend == "cudnn") continue;  // cuDNN's own dropout pattern: no reference
    SCOPED_TRACE(backend + ": " + describe(spec));
    Case c = testing::make_case(spec, Device::cuda(0), seed);
    testing::run_forced(c, backend);
    ATTN_CUDA_OK(cudaDeviceSynchronize());
    testing::expect_matches_reference(c);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << backend << " claims none of the sink cases";
  RecordProperty("cases", ran);
}

// The forward on one backend, the backward on another: lse (with the sink in
// it) is the contract between them.
TEST(SoftmaxSinksCrossPass, EveryOrderedPairOfBackends) {
  ATTN_REQUIRE_GPU();
  CaseSpec spec = sink_cases()[4];  // learnable bshd causal GQA
  spec.return_max_logit = false;     // which cudnn's forward cannot give with a sink
  int pairs = 0;
  for (const std::string& f : testing::gpu_backends())
    for (const std::string& b : testing::gpu_backends()) {
      if (f == b || !testing::claims(f, spec, Pass::forward) || !testing::claims(b, spec, Pass::backward)) continue;
      SCOPED_TRACE("forward " + f + ", backward " + b);
      Case c = testing::make_case(spec, Device::cuda(0), 300 + pairs);
      forward(c.opts, c.fwd, {}, testing::forcing(f));
      backward(c.opts, c.bwd, {}, testing::forcing(b));
      ATTN_CUDA_OK(cudaDeviceSynchronize());
      testing::expect_matches_reference(c);
      ++pairs;
    }
  if (pairs == 0) GTEST_SKIP() << "fewer than two backends run sinks here";
}

TEST_P(SoftmaxSinks, DeterministicBackwardRepeatsBitwise) {
  ATTN_REQUIRE_GPU();
  const std::string backend = GetParam();
  const std::vector<CaseSpec> cases = sink_cases();
  int ran = 0;
  for (CaseSpec spec : {cases[5], cases[4]}) {  // learnable thd with empty sequences, bshd causal GQA
    spec.return_max_logit = false;
    Case c = testing::make_case(spec, Device::cuda(0), 500 + ran);
    c.opts.deterministic = true;
    const Problem p = validate_backward(c.opts, c.bwd);
    if (!find_backend(backend)->supports(p, query_device(p.device)).empty() ||
        !testing::claims(backend, spec, Pass::forward))
      continue;
    SCOPED_TRACE(backend + ": " + describe(spec));
    testing::run_forced(c, backend);
    const std::vector<double> dsink = c.dsink.to(Device::cpu()).to_doubles(), dq = c.dq.to(Device::cpu()).to_doubles();
    for (int run = 0; run < 3; ++run) {
      backward(c.opts, c.bwd, {}, testing::forcing(backend));
      ATTN_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_EQ(c.dsink.to(Device::cpu()).to_doubles(), dsink) << "run " << run;
      EXPECT_EQ(c.dq.to(Device::cpu()).to_doubles(), dq) << "run " << run;
    }
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << backend << " has no deterministic backward for these calls";
}

INSTANTIATE_TEST_SUITE_P(Registered, SoftmaxSinks, ::testing::ValuesIn(testing::gpu_backends()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace attn
