// attn's kernels around a cuDNN call (see cudnn_kernels.h). All are one thread
// per row or per sequence: they touch O(rows) memory, next to cuDNN's O(rows * s_kv) work.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "attn/mask_rule.h"
#include "backends/common/softmax_sink.cuh"
#include "backends/cudnn/cudnn_kernels.h"
#include "core/cuda_check.h"
#include "core/nan_max.h"
#include "core/sequence_bounds.h"

namespace attn::cudnn {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

// Sequence b of cu (b < batch), or where the tokens end (b == batch: at or
// past the last sequence's end), bounded by the tensors (token counts fit
// int32: cudnn_rules.cpp refuses larger ragged problems).
__device__ SequenceBounds sequence_of(const int32_t* cu, int64_t stride, int64_t b, int64_t batch, bool packed,
                                      int64_t tokens, int64_t max_len) {
  const int t = static_cast<int>(tokens), m = static_cast<int>(max_len);
  const int32_t lo = cu[b * stride];
  if (b < batch) return bounded_sequence(lo, cu[(b + 1) * stride], packed, t, m);
  SequenceBounds end = bounded_sequence(lo, lo, packed, t, m);
  if (b > 0) {
    const SequenceBounds last = bounded_sequence(cu[(b - 1) * stride], lo, packed, t, m);
    if (end.start < last.start + last.len) end.start = last.start + last.len;
  }
  return end;
}

// First token of packed sequence b, bounded by the tensor's tokens.
__device__ int64_t sequence_start(const int32_t* cu, int64_t stride, int64_t b, int64_t tokens) {
  return bounded_sequence(cu[b * stride], 0, true, static_cast<int>(tokens), 0).start;
}

__global__ void prepare_sequences(SequenceArgs a) {
  const int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (b > a.batch) return;
  int64_t start_q = b * a.s_q, start_kv = b * a.s_kv, len_q = a.s_q, len_kv = a.s_kv;
  if (a.cu_q) {
    const SequenceBounds q = sequence_of(a.cu_q, a.cu_q_stride, b, a.batch, a.packed, a.tokens_q, a.s_q);
    const SequenceBounds kv = sequence_of(a.cu_kv, a.cu_kv_stride, b, a.batch, a.packed, a.tokens_kv, a.s_kv);
    start_q = q.start, len_q = q.len, start_kv = kv.start, len_kv = kv.len;
  }
  if (b < a.batch) {
    a.len_q[b] = static_cast<int32_t>(len_q);
    a.len_kv[b] = static_cast<int32_t>(len_kv);
  }
  for (int r = 0; r < kRoles; ++r) {
    if (!a.ragged[r]) continue;
    const bool is_kv = r == kK || r == kV || r == kdK || r == kdV;
    a.ragged[r][b] = static_cast<int32_t>((is_kv ? start_kv : start_q) * a.token_stride[r]);
  }
}

template <typename T>
__device__ void zero_row(const RowLayout& t, int64_t row_offset, int64_t dim) {
  T* p = static_cast<T*>(t.data) + row_offset;
  for (int64_t e = 0; e < dim; ++e) p[e] = T(0.0f);
}

__device__ void zero_row_of(DType dtype, const RowLayout& t, int64_t offset, int64_t dim) {
  if (dtype == DType::bf16)
    zero_row<__nv_bfloat16>(t, offset, dim);
  else
    zero_row<__half>(t, offset, dim);
}

__device__ int64_t row_offset(const RowLayout& t, bool ragged, int64_t start, int64_t b, int64_t pos, int64_t h) {
  const int64_t token = ragged ? (start + pos) * t.token_stride : b * t.batch_stride + pos * t.token_stride;
  return token + h * t.head_stride;
}

// Whether row i of sequence b sees a key (false for rows past its length).
__device__ bool sees_a_key(const ForwardRows& a, int64_t b, int64_t i) {
  const int64_t len_q = a.len_q ? a.len_q[b] : a.s_q, len_kv = a.len_kv ? a.len_kv[b] : a.s_kv;
  const int64_t shift = alignment_shift<int64_t>(a.bottom_right, len_q, len_kv);
  return !visible_keys<int64_t>(i, len_q, len_kv, shift, a.left, a.right).empty();
}

__global__ void finish_forward_rows(ForwardRows a) {
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= a.batch * a.heads * a.rows) return;
  const int64_t i = idx % a.rows, h = idx / a.rows % a.heads, b = idx / (a.rows * a.heads);
  const bool ragged = a.cu_q != nullptr;
  if (ragged && i >= (a.len_q ? a.len_q[b] : a.s_q)) return;  // no such token in a packed batch
  const int64_t start = ragged ? sequence_start(a.cu_q, a.cu_q_stride, b, a.tokens_q) : 0;
  const bool empty = !sees_a_key(a, b, i);
  float* lse = a.lse ? a.lse + b * a.lse_b + h * a.lse_h + (start + i) * a.lse_i : nullptr;
  const int64_t row = (b * a.heads + h) * a.rows + i;
  if (empty && a.fix_empty) {
    zero_row_of(a.dtype, a.out, row_offset(a.out, ragged, start, b, i, h), a.d_v);
    if (lse) *lse = detail::sink_logit(a.sink, h);
  } else if (lse && a.stats) {
    *lse = a.stats[row];
  } else if (lse && a.row_max) {
    *lse = a.row_max[row] + logf(a.row_sum_exp[row]);
  }
}

