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
#include "timing.h"

namespace attn::cli {
namespace {

using testing::Case;
using testing::CaseSpec;

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
