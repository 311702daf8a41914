// Shared by the GPU tests: skip cleanly without a device, check CUDA calls.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "attn/select.h"
#include "testing/case.h"

namespace attn::testing {

bool have_gpu();

// The registered backends but the CPU reference: what the GPU tests run.
std::vector<std::string> gpu_backends();

// A Policy that runs `backend` alone.
Policy forcing(const std::string& backend);

// Whether `backend` claims the spec's `pass` on GPU 0 (supports() says no reason).
bool claims(const std::string& backend, const CaseSpec& spec, Pass pass);

// Runs the case's forward (and backward, when its spec asks) on `backend`
// alone, on `stream` (a cudaStream_t; null: the legacy default stream).
void run_forced(Case& c, const std::string& backend, void* stream = nullptr);

// Expects each output of `gpu` (out, lse; dq, dk, dv and a post-scale bias's
// dbias after a backward) to match the reference's within DESIGN.md's
// tolerance for the case's dtype. The caller synchronizes first.
void expect_outputs_match(const Case& gpu, const Case& ref);

// The same against a fresh fp64 CPU copy of gpu's inputs run on the reference
// backend (the caller synchronizes first).
void expect_matches_reference(const Case& gpu);

// `backend`'s deterministic backward on the spec (inputs from `seed`): it
// claims the call, three more runs (outputs refilled with NaN first) give the
// same bytes of dq, dk and dv, and the answer matches the reference (or,
// where the fp64 reference would take too long, the backend's default mode on
// the same inputs, within the same tolerance).
enum class AnswerCheck { reference, default_mode };
void expect_bitwise_repeatable_backward(const CaseSpec& spec, const std::string& backend, uint64_t seed,
                                        AnswerCheck check = AnswerCheck::reference);

// One kernel on `stream` that spends `wait_us` microseconds of GPU time, then
// copies each pair's `bytes` from src to dst (device memory, at most two
// pairs): a kernel that writes a call's inputs (lengths, a block table) just
// before the call, late.
struct DeviceCopy {
  void* dst;
  const void* src;
  size_t bytes;
};
void launch_delayed_copies(const std::vector<DeviceCopy>& copies, int wait_us, cudaStream_t stream);

// Element `at` of a bf16 device tensor set to NaN (the NaN-visibility tests).
void set_bf16_nan(TensorBuffer& t, int64_t at);

// Whether row `row` of `width` values of x (a tensor read back as doubles) holds a NaN.
bool row_has_nan(const std::vector<double>& x, int64_t row, int64_t width);

// Packed edge lengths for a tiled kernel: thd, padding_causal, sequences of
// 1, 0, 77 and 300 tokens (off every tile height, an empty one), GQA 8:2,
// head dim d, a left window.
CaseSpec thd_edge_lengths(int64_t d, int64_t window_left);

// ATTN_SIMULATE_DEVICE=spec while it lives (also when an assertion returns
// early): query_device() then answers for that GPU, so one GPU runs the
// builds another device's shared memory would pick.
struct SimulatedDevice {
  explicit SimulatedDevice(const char* spec);
  ~SimulatedDevice();
  SimulatedDevice(const SimulatedDevice&) = delete;
  SimulatedDevice& operator=(const SimulatedDevice&) = delete;
};

}  // namespace attn::testing

// Skips the current test (reported as skipped by ctest) when there is no GPU.
#define ATTN_REQUIRE_GPU()                                                   \
  do {                                                                       \
    if (!::attn::testing::have_gpu()) GTEST_SKIP() << "no CUDA device here"; \
  } while (0)

#define ATTN_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(cudaGetLastError())
