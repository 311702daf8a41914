// The GPU's ceiling for mma.sync (m16n8k16, bf16 in, fp32 accumulate): the
// instruction flash_sm80 is built on. Each warp runs independent chains of
// HMMAs on registers only (no memory in the loop), so the figure is the
// tensor pipe's rate for this instruction, an upper bound for any mma.sync
// kernel. Warps per SM vary: flash_sm80's forward runs 8 (two CTAs of 4).
//
//   build/mma_peak   (CMake target attn_mma_peak)
//
// Prints TFLOP/s per warps-per-SM count (median of 5 timed launches after a
// warm-up; CUDA events) and the SM clock the kernel saw.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "attn/error.h"
#include "core/cuda_check.h"  // ATTN_CUDA

constexpr int kChains = 8;  // independent accumulators per warp: hides the HMMA latency

__global__ void hmma_loop(float* out, long long* cycles, int iters) {
  // Operands from the thread index, so nothing is a compile-time constant.
  const uint32_t t = threadIdx.x * 0x9E3779B9u;
  uint32_t a[4] = {t & 0x3F803F80u, (t >> 1) & 0x3F803F80u, (t >> 2) & 0x3F803F80u, (t >> 3) & 0x3F803F80u};
  uint32_t b[2] = {(t >> 4) & 0x3F803F80u, (t >> 5) & 0x3F803F80u};
  float acc[kChains][4] = {};
  const long long start = clock64();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};"
          : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  const long long stop = clock64();
  float sum = 0.f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) sum += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;  // keeps the products live
  if (threadIdx.x == 0) cycles[blockIdx.x] = stop - start;
}

namespace {

void run() {
  int sms = 0, device = 0;
  ATTN_CUDA(cudaGetDevice(&device));
  ATTN_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaDeviceProp prop{};
  ATTN_CUDA(cudaGetDeviceProperties(&prop, device));
  std::printf("%s, %d SMs\n", prop.name, sms);
  std::printf("warps/SM  TFLOP/s  SM clock (GHz)  FLOP/clk/SM\n");
  const int iters = 1 << 14;
  for (int warps : {4, 8, 16, 32}) {
    // One CTA of `warps` warps per SM (a CTA of <= 1024 threads).
    const int blocks = sms, threads = warps * 32;
    float* out = nullptr;
    long long* cycles = nullptr;
    ATTN_CUDA(cudaMalloc(&out, sizeof(float) * blocks * threads));
    ATTN_CUDA(cudaMalloc(&cycles, sizeof(long long) * blocks));
    cudaEvent_t e0, e1;
    ATTN_CUDA(cudaEventCreate(&e0));
    ATTN_CUDA(cudaEventCreate(&e1));
    hmma_loop<<<blocks, threads>>>(out, cycles, iters);  // warm-up (clocks up)
    ATTN_CUDA(cudaGetLastError());
    std::vector<float> ms;
    for (int r = 0; r < 5; ++r) {
      ATTN_CUDA(cudaEventRecord(e0));
      hmma_loop<<<blocks, threads>>>(out, cycles, iters);
      ATTN_CUDA(cudaGetLastError());
      ATTN_CUDA(cudaEventRecord(e1));
      ATTN_CUDA(cudaEventSynchronize(e1));
      float t = 0.f;
      ATTN_CUDA(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double flops = 2.0 * 16 * 8 * 16 * kChains * double(iters) * warps * blocks;
    long long cyc = 0;
    ATTN_CUDA(cudaMemcpy(&cyc, cycles, sizeof(cyc), cudaMemcpyDeviceToHost));
    const double sec = ms[2] * 1e-3;
    const double ghz = cyc / sec / 1e9;  // the in-kernel cycle count over the launch's time
    std::printf("%8d  %7.1f  %14.2f  %11.0f\n", warps, flops / sec / 1e12, ghz, flops / blocks / cyc);
    ATTN_CUDA(cudaFree(out));
    ATTN_CUDA(cudaFree(cycles));
    ATTN_CUDA(cudaEventDestroy(e0));
    ATTN_CUDA(cudaEventDestroy(e1));
  }
}

}  // namespace

int main() {
  try {
    run();
  } catch (const attn::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
