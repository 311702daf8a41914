// Helpers for the reference backend's tests (see reference_test_util.h).
#include "reference/reference_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

#include "attn/philox.h"
#include "backends/reference/reference.h"
#include "core/numeric.h"
#include "testing/tensor_buffer.h"

namespace attn::reftest {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using testing::TensorBuffer;

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

// Every element offset of a view, in row-major order of its index.
std::vector<int64_t> view_offsets(const TensorView& t) {
  std::vector<int64_t> offsets;
  if (t.numel() == 0) return offsets;
  std::vector<int64_t> idx(t.rank, 0);
  for (;;) {
    int64_t off = 0;
    for (int d = 0; d < t.rank; ++d) off += idx[d] * t.strides_elems[d];
    offsets.push_back(off);
    int d = t.rank - 1;
    while (d >= 0 && ++idx[d] == t.shape[d]) idx[d--] = 0;
    if (d < 0) return offsets;
  }
}

// Owns the buffers of one call and places tensors in them, contiguous or as
// strided views inside larger buffers.
class Materializer {
 public:
  explicit Materializer(bool strided) : strided_(strided) {}

  // A NaN-filled view of `shape`. Strided: the buffer's last dimension is 3
  // longer and the one before 1 longer, so no view of rank >= 2 is contiguous.
  TensorView alloc(DType t, const std::vector<int64_t>& shape, bool allow_strided = true) {
    std::vector<int64_t> storage = shape;
    if (strided_ && allow_strided && shape.size() >= 2) {
      storage.back() += 3;
      storage[storage.size() - 2] += 1;
    }
    buffers_.emplace_back(t, storage);
    if (is_floating(t)) buffers_.back().fill_nan();
    else buffers_.back().fill_zero();
    const std::vector<int64_t> strides = row_major_strides(storage);
    return make_view(buffers_.back().data(), t, static_cast<int>(shape.size()), shape.data(), strides.data(),
                     Device::cpu());
  }

  // Fails the test unless every element of `t` (made by alloc) was written
  // (is not NaN) and nothing else in its buffer was.
  void expect_exactly_written(const TensorView& t, const char* name) const {
    for (const TensorBuffer& buf : buffers_) {
      if (buf.data() != t.data) continue;
      const std::vector<double> all = buf.to_doubles();
      int64_t unwritten = 0, nan_total = 0;
      for (int64_t off : view_offsets(t)) unwritten += std::isnan(all[off]);
      for (double x : all) nan_total += std::isnan(x);
      EXPECT_EQ(unwritten, 0) << name << ": elements of the view left unwritten (NaN)";
      EXPECT_EQ(nan_total - unwritten, buf.numel() - t.numel())
          << name << ": elements outside the view were written";
      return;
    }
    ADD_FAILURE() << name << ": no buffer";
  }

