// How fast a grid of one or two CTAs per SM streams keys from HBM through
// shared memory, as a decode kernel does: each CTA reads `rows` rows of one
// KV head (K and V, 256 bytes a row, rows 2 KB apart as in a bshd cache with
// 8 KV heads) in tiles of 64 rows through a ring of stages, by
//   - cp.async, 16 bytes per thread and copy (flash_decode's way), or
//   - TMA, four 64 x 64 boxes per tile on an mbarrier (flash_sm90's way),
// with 3 stages (flash_decode's) or 6, on buffers rotated so no launch finds
// its rows in L2 (time_us: each launch alone, and from a CUDA graph). It shows
// whether the one-token decode points with one CTA per SM (PERF.md "Decode")
// are bound by how the copies are issued or by HBM.
//
// Built with attn (target attn_sm_stream, `build/sm_stream`); run it on the
// GPU machine. The TMA columns need sm_90.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include "core/cuda_check.h"
#include "kernels/sm80/cp_async.cuh"
#include "kernels/sm90/mbarrier.cuh"
#include "kernels/sm90/tma.cuh"
#include "kernels/sm90/tma_map.h"

namespace {

constexpr int kHeads = 8, kD = 128, kTileRows = 64, kThreads = 128;
constexpr int kTileBytes = kTileRows * kD * 2;  // K's or V's rows of one tile
constexpr int kStageBytes = 2 * kTileBytes;

// CTA c reads head c % 8 of sequence c / 8, rows [0, rows); each thread folds
// one 16-byte word of every tile into `sink`, so no copy is dead.
__device__ __forceinline__ void fold(const char* stage, uint4& acc) {
  const uint4 w = reinterpret_cast<const uint4*>(stage)[threadIdx.x];
  acc.x ^= w.x;
  acc.y ^= w.y;
  acc.z ^= w.z;
  acc.w ^= w.w;
}

template <int kStages>
__global__ void __launch_bounds__(kThreads) cp_async_stream(const __nv_bfloat16* k, const __nv_bfloat16* v, int s,
                                                            int rows, uint4* sink) {
  extern __shared__ __align__(1024) char smem[];
  const int head = blockIdx.x % kHeads, seq = blockIdx.x / kHeads, tid = threadIdx.x;
  const int64_t row_stride = kHeads * kD;
  const __nv_bfloat16* k0 = k + (static_cast<int64_t>(seq) * s) * row_stride + head * kD;
  const __nv_bfloat16* v0 = v + (static_cast<int64_t>(seq) * s) * row_stride + head * kD;
  const int tiles = rows / kTileRows;
  auto load = [&](int t, int st) {
    const uint32_t dst = attn::sm80::smem_addr(smem + st * kStageBytes);
    const int c = tid % 16, r0 = tid / 16;
#pragma unroll
    for (int i = 0; i < kTileRows / 8; ++i) {
      const int r = r0 + 8 * i;
      const int64_t at = static_cast<int64_t>(t * kTileRows + r) * row_stride + 8 * c;
      attn::sm80::cp_async_16(dst + (r * 16 + c) * 16, k0 + at, true);
      attn::sm80::cp_async_16(dst + kTileBytes + (r * 16 + c) * 16, v0 + at, true);
    }
  };
  uint4 acc = {0, 0, 0, 0};
  for (int i = 0; i + 1 < kStages; ++i) {
    if (i < tiles) load(i, i);
    attn::sm80::cp_async_commit();
  }
  for (int t = 0; t < tiles; ++t) {
    if (t + kStages - 1 < tiles) load(t + kStages - 1, (t + kStages - 1) % kStages);
    attn::sm80::cp_async_commit();
    attn::sm80::cp_async_wait<kStages - 1>();
    __syncthreads();
    fold(smem + (t % kStages) * kStageBytes, acc);
    __syncthreads();
  }
  if (acc.x == 0x12345678u) sink[blockIdx.x] = acc;
}

template <int kStages>
__global__ void __launch_bounds__(kThreads) tma_stream(const __grid_constant__ CUtensorMap k_map,
                                                       const __grid_constant__ CUtensorMap v_map, int rows,
                                                       uint4* sink) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) char smem[];  // the 128-byte swizzle's boxes start 1024 bytes apart
  using namespace attn::sm90;
  const int head = blockIdx.x % kHeads, seq = blockIdx.x / kHeads, tid = threadIdx.x;
  const uint32_t base = smem_addr(smem), bars = base + kStages * kStageBytes;
  const int tiles = rows / kTileRows;
  auto load = [&](int t, int st) {
    const uint32_t dst = base + st * kStageBytes, bar = bars + 8 * st;
    mbar_arrive_expect_tx(bar, kStageBytes);
    for (int half = 0; half < 2; ++half) {
      tma_load_4d(dst + half * (kTileBytes / 2), &k_map, bar, 64 * half, t * kTileRows, head, seq);
      tma_load_4d(dst + kTileBytes + half * (kTileBytes / 2), &v_map, bar, 64 * half, t * kTileRows, head, seq);
    }
  };
  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) mbar_init(bars + 8 * i, 1);
    mbar_init_fence();
  }
  __syncthreads();
  if (tid == 0)
    for (int i = 0; i < kStages && i < tiles; ++i) load(i, i);
  uint4 acc = {0, 0, 0, 0};
  for (int t = 0; t < tiles; ++t) {
    const int st = t % kStages;
    mbar_wait(bars + 8 * st, (t / kStages) & 1);
    fold(smem + st * kStageBytes, acc);
    __syncthreads();
    if (tid == 0 && t + kStages < tiles) load(t + kStages, st);
  }
  if (acc.x == 0x12345678u) sink[blockIdx.x] = acc;
