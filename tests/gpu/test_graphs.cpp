// Calls inside CUDA graphs (DESIGN.md, "Calls inside CUDA graphs"): every GPU
// backend's forward and backward captured on a stream (also with a learnable
// softmax sink and the max logit), then replayed on fresh inputs and sink
// logits (and, for packed sequences, other lengths) and checked against the
// fp64 reference; the caller's workspace needs no call before capture; what
// cannot be captured is an attn::Error that says what to change, and the
// stream works again after it.
#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"

namespace attn {
namespace {

using testing::Case;
using testing::CaseSpec;

CaseSpec bshd_causal_gqa() {
  CaseSpec s;
  s.batch = 2;
  s.s_q = s.s_kv = 200;  // off every tile size
  s.h_q = 4;
  s.h_kv = 2;
  s.mask = MaskType::causal;
  s.backward = true;
  return s;
}

// With a learnable softmax sink and the max logit (their reads and the
// max logit's -inf fill and atomics inside the graph).
CaseSpec bshd_causal_gqa_sink() {
  CaseSpec s = bshd_causal_gqa();
  s.softmax_type = SoftmaxType::learnable;
  s.return_max_logit = true;
  return s;
}

// The spec's passes that `backend` claims (forward always, else the test skips).
bool keep_claimed_passes(CaseSpec& s, const std::string& backend) {
  if (!testing::claims(backend, s, Pass::forward)) return false;
  if (s.backward && !testing::claims(backend, s, Pass::backward)) s.backward = false;
  s.return_lse = true;
  return true;
}

// A captured call reads no cu_seqlens back: lengths are the caller's word.
Case capturable_case(const CaseSpec& spec, uint64_t seed) {
  Case c = testing::make_case(spec, Device::cuda(0), seed);
  c.opts.check_seqlens = false;
  c.opts.max_seqlen_q = testing::rows_q(spec);
  c.opts.max_seqlen_kv = testing::rows_kv(spec);
  return c;
}

// New values in the same buffers (the graph holds their addresses).
void refill_inputs(Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (testing::TensorBuffer* t : {&c.q, &c.k, &c.v, &c.dout}) t->fill_uniform(rng, -1.0, 1.0);
  if (c.sink.view().defined()) c.sink.fill_uniform(rng, -1.0, 2.0);
  testing::poison_outputs(c);
}

// Packed lengths of the same total and longest sequence, in another order.
void reorder_lengths(Case& c, std::vector<int64_t> lengths) {
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  for (size_t i = 0; i < lengths.size(); ++i) cu[i + 1] = cu[i] + static_cast<int32_t>(lengths[i]);
  c.cu_seqlens_q.copy_from_bytes(cu.data(), cu.size() * sizeof(int32_t));
  c.cu_seqlens_kv.copy_from_bytes(cu.data(), cu.size() * sizeof(int32_t));
  c.spec.seqlens_q = c.spec.seqlens_kv = lengths;
}

struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

// Captures `run` on `stream`; an attn::Error thrown inside ends the capture
// first and is rethrown.
template <typename Run>
void capture(Graph& g, cudaStream_t stream, Run run) {
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  try {
    run();
  } catch (...) {
    cudaStreamEndCapture(stream, &g.graph);
    (void)cudaGetLastError();
    throw;
  }
  ASSERT_EQ(cudaStreamEndCapture(stream, &g.graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&g.exec, g.graph, 0), cudaSuccess);
}

class CudaGraphs : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGraphs, ReplayOnNewInputsAndLengths) {
  ATTN_REQUIRE_GPU();
  const std::string backend = GetParam();
  int ran = 0;
  for (CaseSpec spec : {bshd_causal_gqa(), testing::thd_edge_lengths(64, -1), bshd_causal_gqa_sink()}) {
    SCOPED_TRACE(spec.format == QkvFormat::thd ? "thd" : spec.return_max_logit ? "bshd, sink and max logit" : "bshd");
    if (!keep_claimed_passes(spec, backend)) continue;
    Case c = capturable_case(spec, 21);
    cudaStream_t s = nullptr;
    ATTN_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    testing::run_forced(c, backend, s);  // outside capture first: the pool sizes its block
    ATTN_CUDA_OK(cudaStreamSynchronize(s));
    Graph g;
    const bool packed = spec.format == QkvFormat::thd;
    try {
      capture(g, s, [&] { testing::run_forced(c, backend, s); });
    } catch (const Error& e) {
      // unfused plans packed sequences on the host: refused under capture, with the reason.
      EXPECT_TRUE(backend == "unfused" && packed) << e.what();
      EXPECT_NE(std::string(e.what()).find("capture"), std::string::npos) << e.what();
      ATTN_CUDA_OK(cudaStreamDestroy(s));
      continue;
    }
    if (::testing::Test::HasFatalFailure()) return;
    for (int replay = 0; replay < 2; ++replay) {
      refill_inputs(c, 100 + replay);
      if (packed) reorder_lengths(c, replay == 0 ? std::vector<int64_t>{300, 77, 0, 1} : std::vector<int64_t>{77, 1, 300, 0});
      ATTN_CUDA_OK(cudaGraphLaunch(g.exec, s));
      ATTN_CUDA_OK(cudaStreamSynchronize(s));
      SCOPED_TRACE("replay " + std::to_string(replay));
      testing::expect_matches_reference(c);
    }
    ATTN_CUDA_OK(cudaStreamDestroy(s));
    ++ran;
  }
  if (ran == 0 && backend != "unfused") GTEST_SKIP() << backend << " claims neither test problem here";
}

TEST_P(CudaGraphs, CallersWorkspaceNeedsNoCallBeforeCapture) {
  ATTN_REQUIRE_GPU();
  const std::string backend = GetParam();
  CaseSpec spec = bshd_causal_gqa();
  if (!keep_claimed_passes(spec, backend)) GTEST_SKIP() << backend << " does not claim the problem";
  Case c = capturable_case(spec, 31);
  const Policy force = testing::forcing(backend);
  int64_t bytes = forward_workspace_size(c.opts, c.fwd, force);
  if (spec.backward) bytes = std::max(bytes, backward_workspace_size(c.opts, c.bwd, force));
  void* ws = nullptr;
  ATTN_CUDA_OK(cudaMalloc(&ws, static_cast<size_t>(std::max<int64_t>(bytes, 1))));
  testing::run_forced(c, backend);  // the first call of this shape (plans, library handles), on another stream
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  cudaStream_t s = nullptr;
  ATTN_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));  // a stream the pool has never seen
  RunContext ctx;
  ctx.stream = s;
  ctx.workspace = ws;
  ctx.workspace_bytes = bytes;
  Graph g;
  capture(g, s, [&] {
    forward(c.opts, c.fwd, ctx, force);
    if (spec.backward) backward(c.opts, c.bwd, ctx, force);
  });
  if (HasFatalFailure()) return;
  refill_inputs(c, 32);
  ATTN_CUDA_OK(cudaGraphLaunch(g.exec, s));
  ATTN_CUDA_OK(cudaStreamSynchronize(s));
  testing::expect_matches_reference(c);

  const int64_t forward_bytes = forward_workspace_size(c.opts, c.fwd, force);
  ctx.workspace_bytes = forward_bytes - 1;  // one byte short: refused before anything runs
  if (forward_bytes > 0) {
    EXPECT_THROW(forward(c.opts, c.fwd, ctx, force), Error);
  }
  ATTN_CUDA_OK(cudaStreamDestroy(s));
  ATTN_CUDA_OK(cudaFree(ws));
}

