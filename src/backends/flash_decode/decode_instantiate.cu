// One row of decode_table.h: the decode and combine kernels for bf16 and
// fp16, and their launches (CMake sets ATTN_DECODE_DQK / ATTN_DECODE_DV).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <string>

#include "attn/error.h"
#include "backends/flash_decode/decode_kernel.cuh"
#include "backends/flash_decode/decode_launch.h"
#include "backends/flash_decode/decode_table.h"
#include "core/cuda_check.h"

#if !defined(ATTN_DECODE_DQK) || !defined(ATTN_DECODE_DV)
#error "build through CMake: ATTN_DECODE_DQK and ATTN_DECODE_DV name one row of decode_table.h"
#endif

namespace attn::flash_decode {

#define ATTN_IS_ROW(dqk, dv) || (dqk == ATTN_DECODE_DQK && dv == ATTN_DECODE_DV)
static_assert(false ATTN_FLASH_DECODE_TABLE(ATTN_IS_ROW), "ATTN_DECODE_DQK/DV is not a row of decode_table.h");
#undef ATTN_IS_ROW

template <typename T, int kDQK, int kDV, int kRowBlocks, bool kWarpParts = false>
void launch_rows(const DecodeParams& dp, int h_kv, cudaStream_t stream) {
  using Cfg = DecodeConfig<kDQK, kDV, kRowBlocks>;
  auto* kernel = flash_decode_kernel<T, kDQK, kDV, kRowBlocks, kWarpParts>;
  ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  const dim3 grid(static_cast<unsigned>(dp.m_blocks * dp.splits), static_cast<unsigned>(h_kv),
                  static_cast<unsigned>(dp.f.batch));
  kernels::launch_dependent(kernel, grid, Cfg::kThreads, Cfg::kSmemBytes, stream, dp.overlap, dp);
}

template <typename T, int kDQK, int kDV>
void launch_decode(const DecodeParams& dp, int h_kv, cudaStream_t stream) {
  if (dp.row_blocks == 2) {
    if (dp.parts > 1)
      fail(ErrorKind::runtime, "flash_decode was planned with two row blocks and parts per warp", "parts > 1",
           "one row block for parts per warp", "report this: plan() gives parts to at most 8 rows");
    if constexpr (two_row_blocks_fit(kDQK, kDV))
      launch_rows<T, kDQK, kDV, 2>(dp, h_kv, stream);
    else
      fail(ErrorKind::runtime, "flash_decode was planned with two row blocks", "d " + std::to_string(kDQK),
           "d_qk + d_v <= 256", "report this: plan() keeps one row block for wide rows");
  } else if (dp.parts > 1) {
    launch_rows<T, kDQK, kDV, 1, true>(dp, h_kv, stream);
  } else {
    launch_rows<T, kDQK, kDV, 1>(dp, h_kv, stream);
  }
  if (dp.splits > 1) {
    const dim3 cgrid(static_cast<unsigned>(dp.f.s_q * dp.f.h_q), static_cast<unsigned>(dp.f.batch));
    kernels::launch_dependent(flash_decode_combine_kernel<T, kDQK, kDV>, cgrid, CombineConfig<kDV>::kThreads, 0, stream,
                              dp.overlap, dp);
  }
}

template <int kDQK, int kDV, int kRowBlocks>
int occupancy(int device) {
  using Cfg = DecodeConfig<kDQK, kDV, kRowBlocks>;
  auto* kernel = flash_decode_kernel<__nv_bfloat16, kDQK, kDV, kRowBlocks>;
  ATTN_CUDA(cudaSetDevice(device));
  ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  int n = 0;
  ATTN_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, Cfg::kThreads, Cfg::kSmemBytes));
  return n;
}

template <int kDQK, int kDV>
int decode_ctas_per_sm(int device, int row_blocks) {
  // Constant for a kernel on a device, and the query costs host time in
  // every call that plans splits: each device is asked once (n + 1 kept, 0: not yet).
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices][2];
  const int two = row_blocks == 2 && two_row_blocks_fit(kDQK, kDV) ? 1 : 0;
  const bool keep = device >= 0 && device < kDevices;
  if (keep) {
    if (const int n1 = known[device][two].load(std::memory_order_relaxed)) return n1 - 1;
  }
  int n = 0;
  if constexpr (two_row_blocks_fit(kDQK, kDV))
    n = two ? occupancy<kDQK, kDV, 2>(device) : occupancy<kDQK, kDV, 1>(device);
  else
    n = occupancy<kDQK, kDV, 1>(device);
  if (keep) known[device][two].store(n + 1, std::memory_order_relaxed);
  return n;
}

template void launch_decode<__nv_bfloat16, ATTN_DECODE_DQK, ATTN_DECODE_DV>(const DecodeParams&, int, cudaStream_t);
template void launch_decode<__half, ATTN_DECODE_DQK, ATTN_DECODE_DV>(const DecodeParams&, int, cudaStream_t);
template int decode_ctas_per_sm<ATTN_DECODE_DQK, ATTN_DECODE_DV>(int, int);

}  // namespace attn::flash_decode
