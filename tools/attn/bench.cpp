// `attn bench`: a sweep of problems (sequence lengths x head dims x masks, with
// batch = tokens / seqlen and heads = hidden / head_dim, as in ANCHORS.md), each
// timed like `attn run`, written as JSON (problem, backend, times, TFLOP/s,
// device, commit). A problem no backend can run is recorded with the reason.
// The whole sweep is validated before the first point runs; the --json file is
// rewritten after every point, and --resume skips the points it holds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "attn/attn.h"
#include "bench_file.h"
#include "commands.h"
#include "host_memory.h"
#include "json.h"
#include "progress.h"
#include "report.h"
#include "timing.h"

namespace attn::cli {
namespace {

struct Point {
  int64_t d = 0, seqlen = 0;
  std::string mask;
  testing::CaseSpec spec;
  std::string key() const { return point_key(d, seqlen, mask); }
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  if (!s.empty() && s.back() == ',') out.push_back("");
  return out;
}

std::vector<int64_t> positive_ints(const std::string& s, const char* flag, const char* example) {
  std::vector<int64_t> out;
  for (const std::string& item : split(s)) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1)
      fail(ErrorKind::value, std::string("bad value in ") + flag, (item.empty() ? "(empty)" : item) + " in " + s,
           "comma-separated whole numbers >= 1", std::string("e.g. ") + flag + " " + example);
    out.push_back(v);
  }
  if (out.empty())
    fail(ErrorKind::value, std::string(flag) + " is empty", "\"\"", "at least one value", std::string("e.g. ") + flag + " " + example);
  return out;
}

std::vector<std::string> masks_of(const std::string& s) {
  std::vector<std::string> out = split(s);
  for (const std::string& m : out)
    if (!parse_mask(m))
      fail(ErrorKind::value, "bad value in --sweep-masks", (m.empty() ? "(empty)" : m) + " in " + s,
           "no_mask, causal, causal_bottom_right, padding, padding_causal, padding_causal_bottom_right or arbitrary",
           "e.g. --sweep-masks no_mask,causal");
  if (out.empty())
    fail(ErrorKind::value, "--sweep-masks is empty", "\"\"", "at least one mask", "e.g. --sweep-masks no_mask,causal");
  return out;
}

// Every point of the sweep, each problem validated, before any runs: a bad
// value fails at once, naming its flag, and not after an hour of points.
std::vector<Point> plan_sweep(const BenchFlags& f, Device device) {
  const std::vector<int64_t> dims = positive_ints(f.head_dims, "--sweep-head-dims", "64,128,256");
  const std::vector<int64_t> lens = positive_ints(f.seqlens, "--sweep-seqlens", "1024,4096,16384");
  const std::vector<std::string> masks = masks_of(f.masks);
  std::vector<Point> points;
  for (int64_t d : dims)
    for (int64_t s : lens)
      for (const std::string& mask : masks) {
        ProblemFlags pf = f.problem;
        pf.mask = mask;
        pf.seqlen = s;
        pf.seqlen_kv = s;
        pf.batch = std::max<int64_t>(1, f.tokens / s);
        pf.head_dim = d;
        pf.heads = std::max<int64_t>(1, f.hidden / d);
        pf.kv_heads = std::max<int64_t>(1, *pf.heads / f.gqa_ratio);
        Point p{d, s, mask, {}};
        try {
          p.spec = spec_from_flags(pf);
          p.spec.return_lse = p.spec.backward;
          testing::problem_of(p.spec, p.spec.backward ? Pass::backward : Pass::forward, device);
        } catch (const Error& e) {
          ErrorInfo info = e.info();
          info.what = "sweep point " + p.key() + ": " + info.what;
          info.fix += " (no point was run)";
          throw Error(info);
        }
        points.push_back(std::move(p));
      }
  return points;
}

// Seconds the reference needs per FLOP here, from one small forward.
double cpu_seconds_per_flop(const testing::CaseSpec& base, const Policy& policy) {
  testing::CaseSpec s = base;
  s.format = QkvFormat::bshd;
  s.seqlens_q.clear();
  s.seqlens_kv.clear();
  s.batch = 1;
  s.s_q = s.s_kv = 256;
  s.h_q = s.h_kv = 4;
  s.d_qk = s.d_v = 64;
  s.mask = MaskType::no_mask;
  s.bias = BiasType::none;
  s.backward = false;
  try {
    testing::Case c = testing::make_case(s, Device::cpu(), 1);
    const double ms = time_call(false, [&] { forward(c.opts, c.fwd, {}, policy); });
    return ms * 1e-3 / testing::forward_flops(s);
  } catch (const Error&) {
    return 0.0;  // e.g. --backend forces one the CPU lacks: each point will record why
  }
}

