// The public entry points: validate, select, run.
#include "attn/attn.h"
#include "core/validate_internal.h"
#include "core/workspace.h"

namespace attn {
namespace {

Problem validate(const Options& opts, const ForwardArgs& args) { return validate_forward(opts, args); }
Problem validate(const Options& opts, const BackwardArgs& args) { return validate_backward(opts, args); }

bool on_device(const TensorView& t) { return t.defined() && t.device.is_cuda(); }

// Reading cu_seqlens back (check_seqlens) waits on the host, which a call
// inside a CUDA graph capture cannot do.
void require_capturable(const Options& o, const Inputs& in) {
  if (o.check_seqlens && (on_device(in.cu_seqlens_q) || on_device(in.cu_seqlens_kv)))
    fail(ErrorKind::value,
         "check_seqlens reads cu_seqlens back to the host, which a call inside a CUDA graph capture cannot do",
         "check_seqlens=true while the call's stream is capturing",
         "check_seqlens=false with max_seqlen_q and max_seqlen_kv given",
         "turn check_seqlens off for captured calls (Python: check_seqlens=False) and pass max_seqlen_q / "
         "max_seqlen_kv; check the lengths once outside capture if they need checking");
}

// Validation and selection, as every entry point does them. With a context,
// a call whose stream is capturing a CUDA graph is marked so (CPU calls never
// ask CUDA).
template <typename Args>
std::pair<Problem, Selection> plan_call(const Options& opts, const Args& args, const RunContext* ctx,
                                        const Policy& policy) {
  detail::require_tensor_data(args);  // first: validation reads cu_seqlens' values
  const bool capturing = ctx && args.in.q.device.is_cuda() && detail::stream_is_capturing(ctx->stream);
  if (capturing) require_capturable(opts, args.in);
  Problem p = validate(opts, args);
  p.capturing = capturing;
  Selection s = select_backend(p, query_device(p.device), policy);
  return {p, std::move(s)};
}

}  // namespace

Selection forward(const Options& opts, const ForwardArgs& args, const RunContext& ctx, const Policy& policy) {
  auto [p, s] = plan_call(opts, args, &ctx, policy);
  s.backend->forward(p, args, ctx);
  return s;
}

Selection forward(const Options& opts, const ForwardArgs& args, const RunContext& ctx) {
  return forward(opts, args, ctx, Policy::from_env());
}

Selection backward(const Options& opts, const BackwardArgs& args, const RunContext& ctx, const Policy& policy) {
  auto [p, s] = plan_call(opts, args, &ctx, policy);
  s.backend->backward(p, args, ctx);
  return s;
}

Selection backward(const Options& opts, const BackwardArgs& args, const RunContext& ctx) {
  return backward(opts, args, ctx, Policy::from_env());
}

int64_t forward_workspace_size(const Options& opts, const ForwardArgs& args, const Policy& policy) {
  const auto [p, s] = plan_call(opts, args, nullptr, policy);
  return s.backend->forward_workspace_bytes(p, args);
}

int64_t forward_workspace_size(const Options& opts, const ForwardArgs& args) {
  return forward_workspace_size(opts, args, Policy::from_env());
}

int64_t backward_workspace_size(const Options& opts, const BackwardArgs& args, const Policy& policy) {
  const auto [p, s] = plan_call(opts, args, nullptr, policy);
  return s.backend->backward_workspace_bytes(p, args);
}

int64_t backward_workspace_size(const Options& opts, const BackwardArgs& args) {
  return backward_workspace_size(opts, args, Policy::from_env());
}

const char* version() { return ATTN_VERSION; }
const char* git_commit() { return ATTN_GIT_COMMIT; }

}  // namespace attn
