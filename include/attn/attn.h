// attn's public entry points: validate a call, choose a backend, run it.
#pragma once

#include "attn/backend.h"
#include "attn/error.h"
#include "attn/kvcache.h"
#include "attn/problem.h"
#include "attn/rotary.h"
#include "attn/select.h"
#include "attn/tensor.h"

namespace attn {

// Validate, select (Policy::from_env() unless given), run. Returns the selection
// so callers can report which backend ran and why. Throws attn::Error.
Selection forward(const Options& opts, const ForwardArgs& args, const RunContext& ctx = {});
Selection forward(const Options& opts, const ForwardArgs& args, const RunContext& ctx,
                  const Policy& policy);
Selection backward(const Options& opts, const BackwardArgs& args, const RunContext& ctx = {});
Selection backward(const Options& opts, const BackwardArgs& args, const RunContext& ctx,
                   const Policy& policy);

// Device scratch bytes the call would take (RunContext::workspace): validates
// and selects exactly as forward() / backward() do, and asks the chosen
// backend; 0 when it needs none. Query once per shape, outside graph capture.
int64_t forward_workspace_size(const Options& opts, const ForwardArgs& args);
int64_t forward_workspace_size(const Options& opts, const ForwardArgs& args, const Policy& policy);
int64_t backward_workspace_size(const Options& opts, const BackwardArgs& args);
int64_t backward_workspace_size(const Options& opts, const BackwardArgs& args, const Policy& policy);

// The library's version and the commit it was built from (for benchmark records).
const char* version();
const char* git_commit();

}  // namespace attn
