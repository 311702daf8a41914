// Shared by the GPU tests (see gpu_test_util.h).
#include "gpu/gpu_test_util.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "attn/attn.h"
#include "attn/backend.h"
#include "attn/select.h"
#include "testing/compare.h"

namespace attn::testing {

bool have_gpu() { return cuda_device_count() > 0; }

std::vector<std::string> gpu_backends() {
  std::vector<std::string> names;
  for (const Backend* b : registered_backends())
    if (std::string(b->name()) != "reference") names.push_back(b->name());
  return names;
}

Policy forcing(const std::string& backend) {
  Policy p;
  p.forced = backend;
  return p;
}

bool claims(const std::string& backend, const CaseSpec& spec, Pass pass) {
  const DeviceInfo dev = query_device(Device::cuda(0));
  return find_backend(backend)->supports(problem_of(spec, pass, Device::cuda(0)), dev).empty();
}

void run_forced(Case& c, const std::string& backend, void* stream) {
  const Policy force = forcing(backend);
  RunContext ctx;
  ctx.stream = stream;
  forward(c.opts, c.fwd, ctx, force);
  if (c.spec.backward) backward(c.opts, c.bwd, ctx, force);
}

void expect_outputs_match(const Case& gpu, const Case& ref) {
  struct Out {
    const char* name;
    const TensorBuffer *x, *r;
    bool grad;
  };
  std::vector<Out> outs = {{"out", &gpu.out, &ref.out, false}, {"lse", &gpu.lse, &ref.lse, false}};
  if (gpu.spec.return_max_logit) outs.push_back({"max_logit", &gpu.max_logit, &ref.max_logit, false});
  if (gpu.spec.backward) {
    if (gpu.spec.softmax_type == SoftmaxType::learnable) outs.push_back({"dsink", &gpu.dsink, &ref.dsink, true});
    outs.push_back({"dq", &gpu.dq, &ref.dq, true});
    outs.push_back({"dk", &gpu.dk, &ref.dk, true});
    outs.push_back({"dv", &gpu.dv, &ref.dv, true});
    if (gpu.spec.bias == BiasType::post_scale_bias) outs.push_back({"dbias", &gpu.dbias, &ref.dbias, true});
  }
  for (const Out& o : outs) {
    const auto cmp = compare(o.x->to_doubles(), o.r->to_doubles(), tolerance_for(gpu.spec.dtype, o.grad));
    EXPECT_TRUE(cmp.pass) << o.name << ": max abs " << cmp.max_abs << ", rel frob " << cmp.rel_frobenius << ", bad "
                          << cmp.bad << ", nan " << cmp.nan << " of " << cmp.count;
  }
}

void expect_matches_reference(const Case& gpu) {
  Case ref = copy_inputs_to(gpu, Device::cpu(), DType::f64);
  run_forced(ref, "reference");
  expect_outputs_match(gpu, ref);
}

void expect_bitwise_repeatable_backward(const CaseSpec& spec, const std::string& backend, uint64_t seed,
                                        AnswerCheck check) {
  const Policy force = forcing(backend);
  Case gpu = make_case(spec, Device::cuda(0), seed);
  gpu.opts.deterministic = true;
  Problem pd = problem_of(spec, Pass::backward, Device::cuda(0));
  pd.deterministic = true;
  ASSERT_TRUE(find_backend(backend)->supports(pd, query_device(Device::cuda(0))).empty());
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
  if (check == AnswerCheck::reference) {
    expect_matches_reference(gpu);  // out and lse of the first forward, dq, dk, dv of the last run
    return;
  }
  Case free_order = make_case(spec, Device::cuda(0), seed);
  run_forced(free_order, backend);
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  expect_outputs_match(gpu, free_order);
}

void set_bf16_nan(TensorBuffer& t, int64_t at) {
  const uint16_t bf16_nan = 0x7FC0;
  ATTN_CUDA_OK(cudaMemcpy(static_cast<uint16_t*>(t.data()) + at, &bf16_nan, 2, cudaMemcpyHostToDevice));
}

bool row_has_nan(const std::vector<double>& x, int64_t row, int64_t width) {
  for (int64_t e = 0; e < width; ++e)
    if (std::isnan(x[row * width + e])) return true;
  return false;
}

CaseSpec thd_edge_lengths(int64_t d, int64_t window_left) {
  CaseSpec s;
  s.format = QkvFormat::thd;
  s.mask = MaskType::padding_causal;
  s.batch = 4;
  s.seqlens_q = s.seqlens_kv = {1, 0, 77, 300};
  s.h_q = 8;
  s.h_kv = 2;
  s.d_qk = s.d_v = d;
  s.window = {window_left, 0};
  return s;
}

SimulatedDevice::SimulatedDevice(const char* spec) { setenv("ATTN_SIMULATE_DEVICE", spec, 1); }
SimulatedDevice::~SimulatedDevice() { unsetenv("ATTN_SIMULATE_DEVICE"); }

}  // namespace attn::testing
