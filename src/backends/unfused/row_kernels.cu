// The unfused backend's own kernels: one block per (query row, head) turns raw
// scores into probabilities (forward) or into the softmax gradient (backward),
// applying DESIGN.md's rule in the same order as the reference: softcap, bias
// or ALiBi, arbitrary mask, visibility, softmax, dropout.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "attn/mask_rule.h"
#include "attn/philox.h"
#include "backends/common/softmax_sink.cuh"
#include "backends/unfused/row_params.h"
#include "core/cuda_check.h"
#include "core/nan_max.h"

namespace attn::unfused {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load_float(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::f64: return static_cast<float>(static_cast<const double*>(p)[i]);
    case DType::u8:
    case DType::boolean: return static_cast<const uint8_t*>(p)[i];
    default: return 0.f;
  }
}

__device__ __forceinline__ void store_float(void* p, DType t, int64_t i, float x) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = x; return;
    case DType::f16: static_cast<__half*>(p)[i] = __float2half_rn(x); return;
    case DType::bf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x); return;
    default: return;
  }
}

__device__ __forceinline__ int64_t broadcast_index(const BroadcastTensor& t, int64_t b, int64_t h, int64_t i,
                                                   int64_t j) {
  return b * t.stride[0] + h * t.stride[1] + i * t.stride[2] + j * t.stride[3];
}

// s_ij from x_ij for a pair inside the visible range; -inf when an arbitrary mask removes it.
__device__ __forceinline__ float score(const RowParams& p, int h, int64_t i, int64_t j, float x) {
  float s = p.softcap > 0.f ? p.softcap * tanhf(x / p.softcap) : x;
  if (p.bias_kind == 1)
    s += load_float(p.bias.data, p.bias.dtype, broadcast_index(p.bias, p.batch_index, h, i, j));
  else if (p.bias_kind == 2)
    s += alibi_bias<float, int64_t>(p.alibi[h * p.alibi_stride_h], i, j, p.shift);
  if (p.has_mask) {
    const float m = load_float(p.mask.data, p.mask.dtype, broadcast_index(p.mask, p.batch_index, h, i, j));
    if (p.mask_additive)
      s += m;
    else if (m == 0.f)
      s = -INFINITY;
  }
  return s;
}

__device__ __forceinline__ float dropout_factor(const RowParams& p, int h, int64_t i, int64_t j) {
  if (p.dropout_threshold == 0) return 1.f;
  const uint32_t bh = static_cast<uint32_t>(p.batch_index * p.h_q + h);
  const uint64_t seed = p.rng_state ? static_cast<uint64_t>(p.rng_state[0]) : p.seed;
  const uint32_t offset = p.rng_state ? static_cast<uint32_t>(p.rng_state[1]) : p.offset;
  return dropout_keep(seed, offset, bh, static_cast<uint32_t>(i), static_cast<uint32_t>(j), p.dropout_threshold)
             ? p.dropout_scale
             : 0.f;
}

// max that keeps a NaN (fmaxf drops it): a NaN score makes the row's lse NaN,
// not a row that reads as "no visible key".
using detail::max_keeping_nan;

template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float partial[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? max_keeping_nan(v, other) : v + other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // partial may still be read by a previous reduction
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? partial[lane] : (kMax ? -INFINITY : 0.f);
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? max_keeping_nan(v, other) : v + other;
  }
  return v;
}

// The row's log-sum-exp over visible keys and the sink (the sink's logit when
// no key counts, -inf without a sink); *max_score: the largest visible score.
__device__ float row_lse(const RowParams& p, const float* x, int h, int64_t i, KeyRange<int64_t> keys,
                         float* max_score) {
  float m = -INFINITY;
  for (int64_t j = keys.begin + threadIdx.x; j < keys.end; j += kThreads)
    m = max_keeping_nan(m, score(p, h, i, j, x[j]));
  m = block_reduce<true>(m);
  *max_score = m;
  const float sink = detail::sink_logit(p.sink, h);
  const float top = max_keeping_nan(m, sink);
  if (top == -INFINITY) return -INFINITY;
  float sum = 0.f;
  for (int64_t j = keys.begin + threadIdx.x; j < keys.end; j += kThreads) sum += expf(score(p, h, i, j, x[j]) - top);
  sum = block_reduce<false>(sum) + expf(sink - top);
  return top + logf(sum);
}

__device__ __forceinline__ KeyRange<int64_t> row_keys(const RowParams& p, int64_t i) {
  return visible_keys<int64_t>(i, p.len_q, p.len_kv, p.shift, p.window_left, p.window_right);
}

