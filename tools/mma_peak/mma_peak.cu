// The GPU's ceiling for mma.sync (m16n8k16, bf16 in, fp32 accumulate): the
// instruction flash_sm80 is built on. Each warp runs independent chains of
// HMMAs on registers only (no memory in the loop), so the figure is the
// tensor pipe's rate for this instruction, an upper bound for any mma.sync
// kernel. Warps per SM vary: flash_sm80's forward runs 8 (two CTAs of 4).
//
//   build/mma_peak   (CMake target attn_mma_peak; or alone:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a tools/mma_peak/mma_peak.cu -o /tmp/mma_peak)
//
// Prints TFLOP/s per warps-per-SM count (median of 5 timed launches after a
// warm-up; CUDA events) and the SM clock the kernel saw.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

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

int main() {
  int sms = 0, device = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("%s, %d SMs\n", prop.name, sms);
  std::printf("warps/SM  TFLOP/s  SM clock (GHz)  FLOP/clk/SM\n");
  const int iters = 1 << 14;
  for (int warps : {4, 8, 16, 32}) {
    // One CTA of `warps` warps per SM (a CTA of <= 1024 threads).
    const int blocks = sms, threads = warps * 32;
    float* out = nullptr;
    long long* cycles = nullptr;
    CHECK(cudaMalloc(&out, sizeof(float) * blocks * threads));
    CHECK(cudaMalloc(&cycles, sizeof(long long) * blocks));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    hmma_loop<<<blocks, threads>>>(out, cycles, iters);  // warm-up (clocks up)
    CHECK(cudaGetLastError());
    std::vector<float> ms;
    for (int r = 0; r < 5; ++r) {
      CHECK(cudaEventRecord(e0));
      hmma_loop<<<blocks, threads>>>(out, cycles, iters);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float t = 0.f;
      CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double flops = 2.0 * 16 * 8 * 16 * kChains * double(iters) * warps * blocks;
    long long cyc = 0;
    CHECK(cudaMemcpy(&cyc, cycles, sizeof(cyc), cudaMemcpyDeviceToHost));
    const double sec = ms[2] * 1e-3;
    const double ghz = cyc / sec / 1e9;  // the in-kernel cycle count over the launch's time
    std::printf("%8d  %7.1f  %14.2f  %11.0f\n", warps, flops / sec / 1e12, ghz, flops / blocks / cyc);
    CHECK(cudaFree(out));
    CHECK(cudaFree(cycles));
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
  }
  return 0;
}
