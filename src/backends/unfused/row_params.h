// What the unfused backend's row kernels need to turn one sequence's raw
// scores x = scale * q.k into probabilities (and back, for the gradient): the
// visibility rule, softcap, bias / ALiBi / arbitrary mask, dropout. Plain data,
// filled on the host per sequence.
#pragma once

#include <cstdint>

#include "attn/tensor.h"
#include "backends/common/sink_logits.h"

namespace attn::unfused {

// A tensor broadcastable to [b, h_q, s_q, s_kv]: strides are 0 where it broadcasts.
struct BroadcastTensor {
  const void* data = nullptr;
  DType dtype = DType::f32;
  int64_t stride[4] = {0, 0, 0, 0};
};

struct RowParams {
  int64_t batch_index = 0;  // sequence b
  int h_q = 1;
  int rows = 0, cols = 0;  // M (queries) and N (keys) of this sequence's score matrices
  int64_t len_q = 0, len_kv = 0, shift = 0;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.f;
  int bias_kind = 0;  // 0 none, 1 post_scale_bias, 2 alibi
  BroadcastTensor bias;
  const float* alibi = nullptr;  // slopes of this sequence, indexed by h * alibi_stride_h
  int64_t alibi_stride_h = 1;
  bool has_mask = false, mask_additive = false;
  BroadcastTensor mask;
  uint32_t dropout_threshold = 0;  // 0: no dropout
  float dropout_scale = 1.f;       // 1 / (1 - p)
  uint64_t seed = 0;
  uint32_t offset = 0;
  const int64_t* rng_state = nullptr;  // when set: (seed, offset) read here as the kernel runs
  detail::SinkLogits sink;              // the softmax's sink logit per head (none for vanilla)
  float* max_logit = nullptr;           // [h_q] (stride max_logit_stride): each row's largest score max-ed in
  int64_t max_logit_stride = 1;
  float* dsink = nullptr;               // backward: [h_q] (stride dsink_stride), each real row's share added
  int64_t dsink_stride = 1;
};

// lse(b, h, i) for this sequence: lse + h * stride_h + i * stride_i (nullptr: not wanted).
struct LseOut {
  float* base = nullptr;
  int64_t stride_h = 0, stride_i = 0;
};

// What the backward takes as the forward's result (SEMANTICS.md "Backward"):
// the caller's lse of this sequence (lse + h * stride_h + i * stride_i) and its
// out and dout rows (T, element (i, h, c) at base + i * row_stride + h * head_stride + c).
struct GivenForward {
  const float* lse = nullptr;
  int64_t lse_stride_h = 0, lse_stride_i = 0;
  const void* out = nullptr;
  const void* dout = nullptr;
  int64_t out_row_stride = 0, out_head_stride = 0, dout_row_stride = 0, dout_head_stride = 0;
  int d_v = 0;
};

// Scores [h_q, rows, cols] fp32 -> probabilities with dropout applied, in T.
void launch_probabilities(const RowParams& prm, const float* scores, void* probs, DType t, LseOut lse,
                          void* stream);

// The softmax gradient: from the raw scores, dP = dO.V^T (fp32, [h_q, rows, cols])
// and the given forward (P = exp(s - lse), D = dO . O) writes dX (T, ready for dQ
// and dK), P*Z (T, for dV), and adds dS to a fp32 dbias accumulator with the
// bias's broadcast strides (when dbias_acc != nullptr).
void launch_softmax_grad(const RowParams& prm, const GivenForward& given, const float* scores, const float* dprobs, void* dscores,
                         void* probs_dropped, DType t, float* dbias_acc, const int64_t dbias_stride[4],
                         void* stream);

// Writes zeros to rows x heads x dim elements of a strided [rows, heads, dim] block.
void launch_zero_rows(void* base, DType t, int64_t rows, int64_t row_stride, int64_t heads,
                      int64_t head_stride, int64_t dim, void* stream);

// dst (T, strided rows [rows, heads, dim]) = src (fp32, dense [heads, rows, dim]).
void launch_store_accumulator(const float* src, void* dst, DType t, int64_t rows, int64_t row_stride,
                              int64_t heads, int64_t head_stride, int64_t dim, void* stream);

// dst[i] = (T) src[i] over a tensor with the given shape and strides (rank 4), src dense fp32.
void launch_store_dense4(const float* src, void* dst, DType t, const int64_t shape[4], const int64_t stride[4],
                         void* stream);

// dst = src for two views of one shape (padded to rank 4 with leading 1s) and
// any strides, elements of elem_bytes (2, 4 or 8) bytes.
void launch_copy_strided(const void* src, const int64_t src_stride[4], void* dst, const int64_t dst_stride[4],
                         const int64_t shape[4], int elem_bytes, void* stream);

// dst[i] = ptrs[i] for n host-side pointers, carried in kernel parameters: a
// launch takes its parameters by value, so a CUDA graph that captures it
// replays the same table (a copy from host memory would read memory that is
// gone by then).
void launch_write_pointers(const void** dst, const void* const* ptrs, int64_t n, void* stream);

}  // namespace attn::unfused
