// The flash kernels' parameters from a Problem and the caller's views, and
// the backward's workspace (params_build.h).
#include "backends/flash/params_build.h"

#include "attn/philox.h"  // dropout_threshold
#include "core/cuda_check.h"
#include "core/workspace.h"

namespace attn::flash {
namespace {

int64_t rows_q_of(const Problem& p) { return p.qkv_format == QkvFormat::thd ? p.total_q : p.batch * p.s_q; }

// Carves the workspace; with a null base only counts its bytes.
int64_t carve(const Problem& p, int semaphore_block_m, char* base, BwdParams* k) {
  detail::Carver c(base);
  const int64_t rows = rows_q_of(p);
  float2* row_terms = c.take<float2>(p.h_q * rows);
  float* acc = c.take<float>(p.h_q * rows * p.d_qk);
  const int m_tiles = static_cast<int>((p.s_q + semaphore_block_m - 1) / semaphore_block_m);
  int* sem = p.deterministic ? c.take<int>(p.batch * p.h_q * m_tiles) : nullptr;
  if (k) {
    k->rows_q = rows;
    k->row_terms = row_terms;
    k->dq_accum = acc;
    k->dq_semaphore = sem;
    k->m_tiles = m_tiles;
  }
  return c.used();
}

}  // namespace

Strides strides_of(const TensorView& t, QkvFormat f) {
  switch (f) {
    case QkvFormat::bshd: return {t.stride(0), t.stride(1), t.stride(2)};
    case QkvFormat::sbhd: return {t.stride(1), t.stride(0), t.stride(2)};
    case QkvFormat::thd: return {0, t.stride(0), t.stride(1)};
  }
  return {0, 0, 0};
}

FwdParams forward_params(const Problem& p, const ForwardArgs& a) {
  FwdParams k;
  k.q = a.in.q.data;
  k.k = a.in.k.data;
  k.v = a.in.v.data;
  k.out = a.out.data;
  const QkvFormat f = p.qkv_format;
  const Strides q = strides_of(a.in.q, f), kk = strides_of(a.in.k, f), v = strides_of(a.in.v, f),
                o = strides_of(a.out, f);
  k.q_batch_stride = q.batch, k.q_row_stride = q.row, k.q_head_stride = q.head;
  k.k_batch_stride = kk.batch, k.k_row_stride = kk.row, k.k_head_stride = kk.head;
  k.v_batch_stride = v.batch, k.v_row_stride = v.row, k.v_head_stride = v.head;
  k.o_batch_stride = o.batch, k.o_row_stride = o.row, k.o_head_stride = o.head;
  if (a.lse.defined()) {
    k.lse = static_cast<float*>(a.lse.data);
    if (f == QkvFormat::thd) {  // [h_q, t_q]
      k.lse_head_stride = a.lse.stride(0), k.lse_row_stride = a.lse.stride(1);
    } else {  // [b, h_q, s_q]
      k.lse_batch_stride = a.lse.stride(0), k.lse_head_stride = a.lse.stride(1), k.lse_row_stride = a.lse.stride(2);
    }
  }
  if (p.has_seqlens) {
    k.cu_seqlens_q = static_cast<const int32_t*>(a.in.cu_seqlens_q.data);
    k.cu_seqlens_kv = static_cast<const int32_t*>(a.in.cu_seqlens_kv.data);
    k.cu_q_stride = a.in.cu_seqlens_q.stride(0);
    k.cu_kv_stride = a.in.cu_seqlens_kv.stride(0);
    k.packed = f == QkvFormat::thd;
    k.tokens_q = static_cast<int>(p.total_q);  // < 2^31: detail::flash_kernel_reasons
    k.tokens_kv = static_cast<int>(p.total_kv);
  }
  k.batch = static_cast<int>(p.batch);
  k.h_q = static_cast<int>(p.h_q);
  k.h_per_kv = static_cast<int>(p.h_q / p.h_kv);
  k.s_q = static_cast<int>(p.s_q);
  k.s_kv = static_cast<int>(p.s_kv);
  k.window_left = p.window_left;
  k.window_right = p.window_right;
  k.bottom_right = p.bottom_right;
  k.scale = static_cast<float>(p.softmax_scale);
  k.scale_log2 = static_cast<float>(p.softmax_scale * 1.4426950408889634);
  k.softcap = static_cast<float>(p.softcap);
  k.softcap_inv = p.softcap > 0 ? static_cast<float>(1.0 / p.softcap) : 0.f;
  if (p.bias == BiasType::alibi) {
    const TensorView& s = a.in.alibi_slopes;
    k.alibi = static_cast<const float*>(s.data);
    k.alibi_batch_stride = s.rank == 2 ? s.stride(0) : 0;
    k.alibi_head_stride = s.stride(-1);
  }
  // The fast path exponentiates scale * log2(e) * q.k against the row's max
  // q.k, which needs a positive scale and no other change to the scores.
  k.score_mods = p.softcap > 0 || k.alibi != nullptr || !(p.softmax_scale > 0);
  if (p.dropout_p > 0) {
    k.dropout_threshold = dropout_threshold(p.dropout_p);
    k.dropout_scale = static_cast<float>(1.0 / (1.0 - p.dropout_p));
    k.seed = p.seed;
    k.offset = static_cast<uint32_t>(p.offset);
    if (p.rng_state_in_memory) k.rng_state = static_cast<const int64_t*>(a.in.rng_state.data);
  }
  k.sink = detail::sink_logits_of(p, a.in.sink);
  if (a.max_logit.defined()) {
    k.max_logit = static_cast<float*>(a.max_logit.data);
    k.max_logit_stride = a.max_logit.stride(0);
  }
  return k;
}

int64_t backward_workspace_bytes(const Problem& p, int semaphore_block_m) {
  return carve(p, semaphore_block_m, nullptr, nullptr);
}

BwdParams backward_params(const Problem& p, const BackwardArgs& a, int semaphore_block_m, const RunContext& ctx,
                          int64_t tail_bytes, void** tail) {
  BwdParams k;
  k.fwd = forward_params(p, ForwardArgs{a.in, a.out, a.lse, {}});
  if (p.dropout_p > 0) k.delta_scale = static_cast<float>(1.0 - p.dropout_p);
  const QkvFormat f = p.qkv_format;
  const Strides o = strides_of(a.dout, f), q = strides_of(a.dq, f), kk = strides_of(a.dk, f),
                v = strides_of(a.dv, f);
  k.dout = a.dout.data;
  k.dq = a.dq.data;
  k.dk = a.dk.data;
  k.dv = a.dv.data;
  k.do_batch_stride = o.batch, k.do_row_stride = o.row, k.do_head_stride = o.head;
  k.dq_batch_stride = q.batch, k.dq_row_stride = q.row, k.dq_head_stride = q.head;
  k.dk_batch_stride = kk.batch, k.dk_row_stride = kk.row, k.dk_head_stride = kk.head;
  k.dv_batch_stride = v.batch, k.dv_row_stride = v.row, k.dv_head_stride = v.head;
  if (a.dsink.defined()) {
    k.dsink = static_cast<float*>(a.dsink.data);
    k.dsink_stride = a.dsink.stride(0);
  }
  const int64_t bytes = backward_workspace_bytes(p, semaphore_block_m);
  char* const base = static_cast<char*>(detail::workspace(ctx, p.device.index, bytes + tail_bytes));
  carve(p, semaphore_block_m, base, &k);
  if (tail) *tail = tail_bytes > 0 ? base + bytes : nullptr;
  if (k.dq_semaphore)
    ATTN_CUDA(cudaMemsetAsync(k.dq_semaphore, 0, static_cast<size_t>(p.batch * p.h_q * k.m_tiles) * sizeof(int),
                              static_cast<cudaStream_t>(ctx.stream)));
  return k;
}

}  // namespace attn::flash
