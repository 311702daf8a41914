// `attn run`: one problem on random inputs, timed; prints the backend chosen
// and why, the median time and TFLOP/s over the visible (i, j) pairs, as text
// or (--json) one JSON object.
#include <algorithm>
#include <cstdio>

#include "attn/attn.h"
#include "commands.h"
#include "host_memory.h"
#include "json.h"
#include "progress.h"
#include "report.h"
#include "timing.h"

namespace attn::cli {
namespace {

using testing::Case;
using testing::CaseSpec;

double tflops_of(const Timing& t, double flops) {
  const double ms = median(t.ms);
  return ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0;
}

void print_timing(std::FILE* out, const char* pass, const Timing& t, double flops, int warmup) {
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.4g", tflops_of(t, flops));  // 4 digits whether 0.002 (CPU) or 612.3 (H100)
  std::fprintf(out, "%-9s  median %s ms of %zu runs (after %d warm-up), %s TFLOP/s\n", pass,
               fixed(median(t.ms), 3).c_str(), t.ms.size(), warmup, rate);
}

std::string timing_json(const Timing& t, double flops, int warmup) {
  std::vector<std::string> ms;
  for (double x : t.ms) ms.push_back(json::num(x));
  return json::Object()
      .str("backend", t.selection.backend->name())
      .str("why", t.selection.why)
      .count("flops", flops)
      .integer("warmup", warmup)
      .num("first_ms", t.first_ms)
      .raw("ms", json::array(ms))
      .num("median_ms", median(t.ms))
      .num("tflops", tflops_of(t, flops))
      .dump();
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
  std::FILE* out = text_stream(f.json);
  // Progress only where a pass can take long: the CPU reference.
  const bool progress = !gpu && progress_wanted(f.quiet);

  require_host_memory("attn run", run_host_bytes(spec, !gpu));
  std::vector<Case> sets{testing::make_case(spec, device, data_seed(f.problem))};
  for (int i = 1; i < input_sets(sets[0]); ++i)
    sets.push_back(testing::make_case(spec, device, data_seed(f.problem) + static_cast<uint64_t>(i)));

  const Problem p = validate_forward(sets[0].opts, sets[0].fwd);
  const std::string dev_name = gpu ? query_device(device).name : std::string("cpu");
  std::fprintf(out, "problem:   %s\n", describe_problem(p).c_str());
  if (gpu)
    std::fprintf(out, "device:    %s\n", dev_name.c_str());
  else if (cuda_device_count() == 0)
    std::fprintf(out, "device:    cpu: this machine has no CUDA device, so the reference backend runs on the CPU\n"
                      "           (exact, fp64 accumulation, every feature; the oracle, not a fast path)\n");
  else
    std::fprintf(out, "device:    cpu (--device cpu): the reference backend runs on the CPU\n");
  std::fprintf(out, "work:      %s visible pairs; forward %s FLOP%s\n",
               testing::decimal(testing::visible_pairs_wide(spec)).c_str(), sci(testing::forward_flops(spec)).c_str(),
               spec.backward ? (", backward " + sci(testing::backward_flops(spec)) + " FLOP").c_str() : "");
  if (!gpu) note_if_slow_on_cpu(spec, out);
  std::fflush(out);

  auto timed = [&](const char* label, const std::function<Selection(Case&)>& call) {
    Ticker ticker(progress, std::string(label) + ": " + std::to_string(warmup + iters) + " runs on the CPU reference");
    return time_pass(sets, gpu, warmup, iters, call);
  };
  const Timing fwd = timed("forward", [&](Case& c) { return forward(c.opts, c.fwd, {}, policy); });
  std::fprintf(out, "backend:   %s: %s\n", fwd.selection.backend->name(), fwd.selection.why.c_str());
  print_timing(out, "forward:", fwd, testing::forward_flops(spec), warmup);

  json::Object doc;
  doc.str("command", "run").raw("problem", problem_json(spec)).str("description", describe_problem(p));
  doc.str("device", dev_name).integer("iters", iters);
  doc.str("backend", fwd.selection.backend->name()).str("why", fwd.selection.why);
  doc.raw("forward", timing_json(fwd, testing::forward_flops(spec), warmup));
  if (spec.backward) {
    // Every set needs the out and lse of its own forward before its backward.
    for (size_t i = static_cast<size_t>(warmup + iters); i < sets.size(); ++i)
      forward(sets[i].opts, sets[i].fwd, {}, policy);
    const Timing bwd = timed("backward", [&](Case& c) { return backward(c.opts, c.bwd, {}, policy); });
    if (std::string(bwd.selection.backend->name()) != fwd.selection.backend->name())
      std::fprintf(out, "backward backend: %s: %s\n", bwd.selection.backend->name(), bwd.selection.why.c_str());
    print_timing(out, "backward:", bwd, testing::backward_flops(spec), warmup);
    doc.raw("backward", timing_json(bwd, testing::backward_flops(spec), warmup));
  }
  if (f.json) std::fputs(doc.pretty().c_str(), stdout);
  return 0;
}

}  // namespace attn::cli