#endif
}

struct Buffers {
  __nv_bfloat16 *k, *v;
  CUtensorMap k_map, v_map;
};

float median(std::vector<float> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// Each launch alone between two events (its launch latency included), or,
// with `graph`, per launch of a CUDA graph of 8 launches over the rotating
// buffers, as the decode figures are timed (bench/decode.py --graphs).
template <class Launch>
float time_us(const std::vector<Buffers>& sets, bool graph, Launch launch) {
  cudaStream_t stream;
  ATTN_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraphExec_t exec = nullptr;
  constexpr int kCalls = 8;
  if (graph) {
    cudaGraph_t g;
    ATTN_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kCalls; ++i) launch(sets[i % sets.size()], stream);
    ATTN_CUDA(cudaStreamEndCapture(stream, &g));
    ATTN_CUDA(cudaGraphInstantiate(&exec, g, 0));
    ATTN_CUDA(cudaGraphDestroy(g));
  }
  cudaEvent_t a, b;
  ATTN_CUDA(cudaEventCreate(&a));
  ATTN_CUDA(cudaEventCreate(&b));
  std::vector<float> us;
  for (int i = 0; i < 18; ++i) {
    ATTN_CUDA(cudaEventRecord(a, stream));
    if (graph)
      ATTN_CUDA(cudaGraphLaunch(exec, stream));
    else
      launch(sets[i % sets.size()], stream);
    ATTN_CUDA(cudaEventRecord(b, stream));
    ATTN_CUDA(cudaEventSynchronize(b));
    float ms;
    ATTN_CUDA(cudaEventElapsedTime(&ms, a, b));
    if (i >= 3) us.push_back(ms * 1e3f / (graph ? kCalls : 1));
  }
  ATTN_CUDA(cudaGetLastError());
  if (exec) ATTN_CUDA(cudaGraphExecDestroy(exec));
  ATTN_CUDA(cudaEventDestroy(a));
  ATTN_CUDA(cudaEventDestroy(b));
  ATTN_CUDA(cudaStreamDestroy(stream));
  return median(us);
}

