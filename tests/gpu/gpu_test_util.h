// Shared by the GPU tests: skip cleanly without a device, check CUDA calls.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace attn::testing {

bool have_gpu();

// The registered backends but the CPU reference: what the GPU tests run.
std::vector<std::string> gpu_backends();

}  // namespace attn::testing

// Skips the current test (reported as skipped by ctest) when there is no GPU.
#define ATTN_REQUIRE_GPU()                                                   \
  do {                                                                       \
    if (!::attn::testing::have_gpu()) GTEST_SKIP() << "no CUDA device here"; \
  } while (0)

#define ATTN_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(cudaGetLastError())
