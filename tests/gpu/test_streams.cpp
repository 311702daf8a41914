// Two streams running attention at once: every GPU backend runs two different
// problems, forward and backward, alternately on two streams with no host
// sync in between, and both results still match the fp64 reference. (A
// scratch buffer shared by the streams, as the workspace once was, lets one
// problem's kernels overwrite the other's scores or dQ accumulators.)
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "attn/attn.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"

namespace attn {
namespace {

using testing::CaseSpec;

void expect_matches_reference(const testing::Case& gpu, const std::string& name) {
  SCOPED_TRACE(name);
  testing::expect_matches_reference(gpu);
}

class ConcurrentStreams : public ::testing::TestWithParam<std::string> {};

TEST_P(ConcurrentStreams, DoNotShareScratch) {
  ATTN_REQUIRE_GPU();
  const std::string backend = GetParam();
  const Backend* be = find_backend(backend);
  const DeviceInfo dev = query_device(Device::cuda(0));
  CaseSpec a;  // causal, GQA 2
  a.batch = 2;
  a.s_q = a.s_kv = 384;
  a.h_q = 4;
  a.h_kv = 2;
  a.d_qk = a.d_v = 64;
  a.mask = MaskType::causal;
  a.backward = true;
  CaseSpec b;  // another shape and head dim, no mask
  b.batch = 1;
  b.s_q = 257;
  b.s_kv = 390;
  b.h_q = 4;
  b.h_kv = 1;
  b.d_qk = b.d_v = 128;
  b.backward = true;
  // Backward where the backend has it; both problems must at least run forward.
  for (CaseSpec* s : {&a, &b}) {
    if (!be->supports(testing::problem_of(*s, Pass::backward, Device::cuda(0)), dev).empty()) s->backward = false;
    if (!s->backward && !be->supports(testing::problem_of(*s, Pass::forward, Device::cuda(0)), dev).empty())
      GTEST_SKIP() << backend << " does not run both test problems";
    s->return_lse = true;
  }
  testing::Case ca = testing::make_case(a, Device::cuda(0), 11), cb = testing::make_case(b, Device::cuda(0), 12);
  ATTN_CUDA_OK(cudaDeviceSynchronize());  // the inputs are in place before the streams start
  cudaStream_t s1 = nullptr, s2 = nullptr;
  ATTN_CUDA_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  ATTN_CUDA_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  for (int i = 0; i < 8; ++i) {  // each call rewrites the same outputs with the same values
    testing::run_forced(ca, backend, s1);
    testing::run_forced(cb, backend, s2);
  }
  ATTN_CUDA_OK(cudaStreamSynchronize(s1));
  ATTN_CUDA_OK(cudaStreamSynchronize(s2));
  ATTN_CUDA_OK(cudaStreamDestroy(s1));
  ATTN_CUDA_OK(cudaStreamDestroy(s2));
  expect_matches_reference(ca, "problem a (stream 1)");
  expect_matches_reference(cb, "problem b (stream 2)");
}

INSTANTIATE_TEST_SUITE_P(Registered, ConcurrentStreams, ::testing::ValuesIn(testing::gpu_backends()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace attn
