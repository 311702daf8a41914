// flash_sm80's backward beyond the shared grid: the deterministic mode gives
// bitwise identical dq, dk, dv across runs (ordered dQ accumulation) and still
// matches the reference; the default mode matches it on the same inputs.
#include <string>
#include <vector>

#include "attn/attn.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"
#include "testing/compare.h"

namespace attn {
namespace {

// Many KV tiles add into each query tile's dQ (s 1000, 8 query heads per KV
// head), so unordered fp32 adds would differ between runs.
std::vector<testing::CaseSpec> cases() {
  testing::CaseSpec s;
  s.batch = 2;
  s.s_q = s.s_kv = 1000;
  s.h_q = 8;
  s.h_kv = 1;
  s.d_qk = s.d_v = 64;
  s.mask = MaskType::causal;
  s.backward = true;
  testing::CaseSpec t = s;  // thd, a window, dropout, d 128
  t.format = QkvFormat::thd;
  t.mask = MaskType::padding_causal_bottom_right;
  t.seqlens_q = {700, 0, 333};
  t.seqlens_kv = {900, 4, 333};
  t.batch = 3;
  t.h_q = 4;
  t.h_kv = 2;
  t.d_qk = t.d_v = 128;
  t.window = {400, 0};
  t.dropout_p = 0.1;
  t.seed = 7;
  return {s, t};
}

TEST(FlashSm80Backward, DeterministicModeIsBitwiseRepeatable) {
  ATTN_REQUIRE_GPU();
  Policy force;
  force.forced = "flash_sm80";
  int index = 0;
  for (const testing::CaseSpec& spec : cases()) {
    SCOPED_TRACE("case " + std::to_string(index));
    testing::Case gpu = testing::make_case(spec, Device::cuda(0), 500 + index++);
    gpu.opts.deterministic = true;
    const Problem p = testing::problem_of(spec, Pass::backward, Device::cuda(0));
    Problem pd = p;
    pd.deterministic = true;
    ASSERT_TRUE(find_backend("flash_sm80")->supports(pd, query_device(Device::cuda(0))).empty());
    forward(gpu.opts, gpu.fwd, {}, force);
    backward(gpu.opts, gpu.bwd, {}, force);
    ATTN_CUDA_OK(cudaDeviceSynchronize());
    const auto dq = gpu.dq.host_bytes(), dk = gpu.dk.host_bytes(), dv = gpu.dv.host_bytes();
    for (int run = 0; run < 3; ++run) {
      gpu.dq.fill_nan();
      gpu.dk.fill_nan();
      gpu.dv.fill_nan();
      backward(gpu.opts, gpu.bwd, {}, force);
      ATTN_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_TRUE(gpu.dq.host_bytes() == dq) << "dq differs in run " << run;
      EXPECT_TRUE(gpu.dk.host_bytes() == dk) << "dk differs in run " << run;
      EXPECT_TRUE(gpu.dv.host_bytes() == dv) << "dv differs in run " << run;
    }
    testing::Case ref = testing::copy_inputs_to(gpu, Device::cpu(), DType::f64);
    testing::run_forced(ref, "reference");
    for (auto [name, x, r] : {std::tuple{"dq", &gpu.dq, &ref.dq}, {"dk", &gpu.dk, &ref.dk}, {"dv", &gpu.dv, &ref.dv}}) {
      const auto cmp = testing::compare(x->to_doubles(), r->to_doubles(), testing::tolerance_for(spec.dtype, true));
      EXPECT_TRUE(cmp.pass) << name << ": max abs " << cmp.max_abs << ", rel frob " << cmp.rel_frobenius << ", bad "
                            << cmp.bad << ", nan " << cmp.nan << " of " << cmp.count;
    }
  }
}

}  // namespace
}  // namespace attn
