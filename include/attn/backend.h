// The backend interface and the device description backends judge a call by.
// Each backend says whether it can run a Problem (and, if not, why in words a
// person can act on), then runs it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attn/problem.h"

namespace attn {

// What selection knows about the device a call runs on. For the CPU sm == 0.
// A simulated device (ATTN_SIMULATE_DEVICE=sm80, `attn explain --device sm80`)
// answers supports() questions without the hardware.
struct DeviceInfo {
  Device device{};
  std::string name = "cpu";
  int sm = 0;  // compute capability as 10*major + minor: 80, 86, 89, 90
  int sm_count = 0;
  int64_t smem_per_block_optin_bytes = 0;
  int64_t global_mem_bytes = 0;
  bool simulated = false;
};

// The device of a problem's tensors, honouring ATTN_SIMULATE_DEVICE for GPUs.
DeviceInfo query_device(const Device& d);
// "sm80", "sm86", "sm89", "sm90", "cpu" -> a device with that architecture's
// limits; throws attn::Error for an unknown spec.
DeviceInfo simulated_device(const std::string& spec);
// Number of CUDA devices this process can use (0 without a GPU or driver).
int cuda_device_count();

struct RunContext {
  void* stream = nullptr;  // cudaStream_t; nullptr = the legacy default stream
  // Device scratch memory for the call, as cuDNN and TransformerEngine take it:
  // at least forward_workspace_size() / backward_workspace_size() bytes on the
  // call's device, 256-byte aligned, used by the call's work in stream order
  // (so reusable by the next call on the same stream). Null: a framework's
  // allocator (below), else attn's pool: one block per (device, stream) that
  // never allocates or waits while its stream is capturing a CUDA graph.
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  // A framework's stream-ordered allocator (PyTorch's caching allocator, which
  // knows about graph capture): called at most once per call with the bytes
  // needed, returns device memory valid for work queued on `stream`.
  std::function<void*(int64_t bytes)> workspace_allocator;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Empty when the backend can run p on dev; otherwise one reason per obstacle,
  // each naming the value and the limit ("head_dim_qk=192 > 128 on sm80").
  virtual std::vector<std::string> supports(const Problem& p, const DeviceInfo& dev) const = 0;
  // True when its dropout drops exactly the elements the reference drops (attn's
  // Philox pattern). cuDNN draws its own pattern: tests check its statistics instead.
  virtual bool matches_reference_dropout() const { return true; }
  // Device scratch bytes forward() / backward() take for these arguments (0:
  // none). Same preconditions as forward() / backward().
  virtual int64_t forward_workspace_bytes(const Problem&, const ForwardArgs&) const { return 0; }
  virtual int64_t backward_workspace_bytes(const Problem&, const BackwardArgs&) const { return 0; }
  // Called only after validation and a positive supports(); may trust both.
  virtual void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx) const = 0;
  virtual void backward(const Problem& p, const BackwardArgs& args, const RunContext& ctx) const = 0;
};

}  // namespace attn
