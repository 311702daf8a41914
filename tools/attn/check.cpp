// `attn check`: every backend that supports a problem runs on the same inputs
// and is compared with the reference on fp64 copies of them. Where only the
// reference can run (no GPU), the reference is checked on its own terms:
// outputs written and finite, empty rows zero, gradients vs finite differences.
// Prints text, or with --json one JSON object with the same rows and verdict.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "attn/attn.h"
#include "attn/mask_rule.h"
#include "commands.h"
#include "core/sequences.h"
#include "host_memory.h"
#include "json.h"
#include "progress.h"
#include "report.h"
#include "testing/compare.h"

namespace attn::cli {
namespace {

using testing::Case;
using testing::CaseSpec;
using testing::Comparison;
using testing::TensorBuffer;
using testing::Tolerance;

// What check found: table rows of comparisons and one line per other check.
struct Report {
  Table table{{"backend", "device", "tensor", "pass", "max abs", "max rel", "rel frob", "bad", "nan", "elements"}, {}};
  std::vector<std::string> comparisons;  // the table's rows as JSON objects
  std::vector<std::pair<bool, std::string>> checks;
  int failures = 0;

  void add(const std::string& backend, const std::string& device, const std::string& tensor, const Comparison& c) {
    table.rows.push_back({backend, device, tensor, c.pass ? "ok" : "FAIL", sci(c.max_abs), sci(c.max_rel),
                          sci(c.rel_frobenius), std::to_string(c.bad), std::to_string(c.nan), std::to_string(c.count)});
    comparisons.push_back(json::Object()
                              .str("backend", backend)
                              .str("device", device)
                              .str("tensor", tensor)
                              .boolean("pass", c.pass)
                              .num("max_abs", c.max_abs)
                              .num("max_rel", c.max_rel)
                              .num("rel_frobenius", c.rel_frobenius)
                              .integer("bad", c.bad)
                              .integer("nan", c.nan)
                              .integer("elements", c.count)
                              .dump());
    if (!c.pass) ++failures;
  }
  void note(bool ok, const std::string& text) {
    checks.emplace_back(ok, text);
    if (!ok) ++failures;
  }
};

struct Output {
  const char* name;
  const TensorBuffer* buffer;
  bool gradient;
};

// The outputs a case's passes write, in table order.
std::vector<Output> outputs_of(const Case& c) {
  std::vector<Output> outs = {{"out", &c.out, false}, {"lse", &c.lse, false}};
  if (c.max_logit.view().defined()) outs.push_back({"max_logit", &c.max_logit, false});
  if (c.spec.backward)
    for (Output o : {Output{"dq", &c.dq, true}, Output{"dk", &c.dk, true}, Output{"dv", &c.dv, true},
                     Output{"dbias", &c.dbias, true}, Output{"dsink", &c.dsink, true}})
      if (o.buffer->view().defined()) outs.push_back(o);
  return outs;
}

// Runs exactly `backend`, whatever ATTN_BACKEND says: check runs every
// candidate in turn (ATTN_DISABLE and --backend narrow the candidates).
Policy forcing(const std::string& backend) {
  Policy p;
  p.forced = backend;
  return p;
}

void run_passes(Case& c, const Policy& policy) {
  forward(c.opts, c.fwd, {}, policy);
  if (c.spec.backward) backward(c.opts, c.bwd, {}, policy);
}

// Which query rows (b, pos, h) see at least one key: the window and lengths,
// and for arbitrary masks the mask tensor's bits.
class RowVisibility {
 public:
  explicit RowVisibility(const Case& c) : c_(c), p_(validate_forward(c.opts, c.fwd)), seq_(detail::sequences_of(p_, c.fwd.in)) {
    if (c.attn_mask.view().defined()) mask_ = c.attn_mask.to_doubles();
  }
  const Problem& problem() const { return p_; }
  const detail::Sequences& sequences() const { return seq_; }
  // Rows of sequence b in the q-like tensors: its length in thd, the padded s_q otherwise.
  int64_t rows(int64_t b) const { return p_.qkv_format == QkvFormat::thd ? seq_.len_q[b] : p_.s_q; }

