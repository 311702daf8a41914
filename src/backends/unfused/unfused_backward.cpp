// The unfused backward, per sequence: recompute S = scale * Q.K^T, dP = dO.V^T
// (cuBLAS, fp32); the softmax gradient kernel, with the caller's lse and out as
// the forward's result (P = exp(S - lse), D = dO.O; SEMANTICS.md "Backward"),
// gives dX (softcap applied), P*Z and dbias; then dQ = scale * dX.K, and dK = scale * dX^T.Q, dV = (P*Z)^T.dO
// accumulated in fp32 over each KV head's query heads (GQA) and stored.
#include <cuda_runtime.h>

#include "backends/common/fill.h"
#include "backends/unfused/unfused.h"
#include "backends/unfused/unfused_steps.h"
#include "core/cuda_check.h"
#include "core/workspace.h"

namespace attn::unfused {

void backward_products(const Problem& p, const BackwardArgs& a, detail::Carver& ws, void* stream) {
  const int device = p.device.index;
  const detail::Sequences seqs = detail::checked_sequences(p, a.in);  // in bounds, checked or not
  const int64_t g = p.h_q / p.h_kv, elem = static_cast<int64_t>(dtype_size_bytes(p.dtype));
  const int64_t score_elems = p.h_q * p.s_q * p.s_kv;

  const void** table = ws.take<const void*>(p.batch * p.h_q * 15);
  float* scores = ws.take<float>(score_elems);
  float* dprobs = ws.take<float>(score_elems);
  void* dscores = ws.take_bytes(score_elems * elem);
  void* probs_dropped = ws.take_bytes(score_elems * elem);
  float* dk_acc = ws.take<float>(p.h_kv * p.s_kv * p.d_qk);
  float* dv_acc = ws.take<float>(p.h_kv * p.s_kv * p.d_v);
  float* dbias_acc = nullptr;
  int64_t dbias_stride[4] = {0, 0, 0, 0};
  if (p.bias_grad) {
    const auto& sh = p.bias_shape;
    dbias_acc = ws.take<float>(sh[0] * sh[1] * sh[2] * sh[3]);
    ATTN_CUDA(cudaMemsetAsync(dbias_acc, 0, sh[0] * sh[1] * sh[2] * sh[3] * sizeof(float),
                              static_cast<cudaStream_t>(stream)));
    int64_t dense = 1;
    for (int d = 3; d >= 0; --d) {
      dbias_stride[d] = sh[d] == 1 ? 0 : dense;
      dense *= sh[d];
    }
  }

  float* dsink = static_cast<float*>(a.dsink.data);
  const int64_t dsink_stride = a.dsink.defined() ? a.dsink.strides_elems[0] : 1;
  if (dsink) detail::launch_fill(dsink, p.h_q, dsink_stride, 0.f, stream);  // rows add into it

  int64_t cursor = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t M = score_rows(p, seqs, b), N = score_cols(p, seqs, b);
    const SeqRows q = seq_rows(a.in.q, p, seqs, b, true), k = seq_rows(a.in.k, p, seqs, b, false);
    const SeqRows v = seq_rows(a.in.v, p, seqs, b, false), dout = seq_rows(a.dout, p, seqs, b, true);
    const SeqRows dq = seq_rows(a.dq, p, seqs, b, true), dk = seq_rows(a.dk, p, seqs, b, false);
    const SeqRows dv = seq_rows(a.dv, p, seqs, b, false);
    if (M == 0 || N == 0) {  // nothing to attend: the gradients of this sequence are zero
      launch_zero_rows(dq.base, p.dtype, M, dq.row_stride, p.h_q, dq.head_stride, p.d_qk, stream);
      launch_zero_rows(dk.base, p.dtype, N, dk.row_stride, p.h_kv, dk.head_stride, p.d_qk, stream);
      launch_zero_rows(dv.base, p.dtype, N, dv.row_stride, p.h_kv, dv.head_stride, p.d_v, stream);
      continue;
    }
    PointerTable t;
    const int64_t iq = t.add(rows_of_heads(q, 0, p.h_q, 1, 1)), ik = t.add(rows_of_heads(k, 0, p.h_q, 1, g));
    const int64_t iv = t.add(rows_of_heads(v, 0, p.h_q, 1, g)), ido = t.add(rows_of_heads(dout, 0, p.h_q, 1, 1));
    const int64_t is = t.add(slices(scores, 0, p.h_q, 1, M * N * 4)), idp = t.add(slices(dprobs, 0, p.h_q, 1, M * N * 4));
    const int64_t idx = t.add(slices(dscores, 0, p.h_q, 1, M * N * elem)), idq = t.add(rows_of_heads(dq, 0, p.h_q, 1, 1));
    // Member r of every KV head's group: query heads hk * g + r, one per KV head hk.
    std::vector<int64_t> iq_r(g), idx_r(g), ido_r(g), ipz_r(g);
    for (int64_t r = 0; r < g; ++r) {
      iq_r[r] = t.add(rows_of_heads(q, r, p.h_kv, g, 1));
      idx_r[r] = t.add(slices(dscores, r, p.h_kv, g, M * N * elem));
      ido_r[r] = t.add(rows_of_heads(dout, r, p.h_kv, g, 1));
      ipz_r[r] = t.add(slices(probs_dropped, r, p.h_kv, g, M * N * elem));
    }
    const int64_t idk = t.add(slices(dk_acc, 0, p.h_kv, 1, N * p.d_qk * 4));
    const int64_t idv = t.add(slices(dv_acc, 0, p.h_kv, 1, N * p.d_v * 4));
    const void** dev = table + cursor;
    t.upload(dev, stream);
    cursor += t.size();
    auto mut = [&](int64_t i) { return const_cast<void* const*>(dev + i); };
    const int hq = static_cast<int>(p.h_q), hkv = static_cast<int>(p.h_kv);
    const int m = static_cast<int>(M), n = static_cast<int>(N), dqk = static_cast<int>(p.d_qk), dvv = static_cast<int>(p.d_v);
    const int64_t ldq = leading(q.row_stride, M, p.d_qk), ldk = leading(k.row_stride, N, p.d_qk);
    const int64_t ldv = leading(v.row_stride, N, p.d_v), lddo = leading(dout.row_stride, M, p.d_v);

    run_gemm(scores_product(p, M, N, ldk, ldq, dev + ik, dev + iq, mut(is)), device, stream);
    BatchedGemm dp{true, false, n, m, dvv, 1.f, 0.f, p.dtype, p.dtype, DType::f32, ldv, lddo, N, hq,
                   dev + iv, dev + ido, mut(idp)};
    run_gemm(dp, device, stream);  // dP^T = V . dO^T

    RowParams prm = row_params(p, a.in, seqs, b);
    prm.dsink = dsink;
    prm.dsink_stride = dsink_stride;
    const SeqRows out = seq_rows(a.out, p, seqs, b, true);
    GivenForward given;
    given.lse = static_cast<const float*>(a.lse.data) +
                detail::lse_offset(a.lse, p.qkv_format, seqs.start_q[b], b, 0, 0);
    given.lse_stride_h = p.qkv_format == QkvFormat::thd ? a.lse.strides_elems[0] : a.lse.strides_elems[1];
    given.lse_stride_i = p.qkv_format == QkvFormat::thd ? a.lse.strides_elems[1] : a.lse.strides_elems[2];
    given.out = out.base, given.dout = dout.base;
    given.out_row_stride = out.row_stride, given.out_head_stride = out.head_stride;
    given.dout_row_stride = dout.row_stride, given.dout_head_stride = dout.head_stride;
    given.d_v = static_cast<int>(p.d_v);
    launch_softmax_grad(prm, given, scores, dprobs, dscores, probs_dropped, p.dtype, dbias_acc,
                        p.bias_grad ? dbias_stride : nullptr, stream);

    BatchedGemm gq{false, false, dqk, m, n, static_cast<float>(p.softmax_scale), 0.f, p.dtype, p.dtype, p.dtype,
                   ldk, N, leading(dq.row_stride, M, p.d_qk), hq, dev + ik, dev + idx, mut(idq)};
    run_gemm(gq, device, stream);  // dQ^T = K^T . dX^T
    for (int64_t r = 0; r < g; ++r) {
      const float beta = r == 0 ? 0.f : 1.f;
      BatchedGemm gk{false, true, dqk, n, m, static_cast<float>(p.softmax_scale), beta, p.dtype, p.dtype, DType::f32,
                     ldq, N, p.d_qk, hkv, dev + iq_r[r], dev + idx_r[r], mut(idk)};
      run_gemm(gk, device, stream);  // dK^T += Q^T . dX
      BatchedGemm gv{false, true, dvv, n, m, 1.f, beta, p.dtype, p.dtype, DType::f32, lddo, N, p.d_v, hkv,
                     dev + ido_r[r], dev + ipz_r[r], mut(idv)};
      run_gemm(gv, device, stream);  // dV^T += dO^T . (P*Z)
    }
    launch_store_accumulator(dk_acc, dk.base, p.dtype, N, dk.row_stride, p.h_kv, dk.head_stride, p.d_qk, stream);
    launch_store_accumulator(dv_acc, dv.base, p.dtype, N, dv.row_stride, p.h_kv, dv.head_stride, p.d_v, stream);
  }
  if (p.bias_grad) {
    const int64_t shape[4] = {p.bias_shape[0], p.bias_shape[1], p.bias_shape[2], p.bias_shape[3]};
    const int64_t stride[4] = {a.dbias.strides_elems[0], a.dbias.strides_elems[1], a.dbias.strides_elems[2],
                               a.dbias.strides_elems[3]};
    launch_store_dense4(dbias_acc, a.dbias.data, a.dbias.dtype, shape, stride, stream);
  }
  ATTN_CUDA(cudaGetLastError());
}

}  // namespace attn::unfused
