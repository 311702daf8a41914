// The unfused passes' entry points. cuBLAS's batched products take their
// operands through device pointer arrays and assume rows aligned to 16 bytes:
// a view that starts or strides off that alignment (a storage offset of one
// bf16 element) gives wrong products without an error. Such calls run on
// contiguous copies in the workspace, and their outputs are copied back.
#include <cuda_runtime.h>

#include "backends/unfused/row_params.h"
#include "backends/unfused/unfused.h"
#include "core/cuda_check.h"

namespace attn::unfused {
namespace {

bool needs_staging(const Problem& p) { return p.row_alignment_bytes < 16; }

int64_t aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

int64_t staging_bytes(const Problem& p) {
  if (!needs_staging(p)) return 0;
  const int64_t elem = static_cast<int64_t>(dtype_size_bytes(p.dtype));
  const int64_t q = aligned(p.total_q * p.h_q * p.d_qk * elem), k = aligned(p.total_kv * p.h_kv * p.d_qk * elem);
  const int64_t v = aligned(p.total_kv * p.h_kv * p.d_v * elem), out = aligned(p.total_q * p.h_q * p.d_v * elem);
  // Forward: q, k, v, out. Backward: those, dout, and dq, dk, dv.
  return p.pass == Pass::forward ? q + k + v + out : 2 * (q + k + v + out);
}

// A contiguous view shaped like t in the workspace.
TensorView staged(const TensorView& t, detail::Carver& ws) {
  void* data = ws.take_bytes(t.numel() * static_cast<int64_t>(dtype_size_bytes(t.dtype)));
  return make_view(data, t.dtype, t.rank, t.shape.data(), nullptr, t.device);
}

// dst = src (same shape, rank 3 or 4, any strides), queued on stream.
void copy(const TensorView& src, const TensorView& dst, void* stream) {
  int64_t shape[4] = {1, 1, 1, 1}, from[4] = {0, 0, 0, 0}, to[4] = {0, 0, 0, 0};
  for (int d = 0; d < src.rank; ++d) {
    const int at = 4 - src.rank + d;
    shape[at] = src.shape[d], from[at] = src.strides_elems[d], to[at] = dst.strides_elems[d];
  }
  launch_copy_strided(src.data, from, dst.data, to, shape, static_cast<int>(dtype_size_bytes(src.dtype)), stream);
}

// An output's staged view, zeroed: rows the products never write (tokens past
// the last packed sequence) come back as zeros, not as workspace garbage.
TensorView staged_output(const TensorView& t, detail::Carver& ws, void* stream) {
  const TensorView s = staged(t, ws);
  ATTN_CUDA(cudaMemsetAsync(s.data, 0, static_cast<size_t>(s.numel()) * dtype_size_bytes(s.dtype),
                            static_cast<cudaStream_t>(stream)));
  return s;
}

TensorView staged_copy(const TensorView& t, detail::Carver& ws, void* stream) {
  const TensorView s = staged(t, ws);
  copy(t, s, stream);
  return s;
}

}  // namespace

int64_t workspace_bytes(const Problem& p) { return staging_bytes(p) + products_workspace_bytes(p); }

void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx) {
  ATTN_CUDA(cudaSetDevice(p.device.index));
  detail::Carver ws(static_cast<char*>(detail::workspace(ctx, p.device.index, workspace_bytes(p))));
  if (!needs_staging(p)) return forward_products(p, args, ws, ctx.stream);
  ForwardArgs a = args;
  a.in.q = staged_copy(args.in.q, ws, ctx.stream);
  a.in.k = staged_copy(args.in.k, ws, ctx.stream);
  a.in.v = staged_copy(args.in.v, ws, ctx.stream);
  a.out = staged_output(args.out, ws, ctx.stream);
  forward_products(p, a, ws, ctx.stream);
  copy(a.out, args.out, ctx.stream);
}

void backward(const Problem& p, const BackwardArgs& args, const RunContext& ctx) {
  ATTN_CUDA(cudaSetDevice(p.device.index));
  detail::Carver ws(static_cast<char*>(detail::workspace(ctx, p.device.index, workspace_bytes(p))));
  if (!needs_staging(p)) return backward_products(p, args, ws, ctx.stream);
  BackwardArgs a = args;
  a.in.q = staged_copy(args.in.q, ws, ctx.stream);
  a.in.k = staged_copy(args.in.k, ws, ctx.stream);
  a.in.v = staged_copy(args.in.v, ws, ctx.stream);
  a.out = staged_copy(args.out, ws, ctx.stream);
  a.dout = staged_copy(args.dout, ws, ctx.stream);
  a.dq = staged_output(args.dq, ws, ctx.stream);
  a.dk = staged_output(args.dk, ws, ctx.stream);
  a.dv = staged_output(args.dv, ws, ctx.stream);
  backward_products(p, a, ws, ctx.stream);
  copy(a.dq, args.dq, ctx.stream);
  copy(a.dk, args.dk, ctx.stream);
  copy(a.dv, args.dv, ctx.stream);
}

}  // namespace attn::unfused
