// Shared host-side pieces of the unfused backend (see unfused_steps.h).
#include "backends/unfused/unfused_steps.h"

#include <cuda_runtime.h>

#include "attn/mask_rule.h"
#include "attn/philox.h"
#include "core/cuda_check.h"

namespace attn::unfused {

SeqRows seq_rows(const TensorView& t, const Problem& p, const detail::Sequences& s, int64_t b, bool is_q_side) {
  SeqRows r;
  r.dtype = t.dtype;
  const int64_t start = is_q_side ? s.start_q[b] : s.start_kv[b];
  const int64_t off = detail::row_offset(t, p.qkv_format, start, b, 0, 0);
  r.base = static_cast<char*>(t.data) + off * static_cast<int64_t>(dtype_size_bytes(t.dtype));
  switch (p.qkv_format) {
    case QkvFormat::bshd: r.row_stride = t.strides_elems[1]; r.head_stride = t.strides_elems[2]; break;
    case QkvFormat::sbhd: r.row_stride = t.strides_elems[0]; r.head_stride = t.strides_elems[2]; break;
    case QkvFormat::thd: r.row_stride = t.strides_elems[0]; r.head_stride = t.strides_elems[1]; break;
  }
  return r;
}

int64_t score_rows(const Problem& p, const detail::Sequences& s, int64_t b) {
  return p.qkv_format == QkvFormat::thd ? s.len_q[b] : p.s_q;
}

int64_t score_cols(const Problem& p, const detail::Sequences& s, int64_t b) {
  return p.qkv_format == QkvFormat::thd ? s.len_kv[b] : p.s_kv;
}

RowParams row_params(const Problem& p, const Inputs& in, const detail::Sequences& s, int64_t b) {
  RowParams r;
  r.batch_index = b;
  r.h_q = static_cast<int>(p.h_q);
  r.rows = static_cast<int>(score_rows(p, s, b));
  r.cols = static_cast<int>(score_cols(p, s, b));
  r.len_q = s.len_q[b];
  r.len_kv = s.len_kv[b];
  r.shift = alignment_shift<int64_t>(p.bottom_right, r.len_q, r.len_kv);
  r.window_left = p.window_left;
  r.window_right = p.window_right;
  r.softcap = static_cast<float>(p.softcap);
  auto broadcast = [](const TensorView& t) {
    BroadcastTensor bt;
    bt.data = t.data;
    bt.dtype = t.dtype;
    for (int d = 0; d < 4; ++d) bt.stride[d] = t.shape[d] == 1 ? 0 : t.strides_elems[d];
    return bt;
  };
  if (p.bias == BiasType::post_scale_bias) {
    r.bias_kind = 1;
    r.bias = broadcast(in.bias);
  } else if (p.bias == BiasType::alibi) {
    r.bias_kind = 2;
    const TensorView& a = in.alibi_slopes;
    r.alibi = static_cast<const float*>(a.data) + (p.alibi_per_batch ? b * a.strides_elems[0] : 0);
    r.alibi_stride_h = p.alibi_per_batch ? a.strides_elems[1] : a.strides_elems[0];
  }
  if (p.mask == MaskType::arbitrary) {
    r.has_mask = true;
    r.mask_additive = p.mask_additive;
    r.mask = broadcast(in.attn_mask);
  }
  if (p.dropout_p > 0.0) {
    r.dropout_threshold = dropout_threshold(p.dropout_p);
    r.dropout_scale = static_cast<float>(1.0 / (1.0 - p.dropout_p));
    r.seed = p.seed;
    r.offset = static_cast<uint32_t>(p.offset);
    if (p.rng_state_in_memory) r.rng_state = static_cast<const int64_t*>(in.rng_state.data);
  }
  r.sink = detail::sink_logits_of(p, in.sink);
  return r;
}

std::vector<const void*> rows_of_heads(const SeqRows& r, int64_t first, int64_t count, int64_t step, int64_t divide) {
  std::vector<const void*> ptrs(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) ptrs[i] = r.row((first + i * step) / divide);
  return ptrs;
}

std::vector<const void*> slices(const void* base, int64_t first, int64_t count, int64_t step, int64_t bytes_each) {
  std::vector<const void*> ptrs(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) ptrs[i] = static_cast<const char*>(base) + (first + i * step) * bytes_each;
  return ptrs;
}

BatchedGemm scores_product(const Problem& p, int64_t M, int64_t N, int64_t ldk, int64_t ldq, const void* const* k_ptrs,
                           const void* const* q_ptrs, void* const* s_ptrs) {
  BatchedGemm g;
  g.trans_a = true;
  g.m = static_cast<int>(N), g.n = static_cast<int>(M), g.k = static_cast<int>(p.d_qk);
  g.alpha = static_cast<float>(p.softmax_scale);
  g.a_type = g.b_type = p.dtype;
  g.c_type = DType::f32;
  g.lda = ldk, g.ldb = ldq, g.ldc = N;
  g.batch = static_cast<int>(p.h_q);
  g.a = k_ptrs, g.b = q_ptrs, g.c = s_ptrs;
  return g;
}

int64_t PointerTable::add(const std::vector<const void*>& ptrs) {
  const int64_t at = size();
  host_.insert(host_.end(), ptrs.begin(), ptrs.end());
  return at;
}

void PointerTable::upload(const void** device_table, void* stream) const {
  launch_write_pointers(device_table, host_.data(), size(), stream);
}

}  // namespace attn::unfused
