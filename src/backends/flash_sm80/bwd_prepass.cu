// The backward's two light passes around the main kernel, one warp per
// (token, query head) row: before it, the row's terms {lse in log2 units,
// D = rowsum(dO * O) in fp32} and the row of dq_accum zeroed; after it,
// dq = softmax_scale * dq_accum rounded to T in the caller's strides (every
// element written, padding rows included).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backends/flash_sm80/bwd_dq_layout.h"
#include "backends/flash_sm80/bwd_launch.h"
#include "backends/flash_sm80/fwd_softmax.cuh"  // kLog2e
#include "core/cuda_check.h"

namespace attn::flash_sm80 {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block

// Offset of token t's row in a q-like tensor: thd tokens are rows; bshd/sbhd
// token b * s_q + i is row i of sequence b.
__device__ __forceinline__ int64_t row_offset(const BwdParams& p, int64_t t, int64_t batch_stride,
                                              int64_t row_stride) {
  if (p.fwd.packed || p.fwd.s_q == 0) return t * row_stride;
  return (t / p.fwd.s_q) * batch_stride + (t % p.fwd.s_q) * row_stride;
}

template <typename T>
__device__ __forceinline__ float2 to_float2(uint32_t v) {
  if constexpr (std::is_same_v<T, __half>) return __half22float2(*reinterpret_cast<__half2*>(&v));
  else return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
}

template <typename T>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    bwd_prepass_kernel(const __grid_constant__ BwdParams p, int d_qk, int d_v) {
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  const int h = blockIdx.y;
  if (t >= p.rows_q) return;
  const T* o = static_cast<const T*>(p.fwd.out) + row_offset(p, t, p.fwd.o_batch_stride, p.fwd.o_row_stride) +
               h * p.fwd.o_head_stride;
  const T* d = static_cast<const T*>(p.dout) + row_offset(p, t, p.do_batch_stride, p.do_row_stride) +
               h * p.do_head_stride;
  float sum = 0.f;
  for (int c = lane; c < d_v / 8; c += 32) {  // 16-byte chunks (supports() checks the alignment)
    const uint4 ov = *reinterpret_cast<const uint4*>(o + 8 * c), dv = *reinterpret_cast<const uint4*>(d + 8 * c);
    const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 a = to_float2<T>(ow[e]), b = to_float2<T>(dw[e]);
      sum += a.x * b.x + a.y * b.y;
    }
  }
#pragma unroll
  for (int s = 16; s >= 1; s /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, s);
  const int64_t row = h * p.rows_q + t;
  if (lane == 0) {
    const float lse = p.fwd.lse[row_offset(p, t, p.fwd.lse_batch_stride, p.fwd.lse_row_stride) +
                                h * p.fwd.lse_head_stride];
    p.row_terms[row] = make_float2(lse == -INFINITY ? INFINITY : lse * kLog2e, sum);
  }
  float4* acc = reinterpret_cast<float4*>(p.dq_accum + row * d_qk);
  for (int c = lane; c < d_qk / 4; c += 32) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
}

template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float x, float y) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 v = __floats2half2_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

template <typename T>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    bwd_convert_dq_kernel(const __grid_constant__ BwdParams p, int d_qk) {
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  const int h = blockIdx.y;
  if (t >= p.rows_q) return;
  T* dq = static_cast<T*>(p.dq) + row_offset(p, t, p.dq_batch_stride, p.dq_row_stride) + h * p.dq_head_stride;
  const float4* acc = reinterpret_cast<const float4*>(p.dq_accum + (h * p.rows_q + t) * d_qk);
  const float s = p.fwd.scale;
  for (int c = lane; c < d_qk / 8; c += 32) {
    const int at = dq_swizzle(t, 8 * c) / 4;  // chunk c's place in the row (bwd_dq_layout.h)
    const float4 a = acc[at], b = acc[at + 1];
    *reinterpret_cast<uint4*>(dq + 8 * c) = make_uint4(pack_pair<T>(a.x * s, a.y * s), pack_pair<T>(a.z * s, a.w * s),
                                                       pack_pair<T>(b.x * s, b.y * s), pack_pair<T>(b.z * s, b.w * s));
  }
}

dim3 row_grid(const BwdParams& p) {
  return dim3(static_cast<unsigned>((p.rows_q + kRowsPerBlock - 1) / kRowsPerBlock), p.fwd.h_q);
}

}  // namespace

template <typename T>
void launch_bwd_prepass(const BwdParams& p, int d_qk, int d_v, cudaStream_t stream) {
  bwd_prepass_kernel<T><<<row_grid(p), 32 * kRowsPerBlock, 0, stream>>>(p, d_qk, d_v);
  ATTN_CUDA(cudaGetLastError());
}

template <typename T>
void launch_bwd_convert_dq(const BwdParams& p, int d_qk, cudaStream_t stream) {
  bwd_convert_dq_kernel<T><<<row_grid(p), 32 * kRowsPerBlock, 0, stream>>>(p, d_qk);
  ATTN_CUDA(cudaGetLastError());
}

template void launch_bwd_prepass<__nv_bfloat16>(const BwdParams&, int, int, cudaStream_t);
template void launch_bwd_prepass<__half>(const BwdParams&, int, int, cudaStream_t);
template void launch_bwd_convert_dq<__nv_bfloat16>(const BwdParams&, int, cudaStream_t);
template void launch_bwd_convert_dq<__half>(const BwdParams&, int, cudaStream_t);

}  // namespace attn::flash_sm80
