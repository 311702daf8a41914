// Out of device memory: a workspace that cannot be allocated is an attn::Error
// that names the bytes (never an abort or a sticky CUDA error), and the next
// call, once memory is free again, works. The flash backward's fp32 dQ
// accumulator (64 MiB here) is the workspace; the rest of the card is taken
// by a filler allocation first.
#include <cuda_runtime.h>

#include <string>

#include "attn/attn.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"

namespace attn {
namespace {

using testing::CaseSpec;

class OutOfMemory : public ::testing::TestWithParam<std::string> {};

TEST_P(OutOfMemory, WorkspaceErrorNamesTheBytesAndTheNextCallWorks) {
  ATTN_REQUIRE_GPU();
  const std::string backend = GetParam();
  if (!find_backend(backend)) GTEST_SKIP() << backend << " is not in this build";
  CaseSpec spec;  // b 1, 16384 tokens, 8 heads, d 128: dQ's fp32 accumulator is 64 MiB
  spec.s_q = spec.s_kv = 16384;
  spec.h_q = spec.h_kv = 8;
  spec.d_qk = spec.d_v = 128;
  spec.mask = MaskType::causal;
  spec.backward = true;
  if (!testing::claims(backend, spec, Pass::backward)) GTEST_SKIP() << backend << " does not run the backward";
  testing::Case c = testing::make_case(spec, Device::cuda(0), 71);
  const Policy force = testing::forcing(backend);
  const int64_t need = backward_workspace_size(c.opts, c.bwd, force);
  if (need < (int64_t{48} << 20)) GTEST_SKIP() << backend << "'s backward takes only " << need << " bytes";
  cudaStream_t s = nullptr;  // a stream the workspace pool has no block for
  ATTN_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  RunContext ctx;
  ctx.stream = s;
  forward(c.opts, c.fwd, ctx, force);
  ATTN_CUDA_OK(cudaStreamSynchronize(s));

  size_t free_bytes = 0, total = 0;
  ATTN_CUDA_OK(cudaMemGetInfo(&free_bytes, &total));
  void* filler = nullptr;
  const size_t leave = size_t{16} << 20;  // less than the workspace
  ATTN_CUDA_OK(cudaMalloc(&filler, free_bytes - leave));
  cudaStream_t s2 = nullptr;
  ATTN_CUDA_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  ctx.stream = s2;
  try {
    backward(c.opts, c.bwd, ctx, force);
    ADD_FAILURE() << "the backward ran with " << (leave >> 20) << " MiB free and a " << (need >> 20) << " MiB workspace";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of device memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failed allocation left a CUDA error behind";
  ATTN_CUDA_OK(cudaFree(filler));
  backward(c.opts, c.bwd, ctx, force);  // memory is back: the same call runs
  ATTN_CUDA_OK(cudaStreamSynchronize(s2));
  ATTN_CUDA_OK(cudaStreamDestroy(s));
  ATTN_CUDA_OK(cudaStreamDestroy(s2));
  for (const testing::TensorBuffer* g : {&c.dq, &c.dk, &c.dv}) {
    int nan = 0;
    for (double x : g->to(Device::cpu()).to_doubles()) nan += x != x;
    EXPECT_EQ(nan, 0) << "a gradient was left unwritten";
  }
}

INSTANTIATE_TEST_SUITE_P(Registered, OutOfMemory, ::testing::Values("flash_sm90", "flash_sm80"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace attn