  bool has_keys(int64_t b, int64_t pos, int64_t h) const {
    const int64_t lq = seq_.len_q[b], lkv = seq_.len_kv[b];
    const int64_t shift = alignment_shift<int64_t>(p_.bottom_right, lq, lkv);
    const KeyRange<int64_t> r = visible_keys<int64_t>(pos, lq, lkv, shift, p_.window_left, p_.window_right);
    if (mask_.empty()) return !r.empty();
    for (int64_t j = r.begin; j < r.end; ++j)
      if (mask_[detail::broadcast_offset(c_.attn_mask.view(), b, h, pos, j)] != 0.0) return true;
    return false;
  }

 private:
  const Case& c_;
  Problem p_;
  detail::Sequences seq_;
  std::vector<double> mask_;
};

bool all_finite(const std::vector<double>& xs) {
  return std::all_of(xs.begin(), xs.end(), [](double x) { return std::isfinite(x); });
}

// The lse of a row that sees no key: the head's sink logit (-inf without one).
std::vector<double> empty_row_lse(const Case& c) {
  if (c.spec.softmax_type == SoftmaxType::learnable) return c.sink.to_doubles();
  const double t = c.spec.softmax_type == SoftmaxType::off_by_one ? 0.0 : -INFINITY;
  return std::vector<double>(static_cast<size_t>(c.spec.h_q), t);
}

// (a) every element written and finite (lse -inf exactly on rows without keys);
// (c) rows with no visible key: out = 0, lse = the sink logit (-inf without a sink), dq = 0.
void structural_checks(const std::string& who, const Case& c, Report& r) {
  int64_t poisoned = 0;
  std::string names;
  for (const Output& o : outputs_of(c)) {
    const std::vector<double> xs = o.buffer->to_doubles();
    poisoned += std::count_if(xs.begin(), xs.end(), [](double x) { return std::isnan(x); });
    names += (names.empty() ? "" : ", ") + std::string(o.name);
  }
  r.note(poisoned == 0, who + ": (a) every element of " + names + " written (" + std::to_string(poisoned) +
                            " NaN-poisoned elements left)");

  const RowVisibility vis(c);
  const Problem& p = vis.problem();
  const std::vector<double> out = c.out.to_doubles(), lse = c.lse.to_doubles();
  const std::vector<double> dq = c.spec.backward ? c.dq.to_doubles() : std::vector<double>{};
  const std::vector<double> sink = empty_row_lse(c);
  int64_t rows = 0, empty = 0, bad_finite = 0, bad_empty = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t pos = 0; pos < vis.rows(b); ++pos)
      for (int64_t h = 0; h < p.h_q; ++h) {
        const int64_t start = vis.sequences().start_q[b];
        const int64_t o = detail::row_offset(c.out.view(), p.qkv_format, start, b, pos, h);
        const double l = lse[detail::lse_offset(c.lse.view(), p.qkv_format, start, b, pos, h)];
        ++rows;
        if (!vis.has_keys(b, pos, h)) {
          ++empty;
          bool zero = l == static_cast<float>(sink[h]);
          for (int64_t x = 0; x < p.d_v; ++x) zero = zero && out[o + x] == 0.0;
          if (!dq.empty()) {
            const int64_t g = detail::row_offset(c.dq.view(), p.qkv_format, start, b, pos, h);
            for (int64_t x = 0; x < p.d_qk; ++x) zero = zero && dq[g + x] == 0.0;
          }
          bad_empty += !zero;
          continue;
        }
        bool finite = std::isfinite(l);
        for (int64_t x = 0; x < p.d_v; ++x) finite = finite && std::isfinite(out[o + x]);
        bad_finite += !finite;
      }
  bool grads_finite = true;
  for (const Output& o : outputs_of(c))
    if (o.gradient) grads_finite = grads_finite && all_finite(o.buffer->to_doubles());
  r.note(bad_finite == 0 && grads_finite,
         who + ": (a) finite values: out and lse on the " + std::to_string(rows - empty) + " rows with a visible key" +
             (c.spec.backward ? ", every gradient element" : "") + " (" + std::to_string(bad_finite) + " bad rows)");
  const char* empty_lse = c.spec.softmax_type == SoftmaxType::vanilla ? "-inf" : "the sink logit";
  r.note(bad_empty == 0, who + ": (c) the " + std::to_string(empty) + " rows with no visible key have out = 0, lse = " +
                             empty_lse +
                             (c.spec.backward ? ", dq = 0" : "") + " (" + std::to_string(bad_empty) + " bad rows)");
}

// Finite differences in fp64: the gradient of loss = sum(out * dout) with
// respect to sampled elements of q, k, v (and bias), by central differences of
// the reference forward, against the reference backward's analytic gradient.
class FiniteDifferences {
 public:
  FiniteDifferences(const Case& ref64, uint64_t seed) : c_(testing::copy_inputs_to(ref64, Device::cpu())), rng_(seed) {
    dout_ = ref64.dout.to_doubles();
  }

