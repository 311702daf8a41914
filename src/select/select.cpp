// Backend selection: every backend's verdict, the first supporting one in the
// device's preference order (or the forced one), and the reasons as data.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "attn/error.h"
#include "attn/select.h"
#include "core/validate_internal.h"

namespace attn {
namespace {

std::vector<std::string> split_list(const char* s) {
  std::vector<std::string> out;
  if (!s) return out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

void require_known(const std::string& name, const char* source, const std::vector<std::string>& known) {
  if (std::find(known.begin(), known.end(), name) == known.end())
    fail(ErrorKind::value, std::string(source) + " names an unknown backend", name, detail::join(known, ", "),
         "use one of the listed names (`attn explain` lists them with their verdicts)");
}

std::string device_label(const DeviceInfo& dev) {
  if (!dev.device.is_cuda()) return "cpu";
  return "sm" + std::to_string(dev.sm) + (dev.simulated ? " (simulated)" : "");
}

// One backend's verdict on a call, with the policy's own reasons.
Verdict judge(const std::string& name, const Problem& p, const DeviceInfo& dev, const Policy& policy) {
  Verdict v;
  v.backend = name;
  const Backend* b = find_backend(name);
  if (b) {
    v.reasons = b->supports(p, dev);
  } else {
    v.in_build = false;
    v.reasons.push_back("not part of this build");
  }
  if (std::find(policy.disabled.begin(), policy.disabled.end(), name) != policy.disabled.end())
    v.reasons.push_back("disabled by ATTN_DISABLE");
  // A backend with its own dropout pattern (cudnn) must run both passes of a
  // call, or the backward drops other elements than the forward did. Only the
  // caller can promise that, by naming it; automatic choices stay on attn's pattern.
  if (b && p.dropout_p > 0 && !b->matches_reference_dropout() && policy.forced != name)
    v.reasons.push_back("dropout: " + name + " draws its own random pattern, not attn's; name it for both passes "
                        "(ATTN_BACKEND=" + name + " or backend=\"" + name + "\") to use it");
  return v;
}

// The preference order, after checking that the policy names known backends.
std::vector<std::string> checked_order(const DeviceInfo& dev, const Problem& p, const Policy& policy,
                                       std::string* rule = nullptr) {
  std::vector<std::string> order = preference_order_for(dev, p, rule);
  if (!policy.forced.empty()) require_known(policy.forced, "ATTN_BACKEND (or backend=)", order);
  for (const std::string& d : policy.disabled) require_known(d, "ATTN_DISABLE", order);
  return order;
}

}  // namespace

Policy Policy::from_env() {
  Policy p;
  if (const char* f = std::getenv("ATTN_BACKEND")) p.forced = f;
  p.disabled = split_list(std::getenv("ATTN_DISABLE"));
  if (const char* l = std::getenv("ATTN_LOG")) p.log_level = std::atoi(l);
  return p;
}

std::vector<Verdict> explain(const Problem& p, const DeviceInfo& dev, const Policy& policy) {
  std::vector<Verdict> verdicts;
  for (const std::string& name : checked_order(dev, p, policy)) verdicts.push_back(judge(name, p, dev, policy));
  return verdicts;
}

std::string format_verdicts(const std::vector<Verdict>& verdicts) {
  size_t width = 0;
  for (const Verdict& v : verdicts) width = std::max(width, v.backend.size());
  std::string s;
  for (const Verdict& v : verdicts) {
    std::string name = v.backend;
    name.resize(width, ' ');
    if (v.ok()) {
      s += "  " + name + "  yes\n";
      continue;
    }
    for (size_t i = 0; i < v.reasons.size(); ++i)
      s += "  " + (i == 0 ? name : std::string(width, ' ')) + (i == 0 ? "  no: " : "      ") + v.reasons[i] + "\n";
  }
  return s;
}

// Verdicts are asked lazily: a call stops at the first backend that can run it
// (the forced one: only that one), so a backend later in the order costs
// nothing. Every verdict is gathered when the answer is "none", or for ATTN_LOG=2.
Selection select_backend(const Problem& p, const DeviceInfo& dev, const Policy& policy) {
  Selection sel;
  sel.device = dev;
  std::string rule;  // a measured exception to the device's order, if one applies
  const std::vector<std::string> order = checked_order(dev, p, policy, &rule);
  const bool all = policy.log_level >= 2;
  std::vector<std::string> skipped;

  if (!policy.forced.empty()) {
    Verdict forced = judge(policy.forced, p, dev, policy);
    if (!forced.ok())
      fail(ErrorKind::unsupported, "the forced backend " + policy.forced + " cannot run this call",
           describe_problem(p) + "\n" + format_verdicts({forced}),
           "a problem within " + policy.forced + "'s limits",
           "unset ATTN_BACKEND (or backend=) to let attn choose, or change what the reasons name; every backend:\n" +
               format_verdicts(explain(p, dev, policy)));
    sel.verdicts = all ? explain(p, dev, policy) : std::vector<Verdict>{std::move(forced)};
    sel.backend = find_backend(policy.forced);
    sel.why = "forced by ATTN_BACKEND/backend=" + policy.forced;
  } else {
    for (const std::string& name : order) {
      if (sel.backend && !all) break;
      Verdict v = judge(name, p, dev, policy);
      if (!sel.backend) {
        if (v.ok()) sel.backend = find_backend(name);
        else if (v.in_build) skipped.push_back(name + " (" + detail::join(v.reasons, "; ") + ")");
      }
      sel.verdicts.push_back(std::move(v));
    }
    if (!sel.backend)
      fail(ErrorKind::unsupported, "no attention backend can run this call",
           describe_problem(p) + " on " + dev.name + "\n" + format_verdicts(sel.verdicts),
           "at least one backend whose limits include the call",
           "change one of the obstacles listed for a backend above (each reason names the value and the "
           "limit), or run on a device the reasons allow");
    if (!dev.device.is_cuda())
      sel.why = "the tensors are in host memory: the CPU reference runs" +
                std::string(cuda_device_count() == 0 ? " (this machine has no CUDA device)" : "");
    else
      sel.why = "first supporting backend in " + device_label(dev) + "'s order (" + detail::join(order, " > ") + ")" +
                (rule.empty() ? "" : ", " + rule);
    if (!skipped.empty()) sel.why += "; skipped: " + detail::join(skipped, "; ");
  }
  if (policy.log_level >= 1)
    std::fprintf(stderr, "attn: %s -> %s: %s\n", describe_problem(p).c_str(), sel.backend->name(), sel.why.c_str());
  if (all) std::fprintf(stderr, "%s", format_verdicts(sel.verdicts).c_str());
  return sel;
}

}  // namespace attn
