// The backward's two light passes around the main kernel, one group of lanes
// per (token, query head) row: before it, the row's terms {lse in log2
// units, D = rowsum(dO * O) in fp32} and the row of dq_accum zeroed; after
// it, dq = softmax_scale * dq_accum rounded to T in the caller's strides
// (every element written, padding rows included). Both only move memory, so
// what matters is bytes in flight: a group has as many lanes as the row has
// 16-byte chunks (up to 32, a power of two), so a warp covers several short
// rows (one warp per row leaves 24 of 32 lanes idle at d 64, where the
// pre-pass then takes twice its d 256 time for the same bytes on the H100).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backends/common/softmax_sink.cuh"
#include "backends/flash/bwd_prepass.h"
#include "backends/flash/dq_layout.h"
#include "backends/flash/sequence.cuh"
#include "backends/flash/score_mods.cuh"  // kLog2e
#include "core/cuda_check.h"
#include "kernels/dependent_launch.cuh"

namespace attn::flash {
namespace {

constexpr int kThreads = 256;  // per block

// Lanes per row of d elements: its 16-byte chunks, rounded down to a power of
// two (the group's sum is a butterfly), at most a warp.
constexpr int lanes_per_row(int d) {
  int lanes = 1;
  while (lanes * 2 <= d / 8 && lanes < 32) lanes *= 2;
  return lanes;
}
static_assert(lanes_per_row(32) == 4 && lanes_per_row(64) == 8 && lanes_per_row(96) == 8 &&
              lanes_per_row(128) == 16 && lanes_per_row(192) == 16 && lanes_per_row(256) == 32);

// A block covers kThreads / lanes tokens of one query head (blockIdx.y).
dim3 row_grid(const BwdParams& p, int lanes) {
  const int64_t rows = kThreads / lanes;
  return dim3(static_cast<unsigned>((p.rows_q + rows - 1) / rows), p.fwd.h_q);
}

// Token t as (sequence, row): thd tokens are rows of one sequence; bshd/sbhd
// token b * s_q + i is row i of sequence b. Found once per token (a 64-bit
// division), then an offset per tensor.
struct TokenRow {
  int64_t b = 0, i = 0;
};
__device__ __forceinline__ TokenRow token_row(const BwdParams& p, int64_t t) {
  if (p.fwd.packed || p.fwd.s_q == 0) return {0, t};
  const int64_t b = t / p.fwd.s_q;
  return {b, t - b * p.fwd.s_q};
}
__device__ __forceinline__ int64_t row_offset(TokenRow r, int64_t batch_stride, int64_t row_stride) {
  return r.b * batch_stride + r.i * row_stride;
}

template <typename T>
__device__ __forceinline__ float2 to_float2(uint32_t v) {
  if constexpr (std::is_same_v<T, __half>) return __half22float2(*reinterpret_cast<__half2*>(&v));
  else return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    bwd_prepass_kernel(const __grid_constant__ BwdParams p, int d_qk, int d_v, int lanes) {
  // Once every block has started, the main kernel's CTAs may take the SMs
  // this pass leaves (flash_sm90 launches it early; it waits for this grid).
  kernels::allow_dependent_launch();
  const int lane = threadIdx.x % lanes;  // within the row's group
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (kThreads / lanes) + threadIdx.x / lanes;
  const int h = blockIdx.y;
  float sum = 0.f;
  const TokenRow tr = token_row(p, t);
  if (t < p.rows_q) {
    const T* o = static_cast<const T*>(p.fwd.out) + row_offset(tr, p.fwd.o_batch_stride, p.fwd.o_row_stride) +
                 h * p.fwd.o_head_stride;
    const T* d = static_cast<const T*>(p.dout) + row_offset(tr, p.do_batch_stride, p.do_row_stride) +
                 h * p.do_head_stride;
    for (int c = lane; c < d_v / 8; c += lanes) {  // 16-byte chunks (supports() checks the alignment)
      const uint4 ov = *reinterpret_cast<const uint4*>(o + 8 * c), dv = *reinterpret_cast<const uint4*>(d + 8 * c);
      const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 a = to_float2<T>(ow[e]), b = to_float2<T>(dw[e]);
        sum += a.x * b.x + a.y * b.y;
      }
    }
  }
  // The whole warp takes part (rows past rows_q add zeros); a group's lanes
  // are aligned in the warp, so xor within the group stays in it.
  for (int s = lanes / 2; s >= 1; s /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, s);
  if (t >= p.rows_q) return;
  const int64_t row = h * p.rows_q + t;
  if (lane == 0) {
    float lse = p.fwd.lse[row_offset(tr, p.fwd.lse_batch_stride, p.fwd.lse_row_stride) + h * p.fwd.lse_head_stride];
    // A padding row of a padded batch has the sink's logit as its lse; it
    // takes no part (P = 0 everywhere, as for an lse of -inf).
    if (p.fwd.sink.kind != 0 && !p.fwd.packed && p.fwd.cu_seqlens_q && tr.i >= sequence_extent(p.fwd, tr.b).len_q)
      lse = -INFINITY;
    p.row_terms[row] = make_float2(lse == -INFINITY ? INFINITY : lse * kLog2e, sum);
  }
  float4* acc = reinterpret_cast<float4*>(p.dq_accum + row * d_qk);
  for (int c = lane; c < d_qk / 4; c += lanes) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// One block per query head: the sum in a fixed order (each thread's rows in
// order, then a tree), so repeated runs give the same bits.
__global__ void __launch_bounds__(kThreads) bwd_dsink_kernel(const __grid_constant__ BwdParams p) {
  const int h = blockIdx.x;
  const float sink_log2 = detail::sink_logit(p.fwd.sink, h) * kLog2e;
  const float2* terms = p.row_terms + h * p.rows_q;
  float sum = 0.f;  // dsink's share of this thread's rows (no rows: 0)
  for (int64_t t = threadIdx.x; t < p.rows_q; t += kThreads) {
    const float2 r = terms[t];  // {lse in log2 units (+inf: no part), D}
    if (r.x != INFINITY) sum -= exp2f(sink_log2 - r.x) * r.y;
  }
  __shared__ float part[kThreads];
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) p.dsink[h * p.dsink_stride] = part[0];
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
__global__ void __launch_bounds__(kThreads)
    bwd_convert_dq_kernel(const __grid_constant__ BwdParams p, int d_qk, int lanes) {
  kernels::wait_for_prior_grid();  // an early launch: the main kernel's adds (every block waits, see the launch)
  const int lane = threadIdx.x % lanes;  // within the row's group
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (kThreads / lanes) + threadIdx.x / lanes;
  const int h = blockIdx.y;
  if (t >= p.rows_q) return;
  T* dq = static_cast<T*>(p.dq) + row_offset(token_row(p, t), p.dq_batch_stride, p.dq_row_stride) +
          h * p.dq_head_stride;
  const float4* acc = reinterpret_cast<const float4*>(p.dq_accum + (h * p.rows_q + t) * d_qk);
  const float s = p.fwd.scale * p.fwd.dropout_scale;  // dropout's 1 / (1 - p) was left out of dq_accum
  for (int c = lane; c < d_qk / 8; c += lanes) {
    const int at = dq_swizzle(t, 8 * c) / 4;  // chunk c's place in the row (flash/dq_layout.h)
    const float4 a = acc[at], b = acc[at + 1];
    *reinterpret_cast<uint4*>(dq + 8 * c) = make_uint4(pack_pair<T>(a.x * s, a.y * s), pack_pair<T>(a.z * s, a.w * s),
                                                       pack_pair<T>(b.x * s, b.y * s), pack_pair<T>(b.z * s, b.w * s));
  }
}

}  // namespace

template <typename T>
void launch_bwd_prepass(const BwdParams& p, int d_qk, int d_v, cudaStream_t stream) {
  const int lanes = lanes_per_row(d_v);
  bwd_prepass_kernel<T><<<row_grid(p, lanes), kThreads, 0, stream>>>(p, d_qk, d_v, lanes);
  ATTN_CUDA(cudaGetLastError());
}

void launch_bwd_dsink(const BwdParams& p, cudaStream_t stream) {
  if (!p.dsink) return;
  bwd_dsink_kernel<<<p.fwd.h_q, kThreads, 0, stream>>>(p);
  ATTN_CUDA(cudaGetLastError());
}

template <typename T>
void launch_bwd_convert_dq(const BwdParams& p, int d_qk, cudaStream_t stream, bool early) {
  const int lanes = lanes_per_row(d_qk);
  kernels::launch_dependent(bwd_convert_dq_kernel<T>, row_grid(p, lanes), kThreads, 0, stream, early, p, d_qk, lanes);
}

template void launch_bwd_prepass<__nv_bfloat16>(const BwdParams&, int, int, cudaStream_t);
template void launch_bwd_prepass<__half>(const BwdParams&, int, int, cudaStream_t);
template void launch_bwd_convert_dq<__nv_bfloat16>(const BwdParams&, int, cudaStream_t, bool);
template void launch_bwd_convert_dq<__half>(const BwdParams&, int, cudaStream_t, bool);

}  // namespace attn::flash
