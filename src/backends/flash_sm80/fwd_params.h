// The one plain parameter struct of flash_sm80's forward kernels, filled on the
// host from a validated Problem and the caller's views (flash_sm80_forward.cpp).
// Strides in elements; lengths fit int (supports() checks).
#pragma once

#include <cstdint>

namespace attn::flash_sm80 {

struct FwdParams {
  const void* q = nullptr;  // T: q [.., h_q, d_qk], k [.., h_kv, d_qk], v [.., h_kv, d_v]
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;  // T [.., h_q, d_v]
  float* lse = nullptr;  // optional

  // Element strides per (sequence b, token, head); batch strides are 0 for thd,
  // whose sequences start at token cu_seqlens[b] instead.
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int64_t lse_batch_stride = 0, lse_row_stride = 0, lse_head_stride = 0;

  // Per-sequence lengths from cu_seqlens (int32 [batch + 1], on the device)
  // when given; otherwise every sequence is s_q / s_kv long. packed (thd):
  // sequence b also starts at token cu_seqlens[b]. The kernels bound both by
  // the tensors (core/sequence_bounds.h): tokens_q / tokens_kv in thd.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_kv = nullptr;
  int64_t cu_q_stride = 1, cu_kv_stride = 1;
  bool packed = false;
  int tokens_q = 0, tokens_kv = 0;

  int batch = 0, h_q = 0, h_per_kv = 1;  // h_per_kv = h_q / h_kv (GQA group)
  int s_q = 0, s_kv = 0;                 // longest sequence (grid size), or the uniform length

  // Visibility (include/attn/mask_rule.h): -1 = unbounded.
  int64_t window_left = -1, window_right = -1;
  bool bottom_right = false;

  float scale = 1.f;       // softmax_scale
  float scale_log2 = 1.f;  // softmax_scale * log2(e): the fast path's one FFMA per score
  // Score modifications that stop the max of q.k from being the max of the
  // scores (softcap, ALiBi, a scale <= 0): scores are then transformed first.
  bool score_mods = false;
  float softcap = 0.f;                 // > 0: c * tanh(s / c)
  float softcap_inv = 0.f;             // 1 / softcap
  const float* alibi = nullptr;        // slopes, slope(b, h) = alibi[b * batch_stride + h * head_stride]
  int64_t alibi_batch_stride = 0, alibi_head_stride = 1;

  uint32_t dropout_threshold = 0;  // 0: no dropout (include/attn/philox.h)
  float dropout_scale = 1.f;       // 1 / (1 - p)
  uint64_t seed = 0;
  uint32_t offset = 0;
};

}  // namespace attn::flash_sm80