 private:
  bool strided_;
  std::vector<TensorBuffer> buffers_;
};

// Where the sequences of a call lie in a format: thd token offsets.
struct Layout {
  QkvFormat format;
  std::vector<int64_t> start_q, start_kv;
  int64_t t_q = 0, t_kv = 0;
};

Layout layout_of(const Data& d, QkvFormat f) {
  Layout l{f, {}, {}, 0, 0};
  for (int64_t b = 0; b < d.dims.b; ++b) {
    l.start_q.push_back(l.t_q);
    l.start_kv.push_back(l.t_kv);
    l.t_q += d.lq(b);
    l.t_kv += d.lkv(b);
  }
  return l;
}

// Shape and element offset of a [.., heads, dim] tensor in format f.
std::vector<int64_t> qlike_shape(QkvFormat f, int64_t b, int64_t s, int64_t tokens, int64_t h, int64_t dim) {
  switch (f) {
    case QkvFormat::bshd: return {b, s, h, dim};
    case QkvFormat::sbhd: return {s, b, h, dim};
    case QkvFormat::thd: return {tokens, h, dim};
  }
  return {};
}

int64_t qlike_offset(const TensorView& t, QkvFormat f, int64_t start, int64_t b, int64_t pos, int64_t h) {
  const auto& st = t.strides_elems;
  switch (f) {
    case QkvFormat::bshd: return b * st[0] + pos * st[1] + h * st[2];
    case QkvFormat::sbhd: return pos * st[0] + b * st[1] + h * st[2];
    case QkvFormat::thd: return (start + pos) * st[0] + h * st[1];
  }
  return 0;
}

// Which of the padded tensors of Data a q-like view holds.
struct QLike {
  int64_t s, h, dim;
  const std::vector<int64_t>* starts;
  bool is_q_side;  // lengths from len_q (else len_kv)
};

QLike q_side(const Data& d, const Layout& l, int64_t dim) { return {d.dims.s_q, d.dims.h_q, dim, &l.start_q, true}; }
QLike kv_side(const Data& d, const Layout& l, int64_t dim) { return {d.dims.s_kv, d.dims.h_kv, dim, &l.start_kv, false}; }

// Positions of sequence b a tensor holds: all padded ones in bshd/sbhd.
int64_t held(const Data& d, const Layout& l, const QLike& w, int64_t b) {
  if (l.format != QkvFormat::thd) return w.s;
  return w.is_q_side ? d.lq(b) : d.lkv(b);
}

void write_qlike(const TensorView& t, const Data& d, const Layout& l, const QLike& w,
                 const std::vector<double>& padded) {
  for (int64_t b = 0; b < d.dims.b; ++b)
    for (int64_t pos = 0; pos < held(d, l, w, b); ++pos)
      for (int64_t h = 0; h < w.h; ++h) {
        const int64_t off = qlike_offset(t, l.format, (*w.starts)[b], b, pos, h);
        for (int64_t c = 0; c < w.dim; ++c)
          detail::store_from_double(t.data, t.dtype, off + c, padded[((b * w.s + pos) * w.h + h) * w.dim + c]);
      }
}

std::vector<double> read_qlike(const TensorView& t, const Data& d, const Layout& l, const QLike& w) {
  std::vector<double> padded(static_cast<size_t>(d.dims.b * w.s * w.h * w.dim), 0.0);
  for (int64_t b = 0; b < d.dims.b; ++b)
    for (int64_t pos = 0; pos < held(d, l, w, b); ++pos)
      for (int64_t h = 0; h < w.h; ++h) {
        const int64_t off = qlike_offset(t, l.format, (*w.starts)[b], b, pos, h);
        for (int64_t c = 0; c < w.dim; ++c)
          padded[((b * w.s + pos) * w.h + h) * w.dim + c] = detail::load_as_double(t.data, t.dtype, off + c);
      }
  return padded;
}

std::vector<double> read_lse(const TensorView& t, const Data& d, const Layout& l, const std::vector<double>& sinks) {
  const Dims& n = d.dims;
  std::vector<double> lse(static_cast<size_t>(n.b * n.h_q * n.s_q), -kInf);
  for (int64_t b = 0; b < n.b; ++b)
    for (int64_t h = 0; h < n.h_q; ++h)
      for (int64_t i = 0; i < n.s_q; ++i) lse[d.il(b, h, i)] = sinks[h];
  for (int64_t b = 0; b < n.b; ++b)
    for (int64_t h = 0; h < n.h_q; ++h)
      for (int64_t i = 0; i < (l.format == QkvFormat::thd ? d.lq(b) : n.s_q); ++i) {
        const int64_t off = l.format == QkvFormat::thd
                                ? h * t.strides_elems[0] + (l.start_q[b] + i) * t.strides_elems[1]
                                : b * t.strides_elems[0] + h * t.strides_elems[1] + i * t.strides_elems[2];
        lse[d.il(b, h, i)] = detail::load_as_double(t.data, t.dtype, off);
      }
  return lse;
}

DType dtype_of(const Broadcast4& t, DType q_dtype) { return t.follow_q ? q_dtype : t.dtype; }

TensorView put_broadcast4(Materializer& m, const Broadcast4& t, DType dtype) {
  const std::vector<int64_t> shape(t.shape.begin(), t.shape.end());
  TensorView v = m.alloc(dtype, shape);
  int64_t n = 0;
  for (int64_t a = 0; a < t.shape[0]; ++a)
    for (int64_t b = 0; b < t.shape[1]; ++b)
      for (int64_t c = 0; c < t.shape[2]; ++c)
        for (int64_t e = 0; e < t.shape[3]; ++e, ++n)
          detail::store_from_double(v.data, dtype,
                                    a * v.strides_elems[0] + b * v.strides_elems[1] + c * v.strides_elems[2] +
                                        e * v.strides_elems[3],
                                    t.values[n]);
  return v;
}

std::vector<double> read_broadcast4(const TensorView& v) {
  std::vector<double> out;
  for (int64_t a = 0; a < v.shape[0]; ++a)
    for (int64_t b = 0; b < v.shape[1]; ++b)
      for (int64_t c = 0; c < v.shape[2]; ++c)
        for (int64_t e = 0; e < v.shape[3]; ++e)
          out.push_back(detail::load_as_double(v.data, v.dtype,
                                               a * v.strides_elems[0] + b * v.strides_elems[1] +
                                                   c * v.strides_elems[2] + e * v.strides_elems[3]));
  return out;
}

// cu_seqlens from lengths: contiguous int32 [b + 1].
TensorView put_cu_seqlens(Materializer& m, const Data& d, bool q) {
  TensorView v = m.alloc(DType::i32, {d.dims.b + 1}, false);
  int32_t* p = v.as<int32_t>();
  p[0] = 0;
  for (int64_t b = 0; b < d.dims.b; ++b) p[b + 1] = p[b] + static_cast<int32_t>(q ? d.lq(b) : d.lkv(b));
  return v;
}

// The tensors of Inputs for d in format l.
Inputs put_inputs(Materializer& m, const Data& d, const Layout& l, DType dtype) {
  const Dims& n = d.dims;
  Inputs in;
  auto put = [&](const QLike& w, const std::vector<double>& values) {
    TensorView t = m.alloc(dtype, qlike_shape(l.format, n.b, w.s, w.is_q_side ? l.t_q : l.t_kv, w.h, w.dim));
    write_qlike(t, d, l, w, values);
    return t;
  };
  in.q = put(q_side(d, l, n.d_qk), d.q);
  in.k = put(kv_side(d, l, n.d_qk), d.k);
  in.v = put(kv_side(d, l, n.d_v), d.v);
  if (l.format == QkvFormat::thd || d.has_lengths()) {
    in.cu_seqlens_q = put_cu_seqlens(m, d, true);
    in.cu_seqlens_kv = put_cu_seqlens(m, d, false);
  }
  if (d.bias.defined()) in.bias = put_broadcast4(m, d.bias, dtype_of(d.bias, dtype));
  if (d.mask.defined()) in.attn_mask = put_broadcast4(m, d.mask, dtype_of(d.mask, dtype));
  if (!d.alibi.empty()) {
    in.alibi_slopes = d.alibi_per_batch ? m.alloc(DType::f32, {n.b, n.h_q}) : m.alloc(DType::f32, {n.h_q});
    for (int64_t b = 0; b < (d.alibi_per_batch ? n.b : 1); ++b)
      for (int64_t h = 0; h < n.h_q; ++h)
        detail::store_from_double(in.alibi_slopes.data, DType::f32,
                                  d.alibi_per_batch ? b * in.alibi_slopes.strides_elems[0] + h * in.alibi_slopes.strides_elems[1]
                                                    : h * in.alibi_slopes.strides_elems[0],
                                  d.alibi[b * n.h_q + h]);
  }
  if (!d.sink.empty()) {
    in.sink = m.alloc(DType::f32, {n.h_q});
    for (int64_t h = 0; h < n.h_q; ++h)
      detail::store_from_double(in.sink.data, DType::f32, h * in.sink.strides_elems[0], d.sink[h]);
  }
  return in;
}

// A [h_q] vector of fp32 (max_logit, dsink), NaN-filled, and its values.
std::vector<double> read_per_head(const TensorView& t) {
  std::vector<double> v;
  for (int64_t h = 0; h < t.shape[0]; ++h) v.push_back(detail::load_as_double(t.data, t.dtype, h * t.strides_elems[0]));
  return v;
}

}  // namespace

