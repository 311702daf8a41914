// `attn run`: one problem on random inputs, timed; prints the backend chosen
// and why, the median time and TFLOP/s over the visible (i, j) pairs.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "attn/attn.h"
#include "commands.h"
#include "report.h"

namespace attn::cli {
namespace {

using testing::Case;
using testing::CaseSpec;

void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    fail(ErrorKind::runtime, std::string(what) + " failed", cudaGetErrorString(err), "cudaSuccess",
         "check the GPU with nvidia-smi, or pass --device cpu");
}

// Milliseconds of one call: CUDA events on the GPU (the work is asynchronous),
// the wall clock on the CPU.
double time_call(bool gpu, const std::function<void()>& call) {
  if (!gpu) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&stop), "cudaEventCreate");
  cuda_ok(cudaEventRecord(start, nullptr), "cudaEventRecord");
  call();
  cuda_ok(cudaEventRecord(stop, nullptr), "cudaEventRecord");
  cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0.0f;
  cuda_ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

// Input sets to rotate through on the GPU, so that a run does not find the
// previous run's tensors in L2 (50 MB on an H100): at least 256 MiB per cycle.
int input_sets(const Case& c) {
  if (!c.device.is_cuda()) return 1;
  size_t bytes = 0;
  for (const testing::TensorBuffer* b : {&c.q, &c.k, &c.v, &c.out, &c.dout, &c.dq, &c.dk, &c.dv})
    if (b->view().defined()) bytes += b->bytes();
  const size_t want = size_t{256} << 20;
  return static_cast<int>(std::clamp<size_t>((want + bytes - 1) / std::max<size_t>(bytes, 1), 1, 8));
}

struct Timing {
  Selection selection;
  std::vector<double> ms;
};

// warmup + iters calls rotating over the sets; the first call's selection is kept.
Timing time_pass(std::vector<Case>& sets, bool gpu, int warmup, int iters,
                 const std::function<Selection(Case&)>& call) {
  Timing t;
  for (int i = 0; i < warmup + iters; ++i) {
    Case& c = sets[static_cast<size_t>(i) % sets.size()];
    Selection s;
    const double ms = time_call(gpu, [&] { s = call(c); });
    if (i == 0) t.selection = s;
    if (i >= warmup) t.ms.push_back(ms);
    // The first call validated cu_seqlens' values; later calls skip that host
    // copy (as under CUDA graphs) so it does not distort the GPU timing.
    if (gpu && (c.spec.format != QkvFormat::thd || c.opts.max_seqlen_q > 0)) c.opts.check_seqlens = false;
  }
  return t;
}

void print_timing(const char* pass, const Timing& t, double flops, int warmup) {
  const double ms = median(t.ms);
  const double tflops = ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0;
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.4g", tflops);  // 4 digits whether 0.002 (CPU) or 612.3 (H100)
  std::printf("%-9s  median %s ms of %zu runs (after %d warm-up), %s TFLOP/s\n", pass, fixed(ms, 3).c_str(),
              t.ms.size(), warmup, rate);
}

}  // namespace

int run_command(const RunFlags& f) {
  CaseSpec spec = spec_from_flags(f.problem);
  spec.return_lse = spec.backward;
  const Device device = tensor_device(f.problem);
  const bool gpu = device.is_cuda();
  const Policy policy = policy_from(f.problem);
  const int warmup = std::max(0, f.warmup.value_or(gpu ? 3 : 0));
  const int iters = std::max(1, f.iters.value_or(gpu ? 20 : 3));

  std::vector<Case> sets{testing::make_case(spec, device, data_seed(f.problem))};
  for (int i = 1; i < input_sets(sets[0]); ++i)
    sets.push_back(testing::make_case(spec, device, data_seed(f.problem) + static_cast<uint64_t>(i)));

  const Problem p = validate_forward(sets[0].opts, sets[0].fwd);
  std::printf("problem:   %s\n", describe_problem(p).c_str());
  if (gpu)
    std::printf("device:    %s\n", query_device(device).name.c_str());
  else if (cuda_device_count() == 0)
    std::printf("device:    cpu: this machine has no CUDA device, so the reference backend runs on the CPU\n"
                "           (exact, fp64 accumulation, every feature; the oracle, not a fast path)\n");
  else
    std::printf("device:    cpu (--device cpu): the reference backend runs on the CPU\n");
  std::printf("work:      %lld visible pairs; forward %s FLOP%s\n",
              static_cast<long long>(testing::visible_pairs(spec)), sci(testing::forward_flops(spec)).c_str(),
              spec.backward ? (", backward " + sci(testing::backward_flops(spec)) + " FLOP").c_str() : "");
  if (!gpu) note_if_slow_on_cpu(spec);
  std::fflush(stdout);

  const Timing fwd = time_pass(sets, gpu, warmup, iters, [&](Case& c) { return forward(c.opts, c.fwd, {}, policy); });
  std::printf("backend:   %s: %s\n", fwd.selection.backend->name(), fwd.selection.why.c_str());
  print_timing("forward:", fwd, testing::forward_flops(spec), warmup);
  if (!spec.backward) return 0;

  // Every set needs the out and lse of its own forward before its backward.
  for (size_t i = static_cast<size_t>(warmup + iters); i < sets.size(); ++i) forward(sets[i].opts, sets[i].fwd, {}, policy);
  const Timing bwd = time_pass(sets, gpu, warmup, iters, [&](Case& c) { return backward(c.opts, c.bwd, {}, policy); });
  if (std::string(bwd.selection.backend->name()) != fwd.selection.backend->name())
    std::printf("backward backend: %s: %s\n", bwd.selection.backend->name(), bwd.selection.why.c_str());
  print_timing("backward:", bwd, testing::backward_flops(spec), warmup);
  return 0;
}

}  // namespace attn::cli
