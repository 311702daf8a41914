// Per-sequence lengths and offsets of a call (see sequences.h).
#include "core/sequences.h"

#include <cuda_runtime.h>

#include <string>

#include "attn/error.h"

namespace attn::detail {

std::vector<int32_t> read_int32(const TensorView& t) {
  const int64_t n = t.numel();
  std::vector<int32_t> host(static_cast<size_t>(n));
  if (n == 0) return host;
  const int64_t stride = t.strides_elems[0];
  if (!t.device.is_cuda()) {
    for (int64_t i = 0; i < n; ++i) host[i] = t.as<const int32_t>()[i * stride];
    return host;
  }
  // The values may come from work on any stream, including non-blocking ones
  // (PyTorch's side streams) that a copy on the default stream would not wait
  // for: wait for the whole device first. Callers that cannot afford this turn
  // check_seqlens off and pass max_seqlen.
  cudaError_t err = cudaSetDevice(t.device.index);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err == cudaSuccess)
    err = cudaMemcpy2D(host.data(), sizeof(int32_t), t.data, stride * sizeof(int32_t),
                       sizeof(int32_t), n, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess)
    fail(ErrorKind::runtime, "reading an int32 tensor from " + device_name(t.device) + " failed",
         cudaGetErrorString(err), "a readable device pointer",
         "check that the tensor lives on the stated device");
  return host;
}

Sequences sequences_of(const Problem& p, const Inputs& in) {
  Sequences s;
  const auto n = static_cast<size_t>(p.batch);
  s.len_q.assign(n, p.s_q);
  s.len_kv.assign(n, p.s_kv);
  s.start_q.assign(n, 0);
  s.start_kv.assign(n, 0);
  if (!p.has_seqlens) return s;
  const std::vector<int32_t> cq = read_int32(in.cu_seqlens_q);
  const std::vector<int32_t> ck = read_int32(in.cu_seqlens_kv);
  for (size_t b = 0; b < n; ++b) {
    s.len_q[b] = cq[b + 1] - cq[b];
    s.len_kv[b] = ck[b + 1] - ck[b];
    if (p.qkv_format == QkvFormat::thd) {
      s.start_q[b] = cq[b];
      s.start_kv[b] = ck[b];
    }
  }
  return s;
}

}  // namespace attn::detail