int64_t Broadcast4::index(int64_t b, int64_t h, int64_t i, int64_t j) const {
  const int64_t idx[4] = {b, h, i, j};
  int64_t flat = 0;
  for (int d = 0; d < 4; ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : idx[d]);
  return flat;
}

std::vector<double> sink_logits(const Data& d, const Options& opts) {
  std::vector<double> t(static_cast<size_t>(d.dims.h_q), -kInf);
  if (opts.softmax_type == SoftmaxType::off_by_one) std::fill(t.begin(), t.end(), 0.0);
  if (opts.softmax_type == SoftmaxType::learnable)
    for (size_t h = 0; h < t.size() && h < d.sink.size(); ++h) t[h] = static_cast<float>(d.sink[h]);
  return t;
}

Data make_data(const Dims& n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  auto fill = [&](int64_t count) {
    std::vector<double> v(static_cast<size_t>(count));
    for (double& x : v) x = dist(rng);
    return v;
  };
  Data d;
  d.dims = n;
  d.q = fill(n.b * n.s_q * n.h_q * n.d_qk);
  d.k = fill(n.b * n.s_kv * n.h_kv * n.d_qk);
  d.v = fill(n.b * n.s_kv * n.h_kv * n.d_v);
  d.dout = fill(n.b * n.s_q * n.h_q * n.d_v);
  return d;
}

