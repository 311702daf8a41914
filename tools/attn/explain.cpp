// `attn explain`: every backend's verdict on a problem, from flags alone (no
// tensors, no GPU needed); --device sm80 etc. asks as if on that architecture.
#include <cstdio>
#include <cstdlib>

#include "attn/cp.h"
#include "attn/error.h"
#include "commands.h"
#include "json.h"
#include "report.h"

namespace attn::cli {
namespace {

// The device the verdicts are for: --device (a CUDA device, the CPU, or a
// simulated architecture), else what run would use, honouring ATTN_SIMULATE_DEVICE.
DeviceInfo explain_device(const std::optional<std::string>& flag) {
  if (!flag) {
    const char* sim = std::getenv("ATTN_SIMULATE_DEVICE");
    if ((sim && *sim) || cuda_device_count() > 0) return query_device(Device::cuda(0));
    return query_device(Device::cpu());
  }
  if (flag->rfind("sm", 0) == 0) return simulated_device(*flag);
  const char* sim = std::getenv("ATTN_SIMULATE_DEVICE");
  if (sim && *sim && flag->rfind("cuda", 0) == 0) return query_device(Device::cuda(0));  // no GPU needed
  ProblemFlags just_device;
  just_device.device = flag;
  return query_device(tensor_device(just_device));
}

struct Choice {
  std::string backend;  // empty: none can run the call
  std::string why;
};

Choice choose(const Problem& p, const DeviceInfo& dev, Policy policy) {
  policy.log_level = 0;  // explain prints its own report
  try {
    const Selection s = select_backend(p, dev, policy);
    return {s.backend->name(), s.why};
  } catch (const Error& e) {
    return {"", e.info().what};
  }
}

void print_text(const Problem& p, const DeviceInfo& dev, const testing::CaseSpec& spec,
                const std::vector<Verdict>& verdicts, const Choice& choice) {
  std::printf("problem: %s\n", describe_problem(p).c_str());
  std::string device = dev.name;
  if (dev.sm && !dev.simulated) device += " (sm" + std::to_string(dev.sm) + ")";
  std::printf("device:  %s\n", device.c_str());
  std::printf("work:    %s visible pairs, forward %s FLOP\n",
              testing::decimal(testing::visible_pairs_wide(spec)).c_str(), sci(testing::forward_flops(spec)).c_str());
  std::printf("verdicts, in this device's preference order:\n%s", format_verdicts(verdicts).c_str());
  if (choice.backend.empty())
    std::printf("choice:  none: %s\n", choice.why.c_str());
  else
    std::printf("choice:  %s: %s\n", choice.backend.c_str(), choice.why.c_str());
}

void print_json(const Problem& p, const DeviceInfo& dev, const testing::CaseSpec& spec,
                const std::vector<Verdict>& verdicts, const Choice& choice, const std::string* cp_plan) {
  json::Object o;
  o.str("problem", describe_problem(p));
  o.object("device", json::Object().str("name", dev.name).integer("sm", dev.sm).boolean("simulated", dev.simulated));
  o.raw("visible_pairs", testing::decimal(testing::visible_pairs_wide(spec)))
      .count("forward_flops", testing::forward_flops(spec));
  o.raw("chosen", choice.backend.empty() ? std::string("null") : json::str(choice.backend)).str("why", choice.why);
  std::vector<std::string> items;
  for (const Verdict& v : verdicts) {
    std::vector<std::string> reasons;
    for (const std::string& r : v.reasons) reasons.push_back(json::str(r));
    items.push_back(json::Object()
                        .str("backend", v.backend)
                        .boolean("in_build", v.in_build)
                        .boolean("ok", v.ok())
                        .raw("reasons", json::array(reasons))
                        .dump());
  }
  o.raw("verdicts", json::array(items));
  if (cp_plan) o.str("cp_plan", *cp_plan);
  std::fputs(o.pretty().c_str(), stdout);
}

// The context-parallel plan over `cp` ranks (attn/cp.h), or the rule the
// sequence lengths break, as the ring would report it before any transfer.
std::string cp_report(const Problem& p, const testing::CaseSpec& spec, int cp) {
  try {
    // Uniform lengths: the first sequence speaks for all, without listing 2^31 of them.
    const std::vector<int64_t> lengths =
        spec.seqlens_q.empty() ? std::vector<int64_t>(spec.batch > 0 ? 1 : 0, spec.s_q) : spec.seqlens_q;
    cp::check_lengths(lengths, cp);
  } catch (const Error& e) {
    return std::string(e.what());
  }
  Options opts;
  opts.qkv_format = p.qkv_format;
  opts.mask = p.mask;
  opts.window.left = p.window_left;
  opts.window.right = p.window_right;
  const int64_t chunk = p.qkv_format == QkvFormat::thd ? 0 : p.s_q / (2 * cp);  // thd: per sequence
  return cp::describe_plan(opts, cp, chunk);
}

}  // namespace

int explain_command(const ExplainFlags& f) {
  const testing::CaseSpec spec = spec_from_flags(f.problem);
  const DeviceInfo dev = explain_device(f.problem.device);
  const Problem p = testing::problem_of(spec, spec.backward ? Pass::backward : Pass::forward, dev.device);
  const Policy policy = policy_from(f.problem);
  const std::vector<Verdict> verdicts = explain(p, dev, policy);
  const Choice choice = choose(p, dev, policy);
  const std::optional<std::string> cp_plan =
      f.cp ? std::optional<std::string>(cp_report(p, spec, *f.cp)) : std::nullopt;
  if (f.json) {
    print_json(p, dev, spec, verdicts, choice, cp_plan ? &*cp_plan : nullptr);
  } else {
    print_text(p, dev, spec, verdicts, choice);
    if (cp_plan) std::printf("%s", cp_plan->c_str());
  }
  return 0;
}

}  // namespace attn::cli
