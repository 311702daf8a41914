// attn's own small kernels around a cuDNN call: sequence lengths and ragged
// offsets from cu_seqlens, and the rows whose answer attn defines itself
// (rows that see no key: out = 0, lse = the sink's logit or -inf; padded
// rows of gradients: 0), the max logit from cuDNN's per-row Max, and the
// per-head copies of the sink logits and their gradient.
#pragma once

#include <cstdint>

#include "attn/problem.h"
#include "backends/common/sink_logits.h"

namespace attn::cudnn {

// Tensors whose ragged (thd) offsets cuDNN reads, one int32 [b + 1] array each.
enum Role : int { kQ, kK, kV, kO, kdO, kdQ, kdK, kdV, kRoles };

// Where the lengths come from and where the prepared arrays go.
// Lengths and starts are bounded by the tensors (core/sequence_bounds.h), so
// unchecked cu_seqlens never send cuDNN or these kernels past them.
struct SequenceArgs {
  const int32_t* cu_q = nullptr;  // nullptr: every sequence is s_q long
  const int32_t* cu_kv = nullptr;
  int64_t cu_q_stride = 1, cu_kv_stride = 1;  // elements between entries (strided views)
  bool packed = false;                        // thd: sequences start at cu_seqlens offsets
  int64_t batch = 0, s_q = 0, s_kv = 0;
  int64_t tokens_q = 0, tokens_kv = 0;  // thd's t_q, t_kv
  int32_t* len_q = nullptr;   // [batch]
  int32_t* len_kv = nullptr;  // [batch]
  int32_t* ragged[kRoles] = {};         // [batch + 1] element offsets, nullptr: not needed
  int64_t token_stride[kRoles] = {};    // elements between consecutive tokens of that tensor
};
void launch_prepare_sequences(const SequenceArgs& a, void* stream);

// A q-like tensor's row layout: element offset of (b, pos, head) is
// (ragged ? (start_b + pos) * token : b * batch_stride + pos * token) + head * head_stride.
struct RowLayout {
  void* data = nullptr;
  int64_t batch_stride = 0, token_stride = 0, head_stride = 0;
};

// One pass over every (b, h, i) row of the forward's output.
struct ForwardRows {
  const int32_t* cu_q = nullptr;  // thd: sequence starts (nullptr otherwise), bounded by tokens_q
  int64_t cu_q_stride = 1, tokens_q = 0;
  const int32_t* len_q = nullptr;   // nullptr: s_q
  const int32_t* len_kv = nullptr;  // nullptr: s_kv
  int64_t batch = 0, heads = 0, rows = 0, s_q = 0, s_kv = 0;  // rows: s_q, or thd's max_seqlen
  int64_t left = -1, right = -1;
  bool bottom_right = false;
  DType dtype = DType::bf16;
  int64_t d_v = 0;
  RowLayout out;
  // lse in attn's layout: (b, h, i) at b * lse_b + h * lse_h + (start + i) * lse_i.
  float* lse = nullptr;
  int64_t lse_b = 0, lse_h = 0, lse_i = 0;
  const float* stats = nullptr;  // cuDNN's [b, h, rows] packed stats to copy into lse; nullptr: lse written in place
  // Or cuDNN's packed per-row Max and Sum_exp (relative to Max): lse = max + log(sum_exp).
  const float *row_max = nullptr, *row_sum_exp = nullptr;
  bool fix_empty = true;  // zero out the rows that see no key and set their lse to the sink's logit (-inf: none)
  detail::SinkLogits sink;
};
void launch_finish_forward_rows(const ForwardRows& a, void* stream);

// max_logit[h * stride] = the largest of cuDNN's per-row Max over the rows of
// head h that see a key (NaN where a row's Sum_exp is: a NaN score; -inf:
// none). Reuses ForwardRows' geometry (row_max and row_sum_exp set, or
// row_max nullptr for a call without keys: -inf everywhere).
void launch_max_logit_per_head(const ForwardRows& a, float* max_logit, int64_t stride, void* stream);

// dst[h * dst_stride] = src[h * src_stride] for h < heads: the caller's sink
// logits into the contiguous [h_q] tensor cuDNN reads, and cuDNN's dsink out
// to the caller's.
void launch_copy_per_head(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t heads,
                          void* stream);

// attn's lse -> cuDNN's packed [b, h, rows] stats, with -inf (rows that see no
// key) as 0 so cuDNN's exp(s - stats) of their masked scores stays 0, not NaN.
struct BackwardStats {
  const int32_t* cu_q = nullptr;  // as in ForwardRows
  int64_t cu_q_stride = 1, tokens_q = 0;
  const int32_t* len_q = nullptr;
  int64_t batch = 0, heads = 0, rows = 0, s_q = 0;
  const float* lse = nullptr;
  int64_t lse_b = 0, lse_h = 0, lse_i = 0;
  float* stats = nullptr;
};
void launch_backward_stats(const BackwardStats& a, void* stream);

// Zeroes rows pos >= len of a padded (bshd/sbhd) gradient, which cuDNN leaves
// unwritten, and every row of a sequence whose other side is empty
// (other_len[b] == 0: dk, dv of keys no query sees, dq of a query with no
// key), where cuDNN left NaN on an H100.
struct PaddedRows {
  const int32_t* len = nullptr;
  const int32_t* other_len = nullptr;
  int64_t batch = 0, heads = 0, rows = 0, dim = 0;
  DType dtype = DType::bf16;
  RowLayout t;
};
void launch_zero_padded_rows(const PaddedRows& a, void* stream);

}  // namespace attn::cudnn
