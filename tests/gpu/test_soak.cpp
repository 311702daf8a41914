// Soak: thousands of mixed calls (formats, masks, windows, GQA, head dims,
// dropout, softcap, padded and packed sequences; forced backends and
// automatic selection; forward and backward) from 2 host threads on 2 streams
// each, every 10th call checked against the fp64 reference, and device memory
// flat from the end of a warm-up round (every choice once on every stream, in
// the soak's own threads: library handles are per thread) to the end. ATTN_SOAK_CALLS sets the
// count (2000). At most 4 streams at once: the workspace pool's limit
// (core/workspace.h).
#include <cuda_runtime.h>

#include <atomic>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attn/attn.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"

namespace attn {
namespace {

using testing::CaseSpec;

std::vector<CaseSpec> soak_specs() {
  std::vector<CaseSpec> specs;
  CaseSpec s;  // bshd causal GQA 2
  s.batch = 2, s.s_q = s.s_kv = 130, s.h_q = 4, s.h_kv = 2, s.mask = MaskType::causal, s.backward = true;
  specs.push_back(s);
  CaseSpec x;  // sbhd cross lengths, d 128
  x.format = QkvFormat::sbhd, x.batch = 2, x.s_q = 96, x.s_kv = 160, x.h_q = x.h_kv = 4, x.d_qk = x.d_v = 128;
  x.backward = true;
  specs.push_back(x);
  specs.push_back(testing::thd_edge_lengths(64, 40));  // 1, 0, 77, 300 tokens, a left window
  specs.back().backward = true;
  CaseSpec w;  // decode-like: 64 queries, 257 keys, bottom right, a window, MQA
  w.s_q = 64, w.s_kv = 257, w.h_q = 8, w.h_kv = 1, w.d_qk = w.d_v = 128, w.mask = MaskType::causal_bottom_right;
  w.window = {31, 0};
  specs.push_back(w);
  CaseSpec d = s;  // dropout
  d.dropout_p = 0.1, d.seed = 9, d.offset = 3;
  specs.push_back(d);
  CaseSpec p;  // padded batch
  p.batch = 2, p.s_q = p.s_kv = 128, p.h_q = 4, p.h_kv = 2, p.mask = MaskType::padding_causal;
  p.seqlens_q = {100, 37}, p.backward = true;
  specs.push_back(p);
  CaseSpec c = s;  // softcap
  c.softcap = 30.0;
  specs.push_back(c);
  for (CaseSpec& one : specs) one.return_lse = true;
  return specs;
}

// One call's plan: a spec and a backend ("" = automatic selection), passes
// the backend claims (a backward it refuses is dropped).
struct Choice {
  CaseSpec spec;
  std::string backend;
};

std::vector<Choice> choices(const std::vector<CaseSpec>& specs) {
  std::vector<Choice> out;
  for (const CaseSpec& s : specs) {
    out.push_back({s, ""});
    for (const std::string& b : testing::gpu_backends()) {
      if (s.dropout_p > 0 && !find_backend(b)->matches_reference_dropout()) continue;
      CaseSpec one = s;
      if (!testing::claims(b, one, Pass::forward)) continue;
      if (one.backward && !testing::claims(b, one, Pass::backward)) one.backward = false;
      out.push_back({one, b});
    }
  }
  return out;
}

void run(testing::Case& c, const std::string& backend, cudaStream_t stream) {
  if (!backend.empty()) return testing::run_forced(c, backend, stream);
  RunContext ctx;
  ctx.stream = stream;
  forward(c.opts, c.fwd, ctx);
  if (c.spec.backward) backward(c.opts, c.bwd, ctx);
}

size_t free_device_bytes() {
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  return free_bytes;
}

TEST(Soak, MixedCallsFromThreadsAndStreams) {
  ATTN_REQUIRE_GPU();
  const char* env = std::getenv("ATTN_SOAK_CALLS");
  const int calls = env ? std::atoi(env) : 2000;
  constexpr int kThreads = 2, kStreamsPerThread = 2;
  const std::vector<Choice> plan = choices(soak_specs());
  ASSERT_FALSE(plan.empty());
  std::vector<cudaStream_t> streams(kThreads * kStreamsPerThread);
  for (cudaStream_t& s : streams) ATTN_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  size_t before = 0;
  // When both workers have warmed up, the barrier's completion reads free memory, before any soak call.
  std::barrier warmed(kThreads, [&]() noexcept {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    before = free_device_bytes();
  });

  std::atomic<int> done{0}, checked{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t)
    workers.emplace_back([&, t] {
      // Warm-up: every choice once on each of this thread's streams (plans,
      // handles, workspace blocks at full size).
      for (int k = 0; k < kStreamsPerThread; ++k)
        for (const Choice& ch : plan) {
          const cudaStream_t s = streams[t * kStreamsPerThread + k];
          testing::Case c = testing::make_case(ch.spec, Device::cuda(0), 1);
          run(c, ch.backend, s);
          EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        }
      warmed.arrive_and_wait();
      std::mt19937_64 rng(1000 + t);
      for (int i = t; i < calls; i += kThreads) {
        const Choice& ch = plan[rng() % plan.size()];
        const cudaStream_t s = streams[t * kStreamsPerThread + (i / kThreads) % kStreamsPerThread];
        testing::Case c = testing::make_case(ch.spec, Device::cuda(0), 5000 + i);
        try {
          run(c, ch.backend, s);
        } catch (const Error& e) {
          ADD_FAILURE() << "call " << i << " on " << (ch.backend.empty() ? "auto" : ch.backend) << ": " << e.what();
        }
        EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);  // before the case's buffers go
        if (i % 10 == 0) {
          SCOPED_TRACE("call " + std::to_string(i) + " on " + (ch.backend.empty() ? "auto" : ch.backend));
          testing::expect_matches_reference(c);
          ++checked;
        }
        ++done;
      }
    });
  for (std::thread& w : workers) w.join();
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  const size_t after = free_device_bytes();
  for (cudaStream_t s : streams) ATTN_CUDA_OK(cudaStreamDestroy(s));
  const double mib = 1.0 / (1 << 20);
  std::printf("soak: %d calls (%zu spec/backend choices), %d threads x %d streams, %d checked against the "
              "reference; free device memory %.1f MiB before, %.1f MiB after\n",
              done.load(), plan.size(), kThreads, kStreamsPerThread, checked.load(), before * mib, after * mib);
  EXPECT_EQ(done.load(), calls);
  EXPECT_LE(static_cast<double>(before) - static_cast<double>(after), 64.0 * (1 << 20))
      << "device memory grew during the soak";
}

}  // namespace
}  // namespace attn