  // Compares the analytic gradient `grad` of `input` at `samples` elements.
  Comparison check(TensorBuffer& input, const std::vector<double>& grad, int samples) {
    std::vector<double> analytic, numeric;
    for (int64_t idx : pick(grad, samples)) {
      double& x = static_cast<double*>(input.data())[idx];
      const double x0 = x;
      x = x0 + kStep;
      const double up = loss();
      x = x0 - kStep;
      const double down = loss();
      x = x0;
      analytic.push_back(grad[idx]);
      numeric.push_back((up - down) / (2 * kStep));
    }
    // Central differences err by O(step^2) plus rounding of the summed loss.
    return testing::compare(analytic, numeric, Tolerance{1e-6, 1e-4, 1e-4});
  }

  Case& inputs() { return c_; }

 private:
  static constexpr double kStep = 1e-3;

  double loss() {
    forward(c_.opts, c_.fwd, {}, forcing("reference"));
    const std::vector<double> out = c_.out.to_doubles();
    double s = 0.0;
    for (size_t i = 0; i < out.size(); ++i) s += out[i] * dout_[i];
    return s;
  }

  // Mostly elements with a non-zero gradient (where an error shows), plus one
  // whose gradient is zero (which must stay zero).
  std::vector<int64_t> pick(const std::vector<double>& grad, int samples) {
    std::vector<int64_t> nonzero, zero;
    for (size_t i = 0; i < grad.size(); ++i) (grad[i] != 0.0 ? nonzero : zero).push_back(static_cast<int64_t>(i));
    std::shuffle(nonzero.begin(), nonzero.end(), rng_);
    std::shuffle(zero.begin(), zero.end(), rng_);
    const int want_zero = zero.empty() ? 0 : std::max(1, samples - static_cast<int>(nonzero.size()));
    std::vector<int64_t> picked(zero.begin(), zero.begin() + std::min<int64_t>(want_zero, zero.size()));
    for (int64_t i : nonzero) {
      if (static_cast<int>(picked.size()) >= samples) break;
      picked.push_back(i);
    }
    return picked;
  }

