// `attn bench`: a sweep of problems (sequence lengths x head dims x masks, with
// batch = tokens / seqlen and heads = hidden / head_dim, as in ANCHORS.md), each
// timed like `attn run`, written as JSON (problem, backend, times, TFLOP/s,
// device, commit). A problem no backend can run is recorded with the reason.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "attn/attn.h"
#include "commands.h"
#include "report.h"
#include "timing.h"

namespace attn::cli {
namespace {

std::vector<int64_t> int_list(const std::string& s, const char* flag) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    try {
      out.push_back(std::stoll(item));
    } catch (const std::exception&) {
      fail(ErrorKind::value, std::string(flag) + " is not a list of integers", s, "e.g. 1024,4096,16384",
           "separate the numbers with commas");
    }
  return out;
}

std::vector<std::string> word_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

std::string num(double x) {
  char s[32];
  std::snprintf(s, sizeof s, "%.6g", x);
  return s;
}

}  // namespace

int bench_command(const BenchFlags& f) {
  const Device device = tensor_device(f.problem);
  const bool gpu = device.is_cuda();
  const Policy policy = policy_from(f.problem);
  const int warmup = std::max(0, f.warmup.value_or(gpu ? 3 : 0));
  const int iters = std::max(1, f.iters.value_or(gpu ? 20 : 2));
  const std::string dev_name = gpu ? query_device(device).name : std::string("cpu");

  std::string rows;
  Table table{{"d", "seqlen", "mask", "batch", "heads", "backend", "fwd ms", "fwd TFLOP/s", "bwd ms", "bwd TFLOP/s"}, {}};
  for (int64_t d : int_list(f.head_dims, "--sweep-head-dims"))
    for (int64_t s : int_list(f.seqlens, "--sweep-seqlens"))
      for (const std::string& mask : word_list(f.masks)) {
        ProblemFlags pf = f.problem;
        pf.mask = mask;
        pf.seqlen = s;
        pf.seqlen_kv = s;
        pf.batch = std::max<int64_t>(1, f.tokens / std::max<int64_t>(s, 1));
        pf.head_dim = d;
        pf.heads = std::max<int64_t>(1, f.hidden / d);
        pf.kv_heads = std::max<int64_t>(1, *pf.heads / f.gqa_ratio);
        testing::CaseSpec spec = spec_from_flags(pf);
        spec.return_lse = spec.backward;
        std::string row = "{\"d\": " + std::to_string(d) + ", \"seqlen\": " + std::to_string(s) +
                          ", \"mask\": " + json_string(mask) + ", \"batch\": " + std::to_string(spec.batch) +
                          ", \"heads\": " + std::to_string(spec.h_q) + ", \"kv_heads\": " + std::to_string(spec.h_kv) +
                          ", \"dtype\": " + json_string(dtype_name(spec.dtype)) +
                          ", \"fwd_flops\": " + num(testing::forward_flops(spec));
        std::vector<std::string> cells = {std::to_string(d), std::to_string(s), mask, std::to_string(spec.batch),
                                          std::to_string(spec.h_q)};
        try {
          std::vector<testing::Case> sets{testing::make_case(spec, device, 1)};
          for (int i = 1; i < input_sets(sets[0]); ++i) sets.push_back(testing::make_case(spec, device, 1 + i));
          const Timing fwd = time_pass(sets, gpu, warmup, iters, [&](testing::Case& c) { return forward(c.opts, c.fwd, {}, policy); });
          const double fms = median(fwd.ms), ftf = testing::forward_flops(spec) / (fms * 1e-3) / 1e12;
          row += ", \"backend\": " + json_string(fwd.selection.backend->name()) +
                 ", \"why\": " + json_string(fwd.selection.why) + ", \"fwd_first_ms\": " + num(fwd.first_ms) +
                 ", \"fwd_ms\": " + num(fms) + ", \"fwd_tflops\": " + num(ftf);
          cells.insert(cells.end(), {fwd.selection.backend->name(), fixed(fms, 3), fixed(ftf, 1)});
          if (spec.backward) {
            // Every set needs the out and lse of its own forward.
            for (size_t i = static_cast<size_t>(warmup + iters); i < sets.size(); ++i)
              forward(sets[i].opts, sets[i].fwd, {}, policy);
            const Timing bwd = time_pass(sets, gpu, warmup, iters, [&](testing::Case& c) { return backward(c.opts, c.bwd, {}, policy); });
            const double bms = median(bwd.ms), btf = testing::backward_flops(spec) / (bms * 1e-3) / 1e12;
            row += ", \"bwd_first_ms\": " + num(bwd.first_ms) + ", \"bwd_ms\": " + num(bms) + ", \"bwd_tflops\": " + num(btf);
            cells.insert(cells.end(), {fixed(bms, 3), fixed(btf, 1)});
          } else {
            cells.insert(cells.end(), {"-", "-"});
          }
        } catch (const Error& e) {
          row += ", \"error\": " + json_string(e.info().what);
          cells.insert(cells.end(), {"none: " + e.info().what, "-", "-", "-", "-"});
        }
        row += "}";
        rows += (rows.empty() ? "\n  " : ",\n  ") + row;
        table.rows.push_back(cells);
        std::fprintf(stderr, "bench: d=%lld seqlen=%lld mask=%s done\n", static_cast<long long>(d),
                     static_cast<long long>(s), mask.c_str());
      }
  const std::string json = "{\"device\": " + json_string(dev_name) + ", \"commit\": " + json_string(git_commit()) +
                           ", \"version\": " + json_string(version()) + ", \"warmup\": " + std::to_string(warmup) +
                           ", \"iters\": " + std::to_string(iters) + ", \"results\": [" + rows + "\n]}\n";
  if (f.json_path.empty() || f.json_path == "-") {
    std::fputs(json.c_str(), stdout);
  } else {
    std::ofstream(f.json_path) << json;
    std::printf("device: %s, commit %s (JSON: %s)\n%s", dev_name.c_str(), git_commit(), f.json_path.c_str(),
                table.str().c_str());
  }
  return 0;
}

}  // namespace attn::cli