Data probe_data(Dims n, uint64_t seed) {
  n.d_v = n.s_kv;
  Data d = make_data(n, seed);
  std::fill(d.q.begin(), d.q.end(), 0.0);
  std::fill(d.k.begin(), d.k.end(), 0.0);
  for (int64_t b = 0; b < n.b; ++b)
    for (int64_t j = 0; j < n.s_kv; ++j)
      for (int64_t h = 0; h < n.h_kv; ++h)
        for (int64_t c = 0; c < n.d_v; ++c) d.v[d.iv(b, j, h, c)] = c == j ? 1.0 : 0.0;
  return d;
}

Broadcast4 random_broadcast4(std::array<int64_t, 4> shape, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Broadcast4 t;
  t.shape = shape;
  t.values.resize(static_cast<size_t>(shape[0] * shape[1] * shape[2] * shape[3]));
  for (double& x : t.values) x = dist(rng);
  return t;
}

Result run_reference(const Data& d, Options opts, const Spec& spec) {
  const Dims& n = d.dims;
  Materializer m(spec.strided);
  const Layout l = layout_of(d, spec.format);
  opts.qkv_format = spec.format;
  if (spec.format == QkvFormat::thd) {
    if (opts.max_seqlen_q == 0) opts.max_seqlen_q = n.s_q;
    if (opts.max_seqlen_kv == 0) opts.max_seqlen_kv = n.s_kv;
  }
  const Inputs in = put_inputs(m, d, l, spec.dtype);
  const QLike out_w = q_side(d, l, n.d_v);
  auto alloc_qlike = [&](const QLike& w) {
    return m.alloc(spec.dtype, qlike_shape(l.format, n.b, w.s, w.is_q_side ? l.t_q : l.t_kv, w.h, w.dim));
  };

  ForwardArgs fa;
  fa.in = in;
  fa.out = alloc_qlike(out_w);
  fa.lse = spec.format == QkvFormat::thd ? m.alloc(DType::f32, {n.h_q, l.t_q}) : m.alloc(DType::f32, {n.b, n.h_q, n.s_q});
  if (spec.max_logit) fa.max_logit = m.alloc(DType::f32, {n.h_q});
  const Problem pf = validate_forward(opts, fa);
  reference::forward(pf, fa);
  m.expect_exactly_written(fa.out, "out");
  m.expect_exactly_written(fa.lse, "lse");
  Result r;
  r.out = read_qlike(fa.out, d, l, out_w);
  r.lse = read_lse(fa.lse, d, l, sink_logits(d, opts));
  if (spec.max_logit) {
    m.expect_exactly_written(fa.max_logit, "max_logit");
    r.max_logit = read_per_head(fa.max_logit);
  }
  if (!spec.backward) return r;
  if (spec.given_out) write_qlike(fa.out, d, l, out_w, *spec.given_out);

  BackwardArgs ba;
  ba.in = in;
  ba.out = fa.out;
  ba.lse = fa.lse;
  ba.dout = alloc_qlike(out_w);
  write_qlike(ba.dout, d, l, out_w, d.dout);
  ba.dq = alloc_qlike(q_side(d, l, n.d_qk));
  ba.dk = alloc_qlike(kv_side(d, l, n.d_qk));
  ba.dv = alloc_qlike(kv_side(d, l, n.d_v));
  if (spec.dbias)
    ba.dbias = m.alloc(dtype_of(d.bias, spec.dtype), std::vector<int64_t>(d.bias.shape.begin(), d.bias.shape.end()));
  if (spec.dsink) ba.dsink = m.alloc(DType::f32, {n.h_q});
  const Problem pb = validate_backward(opts, ba);
  reference::backward(pb, ba);
  if (spec.dsink) {
    m.expect_exactly_written(ba.dsink, "dsink");
    r.dsink = read_per_head(ba.dsink);
  }
  m.expect_exactly_written(ba.dq, "dq");
  m.expect_exactly_written(ba.dk, "dk");
  m.expect_exactly_written(ba.dv, "dv");
  r.dq = read_qlike(ba.dq, d, l, q_side(d, l, n.d_qk));
  r.dk = read_qlike(ba.dk, d, l, kv_side(d, l, n.d_qk));
  r.dv = read_qlike(ba.dv, d, l, kv_side(d, l, n.d_v));
  if (spec.dbias) {
    m.expect_exactly_written(ba.dbias, "dbias");
    r.dbias = read_broadcast4(ba.dbias);
  }
  return r;
}

