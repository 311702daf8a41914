// The reference backward: dq, dk, dv (and dbias, dsink) in fp64 from the caller's lse
// and out, taken as the forward's result (SEMANTICS.md "Backward"): p = exp(s -
// lse), D = dout . out. A ring step passes the whole sequence's lse and out, so
// its block gradients add up to the whole (attn/cp.h). One task per
// (sequence, KV head) owns that head's dk/dv and its query heads' dq rows;
// dbias is a second pass, one task per block of bias rows. Every sum has a
// fixed order, so results do not depend on the number of threads.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "backends/reference/reference.h"
#include "backends/reference/reference_common.h"
#include "core/numeric.h"
#include "core/parallel.h"

namespace attn::reference {
namespace {

using internal::KvHead;
using internal::Row;
using internal::Sequences;

// Gradients of one attention row (SEMANTICS.md "Backward"), indexed by key j:
// ds w.r.t. the biased score s (= dbias), dx w.r.t. x = softmax_scale * q.k.
struct RowGrad {
  std::vector<double> ds, dx;
};

RowGrad row_grad(const Problem& p, const Row& r, const KvHead& kv, const double* dout, const double* out) {
  RowGrad g;
  g.ds.assign(r.p.size(), 0.0);
  g.dx.assign(r.p.size(), 0.0);
  // dp_j = z_j (dout . v_j); D = dout . out from the given out (equal to
  // sum_j p_j dp_j when out is this row's own result).
  std::vector<double> dp(r.p.size(), 0.0);
  const double D = internal::dot(dout, out, p.d_v);
  for (int64_t j = r.keys.begin; j < r.keys.end; ++j) {
    if (r.p[j] == 0.0) continue;  // masked (or underflowed): every term of this pair is 0
    dp[j] = r.z[j] * internal::dot(dout, kv.v_row(j), p.d_v);
  }
  for (int64_t j = r.keys.begin; j < r.keys.end; ++j) {
    if (r.p[j] == 0.0) continue;
    g.ds[j] = r.p[j] * (dp[j] - D);
    if (p.softcap > 0.0) {
      const double t = std::tanh(r.x[j] / p.softcap);  // d(c tanh(x/c))/dx = 1 - tanh^2
      g.dx[j] = g.ds[j] * (1.0 - t * t);
    } else {
      g.dx[j] = g.ds[j];
    }
  }
  return g;
}

double given_lse(const BackwardArgs& a, const Problem& p, int64_t start_q, int64_t b, int64_t i, int64_t h) {
  return detail::load_as_double(a.lse.data, a.lse.dtype, detail::lse_offset(a.lse, p.qkv_format, start_q, b, i, h));
}

// dq for the query heads of KV head hk in sequence b, and that head's dk, dv;
// with a learnable sink, dsink_part[h] for those heads (this sequence's share;
// null without).
void backward_kv_head(const Problem& p, const BackwardArgs& a, const Sequences& seqs, int64_t b,
                      int64_t hk, double* dsink_part) {
  const KvHead kv = internal::load_kv_head(p, a.in, seqs, b, hk);
  const int64_t group = p.h_q / p.h_kv;
  const int64_t start_q = seqs.start_q[b], start_kv = seqs.start_kv[b];
  std::vector<double> dk(static_cast<size_t>(kv.len * p.d_qk), 0.0);
  std::vector<double> dv(static_cast<size_t>(kv.len * p.d_v), 0.0);

  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const double sink = internal::sink_logit(p, a.in, h);
    for (int64_t i = 0; i < internal::stored_rows_q(p, seqs, b); ++i) {
      std::vector<double> dq(static_cast<size_t>(p.d_qk), 0.0);
      if (i < seqs.len_q[b]) {
        const std::vector<double> q = internal::load_row(a.in.q, p, start_q, b, i, h, p.d_qk);
        const std::vector<double> dout = internal::load_row(a.dout, p, start_q, b, i, h, p.d_v);
        const std::vector<double> out = internal::load_row(a.out, p, start_q, b, i, h, p.d_v);
        const double lse = given_lse(a, p, start_q, b, i, h);
        const Row r = internal::attention_row(p, a.in, seqs, kv, q.data(), b, h, i, &lse);
        const RowGrad g = row_grad(p, r, kv, dout.data(), out.data());
        // d lse / d sink = exp(sink - lse), the sink's probability.
        if (p.sink_grad) dsink_part[h] -= std::exp(sink - lse) * internal::dot(dout.data(), out.data(), p.d_v);
        for (int64_t j = r.keys.begin; j < r.keys.end; ++j) {
          if (r.p[j] == 0.0) continue;
          const double dx = p.softmax_scale * g.dx[j];
          const double w = r.p[j] * r.z[j];
          const double* k = kv.k_row(j);
          double* dk_j = dk.data() + j * p.d_qk;
          double* dv_j = dv.data() + j * p.d_v;
          for (int64_t c = 0; c < p.d_qk; ++c) {
            dq[c] += dx * k[c];
            dk_j[c] += dx * q[c];
          }
          for (int64_t c = 0; c < p.d_v; ++c) dv_j[c] += w * dout[c];
        }
      }
      internal::store_row(a.dq, p, start_q, b, i, h, dq);
    }
  }

