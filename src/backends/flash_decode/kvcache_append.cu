// See kvcache_append.h.
#include "backends/flash_decode/kvcache_append.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "core/cuda_check.h"
#include "kernels/dependent_launch.cuh"
#include "kernels/float_convert.cuh"

namespace attn::flash_decode {
namespace {

using kernels::from_float;
using kernels::to_float;

// Channel c of row x rotated at position pos (the table's row; NaN past it).
template <typename T, typename Trig>
__device__ __forceinline__ float rotated(const AppendParams& a, const T* x, int c, int pos) {
  const float xc = to_float(x[c]);
  if (c >= 2 * a.half) return xc;
  if (pos < 0 || pos >= a.s_ro) return NAN;
  const bool first = a.interleaved ? (c & 1) == 0 : c < a.half;
  const int angle = a.interleaved ? c / 2 : (first ? c : c - a.half);
  const int partner = a.interleaved ? (c ^ 1) : (first ? c + a.half : c - a.half);
  const float co = to_float(static_cast<const Trig*>(a.cos)[pos * a.cos_stride + angle]);
  const float si = to_float(static_cast<const Trig*>(a.sin)[pos * a.sin_stride + angle]);
  const float xp = to_float(x[partner]);
  return first ? xc * co - xp * si : xc * co + xp * si;
}

// One block per (new token, KV head) of sequence blockIdx.y.
template <typename T, typename Trig>
__global__ void __launch_bounds__(128) append_kernel(const AppendParams a) {
  kernels::allow_dependent_launch();  // the decode kernel waits where it reads what this writes
  const int b = blockIdx.y, j = blockIdx.x / a.h_kv, h = blockIdx.x % a.h_kv;
  const int pos = flash::cache_length(a.cache, b) + j;
  if (pos < 0 || pos >= a.cache.capacity) return;  // only unchecked lengths get here: nothing is written
  const flash::CacheSlot at = flash::cache_slot(a.cache, b, flash::cache_row(a.cache, b), pos);
  const T* k = static_cast<const T*>(a.k) + b * a.k_stride[0] + j * a.k_stride[1] + h * a.k_stride[2];
  const T* v = static_cast<const T*>(a.v) + b * a.v_stride[0] + j * a.v_stride[1] + h * a.v_stride[2];
  T* kc = static_cast<T*>(a.k_cache) + at.outer * a.kc_stride[0] + at.inner * a.kc_stride[1] + h * a.kc_stride[2];
  T* vc = static_cast<T*>(a.v_cache) + at.outer * a.vc_stride[0] + at.inner * a.vc_stride[1] + h * a.vc_stride[2];
  for (int c = threadIdx.x; c < a.d_qk; c += blockDim.x) kc[c] = from_float<T>(rotated<T, Trig>(a, k, c, pos));
  for (int c = threadIdx.x; c < a.d_v; c += blockDim.x) vc[c] = v[c];
}

// One block per (query token, query head) of sequence blockIdx.y.
template <typename T, typename Trig>
__global__ void __launch_bounds__(128) rotate_q_kernel(const AppendParams a) {
  kernels::allow_dependent_launch();
  const int b = blockIdx.y, j = blockIdx.x / a.h_q, h = blockIdx.x % a.h_q;
  const int len = flash::cache_length(a.cache, b);
  int pos = a.q_by_row ? len + a.cache.s_new - a.s_q + j : len;
  pos = pos < 0 ? 0 : pos;
  const T* q = static_cast<const T*>(a.q) + b * a.q_stride[0] + j * a.q_stride[1] + h * a.q_stride[2];
  T* out = static_cast<T*>(a.q_out) + ((static_cast<int64_t>(b) * a.s_q + j) * a.h_q + h) * a.d_qk;
  for (int c = threadIdx.x; c < a.d_qk; c += blockDim.x) out[c] = from_float<T>(rotated<T, Trig>(a, q, c, pos));
}

template <typename T, typename Trig>
bool launch(const AppendParams& a, cudaStream_t stream) {
  bool launched = false;
  if (a.cache.s_new > 0 && a.batch > 0 && a.h_kv > 0) {
    const dim3 grid(static_cast<unsigned>(a.cache.s_new * a.h_kv), static_cast<unsigned>(a.batch));
    append_kernel<T, Trig><<<grid, 128, 0, stream>>>(a);
    ATTN_CUDA(cudaGetLastError());
    launched = true;
  }
  if (a.q_out && a.s_q > 0 && a.batch > 0 && a.h_q > 0) {
    rotate_q_kernel<T, Trig><<<dim3(static_cast<unsigned>(a.s_q * a.h_q), static_cast<unsigned>(a.batch)), 128, 0,
                               stream>>>(a);
    ATTN_CUDA(cudaGetLastError());
    launched = true;
  }
  return launched;
}

template <typename T>
bool launch_for(const AppendParams& a, cudaStream_t stream) {
  return a.trig_f32 ? launch<T, float>(a, stream) : launch<T, T>(a, stream);
}

}  // namespace

bool launch_kvcache_prologue(const AppendParams& a, DType dtype, cudaStream_t stream) {
  return dtype == DType::bf16 ? launch_for<__nv_bfloat16>(a, stream) : launch_for<__half>(a, stream);
}

}  // namespace attn::flash_decode