__global__ void __launch_bounds__(kThreads) probabilities_kernel(RowParams p, const float* scores, void* probs,
                                                                DType t, LseOut lse) {
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int64_t row = (static_cast<int64_t>(h) * p.rows + i) * p.cols;
  const float* x = scores + row;
  const KeyRange<int64_t> keys = row_keys(p, i);
  float max_score;
  const float l = row_lse(p, x, h, i, keys, &max_score);
  for (int64_t j = threadIdx.x; j < p.cols; j += kThreads) {
    float prob = 0.f;
    if (keys.contains(j) && l != -INFINITY) {
      const float s = score(p, h, i, j, x[j]);
      if (s != -INFINITY) prob = expf(s - l) * dropout_factor(p, h, i, j);
    }
    store_float(probs, t, row + j, prob);
  }
  // Every row, padded ones included (their lse is the sink's logit, -inf without one).
  if (lse.base && threadIdx.x == 0) lse.base[h * lse.stride_h + i * lse.stride_i] = l;
  if (p.max_logit && threadIdx.x == 0 && max_score != -INFINITY)
    detail::atomic_max_keeping_nan(p.max_logit + h * p.max_logit_stride, max_score);
}

__global__ void __launch_bounds__(kThreads) softmax_grad_kernel(RowParams p, GivenForward given, const float* scores,
                                                               const float* dprobs, void* dscores, void* probs_dropped,
                                                               DType t, float* dbias, BroadcastTensor dbias_layout) {
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int64_t row = (static_cast<int64_t>(h) * p.rows + i) * p.cols;
  const float *x = scores + row, *dp = dprobs + row;
  const KeyRange<int64_t> keys = row_keys(p, i);
  // The forward's result as given (not recomputed): l = lse_i, D_i = dO_i . O_i.
  const float l = given.lse[h * given.lse_stride_h + i * given.lse_stride_i];
  float d = 0.f;
  const int64_t o = i * given.out_row_stride + h * given.out_head_stride;
  const int64_t g = i * given.dout_row_stride + h * given.dout_head_stride;
  for (int c = threadIdx.x; c < given.d_v; c += kThreads)
    d += load_float(given.dout, t, g + c) * load_float(given.out, t, o + c);
  d = block_reduce<false>(d);
  // d lse / d sink = exp(sink - lse): dsink = -sum over real rows of exp(sink - lse_i) D_i.
  if (p.dsink && threadIdx.x == 0 && i < p.len_q)
    atomicAdd(p.dsink + h * p.dsink_stride, -expf(detail::sink_logit(p.sink, h) - l) * d);
  for (int64_t j = threadIdx.x; j < p.cols; j += kThreads) {
    float dx = 0.f, pz = 0.f;
    if (keys.contains(j) && l != -INFINITY) {
      const float s = score(p, h, i, j, x[j]);
      if (s != -INFINITY) {
        const float prob = expf(s - l), z = dropout_factor(p, h, i, j);
        const float ds = prob * (z * dp[j] - d);
        pz = prob * z;
        if (dbias) atomicAdd(dbias + broadcast_index(dbias_layout, p.batch_index, h, i, j), ds);
        if (p.softcap > 0.f) {
          const float th = tanhf(x[j] / p.softcap);
          dx = ds * (1.f - th * th);
        } else {
          dx = ds;
        }
      }
    }
    store_float(dscores, t, row + j, dx);
    store_float(probs_dropped, t, row + j, pz);
  }
}

__global__ void zero_rows_kernel(void* base, DType t, int64_t rows, int64_t row_stride, int64_t heads,
                                 int64_t head_stride, int64_t dim) {
  const int64_t n = rows * heads * dim;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = e % dim, h = (e / dim) % heads, r = e / (dim * heads);
    store_float(base, t, r * row_stride + h * head_stride + c, 0.f);
  }
}

__global__ void store_accumulator_kernel(const float* src, void* dst, DType t, int64_t rows, int64_t row_stride,
                                         int64_t heads, int64_t head_stride, int64_t dim) {
  const int64_t n = rows * heads * dim;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = e % dim, r = (e / dim) % rows, h = e / (dim * rows);  // src is [heads, rows, dim]
    store_float(dst, t, r * row_stride + h * head_stride + c, src[e]);
  }
}

__global__ void store_dense4_kernel(const float* src, void* dst, DType t, int64_t s0, int64_t s1, int64_t s2,
                                    int64_t s3, int64_t t0, int64_t t1, int64_t t2, int64_t t3) {
  const int64_t n = s0 * s1 * s2 * s3;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i3 = e % s3, i2 = (e / s3) % s2, i1 = (e / (s3 * s2)) % s1, i0 = e / (s3 * s2 * s1);
    store_float(dst, t, i0 * t0 + i1 * t1 + i2 * t2 + i3 * t3, src[e]);
  }
}

int grid_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 65535)); }

struct Strided4 {
  int64_t shape[4];
  int64_t src[4], dst[4];
};