// One block per head: its rows that see a key, in a fixed order (the same
// bits on every run).
__global__ void max_logit_per_head(ForwardRows a, float* max_logit, int64_t stride) {
  const int64_t h = blockIdx.x;
  float m = -INFINITY;
  if (a.row_max)
    for (int64_t r = threadIdx.x; r < a.batch * a.rows; r += blockDim.x) {
      const int64_t b = r / a.rows, i = r % a.rows;
      if (!sees_a_key(a, b, i)) continue;
      // A NaN score makes the row's Sum_exp NaN, whatever cuDNN's Max kept.
      const int64_t row = (b * a.heads + h) * a.rows + i;
      const float sum = a.row_sum_exp[row];
      m = detail::max_keeping_nan(m, sum != sum ? sum : a.row_max[row]);
    }
  __shared__ float part[kThreads];
  part[threadIdx.x] = m;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] = detail::max_keeping_nan(part[threadIdx.x], part[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) max_logit[h * stride] = part[0];
}

__global__ void copy_per_head(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t heads) {
  const int64_t h = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (h < heads) dst[h * dst_stride] = src[h * src_stride];
}

__global__ void backward_stats(BackwardStats a) {
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= a.batch * a.heads * a.rows) return;
  const int64_t i = idx % a.rows, h = idx / a.rows % a.heads, b = idx / (a.rows * a.heads);
  const bool ragged = a.cu_q != nullptr;
  const int64_t len_q = a.len_q ? a.len_q[b] : a.s_q;
  float v = 0.0f;
  if (i < len_q || !ragged) {
    const int64_t start = ragged ? sequence_start(a.cu_q, a.cu_q_stride, b, a.tokens_q) : 0;
    v = a.lse[b * a.lse_b + h * a.lse_h + (start + i) * a.lse_i];
    if (!isfinite(v)) v = 0.0f;
  }
  a.stats[idx] = v;
}

__global__ void zero_padded_rows(PaddedRows a) {
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= a.batch * a.heads * a.rows) return;
  const int64_t i = idx % a.rows, h = idx / a.rows % a.heads, b = idx / (a.rows * a.heads);
  if (i < a.len[b] && a.other_len[b] != 0) return;
  zero_row_of(a.dtype, a.t, row_offset(a.t, false, 0, b, i, h), a.dim);
}

}  // namespace

namespace {

// One thread per item; nothing to do for zero items.
template <typename Args>
void launch(void (*kernel)(Args), int64_t items, const Args& a, void* stream) {
  if (items == 0) return;
  kernel<<<blocks_for(items), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  ATTN_CUDA(cudaGetLastError());
}

}  // namespace

void launch_prepare_sequences(const SequenceArgs& a, void* stream) {
  launch(prepare_sequences, a.batch + 1, a, stream);
}
void launch_finish_forward_rows(const ForwardRows& a, void* stream) {
  launch(finish_forward_rows, a.batch * a.heads * a.rows, a, stream);
}
void launch_max_logit_per_head(const ForwardRows& a, float* max_logit, int64_t stride, void* stream) {
  if (a.heads == 0) return;
  max_logit_per_head<<<static_cast<unsigned>(a.heads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a, max_logit,
                                                                                                          stride);
  ATTN_CUDA(cudaGetLastError());
}
void launch_copy_per_head(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t heads,
                          void* stream) {
  if (heads == 0) return;
  copy_per_head<<<blocks_for(heads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(dst, dst_stride, src,
                                                                                        src_stride, heads);
  ATTN_CUDA(cudaGetLastError());
}
void launch_backward_stats(const BackwardStats& a, void* stream) {
  launch(backward_stats, a.batch * a.heads * a.rows, a, stream);
}
void launch_zero_padded_rows(const PaddedRows& a, void* stream) {
  launch(zero_padded_rows, a.batch * a.heads * a.rows, a, stream);
}

}  // namespace attn::cudnn
