// Shared by the GPU tests: skip cleanly without a device, check CUDA calls.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/case.h"

namespace attn::testing {

bool have_gpu();

// The registered backends but the CPU reference: what the GPU tests run.
std::vector<std::string> gpu_backends();

// Runs the case's forward (and backward, when its spec asks) on `backend`
// alone, on `stream` (a cudaStream_t; null: the legacy default stream).
void run_forced(Case& c, const std::string& backend, void* stream = nullptr);

// Expects each output of `gpu` (out, lse; dq, dk, dv and a post-scale bias's
// dbias after a backward) to match the reference's within DESIGN.md's
// tolerance for the case's dtype. The caller synchronizes first.
void expect_outputs_match(const Case& gpu, const Case& ref);

}  // namespace attn::testing

// Skips the current test (reported as skipped by ctest) when there is no GPU.
#define ATTN_REQUIRE_GPU()                                                   \
  do {                                                                       \
    if (!::attn::testing::have_gpu()) GTEST_SKIP() << "no CUDA device here"; \
  } while (0)

#define ATTN_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(cudaGetLastError())