TEST_P(CudaGraphs, PoolRefusesToAllocateWhileCapturingThenWorks) {
  ATTN_REQUIRE_GPU();
  const std::string backend = GetParam();
  CaseSpec spec = bshd_causal_gqa();
  spec.backward = false;
  if (!keep_claimed_passes(spec, backend)) GTEST_SKIP() << backend << " does not claim the problem";
  Case c = capturable_case(spec, 41);
  const Policy force = testing::forcing(backend);
  if (forward_workspace_size(c.opts, c.fwd, force) == 0) GTEST_SKIP() << backend << "'s forward takes no workspace";
  testing::run_forced(c, backend);  // plans and library handles exist; only the new stream's block is missing
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  cudaStream_t s = nullptr;
  ATTN_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Graph g;
  try {
    capture(g, s, [&] { testing::run_forced(c, backend, s); });
    ADD_FAILURE() << "the pool allocated inside a capture";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("capturing a CUDA graph"), std::string::npos) << e.what();
    EXPECT_NE(e.info().fix.find("before capturing"), std::string::npos) << e.what();
  }
  testing::run_forced(c, backend, s);  // the same stream, outside capture: runs
  ATTN_CUDA_OK(cudaStreamSynchronize(s));
  testing::expect_matches_reference(c);
  ATTN_CUDA_OK(cudaStreamDestroy(s));
}

