// What selection knows about a device: queried from the CUDA runtime, or
// simulated from an architecture name (ATTN_SIMULATE_DEVICE, `--device sm80`)
// so verdicts can be asked for hardware this machine lacks.
#include <cuda_runtime.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "attn/backend.h"
#include "attn/error.h"

namespace attn {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

DeviceInfo simulated_device(const std::string& spec) {
  DeviceInfo d;
  d.simulated = true;
  if (spec == "cpu") {
    d.name = "cpu (simulated)";
    return d;
  }
  // Per-architecture limits that decide supports() (opt-in shared memory per block).
  struct Arch {
    const char* spec;
    int sm;
    int64_t smem;
    int sms;
    const char* like;
  };
  static const Arch kArchs[] = {
      {"sm80", 80, 163 * 1024, 108, "A100"}, {"sm86", 86, 99 * 1024, 84, "RTX 3090"},
      {"sm89", 89, 99 * 1024, 128, "RTX 4090 / L40"}, {"sm90", 90, 227 * 1024, 132, "H100"},
  };
  for (const Arch& a : kArchs) {
    if (spec != a.spec) continue;
    d.device = Device::cuda(0);
    d.name = std::string("simulated ") + a.spec + " (like " + a.like + ")";
    d.sm = a.sm;
    d.sm_count = a.sms;
    d.smem_per_block_optin_bytes = a.smem;
    d.global_mem_bytes = int64_t{80} << 30;
    return d;
  }
  fail(ErrorKind::value, "unknown simulated device", spec, "one of cpu, sm80, sm86, sm89, sm90",
       "set ATTN_SIMULATE_DEVICE (or --device) to one of those");
}

namespace {

// cudaGetDeviceProperties fills ~100 attributes and costs tens to hundreds of
// microseconds, so a real device is queried once per process; the properties
// selection reads (name, architecture, SMs, memory, shared memory) never change.
DeviceInfo query_real_device(const Device& dev) {
  DeviceInfo d;
  d.device = dev;
  cudaDeviceProp prop{};
  const cudaError_t err = cudaGetDeviceProperties(&prop, dev.index);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorKind::runtime, "cannot query " + device_name(dev), cudaGetErrorString(err),
         "a visible CUDA device", "check CUDA_VISIBLE_DEVICES and the driver, or pass host tensors");
  }
  d.name = prop.name;
  d.sm = prop.major * 10 + prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.smem_per_block_optin_bytes = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  d.global_mem_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  return d;
}

}  // namespace

DeviceInfo query_device(const Device& dev) {
  if (!dev.is_cuda()) return DeviceInfo{};
  if (const char* sim = std::getenv("ATTN_SIMULATE_DEVICE"); sim && *sim) {
    DeviceInfo d = simulated_device(sim);
    d.device = dev;
    return d;
  }
  static std::mutex mutex;
  static std::map<int, DeviceInfo> known;  // a failed query is not cached: it throws
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(dev.index);
  if (it == known.end()) it = known.emplace(dev.index, query_real_device(dev)).first;
  return it->second;
}

}  // namespace attn
