// The `reference` backend object: runs every feature of docs/SEMANTICS.md on
// host tensors, and says so in words when the tensors live elsewhere.
#include <string>
#include <vector>

#include "backends/reference/reference.h"

namespace attn::reference {
namespace {

// The problem with dropout's seed and offset read from Inputs::rng_state (a
// host tensor here) when the caller keeps them there.
Problem with_rng_state(const Problem& p, const Inputs& in) {
  if (!p.rng_state_in_memory) return p;
  Problem q = p;
  const auto* state = static_cast<const int64_t*>(in.rng_state.data);
  q.seed = static_cast<uint64_t>(state[0]);
  q.offset = static_cast<uint32_t>(state[1]);
  q.rng_state_in_memory = false;
  return q;
}

class ReferenceBackend final : public Backend {
 public:
  const char* name() const override { return "reference"; }

  std::vector<std::string> supports(const Problem& p, const DeviceInfo& /*dev*/) const override {
    std::vector<std::string> reasons;
    if (p.device.is_cuda())
      reasons.push_back("runs on the CPU; the tensors are on " + device_name(p.device) +
                        " (copy them to the host, or use `attn check`)");
    if (!(p.dtype == DType::f32 || p.dtype == DType::f16 || p.dtype == DType::bf16 ||
          p.dtype == DType::f64))
      reasons.push_back(std::string("dtype=") + dtype_name(p.dtype) +
                        " is not one of float32, float16, bfloat16, float64");
    return reasons;
  }

  void forward(const Problem& p, const ForwardArgs& args, const RunContext& /*ctx*/) const override {
    reference::forward(with_rng_state(p, args.in), args);
  }

  void backward(const Problem& p, const BackwardArgs& args, const RunContext& /*ctx*/) const override {
    reference::backward(with_rng_state(p, args.in), args);
  }
};

}  // namespace

const Backend& backend() {
  static const ReferenceBackend instance;
  return instance;
}

}  // namespace attn::reference