Result run_reference_packed_qkv(const Data& d, Options opts) {
  const Dims& n = d.dims;
  EXPECT_TRUE(n.h_q == n.h_kv && n.d_qk == n.d_v && n.s_q == n.s_kv) << "packed QKV needs one shape";
  opts.qkv_format = QkvFormat::bshd;
  const int64_t s = n.s_q, h = n.h_q, dim = n.d_qk;
  // Three [b, s, 3, h, d] buffers: inputs, forward outputs (out in slot 0), gradients.
  TensorBuffer qkv(DType::f64, {n.b, s, 3, h, dim}), outs(DType::f64, {n.b, s, 3, h, dim}),
      grads(DType::f64, {n.b, s, 3, h, dim});
  outs.fill_nan();
  grads.fill_nan();
  auto slot = [&](const TensorBuffer& buf, int which) {
    return make_view(static_cast<double*>(buf.data()) + which * h * dim, DType::f64, {n.b, s, h, dim},
                     {s * 3 * h * dim, 3 * h * dim, dim, 1});
  };
  Inputs in;
  in.q = slot(qkv, 0);
  in.k = slot(qkv, 1);
  in.v = slot(qkv, 2);
  const Layout l = layout_of(d, QkvFormat::bshd);
  write_qlike(in.q, d, l, q_side(d, l, dim), d.q);
  write_qlike(in.k, d, l, kv_side(d, l, dim), d.k);
  write_qlike(in.v, d, l, kv_side(d, l, dim), d.v);
  Materializer m(false);
  if (d.has_lengths()) {
    in.cu_seqlens_q = put_cu_seqlens(m, d, true);
    in.cu_seqlens_kv = put_cu_seqlens(m, d, false);
  }
  if (d.bias.defined()) in.bias = put_broadcast4(m, d.bias, DType::f64);

  ForwardArgs fa;
  fa.in = in;
  fa.out = slot(outs, 0);
  fa.lse = m.alloc(DType::f32, {n.b, h, s});
  reference::forward(validate_forward(opts, fa), fa);
  BackwardArgs ba;
  ba.in = in;
  ba.out = fa.out;
  ba.lse = fa.lse;
  ba.dout = slot(outs, 1);
  write_qlike(ba.dout, d, l, q_side(d, l, dim), d.dout);
  ba.dq = slot(grads, 0);
  ba.dk = slot(grads, 1);
  ba.dv = slot(grads, 2);
  reference::backward(validate_backward(opts, ba), ba);
  Result r;
  r.out = read_qlike(fa.out, d, l, q_side(d, l, dim));
  r.lse = read_lse(fa.lse, d, l, sink_logits(d, opts));
  r.dq = read_qlike(ba.dq, d, l, q_side(d, l, dim));
  r.dk = read_qlike(ba.dk, d, l, kv_side(d, l, dim));
  r.dv = read_qlike(ba.dv, d, l, kv_side(d, l, dim));
  for (double x : grads.to_doubles()) EXPECT_FALSE(std::isnan(x)) << "a gradient element was left unwritten";
  return r;
}