// Dropout's seed and offset in device memory: the same values as Options'
// give the same result; a captured call replays with whatever the tensor holds.
TEST_P(CudaGraphs, DropoutSeedInDeviceMemoryAdvancesReplays) {
  ATTN_REQUIRE_GPU();
  const std::string backend = GetParam();
  CaseSpec spec = bshd_causal_gqa();
  spec.dropout_p = 0.1;
  if (!keep_claimed_passes(spec, backend)) GTEST_SKIP() << backend << " does not claim the problem";
  const bool exact = find_backend(backend)->matches_reference_dropout();
  Case by_options = capturable_case(spec, 81), c = capturable_case(spec, 81);
  testing::TensorBuffer state(DType::i64, {2}, Device::cuda(0));
  auto set_state = [&](uint64_t seed, uint64_t offset) {
    const int64_t v[2] = {static_cast<int64_t>(seed), static_cast<int64_t>(offset)};
    state.copy_from_bytes(v, sizeof v);
    by_options.opts.seed = seed, by_options.opts.offset = offset;
    by_options.spec.seed = c.spec.seed = seed, by_options.spec.offset = c.spec.offset = offset;
  };
  c.fwd.in.rng_state = c.bwd.in.rng_state = state.view();
  c.opts.seed = 99, c.opts.offset = 99;  // ignored: the tensor's values count
  set_state(5, 1);
  cudaStream_t s = nullptr;
  ATTN_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  testing::run_forced(c, backend, s);  // outside capture first
  testing::run_forced(by_options, backend, s);
  ATTN_CUDA_OK(cudaStreamSynchronize(s));
  EXPECT_EQ(c.out.host_bytes(), by_options.out.host_bytes()) << "the tensor's (seed, offset) and Options' differ";
  Graph g;
  capture(g, s, [&] { testing::run_forced(c, backend, s); });
  if (HasFatalFailure()) return;
  std::vector<unsigned char> previous;
  for (uint64_t seed : {17u, 18u}) {
    set_state(seed, 4);
    refill_inputs(c, seed);
    ATTN_CUDA_OK(cudaGraphLaunch(g.exec, s));
    ATTN_CUDA_OK(cudaStreamSynchronize(s));
    SCOPED_TRACE("replay with seed " + std::to_string(seed));
    if (exact) testing::expect_matches_reference(c);  // the reference drops by the spec's seed and offset
    const std::vector<unsigned char> out = c.out.host_bytes();
    EXPECT_NE(out, previous);
    previous = out;
  }
  ATTN_CUDA_OK(cudaStreamDestroy(s));
}

TEST(CudaGraphs, CheckedSeqlensUnderCaptureNameTheKeyword) {
  ATTN_REQUIRE_GPU();
  CaseSpec spec = testing::thd_edge_lengths(64, -1);
  spec.backward = false;
  Case c = testing::make_case(spec, Device::cuda(0), 51);  // check_seqlens on
  cudaStream_t s = nullptr;
  ATTN_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Graph g;
  try {
    capture(g, s, [&] {
      RunContext ctx;
      ctx.stream = s;
      forward(c.opts, c.fwd, ctx);
    });
    ADD_FAILURE() << "a checked cu_seqlens read passed inside a capture";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("check_seqlens"), std::string::npos) << e.what();
  }
  ATTN_CUDA_OK(cudaStreamDestroy(s));
}

INSTANTIATE_TEST_SUITE_P(Registered, CudaGraphs, ::testing::ValuesIn(testing::gpu_backends()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace attn
