// See fill.h.
#include "backends/common/fill.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda_check.h"
#include "kernels/dependent_launch.cuh"

namespace attn::detail {
namespace {

__global__ void fill_kernel(float* base, int64_t n, int64_t stride, float value, int* counter) {
  kernels::allow_dependent_launch();  // a kernel launched early behind this one waits for its end
  if (counter && blockIdx.x == 0 && threadIdx.x == 0) *counter = 0;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    base[e * stride] = value;
}

}  // namespace

void launch_fill(float* base, int64_t n, int64_t stride, float value, void* stream, int* counter) {
  if (n <= 0 && !counter) return;
  const int blocks = static_cast<int>(n < 256 * 1024 ? std::max<int64_t>((n + 255) / 256, 1) : 1024);
  fill_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(base, n, stride, value, counter);
  ATTN_CUDA(cudaGetLastError());
}

}  // namespace attn::detail