Result naive_forward(const Data& d, const Options& o) {
  const Dims& n = d.dims;
  const MaskType mt = o.mask;
  const bool causal = mt == MaskType::causal || mt == MaskType::causal_bottom_right ||
                      mt == MaskType::padding_causal || mt == MaskType::padding_causal_bottom_right;
  const bool top_left = mt == MaskType::causal || mt == MaskType::padding_causal;
  const int64_t left = o.window.left, right = causal ? 0 : o.window.right;
  const double scale = o.softmax_scale ? *o.softmax_scale : 1.0 / std::sqrt(static_cast<double>(n.d_qk));
  const int64_t group = n.h_q / n.h_kv;
  const std::vector<double> sinks = sink_logits(d, o);

  Result r;
  r.out.assign(static_cast<size_t>(n.b * n.s_q * n.h_q * n.d_v), 0.0);
  r.lse.assign(static_cast<size_t>(n.b * n.h_q * n.s_q), -kInf);
  r.max_logit.assign(static_cast<size_t>(n.h_q), -kInf);
  for (int64_t b = 0; b < n.b; ++b) {
    const int64_t lq = d.lq(b), lkv = d.lkv(b), shift = top_left ? 0 : lkv - lq;
    for (int64_t h = 0; h < n.h_q; ++h) {
      for (int64_t i = 0; i < n.s_q; ++i) r.lse[d.il(b, h, i)] = sinks[h];  // rows that see no key
      for (int64_t i = 0; i < lq; ++i) {
        std::vector<double> s(static_cast<size_t>(lkv), -kInf);
        for (int64_t j = 0; j < lkv; ++j) {
          if (left >= 0 && j < i + shift - left) continue;
          if (right >= 0 && j > i + shift + right) continue;
          double x = 0.0;
          for (int64_t c = 0; c < n.d_qk; ++c) x += d.q[d.iq(b, i, h, c)] * d.k[d.ik(b, j, h / group, c)];
          x *= scale;
          double sc = o.softcap > 0 ? o.softcap * std::tanh(x / o.softcap) : x;
          if (d.bias.defined()) sc += d.bias.at(b, h, i, j);
          if (!d.alibi.empty()) {  // slopes are stored as fp32
            const double slope = float(d.alibi[(d.alibi_per_batch ? b * n.h_q : 0) + h]);
            sc -= slope * std::abs(double(i + shift - j));
          }
          if (d.mask.defined()) {
            const double m = d.mask.at(b, h, i, j);
            const bool additive = d.mask.follow_q || is_floating(d.mask.dtype);
            if (additive)
              sc += m;
            else if (m == 0.0)
              sc = -kInf;
          }
          s[j] = sc;
        }
        double mx = -kInf;
        for (double x : s) mx = std::max(mx, x);
        r.max_logit[h] = std::max(r.max_logit[h], mx);
        mx = std::max(mx, sinks[h]);  // the sink joins the softmax's denominator
        if (mx == -kInf) continue;
        double sum = std::exp(sinks[h] - mx);
        for (double x : s) sum += std::exp(x - mx);
        const double lse = mx + std::log(sum);
        r.lse[d.il(b, h, i)] = lse;
        const uint32_t thr = dropout_threshold(o.dropout_p);
        for (int64_t j = 0; j < lkv; ++j) {
          double p = std::exp(s[j] - lse);
          if (o.dropout_p > 0)
            p = dropout_keep(o.seed, static_cast<uint32_t>(o.offset), static_cast<uint32_t>(b * n.h_q + h),
                             static_cast<uint32_t>(i), static_cast<uint32_t>(j), thr)
                    ? p / (1.0 - o.dropout_p)
                    : 0.0;
          for (int64_t c = 0; c < n.d_v; ++c) r.out[d.io(b, i, h, c)] += p * d.v[d.iv(b, j, h / group, c)];
        }
      }
    }
  }
  return r;
}