  Case c_;
  std::mt19937_64 rng_;
  std::vector<double> dout_;
};

// Finite-difference samples per gradient: the requested number, or by default
// as many (up to 6) as keep the extra forward passes under ~20 GFLOP.
int fd_samples(const CheckFlags& f, const CaseSpec& spec, bool self_check) {
  if (f.fd_samples) return std::max(0, *f.fd_samples);
  if (!self_check || !spec.backward) return 0;
  const double per_sample = 2 * testing::forward_flops(spec) * 4;  // two passes, up to 4 inputs
  return static_cast<int>(std::clamp(20e9 / std::max(per_sample, 1.0), 1.0, 6.0));
}

void finite_difference_checks(const Case& ref64, int samples, uint64_t seed, Report& r) {
  FiniteDifferences fd(ref64, seed);
  Case& in = fd.inputs();
  const std::string label = " vs central differences (" + std::to_string(samples) + " samples)";
  r.add("reference", "cpu (fp64)", "dq" + label, fd.check(in.q, ref64.dq.to_doubles(), samples));
  r.add("reference", "cpu (fp64)", "dk" + label, fd.check(in.k, ref64.dk.to_doubles(), samples));
  r.add("reference", "cpu (fp64)", "dv" + label, fd.check(in.v, ref64.dv.to_doubles(), samples));
  if (ref64.dbias.view().defined())
    r.add("reference", "cpu (fp64)", "dbias" + label, fd.check(in.bias, ref64.dbias.to_doubles(), samples));
}

// Runs `backend` on a copy of the host inputs on `device` and compares each
// output with the fp64 reference; then the structural checks.
void check_backend(const std::string& backend, Device device, const Case& host, const Case& ref64, Report& r) {
  Case c = testing::copy_inputs_to(host, device);
  const std::string dev = device_name(device) + " (" + dtype_name(c.spec.dtype) + ")";
  try {
    run_passes(c, forcing(backend));
  } catch (const Error& e) {
    r.note(false, backend + ": failed to run: " + e.info().what + " (" + e.info().got + ")");
    return;
  }
  const std::vector<Output> outs = outputs_of(c), refs = outputs_of(ref64);
  for (size_t i = 0; i < outs.size(); ++i)  // the same list: both cases come from one spec
    r.add(backend, dev, outs[i].name,
          testing::compare(outs[i].buffer->to_doubles(), refs[i].buffer->to_doubles(),
                           testing::tolerance_for(c.spec.dtype, outs[i].gradient)));
  structural_checks(backend, c, r);
}

// GPU backends that can run the problem, in preference order (--backend: that one).
std::vector<std::string> gpu_candidates(const CheckFlags& f, const CaseSpec& spec, Device device,
                                        std::vector<std::string>& skipped, std::FILE* out) {
  if (!device.is_cuda()) return {};
  const Problem p = testing::problem_of(spec, spec.backward ? Pass::backward : Pass::forward, device);
  Policy policy = Policy::from_env();
  policy.forced.clear();
  std::vector<std::string> names;
  for (const Verdict& v : explain(p, query_device(device), policy)) {
    if (!v.ok() || v.backend == "reference" || (f.problem.backend && *f.problem.backend != v.backend)) continue;
    if (spec.dropout_p > 0 && !find_backend(v.backend)->matches_reference_dropout()) {
      std::fprintf(out, "skipped:    %s: its dropout draws its own random pattern, not attn's, so it cannot match\n"
                        "            the reference element by element (its tests check the statistics)\n",
                   v.backend.c_str());
      skipped.push_back(v.backend);
      continue;
    }
    names.push_back(v.backend);
  }
  return names;
}

}  // namespace

