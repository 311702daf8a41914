// One query row of attention in fp64 (scores, softmax, dropout), and row I/O
// for the reference's forward and backward (see reference_common.h).
#include "backends/reference/reference_common.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "attn/error.h"
#include "attn/philox.h"
#include "core/nan_max.h"
#include "core/numeric.h"

namespace attn::reference::internal {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Steps 2-4 of SEMANTICS.md "Scores" for a pair the window and padding allow:
// softcap, then bias or ALiBi, then an arbitrary mask. Returns -inf for a pair
// the mask removes.
double score(const Problem& p, const Inputs& in, int64_t b, int64_t h, int64_t i, int64_t j,
             int64_t shift, double x) {
  double s = p.softcap > 0.0 ? p.softcap * std::tanh(x / p.softcap) : x;
  if (p.bias == BiasType::post_scale_bias) {
    s += detail::load_as_double(in.bias.data, in.bias.dtype, detail::broadcast_offset(in.bias, b, h, i, j));
  } else if (p.bias == BiasType::alibi) {
    const TensorView& a = in.alibi_slopes;
    const int64_t off = p.alibi_per_batch ? b * a.strides_elems[0] + h * a.strides_elems[1]
                                          : h * a.strides_elems[0];
    s += alibi_bias(detail::load_as_double(a.data, a.dtype, off), i, j, shift);
  }
  if (p.mask == MaskType::arbitrary) {
    const TensorView& m = in.attn_mask;
    const double value = detail::load_as_double(m.data, m.dtype, detail::broadcast_offset(m, b, h, i, j));
    if (p.mask_additive)
      s += value;
    else if (value == 0.0)  // boolean mask: true = visible
      s = kNegInf;
  }
  return s;
}

// log(sum_j exp(s_j)) over the given range, shifted by the maximum so that
// nothing overflows; -inf when every score is -inf (or the range is empty).
// A NaN score makes the row's lse NaN (and so every probability of the row):
// std::max alone would skip it and the row would read as "no visible key".
double log_sum_exp(const std::vector<double>& s, KeyRange<int64_t> keys) {
  double max = kNegInf;
  for (int64_t j = keys.begin; j < keys.end; ++j) {
    if (std::isnan(s[j])) return s[j];
    max = std::max(max, s[j]);
  }
  if (max == kNegInf) return kNegInf;
  double sum = 0.0;
  for (int64_t j = keys.begin; j < keys.end; ++j) sum += std::exp(s[j] - max);
  return max + std::log(sum);
}

// log(exp(a) + exp(b)), exact for -inf operands; NaN stays NaN.
double log_add_exp(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  const double hi = std::max(a, b), lo = std::min(a, b);
  if (hi == kNegInf) return kNegInf;
  return hi + std::log1p(std::exp(lo - hi));
}

}  // namespace

int64_t stored_rows_q(const Problem& p, const Sequences& seqs, int64_t b) {
  return p.qkv_format == QkvFormat::thd ? seqs.len_q[b] : p.s_q;
}

int64_t stored_rows_kv(const Problem& p, const Sequences& seqs, int64_t b) {
  return p.qkv_format == QkvFormat::thd ? seqs.len_kv[b] : p.s_kv;
}

std::vector<double> load_row(const TensorView& t, const Problem& p, int64_t start, int64_t b,
                             int64_t pos, int64_t head, int64_t dim) {
  const int64_t base = detail::row_offset(t, p.qkv_format, start, b, pos, head);
  std::vector<double> row(static_cast<size_t>(dim));
  for (int64_t c = 0; c < dim; ++c) row[c] = detail::load_as_double(t.data, t.dtype, base + c);
  return row;
}

void store_row(const TensorView& t, const Problem& p, int64_t start, int64_t b, int64_t pos,
               int64_t head, const std::vector<double>& values) {
  const int64_t base = detail::row_offset(t, p.qkv_format, start, b, pos, head);
  for (size_t c = 0; c < values.size(); ++c)
    detail::store_from_double(t.data, t.dtype, base + static_cast<int64_t>(c), values[c]);
}