double loss(const Data& d, const Options& opts) {
  Spec spec;
  spec.backward = false;
  const Result r = run_reference(d, opts, spec);
  double sum = 0.0;
  for (size_t i = 0; i < r.out.size(); ++i) sum += r.out[i] * d.dout[i];
  return sum;
}

std::vector<double> numeric_grad(const Data& d, const Options& opts,
                                 const std::function<std::vector<double>&(Data&)>& member, double eps) {
  Data work = d;
  std::vector<double>& values = member(work);
  std::vector<double> grad(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double saved = values[i];
    values[i] = saved + eps;
    const double up = loss(work, opts);
    values[i] = saved - eps;
    const double down = loss(work, opts);
    values[i] = saved;
    grad[i] = (up - down) / (2 * eps);
  }
  return grad;
}

void expect_gradients_match_differences(const Data& d, const Options& opts, double step, double tol,
                                        const std::string& what) {
  Spec spec;
  spec.dbias = d.bias.defined();
  spec.dsink = opts.softmax_type == SoftmaxType::learnable;
  const Result r = run_reference(d, opts, spec);
  const struct {
    const char* name;
    bool wanted;
    const std::vector<double>& analytic;
    std::function<std::vector<double>&(Data&)> member;
  } checks[] = {
      {"dq", true, r.dq, [](Data& x) -> std::vector<double>& { return x.q; }},
      {"dk", true, r.dk, [](Data& x) -> std::vector<double>& { return x.k; }},
      {"dv", true, r.dv, [](Data& x) -> std::vector<double>& { return x.v; }},
      {"dbias", spec.dbias, r.dbias, [](Data& x) -> std::vector<double>& { return x.bias.values; }},
      {"dsink", spec.dsink, r.dsink, [](Data& x) -> std::vector<double>& { return x.sink; }},
  };
  for (const auto& c : checks) {
    if (!c.wanted) continue;
    const std::vector<double> numeric = numeric_grad(d, opts, c.member, step);
    EXPECT_LE(max_abs_diff(c.analytic, numeric), tol) << what << " " << c.name;
    EXPECT_GT(max_abs(numeric), 1e-3) << what << " " << c.name << " is zero: the case tests nothing";
  }
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

std::vector<double> round_to(const std::vector<double>& values, DType t) {
  std::vector<double> out(values.size());
  std::vector<unsigned char> cell(8);
  for (size_t i = 0; i < values.size(); ++i) {
    detail::store_from_double(cell.data(), t, 0, values[i]);
    out[i] = detail::load_as_double(cell.data(), t, 0);
  }
  return out;
}

Data rounded(const Data& d, DType t) {
  Data r = d;
  r.q = round_to(d.q, t);
  r.k = round_to(d.k, t);
  r.v = round_to(d.v, t);
  r.dout = round_to(d.dout, t);
  if (r.bias.defined()) r.bias.values = round_to(d.bias.values, d.bias.follow_q ? t : d.bias.dtype);
  return r;
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old;
  setenv(name, value, 1);
}

ScopedEnv::~ScopedEnv() {
  if (old_)
    setenv(name_.c_str(), old_->c_str(), 1);
  else
    unsetenv(name_.c_str());
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] == b[i]) continue;  // also equal infinities
    const double diff = std::abs(a[i] - b[i]);
    worst = std::isnan(diff) ? kInf : std::max(worst, diff);
  }
  return worst;
}

bool identical(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

}  // namespace attn::reftest
