// The unfused forward, per sequence: S = scale * Q.K^T (cuBLAS, fp32), P =
// probabilities with every mask, bias and dropout (own kernel, also lse), then
// out = P.V (cuBLAS, written straight into the caller's strided out).
#include <cuda_runtime.h>

#include <cmath>

#include "backends/common/fill.h"
#include "backends/unfused/unfused.h"
#include "backends/unfused/unfused_steps.h"
#include "core/cuda_check.h"
#include "core/workspace.h"

namespace attn::unfused {

void forward_products(const Problem& p, const ForwardArgs& a, detail::Carver& ws, void* stream) {
  const int device = p.device.index;
  const detail::Sequences seqs = detail::checked_sequences(p, a.in);  // in bounds, checked or not
  const int64_t group = p.h_q / p.h_kv, elem = static_cast<int64_t>(dtype_size_bytes(p.dtype));
  const int64_t score_elems = p.h_q * p.s_q * p.s_kv;

  const void** table = ws.take<const void*>(p.batch * p.h_q * 6);
  float* scores = ws.take<float>(score_elems);
  void* probs = ws.take_bytes(score_elems * elem);

  float* max_logit = static_cast<float*>(a.max_logit.data);
  const int64_t max_logit_stride = a.max_logit.defined() ? a.max_logit.strides_elems[0] : 1;
  if (max_logit) detail::launch_fill(max_logit, p.h_q, max_logit_stride, -INFINITY, stream);  // rows max into it

  int64_t cursor = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t M = score_rows(p, seqs, b), N = score_cols(p, seqs, b);
    if (M == 0) continue;
    const SeqRows q = seq_rows(a.in.q, p, seqs, b, true), k = seq_rows(a.in.k, p, seqs, b, false);
    const SeqRows v = seq_rows(a.in.v, p, seqs, b, false), o = seq_rows(a.out, p, seqs, b, true);
    RowParams prm = row_params(p, a.in, seqs, b);
    prm.max_logit = max_logit;
    prm.max_logit_stride = max_logit_stride;
    LseOut lse;
    if (a.lse.defined()) {
      const bool thd = p.qkv_format == QkvFormat::thd;
      lse.base = static_cast<float*>(a.lse.data) + detail::lse_offset(a.lse, p.qkv_format, seqs.start_q[b], b, 0, 0);
      lse.stride_h = thd ? a.lse.strides_elems[0] : a.lse.strides_elems[1];
      lse.stride_i = thd ? a.lse.strides_elems[1] : a.lse.strides_elems[2];
    }
    if (N == 0) {  // no keys: every row is empty
      launch_zero_rows(o.base, p.dtype, M, o.row_stride, p.h_q, o.head_stride, p.d_v, stream);
      launch_probabilities(prm, scores, probs, p.dtype, lse, stream);
      continue;
    }
    PointerTable t;
    const int64_t iq = t.add(rows_of_heads(q, 0, p.h_q, 1, 1)), ik = t.add(rows_of_heads(k, 0, p.h_q, 1, group));
    const int64_t is = t.add(slices(scores, 0, p.h_q, 1, M * N * 4)), ip = t.add(slices(probs, 0, p.h_q, 1, M * N * elem));
    const int64_t iv = t.add(rows_of_heads(v, 0, p.h_q, 1, group)), io = t.add(rows_of_heads(o, 0, p.h_q, 1, 1));
    const void** dev = table + cursor;
    t.upload(dev, stream);
    cursor += t.size();

    run_gemm(scores_product(p, M, N, leading(k.row_stride, N, p.d_qk), leading(q.row_stride, M, p.d_qk), dev + ik,
                            dev + iq, const_cast<void* const*>(dev + is)),
             device, stream);

    launch_probabilities(prm, scores, probs, p.dtype, lse, stream);

    BatchedGemm pv;  // O^T (d_v x M) = V^T (d_v x N) . P^T (N x M)
    pv.m = static_cast<int>(p.d_v), pv.n = static_cast<int>(M), pv.k = static_cast<int>(N);
    pv.a_type = pv.b_type = pv.c_type = p.dtype;
    pv.lda = leading(v.row_stride, N, p.d_v), pv.ldb = N, pv.ldc = leading(o.row_stride, M, p.d_v);
    pv.batch = static_cast<int>(p.h_q);
    pv.a = dev + iv, pv.b = dev + ip, pv.c = const_cast<void* const*>(dev + io);
    run_gemm(pv, device, stream);
  }
  ATTN_CUDA(cudaGetLastError());
}

}  // namespace attn::unfused
