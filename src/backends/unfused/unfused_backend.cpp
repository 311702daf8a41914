// The `unfused` backend object: what it supports (everything, on CUDA tensors
// of sm_8x / sm_90 in this build, while its score matrices fit) and its memory need.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "backends/common/device_reasons.h"
#include "backends/unfused/unfused.h"

namespace attn::unfused {

int64_t products_workspace_bytes(const Problem& p) {
  const int64_t elem = static_cast<int64_t>(dtype_size_bytes(p.dtype));
  const int64_t scores = p.h_q * p.s_q * p.s_kv;
  auto aligned = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  if (p.pass == Pass::forward)
    return aligned(p.batch * p.h_q * 6 * 8) + aligned(scores * 4) + aligned(scores * elem);
  int64_t bias = 0;
  if (p.bias_grad) bias = aligned(p.bias_shape[0] * p.bias_shape[1] * p.bias_shape[2] * p.bias_shape[3] * 4);
  return aligned(p.batch * p.h_q * 15 * 8) + 2 * aligned(scores * 4) + 2 * aligned(scores * elem) +
         aligned(p.h_kv * p.s_kv * p.d_qk * 4) + aligned(p.h_kv * p.s_kv * p.d_v * 4) + bias;
}

namespace {

std::string gib(int64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return s;
}

class UnfusedBackend final : public Backend {
 public:
  const char* name() const override { return "unfused"; }

  std::vector<std::string> supports(const Problem& p, const DeviceInfo& dev) const override {
    std::vector<std::string> no = detail::gpu_device_reasons(p, dev);
    if (!p.device.is_cuda()) return no;
    if (!(p.dtype == DType::bf16 || p.dtype == DType::f16 || p.dtype == DType::f32))
      no.push_back(std::string("dtype ") + dtype_name(p.dtype) + " is CPU-only; use float32, bfloat16 or float16");
    if (p.deterministic && p.bias_grad)
      no.push_back("deterministic=true with a bias gradient: unfused sums dbias with atomics");
    if (p.deterministic && p.sink_grad)
      no.push_back("deterministic=true with a sink gradient: unfused sums dsink with atomics");
    if (p.s_q > INT32_MAX || p.s_kv > INT32_MAX)
      no.push_back("sequence lengths beyond 2^31 do not fit cuBLAS's int dimensions");
    if (p.capturing && p.has_seqlens)
      no.push_back("under CUDA graph capture with cu_seqlens: unfused plans each sequence's products on the host "
                   "from the lengths, which a captured call cannot read (flash_sm80, flash_sm90 and cudnn read "
                   "them on the device)");
    const int64_t need = workspace_bytes(p);
    int64_t available = dev.global_mem_bytes;
    // Free memory is asked only when the need is a real share of the card, so
    // small calls do not pay for the query.
    if (!dev.simulated && need > dev.global_mem_bytes / 16) {
      size_t free_bytes = 0, total = 0;
      if (cudaSetDevice(p.device.index) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total) == cudaSuccess)
        available = static_cast<int64_t>(free_bytes);
      else
        cudaGetLastError();
    }
    if (need > available * 9 / 10)
      no.push_back("its score matrices need " + gib(need) + " of workspace, more than 90% of the " + gib(available) +
                   " free on " + device_name(p.device) +
                   "; use fewer heads or shorter sequences per call (thd packs sequences without padding), "
                   "or a flash backend, which needs no score matrix");
    return no;
  }

  int64_t forward_workspace_bytes(const Problem& p, const ForwardArgs&) const override {
    return workspace_bytes(p);
  }
  int64_t backward_workspace_bytes(const Problem& p, const BackwardArgs&) const override {
    return workspace_bytes(p);
  }
  void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx) const override {
    unfused::forward(p, args, ctx);
  }
  void backward(const Problem& p, const BackwardArgs& args, const RunContext& ctx) const override {
    unfused::backward(p, args, ctx);
  }
};

}  // namespace

const Backend& backend() {
  static const UnfusedBackend instance;
  return instance;
}

}  // namespace attn::unfused
