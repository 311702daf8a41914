// launch_delayed_copies (gpu_test_util.h): a kernel that spends a set time,
// then copies, so that the call launched after it on the stream finds its
// inputs written late, by the kernel just before it.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "gpu/gpu_test_util.h"

namespace attn::testing {
namespace {

constexpr int kMaxCopies = 2;

struct Copies {
  DeviceCopy c[kMaxCopies];
  int n;
};

__device__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void delayed_copy_kernel(const Copies copies, const uint64_t wait_ns) {
  if (threadIdx.x == 0) {
    const uint64_t start = global_ns();
    while (global_ns() - start < wait_ns) {
    }
  }
  __syncthreads();
  for (int i = 0; i < copies.n; ++i) {
    auto* const dst = static_cast<unsigned char*>(copies.c[i].dst);
    const auto* const src = static_cast<const unsigned char*>(copies.c[i].src);
    for (size_t j = threadIdx.x; j < copies.c[i].bytes; j += blockDim.x) dst[j] = src[j];
  }
}

}  // namespace

void launch_delayed_copies(const std::vector<DeviceCopy>& copies, int wait_us, cudaStream_t stream) {
  if (copies.size() > kMaxCopies)
    throw std::invalid_argument("launch_delayed_copies: at most " + std::to_string(kMaxCopies) + " copies");
  Copies all{};
  for (size_t i = 0; i < copies.size(); ++i) all.c[i] = copies[i];
  all.n = static_cast<int>(copies.size());
  delayed_copy_kernel<<<1, 256, 0, stream>>>(all, static_cast<uint64_t>(wait_us) * 1000);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string("launch_delayed_copies: ") + cudaGetErrorString(err));
}

}  // namespace attn::testing