  // Every stored key row is written: padded positions past len_kv get zeros.
  for (int64_t j = 0; j < internal::stored_rows_kv(p, seqs, b); ++j) {
    std::vector<double> dk_row(static_cast<size_t>(p.d_qk), 0.0), dv_row(static_cast<size_t>(p.d_v), 0.0);
    if (j < kv.len) {
      dk_row.assign(dk.begin() + j * p.d_qk, dk.begin() + (j + 1) * p.d_qk);
      dv_row.assign(dv.begin() + j * p.d_v, dv.begin() + (j + 1) * p.d_v);
    }
    internal::store_row(a.dk, p, start_kv, b, j, hk, dk_row);
    internal::store_row(a.dv, p, start_kv, b, j, hk, dv_row);
  }
}

// Rows [ii0, ii1) of dbias slice (bb, hh): ds summed over every (b, h, i) a
// bias row broadcasts to, and over j when the bias broadcasts along keys. The
// ds rows are recomputed here. Each dbias element sums in one fixed order
// (b, then h, then i, then j), whatever the blocking and the thread count.
void dbias_rows(const Problem& p, const BackwardArgs& a, const Sequences& seqs, int64_t bb, int64_t hh,
                int64_t ii0, int64_t ii1) {
  const auto& shape = p.bias_shape;  // [b|1, h_q|1, s_q|1, s_kv|1]
  // The problem indices one bias index stands for: all of them along a broadcast dimension.
  auto range = [](int64_t size, int64_t full, int64_t index) {
    return size == 1 ? std::pair<int64_t, int64_t>{0, full} : std::pair<int64_t, int64_t>{index, index + 1};
  };
  const auto [b0, b1] = range(shape[0], p.batch, bb);
  const auto [h0, h1] = range(shape[1], p.h_q, hh);
  std::vector<double> acc(static_cast<size_t>((ii1 - ii0) * shape[3]), 0.0);

  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t h = h0; h < h1; ++h) {
      const KvHead kv = internal::load_kv_head(p, a.in, seqs, b, h / (p.h_q / p.h_kv));
      for (int64_t ii = ii0; ii < ii1; ++ii) {
        double* acc_row = acc.data() + (ii - ii0) * shape[3];
        const auto [i0, i1] = range(shape[2], p.s_q, ii);
        for (int64_t i = i0; i < std::min(i1, seqs.len_q[b]); ++i) {
          const std::vector<double> q = internal::load_row(a.in.q, p, seqs.start_q[b], b, i, h, p.d_qk);
          const std::vector<double> dout = internal::load_row(a.dout, p, seqs.start_q[b], b, i, h, p.d_v);
          const std::vector<double> out = internal::load_row(a.out, p, seqs.start_q[b], b, i, h, p.d_v);
          const double lse = given_lse(a, p, seqs.start_q[b], b, i, h);
          const Row r = internal::attention_row(p, a.in, seqs, kv, q.data(), b, h, i, &lse);
          const RowGrad g = row_grad(p, r, kv, dout.data(), out.data());
          for (int64_t j = r.keys.begin; j < r.keys.end; ++j) acc_row[shape[3] == 1 ? 0 : j] += g.ds[j];
        }
      }
    }
  }
  for (int64_t ii = ii0; ii < ii1; ++ii)
    for (int64_t jj = 0; jj < shape[3]; ++jj)
      detail::store_from_double(a.dbias.data, a.dbias.dtype, detail::broadcast_offset(a.dbias, bb, hh, ii, jj),
                                acc[(ii - ii0) * shape[3] + jj]);
}

}  // namespace

void backward(const Problem& p, const BackwardArgs& args) {
  const Sequences seqs = internal::checked_sequences(p, args.in);
  std::vector<double> dsink_part(static_cast<size_t>(p.sink_grad ? p.batch * p.h_q : 0), 0.0);  // [b, h_q]
  detail::parallel_for(p.batch * p.h_kv, [&](int64_t task) {
    const int64_t b = task / p.h_kv;
    backward_kv_head(p, args, seqs, b, task % p.h_kv, p.sink_grad ? dsink_part.data() + b * p.h_q : nullptr);
  });
  if (p.sink_grad)  // dsink[h] = -sum over (b, i) of exp(sink - lse_i) D_i, summed in order of b
    for (int64_t h = 0; h < p.h_q; ++h) {
      double sum = 0.0;
      for (int64_t b = 0; b < p.batch; ++b) sum += dsink_part[b * p.h_q + h];
      detail::store_from_double(args.dsink.data, args.dsink.dtype, h * args.dsink.strides_elems[0], sum);
    }
  if (args.dbias.defined()) {
    // Tasks: blocks of dbias rows, so each block loads a K/V head once.
    const auto& shape = p.bias_shape;
    constexpr int64_t kRowsPerTask = 32;
    const int64_t blocks = (shape[2] + kRowsPerTask - 1) / kRowsPerTask;
    detail::parallel_for(shape[0] * shape[1] * blocks, [&](int64_t task) {
      const int64_t bb = task / (shape[1] * blocks), hh = (task / blocks) % shape[1], block = task % blocks;
      dbias_rows(p, args, seqs, bb, hh, block * kRowsPerTask, std::min(shape[2], (block + 1) * kRowsPerTask));
    });
  }
}

}  // namespace attn::reference