void run() {
  cudaDeviceProp prop;
  ATTN_CUDA(cudaGetDeviceProperties(&prop, 0));
  // (CTAs, rows each): b 8 2k one split / two splits, b 8 2k h 16/16 one split, b 1 32k (16 splits of 2k),
  // b 8 8k two splits, a full wave, two CTAs per SM.
  const int points[][2] = {{64, 2048}, {128, 1024}, {128, 2048}, {128, 4096}, {132, 2048}, {256, 1024}, {264, 512}};
  const int s = 4096, seqs = (264 + kHeads - 1) / kHeads;
  const size_t elems = static_cast<size_t>(seqs) * s * kHeads * kD;
  std::vector<Buffers> sets(4);  // 4 x 2 x 277 MB: more than L2 holds many times over
  for (Buffers& buf : sets) {
    ATTN_CUDA(cudaMalloc(&buf.k, elems * 2));
    ATTN_CUDA(cudaMalloc(&buf.v, elems * 2));
    ATTN_CUDA(cudaMemset(buf.k, 1, elems * 2));
    ATTN_CUDA(cudaMemset(buf.v, 2, elems * 2));
    attn::sm90::TileMapShape shape;
    shape.cols = kD;
    shape.tokens = s;
    shape.heads = kHeads;
    shape.sequences = seqs;
    shape.token_stride = kHeads * kD;
    shape.head_stride = kD;
    shape.sequence_stride = static_cast<int64_t>(s) * kHeads * kD;
    shape.box_rows = kTileRows;
    shape.base = buf.k;
    buf.k_map = attn::sm90::make_tile_map(shape, "k");
    shape.base = buf.v;
    buf.v_map = attn::sm90::make_tile_map(shape, "v");
  }
  uint4* sink;
  ATTN_CUDA(cudaMalloc(&sink, 1024 * sizeof(uint4)));
  const int smem3 = 3 * kStageBytes + 64, smem6 = 6 * kStageBytes + 64;
  ATTN_CUDA(cudaFuncSetAttribute(cp_async_stream<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem3));
  ATTN_CUDA(cudaFuncSetAttribute(cp_async_stream<6>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem6));
  ATTN_CUDA(cudaFuncSetAttribute(tma_stream<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem3));
  ATTN_CUDA(cudaFuncSetAttribute(tma_stream<6>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem6));
  const bool tma = prop.major >= 9;  // else the TMA columns read nan
  for (const bool graph : {false, true}) {
    std::printf("%s, %d SMs; us per launch (TB/s of K+V), %s\n", prop.name, prop.multiProcessorCount,
                graph ? "from a CUDA graph of 8 launches" : "each launch alone");
    std::printf("%5s %6s %8s | %16s %16s | %16s %16s\n", "CTAs", "rows", "MB", "cp.async 3", "cp.async 6", "TMA 3",
                "TMA 6");
    for (const auto& pt : points) {
      const int ctas = pt[0], rows = pt[1];
      const double mb = 2.0 * ctas * rows * kD * 2 / 1e6;
      const float us[4] = {
          time_us(sets, graph, [&](const Buffers& b, cudaStream_t st) {
            cp_async_stream<3><<<ctas, kThreads, smem3, st>>>(b.k, b.v, s, rows, sink);
          }),
          time_us(sets, graph, [&](const Buffers& b, cudaStream_t st) {
            cp_async_stream<6><<<ctas, kThreads, smem6, st>>>(b.k, b.v, s, rows, sink);
          }),
          !tma ? NAN : time_us(sets, graph, [&](const Buffers& b, cudaStream_t st) {
            tma_stream<3><<<ctas, kThreads, smem3, st>>>(b.k_map, b.v_map, rows, sink);
          }),
          !tma ? NAN : time_us(sets, graph, [&](const Buffers& b, cudaStream_t st) {
            tma_stream<6><<<ctas, kThreads, smem6, st>>>(b.k_map, b.v_map, rows, sink);
          })};
      std::printf("%5d %6d %8.1f |", ctas, rows, mb);
      for (int i = 0; i < 4; ++i) std::printf(" %7.2f (%5.2f)%s", us[i], mb / us[i], i == 1 ? " |" : "");
      std::printf("\n");
    }
  }
}

}  // namespace

// Failures (a CUDA call, a tensor map the driver refuses) arrive as attn::Error: what, got, expected, fix.
int main() {
  try {
    run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sm_stream: %s\n", e.what());
    return 1;
  }
  return 0;
}