// The sweep's FLOPs on the CPU: every timed and warm-up call of each pass.
double sweep_flops(const std::vector<Point>& points, int calls) {
  double total = 0.0;
  for (const Point& p : points)
    total += calls * (testing::forward_flops(p.spec) + (p.spec.backward ? testing::backward_flops(p.spec) : 0.0));
  return total;
}

std::string run_point(const Point& p, Device device, const Policy& policy, int warmup, int iters) {
  const bool gpu = device.is_cuda();
  const testing::CaseSpec& spec = p.spec;
  json::Object row;
  row.integer("d", p.d).integer("seqlen", p.seqlen).str("mask", p.mask).integer("batch", spec.batch);
  row.integer("heads", spec.h_q).integer("kv_heads", spec.h_kv).str("dtype", dtype_name(spec.dtype));
  row.count("fwd_flops", testing::forward_flops(spec));
  if (spec.backward) row.count("bwd_flops", testing::backward_flops(spec));
  try {
    require_host_memory("attn bench", run_host_bytes(spec, !gpu));  // the point records why it was skipped
    std::vector<testing::Case> sets{testing::make_case(spec, device, 1)};
    for (int i = 1; i < input_sets(sets[0]); ++i) sets.push_back(testing::make_case(spec, device, 1 + i));
    const Timing fwd = time_pass(sets, gpu, warmup, iters, [&](testing::Case& c) { return forward(c.opts, c.fwd, {}, policy); });
    const double fms = median(fwd.ms);
    row.str("backend", fwd.selection.backend->name()).str("why", fwd.selection.why);
    row.num("fwd_first_ms", fwd.first_ms).num("fwd_ms", fms).num("fwd_tflops", testing::forward_flops(spec) / (fms * 1e-3) / 1e12);
    if (spec.backward) {
      // Every set needs the out and lse of its own forward.
      for (size_t i = static_cast<size_t>(warmup + iters); i < sets.size(); ++i) forward(sets[i].opts, sets[i].fwd, {}, policy);
      const Timing bwd = time_pass(sets, gpu, warmup, iters, [&](testing::Case& c) { return backward(c.opts, c.bwd, {}, policy); });
      const double bms = median(bwd.ms);
      row.num("bwd_first_ms", bwd.first_ms).num("bwd_ms", bms).num("bwd_tflops", testing::backward_flops(spec) / (bms * 1e-3) / 1e12);
    }
  } catch (const Error& e) {
    row.str("error", e.info().what);
  }
  return row.dump();
}

std::vector<std::string> table_row(const std::string& result) {
  const json::Value r = json::parse(result);
  auto text = [&](const char* key) {
    const json::Value* v = r.get(key);
    return v ? v->text : std::string("-");  // a string's value, or a number's digits
  };
  auto number = [&](const char* key, int decimals) {
    const json::Value* v = r.get(key);
    return v && v->type == json::Value::Type::number ? fixed(v->number, decimals) : std::string("-");
  };
  if (r.get("error"))
    return {text("d"), text("seqlen"), text("mask"), text("batch"), text("heads"), "none: " + text("error"), "-", "-", "-", "-"};
  return {text("d"),           text("seqlen"), text("mask"),          text("batch"),     text("heads"),
          text("backend"),     number("fwd_ms", 3), number("fwd_tflops", 1), number("bwd_ms", 3), number("bwd_tflops", 1)};
}

// ATTN_BENCH_STOP_AFTER=N (for tests): exit non-zero after N points of this
// process, as an interrupted sweep would, so --resume can be tested.
int stop_after() {
  const char* s = std::getenv("ATTN_BENCH_STOP_AFTER");
  return s && *s ? std::atoi(s) : -1;
}

}  // namespace

