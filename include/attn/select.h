// Backend selection as data: every backend's verdict on a call, the one chosen,
// and why. ATTN_BACKEND, ATTN_DISABLE and ATTN_LOG act here.
#pragma once

#include <string>
#include <vector>

#include "attn/backend.h"

namespace attn {

struct Verdict {
  std::string backend;
  bool in_build = true;              // false: a planned backend this build lacks
  std::vector<std::string> reasons;  // empty: it can run the call
  bool ok() const { return in_build && reasons.empty(); }
};

// How the caller steers selection. from_env() reads ATTN_BACKEND (force one),
// ATTN_DISABLE (comma list to skip) and ATTN_LOG (1: the choice, 2: every verdict).
struct Policy {
  std::string forced;
  std::vector<std::string> disabled;
  int log_level = 0;
  static Policy from_env();
};

struct Selection {
  const Backend* backend = nullptr;
  std::string why;                // "first supporting backend in sm90's order: ..."
  // In preference order up to the chosen backend (only the forced one when
  // forced); every known backend's at ATTN_LOG=2. explain() gives them all.
  std::vector<Verdict> verdicts;
  DeviceInfo device;
};

// Backends compiled into this build, by name (nullptr if absent).
const std::vector<const Backend*>& registered_backends();
const Backend* find_backend(const std::string& name);
// Every backend attn knows, in the preference order for this device and pass.
std::vector<std::string> preference_order(const DeviceInfo& dev, Pass pass = Pass::forward);
// The order for one problem: preference_order()'s for its pass, except where
// a measured rule moves a backend first (Hopper's backward: flash_sm90 for a
// causal GQA problem at d 128); `rule`, when given, gets that rule's words.
std::vector<std::string> preference_order_for(const DeviceInfo& dev, const Problem& p, std::string* rule = nullptr);

// Every known backend's verdict, in preference order; policy adds its own
// reasons ("disabled by ATTN_DISABLE").
std::vector<Verdict> explain(const Problem& p, const DeviceInfo& dev, const Policy& policy);
// The backend that runs the call, or attn::Error(unsupported) listing every
// backend with its reasons. Logs to stderr per policy.log_level.
Selection select_backend(const Problem& p, const DeviceInfo& dev, const Policy& policy);

// Readable multi-line table of verdicts (used by `attn explain` and errors).
std::string format_verdicts(const std::vector<Verdict>& verdicts);

}  // namespace attn
