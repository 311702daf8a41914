// flash_sm90's backward with a head split (flash::bwd_head_split): dK and dV
// from the fp32 accumulators its CTAs added into (Sm90BwdParams::dkv_accum)
// to the caller's tensors: every row of a padded batch (zeros past a
// sequence), or thd's tokens that lie in a sequence (the rows between
// sequences stay the caller's). Memory only: 16 bytes written per thread.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/flash_sm90/bwd_launch.h"
#include "core/cuda_check.h"
#include "core/sequence_bounds.h"
#include "kernels/sm80/mma.cuh"  // pack2

namespace attn::flash_sm90 {
namespace {

constexpr int kThreads = 256;

// Thread (row, 8-column chunk) of head blockIdx.y; blockIdx.z: 0 dK (d_qk
// columns), 1 dV (d_v; its accumulator follows dK's).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    bwd_convert_dkv_kernel(const __grid_constant__ Sm90BwdParams a, int d_qk, int d_v) {
  const flash::BwdParams& p = a.p;
  const bool v = blockIdx.z == 1;
  const int d = v ? d_v : d_qk, chunks = d / 8, h = blockIdx.y;
  const int64_t rows = a.dkv_rows, heads = p.fwd.h_q / p.fwd.h_per_kv;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x, t = idx / chunks;
  if (t >= rows) return;
  const int c = static_cast<int>(idx % chunks);
  int64_t b = 0, i = t;
  if (p.fwd.packed) {
    if (sequence_holding(p.fwd.cu_seqlens_kv, p.fwd.cu_kv_stride, p.fwd.batch, t) < 0) return;
  } else {
    b = t / p.fwd.s_kv;
    i = t - b * p.fwd.s_kv;
  }
  const float* first = a.dkv_accum + (v ? heads * rows * d_qk : 0);
  const float4* acc = reinterpret_cast<const float4*>(first + h * rows * d + t * d + 8 * c);
  T* out = static_cast<T*>(v ? p.dv : p.dk) + b * (v ? p.dv_batch_stride : p.dk_batch_stride) +
           i * (v ? p.dv_row_stride : p.dk_row_stride) + h * (v ? p.dv_head_stride : p.dk_head_stride) + 8 * c;
  const float4 x = acc[0], y = acc[1];
  *reinterpret_cast<uint4*>(out) = make_uint4(sm80::pack2<T>(x.x, x.y), sm80::pack2<T>(x.z, x.w),
                                              sm80::pack2<T>(y.x, y.y), sm80::pack2<T>(y.z, y.w));
}

}  // namespace

template <typename T>
void launch_bwd_convert_dkv(const Sm90BwdParams& a, int d_qk, int d_v, cudaStream_t stream) {
  const int64_t threads = a.dkv_rows * (std::max(d_qk, d_v) / 8);
  if (threads == 0) return;
  const dim3 grid(static_cast<unsigned>((threads + kThreads - 1) / kThreads), a.p.fwd.h_q / a.p.fwd.h_per_kv, 2);
  bwd_convert_dkv_kernel<T><<<grid, kThreads, 0, stream>>>(a, d_qk, d_v);
  ATTN_CUDA(cudaGetLastError());
}

template void launch_bwd_convert_dkv<__nv_bfloat16>(const Sm90BwdParams&, int, int, cudaStream_t);
template void launch_bwd_convert_dkv<__half>(const Sm90BwdParams&, int, int, cudaStream_t);

}  // namespace attn::flash_sm90