int bench_command(const BenchFlags& f) {
  const Device device = tensor_device(f.problem);
  const bool gpu = device.is_cuda();
  const Policy policy = policy_from(f.problem);
  const int warmup = std::max(0, f.warmup.value_or(gpu ? 3 : 0));
  const int iters = std::max(1, f.iters.value_or(gpu ? 20 : 2));
  const std::string dev_name = gpu ? query_device(device).name : std::string("cpu");
  const bool to_file = !f.json_path.empty() && f.json_path != "-";
  if (f.resume && !to_file)
    fail(ErrorKind::value, "--resume needs a --json file", f.json_path.empty() ? "(no --json)" : f.json_path,
         "--json FILE", "e.g. attn bench --json bench.json --resume");

  const std::vector<Point> points = plan_sweep(f, device);
  // What must match for --resume to reuse a file's points.
  const std::string sweep = json::Object()
                                .str("device", dev_name)
                                .raw("base", problem_json(spec_from_flags(f.problem)))
                                .str("seqlens", f.seqlens)
                                .str("head_dims", f.head_dims)
                                .str("masks", f.masks)
                                .integer("tokens", f.tokens)
                                .integer("hidden", f.hidden)
                                .integer("gqa_ratio", f.gqa_ratio)
                                .integer("warmup", warmup)
                                .integer("iters", iters)
                                .dump();
  std::map<std::string, std::string> done;
  if (f.resume) done = load_points(f.json_path, sweep);
  std::vector<const Point*> todo;
  for (const Point& p : points)
    if (!done.count(p.key())) todo.push_back(&p);
  if (f.resume)
    std::fprintf(stderr, "bench: --resume: %zu of %zu points already in %s\n", points.size() - todo.size(), points.size(),
                 f.json_path.c_str());

  if (!gpu && !todo.empty()) {
    std::vector<Point> left;
    for (const Point* p : todo) left.push_back(*p);
    const double seconds = sweep_flops(left, warmup + iters) * cpu_seconds_per_flop(points[0].spec, policy);
    if (seconds > 60)
      std::fprintf(stderr,
                   "bench: warning: %zu points on the CPU reference, estimated %s. The reference is exact, not fast;\n"
                   "       shrink the sweep (--sweep-seqlens 128,256 --tokens 1024 --hidden 256) for a quick look.\n",
                   todo.size(), format_seconds(seconds).c_str());
  }

  auto document = [&] {
    std::vector<std::string> results;
    for (const Point& p : points)
      if (done.count(p.key())) results.push_back(done.at(p.key()));
    return json::Object()
        .str("device", dev_name)
        .str("commit", git_commit())
        .str("version", version())
        .integer("warmup", warmup)
        .integer("iters", iters)
        .raw("sweep", sweep)
        .raw("results", json::array(results))
        .pretty();
  };

  const bool progress = progress_wanted(f.quiet);
  const int stop = stop_after();
  const auto start = std::chrono::steady_clock::now();
  int finished = 0;
  for (const Point* p : todo) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string line = "bench: point " + std::to_string(finished + 1) + "/" + std::to_string(todo.size()) + " (" + p->key() + ")";
    if (finished > 0) line += ", elapsed " + format_seconds(elapsed) + ", about " + format_seconds(elapsed / finished * (todo.size() - finished)) + " left";
    if (gpu) {
      progress_line(progress, line);
      done[p->key()] = run_point(*p, device, policy, warmup, iters);
    } else {  // a CPU point can take minutes: tick the seconds
      Ticker ticker(progress, line);
      done[p->key()] = run_point(*p, device, policy, warmup, iters);
    }
    ++finished;
    if (to_file) write_atomically(f.json_path, document());
    if (finished == stop && finished < static_cast<int>(todo.size())) {
      std::fprintf(stderr, "bench: stopped after %d points (ATTN_BENCH_STOP_AFTER, for tests)\n", finished);
      return 3;
    }
  }

  if (!to_file) {
    std::fputs(document().c_str(), stdout);
    return 0;
  }
  if (todo.empty()) write_atomically(f.json_path, document());
  Table table{{"d", "seqlen", "mask", "batch", "heads", "backend", "fwd ms", "fwd TFLOP/s", "bwd ms", "bwd TFLOP/s"}, {}};
  for (const Point& p : points) table.rows.push_back(table_row(done.at(p.key())));
  std::printf("device: %s, commit %s (JSON: %s)\n%s", dev_name.c_str(), git_commit(), f.json_path.c_str(), table.str().c_str());
  return 0;
}

}  // namespace attn::cli