template <typename Word>
__global__ void copy_strided_kernel(const Word* src, Word* dst, Strided4 g, int64_t n) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i3 = e % g.shape[3], i2 = (e / g.shape[3]) % g.shape[2];
    const int64_t i1 = (e / (g.shape[3] * g.shape[2])) % g.shape[1], i0 = e / (g.shape[3] * g.shape[2] * g.shape[1]);
    dst[i0 * g.dst[0] + i1 * g.dst[1] + i2 * g.dst[2] + i3 * g.dst[3]] =
        src[i0 * g.src[0] + i1 * g.src[1] + i2 * g.src[2] + i3 * g.src[3]];
  }
}

// Pointers per launch: the chunk stays within the 4 KiB of kernel parameters.
constexpr int kPointersPerLaunch = 480;
struct PointerChunk {
  const void** dst;
  int count;
  const void* ptrs[kPointersPerLaunch];
};

__global__ void write_pointers_kernel(PointerChunk c) {
  if (static_cast<int>(threadIdx.x) < c.count) c.dst[threadIdx.x] = c.ptrs[threadIdx.x];
}

}  // namespace

void launch_probabilities(const RowParams& prm, const float* scores, void* probs, DType t, LseOut lse, void* stream) {
  if (prm.rows == 0) return;
  probabilities_kernel<<<dim3(prm.rows, prm.h_q), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(prm, scores, probs,
                                                                                                   t, lse);
  ATTN_CUDA(cudaGetLastError());
}

void launch_softmax_grad(const RowParams& prm, const GivenForward& given, const float* scores, const float* dprobs,
                         void* dscores, void* probs_dropped, DType t, float* dbias_acc, const int64_t dbias_stride[4],
                         void* stream) {
  if (prm.rows == 0) return;
  BroadcastTensor layout;
  for (int d = 0; d < 4; ++d) layout.stride[d] = dbias_stride ? dbias_stride[d] : 0;
  softmax_grad_kernel<<<dim3(prm.rows, prm.h_q), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      prm, given, scores, dprobs, dscores, probs_dropped, t, dbias_acc, layout);
  ATTN_CUDA(cudaGetLastError());
}

void launch_zero_rows(void* base, DType t, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_stride,
                      int64_t dim, void* stream) {
  const int64_t n = rows * heads * dim;
  if (n == 0) return;
  zero_rows_kernel<<<grid_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(base, t, rows, row_stride, heads,
                                                                              head_stride, dim);
  ATTN_CUDA(cudaGetLastError());
}

void launch_store_accumulator(const float* src, void* dst, DType t, int64_t rows, int64_t row_stride, int64_t heads,
                              int64_t head_stride, int64_t dim, void* stream) {
  const int64_t n = rows * heads * dim;
  if (n == 0) return;
  store_accumulator_kernel<<<grid_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(src, dst, t, rows, row_stride,
                                                                                      heads, head_stride, dim);
  ATTN_CUDA(cudaGetLastError());
}

void launch_store_dense4(const float* src, void* dst, DType t, const int64_t shape[4], const int64_t stride[4],
                         void* stream) {
  const int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
  if (n == 0) return;
  store_dense4_kernel<<<grid_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      src, dst, t, shape[0], shape[1], shape[2], shape[3], stride[0], stride[1], stride[2], stride[3]);
  ATTN_CUDA(cudaGetLastError());
}

void launch_copy_strided(const void* src, const int64_t src_stride[4], void* dst, const int64_t dst_stride[4],
                         const int64_t shape[4], int elem_bytes, void* stream) {
  Strided4 g;
  for (int d = 0; d < 4; ++d) g.shape[d] = shape[d], g.src[d] = src_stride[d], g.dst[d] = dst_stride[d];
  const int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
  if (n == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (elem_bytes) {
    case 2: copy_strided_kernel<<<grid_for(n), 256, 0, s>>>(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), g, n); break;
    case 4: copy_strided_kernel<<<grid_for(n), 256, 0, s>>>(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), g, n); break;
    default: copy_strided_kernel<<<grid_for(n), 256, 0, s>>>(static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst), g, n); break;
  }
  ATTN_CUDA(cudaGetLastError());
}

void launch_write_pointers(const void** dst, const void* const* ptrs, int64_t n, void* stream) {
  for (int64_t first = 0; first < n; first += kPointersPerLaunch) {
    PointerChunk c;
    c.dst = dst + first;
    c.count = static_cast<int>(std::min<int64_t>(n - first, kPointersPerLaunch));
    for (int i = 0; i < c.count; ++i) c.ptrs[i] = ptrs[first + i];
    write_pointers_kernel<<<1, 512, 0, static_cast<cudaStream_t>(stream)>>>(c);
    ATTN_CUDA(cudaGetLastError());
  }
}

}  // namespace attn::unfused