KvHead load_kv_head(const Problem& p, const Inputs& in, const Sequences& seqs, int64_t b,
                    int64_t h_kv) {
  KvHead kv;
  kv.len = seqs.len_kv[b];
  kv.d_qk = p.d_qk;
  kv.d_v = p.d_v;
  kv.k.reserve(static_cast<size_t>(kv.len * p.d_qk));
  kv.v.reserve(static_cast<size_t>(kv.len * p.d_v));
  for (int64_t j = 0; j < kv.len; ++j) {
    const std::vector<double> k = load_row(in.k, p, seqs.start_kv[b], b, j, h_kv, p.d_qk);
    const std::vector<double> v = load_row(in.v, p, seqs.start_kv[b], b, j, h_kv, p.d_v);
    kv.k.insert(kv.k.end(), k.begin(), k.end());
    kv.v.insert(kv.v.end(), v.begin(), v.end());
  }
  return kv;
}

double sink_logit(const Problem& p, const Inputs& in, int64_t h) {
  switch (p.softmax_type) {
    case SoftmaxType::vanilla: return kNegInf;
    case SoftmaxType::off_by_one: return 0.0;
    case SoftmaxType::learnable:
      return detail::load_as_double(in.sink.data, in.sink.dtype, h * in.sink.strides_elems[0]);
  }
  return kNegInf;
}

double dot(const double* a, const double* b, int64_t n) {
  double sum = 0.0;
  for (int64_t c = 0; c < n; ++c) sum += a[c] * b[c];
  return sum;
}

Row attention_row(const Problem& p, const Inputs& in, const Sequences& seqs, const KvHead& kv,
                  const double* q, int64_t b, int64_t h, int64_t i, const double* given_lse) {
  const int64_t len_q = seqs.len_q[b], len_kv = kv.len;
  const int64_t shift = alignment_shift<int64_t>(p.bottom_right, len_q, len_kv);
  Row r;
  r.keys = visible_keys<int64_t>(i, len_q, len_kv, shift, p.window_left, p.window_right);
  r.x.assign(static_cast<size_t>(len_kv), 0.0);
  r.p.assign(static_cast<size_t>(len_kv), 0.0);
  r.z.assign(static_cast<size_t>(len_kv), 1.0);

  // Scores of the keys padding and the window allow; -inf elsewhere.
  std::vector<double> s(static_cast<size_t>(len_kv), kNegInf);
  for (int64_t j = r.keys.begin; j < r.keys.end; ++j) {
    r.x[j] = p.softmax_scale * dot(q, kv.k_row(j), p.d_qk);
    s[j] = score(p, in, b, h, i, j, shift, r.x[j]);
  }

  r.max_score = kNegInf;
  for (int64_t j = r.keys.begin; j < r.keys.end; ++j) r.max_score = detail::max_keeping_nan(r.max_score, s[j]);

  // Softmax over the allowed keys and the sink (a logit without a value); a
  // row whose scores are all -inf (or whose given lse is -inf) keeps p = 0.
  r.lse = given_lse ? *given_lse : log_add_exp(log_sum_exp(s, r.keys), sink_logit(p, in, h));
  if (r.lse != kNegInf)
    for (int64_t j = r.keys.begin; j < r.keys.end; ++j) r.p[j] = std::exp(s[j] - r.lse);

  // Dropout acts after the softmax (lse is computed before it), element by
  // element as include/attn/philox.h decides.
  if (p.dropout_p > 0.0) {
    const uint32_t threshold = dropout_threshold(p.dropout_p);
    const double scale = 1.0 / (1.0 - p.dropout_p);
    const auto bh = static_cast<uint32_t>(b * p.h_q + h);
    for (int64_t j = r.keys.begin; j < r.keys.end; ++j)
      r.z[j] = dropout_keep(p.seed, static_cast<uint32_t>(p.offset), bh, static_cast<uint32_t>(i),
                            static_cast<uint32_t>(j), threshold)
                   ? scale
                   : 0.0;
  }
  return r;
}

}  // namespace attn::reference::internal
