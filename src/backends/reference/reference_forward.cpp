// The reference forward: out_i = sum_j p_ij z_ij v_j and lse_i (and max_logit),
// in fp64, one task per (sequence, query head); every element of out (and lse)
// is written.
#include <cmath>
#include <limits>
#include <vector>

#include "backends/reference/reference.h"
#include "backends/reference/reference_common.h"
#include "core/nan_max.h"
#include "core/numeric.h"
#include "core/parallel.h"

namespace attn::reference {
namespace {

using internal::KvHead;
using internal::Row;
using internal::Sequences;

// Rows (b, *, h) of out and lse; returns their largest score (max_logit's
// share). Positions past the sequence's true length (padded bshd/sbhd) and rows
// that see no key get out = 0 and lse = the sink logit (-inf without a sink).
double forward_head(const Problem& p, const ForwardArgs& a, const Sequences& seqs, int64_t b, int64_t h) {
  const KvHead kv = internal::load_kv_head(p, a.in, seqs, b, h / (p.h_q / p.h_kv));
  const int64_t start_q = seqs.start_q[b];
  const double sink = internal::sink_logit(p, a.in, h);
  double max_score = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < internal::stored_rows_q(p, seqs, b); ++i) {
    std::vector<double> out(static_cast<size_t>(p.d_v), 0.0);
    double lse = sink;
    if (i < seqs.len_q[b]) {
      const std::vector<double> q = internal::load_row(a.in.q, p, start_q, b, i, h, p.d_qk);
      const Row r = internal::attention_row(p, a.in, seqs, kv, q.data(), b, h, i);
      lse = r.lse;
      max_score = detail::max_keeping_nan(max_score, r.max_score);
      for (int64_t j = r.keys.begin; j < r.keys.end; ++j) {
        const double w = r.p[j] * r.z[j];
        if (w == 0.0) continue;  // masked or dropped: contributes nothing (even if v_j is not finite)
        const double* v = kv.v_row(j);
        for (int64_t c = 0; c < p.d_v; ++c) out[c] += w * v[c];
      }
    }
    internal::store_row(a.out, p, start_q, b, i, h, out);
    if (a.lse.defined())
      detail::store_from_double(a.lse.data, a.lse.dtype,
                                detail::lse_offset(a.lse, p.qkv_format, start_q, b, i, h), lse);
  }
  return max_score;
}

}  // namespace

void forward(const Problem& p, const ForwardArgs& args) {
  const Sequences seqs = internal::checked_sequences(p, args.in);
  std::vector<double> max_score(static_cast<size_t>(p.return_max_logit ? p.batch * p.h_q : 0));  // [b, h_q]
  detail::parallel_for(p.batch * p.h_q, [&](int64_t task) {
    const double m = forward_head(p, args, seqs, task / p.h_q, task % p.h_q);
    if (p.return_max_logit) max_score[task] = m;
  });
  if (!args.max_logit.defined()) return;
  for (int64_t h = 0; h < p.h_q; ++h) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t b = 0; b < p.batch; ++b) m = detail::max_keeping_nan(m, max_score[b * p.h_q + h]);
    detail::store_from_double(args.max_logit.data, args.max_logit.dtype, h * args.max_logit.strides_elems[0], m);
  }
}

}  // namespace attn::reference
