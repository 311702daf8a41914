// Timing of attention calls (see timing.h).
#include "timing.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "attn/error.h"

namespace attn::cli {

using testing::Case;

namespace {

void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    fail(ErrorKind::runtime, std::string(what) + " failed", cudaGetErrorString(err), "cudaSuccess",
         "check the GPU with nvidia-smi, or pass --device cpu");
}

}  // namespace

// Milliseconds of one call: CUDA events on the GPU (the work is asynchronous),
// the wall clock on the CPU.
double time_call(bool gpu, const std::function<void()>& call) {
  if (!gpu) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&stop), "cudaEventCreate");
  cuda_ok(cudaEventRecord(start, nullptr), "cudaEventRecord");
  call();
  cuda_ok(cudaEventRecord(stop, nullptr), "cudaEventRecord");
  cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0.0f;
  cuda_ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

// Input sets to rotate through on the GPU, so that a run does not find the
// previous run's tensors in L2 (50 MB on an H100): at least 256 MiB per cycle.
int input_sets(const Case& c) {
  if (!c.device.is_cuda()) return 1;
  size_t bytes = 0;
  for (const testing::TensorBuffer* b : {&c.q, &c.k, &c.v, &c.out, &c.dout, &c.dq, &c.dk, &c.dv})
    if (b->view().defined()) bytes += b->bytes();
  const size_t want = size_t{256} << 20;
  return static_cast<int>(std::clamp<size_t>((want + bytes - 1) / std::max<size_t>(bytes, 1), 1, 8));
}

// warmup + iters calls rotating over the sets; the first call's selection is kept.
Timing time_pass(std::vector<Case>& sets, bool gpu, int warmup, int iters,
                 const std::function<Selection(Case&)>& call) {
  Timing t;
  for (int i = 0; i < warmup + iters; ++i) {
    Case& c = sets[static_cast<size_t>(i) % sets.size()];
    Selection s;
    const double ms = time_call(gpu, [&] { s = call(c); });
    if (i == 0) {
      t.selection = s;
      t.first_ms = ms;
    }
    if (i >= warmup) t.ms.push_back(ms);
    // The first call validated cu_seqlens' values; later calls skip that host
    // copy (as under CUDA graphs) so it does not distort the GPU timing.
    if (gpu && (c.spec.format != QkvFormat::thd || c.opts.max_seqlen_q > 0)) c.opts.check_seqlens = false;
  }
  return t;
}

}  // namespace attn::cli