int check_command(const CheckFlags& f) {
  CaseSpec spec = spec_from_flags(f.problem);
  spec.return_lse = true;
  const Device device = tensor_device(f.problem);
  const Problem p = testing::problem_of(spec, spec.backward ? Pass::backward : Pass::forward, Device::cpu());
  std::FILE* out = text_stream(f.json);
  std::vector<std::string> skipped;
  const std::vector<std::string> candidates = gpu_candidates(f, spec, device, skipped, out);
  const bool self_check = candidates.empty();
  if (self_check && f.problem.backend && *f.problem.backend != "reference")
    fail(ErrorKind::unsupported, "the backend " + *f.problem.backend + " cannot run this problem on " + device_name(device),
         *f.problem.backend, "a backend whose verdict is yes",
         "see `attn explain` with the same flags (and --device) for its reasons");

  std::fprintf(out, "attn check: %s\n", describe_problem(p).c_str());
  std::fprintf(out, "oracle:     the reference backend on fp64 copies of the inputs\n");
  note_if_slow_on_cpu(spec, out);
  // Progress only for the CPU reference's passes, which can take minutes.
  const bool progress = progress_wanted(f.quiet);
  std::fflush(out);
  require_host_memory("attn check", check_host_bytes(spec));
  const Case host = testing::make_case(spec, Device::cpu(), data_seed(f.problem));
  Case ref64 = testing::copy_inputs_to(host, Device::cpu(), DType::f64);
  {
    Ticker ticker(progress, "oracle: the reference in fp64 on the CPU");
    run_passes(ref64, forcing("reference"));
  }

  Report report;
  for (const std::string& name : candidates) check_backend(name, device, host, ref64, report);
  if (self_check) {
    std::fprintf(out, "note:       %s, so only the reference backend can run. This checks the reference\n"
                "            on its own terms instead: (a) every output element written and finite,\n"
                "            (b) its gradients against central finite differences in fp64, (c) rows with\n"
                "            no visible key giving out = 0, lse = -inf (a sink's logit with one), dq = 0;\n"
                "            and its %s outputs against its fp64 ones. No GPU backend was checked.\n",
                device.is_cuda() ? "no GPU backend supports this problem"
                : cuda_device_count() == 0 ? "this machine has no CUDA device"
                                           : "--device cpu",
                dtype_name(spec.dtype));
    std::fflush(out);
    {
      Ticker ticker(progress, std::string("reference in ") + dtype_name(spec.dtype) + " on the CPU");
      check_backend("reference", Device::cpu(), host, ref64, report);
    }
    structural_checks("reference (fp64)", ref64, report);
  }
  if (const int samples = fd_samples(f, spec, self_check); samples > 0 && spec.backward) {
    Ticker ticker(progress, "finite differences: " + std::to_string(samples) + " samples per gradient");
    finite_difference_checks(ref64, samples, data_seed(f.problem) + 1, report);
  }

  std::fprintf(out, "\n%s\n", report.table.str().c_str());
  for (const auto& [ok, text] : report.checks) std::fprintf(out, "%-4s  %s\n", ok ? "ok" : "FAIL", text.c_str());
  const size_t total = report.table.rows.size() + report.checks.size();
  if (report.failures == 0)
    std::fprintf(out, "\nPASS: all %zu checks\n", total);
  else
    std::fprintf(out, "\nFAIL: %d of %zu checks failed\n", report.failures, total);
  if (f.json) {
    std::vector<std::string> names, skipped_json, checks;
    for (const std::string& n : candidates) names.push_back(json::str(n));
    for (const std::string& n : skipped) skipped_json.push_back(json::str(n));
    for (const auto& [ok, text] : report.checks) checks.push_back(json::Object().boolean("ok", ok).str("what", text).dump());
    json::Object doc;
    doc.str("command", "check").raw("problem", problem_json(spec)).str("description", describe_problem(p));
    doc.str("device", device_name(device)).str("oracle", "reference, fp64, cpu");
    doc.raw("backends", json::array(names)).raw("skipped", json::array(skipped_json)).boolean("self_check", self_check);
    doc.raw("comparisons", json::array(report.comparisons)).raw("checks", json::array(checks));
    doc.integer("total", static_cast<int64_t>(total)).integer("failures", report.failures);
    doc.str("verdict", report.failures == 0 ? "pass" : "fail");
    std::fputs(doc.pretty().c_str(), stdout);
  }
  return report.failures == 0 ? 0 : 1;
}

}  // namespace attn::cli
