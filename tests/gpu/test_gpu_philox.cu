// The dropout generator gives the same bits on the GPU as on the host: the
// premise of "every backend drops the same elements".
#include <cstdint>
#include <vector>

#include "attn/philox.h"
#include "gpu/gpu_test_util.h"

namespace attn {
namespace {

__global__ void keep_mask_kernel(uint64_t seed, uint32_t offset, uint32_t bh, int rows, int cols,
                                 uint32_t threshold, uint8_t* out) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= rows * cols) return;
  const uint32_t i = idx / cols, j = idx % cols;
  out[idx] = dropout_keep(seed, offset, bh, i, j, threshold) ? 1 : 0;
}

TEST(GpuPhilox, DeviceKeepMaskEqualsHost) {
  ATTN_REQUIRE_GPU();
  const int rows = 37, cols = 301;
  const uint64_t seed = 0x123456789abcdefull;
  const uint32_t offset = 77, bh = 5, threshold = dropout_threshold(0.3);
  uint8_t* d_out = nullptr;
  ATTN_CUDA_OK(cudaMalloc(&d_out, rows * cols));
  keep_mask_kernel<<<(rows * cols + 255) / 256, 256>>>(seed, offset, bh, rows, cols, threshold, d_out);
  ATTN_CUDA_OK(cudaGetLastError());
  std::vector<uint8_t> gpu(rows * cols);
  ATTN_CUDA_OK(cudaMemcpy(gpu.data(), d_out, gpu.size(), cudaMemcpyDeviceToHost));
  ATTN_CUDA_OK(cudaFree(d_out));
  int kept = 0;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      const bool host = dropout_keep(seed, offset, bh, i, j, threshold);
      ASSERT_EQ(gpu[i * cols + j], host ? 1 : 0) << "i=" << i << " j=" << j;
      kept += host;
    }
  EXPECT_NEAR(kept / double(rows * cols), 0.7, 0.03);
}

}  // namespace
}  // namespace attn
