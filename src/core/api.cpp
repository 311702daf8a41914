// The public entry points: validate, select, run.
#include "attn/attn.h"
#include "core/validate_internal.h"

namespace attn {

Selection forward(const Options& opts, const ForwardArgs& args, const RunContext& ctx, const Policy& policy) {
  detail::require_tensor_data(args);  // first: validation reads cu_seqlens' values
  const Problem p = validate_forward(opts, args);
  Selection s = select_backend(p, query_device(p.device), policy);
  s.backend->forward(p, args, ctx);
  return s;
}

Selection forward(const Options& opts, const ForwardArgs& args, const RunContext& ctx) {
  return forward(opts, args, ctx, Policy::from_env());
}

Selection backward(const Options& opts, const BackwardArgs& args, const RunContext& ctx, const Policy& policy) {
  detail::require_tensor_data(args);
  const Problem p = validate_backward(opts, args);
  Selection s = select_backend(p, query_device(p.device), policy);
  s.backend->backward(p, args, ctx);
  return s;
}

Selection backward(const Options& opts, const BackwardArgs& args, const RunContext& ctx) {
  return backward(opts, args, ctx, Policy::from_env());
}

const char* version() { return ATTN_VERSION; }
const char* git_commit() { return ATTN_GIT_COMMIT; }

}  // namespace attn
