// The ring's memory work on the host (see ring_ops.h): plain loops in fp64,
// used by the CPU ring that tests the algorithm with in-process ranks.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/nan_max.h"
#include "core/numeric.h"
#include "cp/ring_ops.h"

namespace attn::cp::internal {

View4 view4(const TensorView& t, int* index_dim) {
  View4 v;
  v.data = t.data;
  v.dtype = t.dtype;
  const int pad = 4 - t.rank;
  for (int d = 0; d < t.rank; ++d) v.shape[pad + d] = t.shape[d], v.stride[pad + d] = t.strides_elems[d];
  if (index_dim) *index_dim += pad;
  return v;
}

MergeRows merge_rows(QkvFormat format, const TensorView& block_out, const TensorView& block_lse,
                     const TensorView& acc_out, const TensorView& acc_lse) {
  MergeRows m;
  const bool thd = format == QkvFormat::thd;
  const int first = thd ? 1 : 0;  // thd rows (t, h) sit in x1, x2
  for (int i = 0; i < block_out.rank - 1; ++i) {
    m.dims[first + i] = block_out.shape[i];
    m.out_stride[first + i] = block_out.strides_elems[i];
    m.acc_stride[first + i] = acc_out.strides_elems[i];
  }
  m.d = block_out.shape[block_out.rank - 1];
  auto lse = [&](const TensorView& l, int64_t* s) {
    if (thd) s[1] = l.strides_elems[1], s[2] = l.strides_elems[0];  // [h, t]
    else if (format == QkvFormat::bshd) s[0] = l.strides_elems[0], s[1] = l.strides_elems[2], s[2] = l.strides_elems[1];
    else s[0] = l.strides_elems[2], s[1] = l.strides_elems[0], s[2] = l.strides_elems[1];  // sbhd (s, b, h)
  };
  lse(block_lse, m.lse_stride);
  lse(acc_lse, m.acc_lse_stride);
  return m;
}

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double sink_at(const detail::SinkLogits& s, int64_t h) {
  if (s.kind == 2) return s.logits[h * s.stride];
  return s.kind == 1 ? 0.0 : kNegInf;
}

// Offsets of element e (row-major over shape) in two views of the same shape.
template <typename F>
void for_each(const View4& a, const View4& b, const int32_t* index, int dim, F f) {
  const int64_t n = a.shape[0] * a.shape[1] * a.shape[2] * a.shape[3];
  for (int64_t e = 0; e < n; ++e) {
    int64_t rem = e, oa = 0, ob = 0;
    for (int d = 3; d >= 0; --d) {
      const int64_t i = rem % a.shape[d];
      rem /= a.shape[d];
      oa += (index && d == dim ? index[i] : i) * a.stride[d];
      ob += i * b.stride[d];
    }
    f(oa, ob);
  }
}

class HostOps : public Ops {
 public:
  void* alloc(int64_t bytes) override {
    storage_.emplace_back(static_cast<size_t>(bytes));
    return storage_.back().data();
  }
  const int32_t* upload(const std::vector<int32_t>& values) override {
    ints_.push_back(values);
    return ints_.back().data();
  }
  void fill(const TensorView& t, float value) override {
    const View4 v = view4(t);
    for_each(v, v, nullptr, 0, [&](int64_t o, int64_t) { detail::store_from_double(v.data, v.dtype, o, value); });
  }
  void copy(const TensorView& src, const TensorView& dst, const int32_t* index, int dim) override {
    const View4 s = view4(src, &dim), d = view4(dst);
    for_each(s, d, index, dim, [&](int64_t os, int64_t od) {
      detail::store_from_double(d.data, d.dtype, od, detail::load_as_double(s.data, s.dtype, os));
    });
  }
  void add(const TensorView& src, const TensorView& dst) override {
    const View4 s = view4(src), d = view4(dst);
    for_each(s, d, nullptr, 0, [&](int64_t os, int64_t od) {
      static_cast<float*>(d.data)[od] += static_cast<float>(detail::load_as_double(s.data, s.dtype, os));
    });
  }
  void add_sink(QkvFormat format, const TensorView& acc_out, const TensorView& acc_lse,
                const detail::SinkLogits& sink) override {
    const MergeRows m = merge_rows(format, acc_out, acc_lse, acc_out, acc_lse);
    auto* acc_l = static_cast<float*>(acc_lse.data);
    auto* acc = static_cast<float*>(acc_out.data);
    for (int64_t x0 = 0; x0 < m.dims[0]; ++x0)
      for (int64_t x1 = 0; x1 < m.dims[1]; ++x1)
        for (int64_t x2 = 0; x2 < m.dims[2]; ++x2) {
          const double t = sink_at(sink, x2);
          float& l = acc_l[x0 * m.acc_lse_stride[0] + x1 * m.acc_lse_stride[1] + x2 * m.acc_lse_stride[2]];
          const double mx = std::max<double>(l, t);
          if (mx == kNegInf) continue;
          const double merged = mx + std::log(std::exp(l - mx) + std::exp(t - mx));
          const double w = l == kNegInf ? 0.0 : std::exp(l - merged);
          float* a = acc + x0 * m.acc_stride[0] + x1 * m.acc_stride[1] + x2 * m.acc_stride[2];
          for (int64_t c = 0; c < m.d; ++c) a[c] = static_cast<float>(w * a[c]);
          l = static_cast<float>(merged);
        }
  }
  void sink_grad(QkvFormat format, const TensorView& out, const TensorView& dout, const TensorView& lse,
                 const detail::SinkLogits& sink, float* dsink, int64_t heads) override {
    const MergeRows m = merge_rows(format, out, lse, out, lse), g = merge_rows(format, dout, lse, dout, lse);
    std::vector<double> sum(static_cast<size_t>(heads), 0.0);
    for (int64_t x0 = 0; x0 < m.dims[0]; ++x0)
      for (int64_t x1 = 0; x1 < m.dims[1]; ++x1)
        for (int64_t x2 = 0; x2 < m.dims[2]; ++x2) {
          const double l = static_cast<const float*>(lse.data)[x0 * m.lse_stride[0] + x1 * m.lse_stride[1] +
                                                              x2 * m.lse_stride[2]];
          const int64_t o = x0 * m.out_stride[0] + x1 * m.out_stride[1] + x2 * m.out_stride[2];
          const int64_t d = x0 * g.out_stride[0] + x1 * g.out_stride[1] + x2 * g.out_stride[2];
          double dot = 0.0;
          for (int64_t c = 0; c < m.d; ++c)
            dot += detail::load_as_double(out.data, out.dtype, o + c) * detail::load_as_double(dout.data, dout.dtype, d + c);
          sum[x2] -= std::exp(sink_at(sink, x2) - l) * dot;
        }
    for (int64_t h = 0; h < heads; ++h) dsink[h] = static_cast<float>(sum[h]);
  }
  void max_into(const TensorView& src, const TensorView& dst) override {
    const View4 s = view4(src), d = view4(dst);
    for_each(s, d, nullptr, 0, [&](int64_t os, int64_t od) {
      float& x = static_cast<float*>(d.data)[od];
      x = detail::max_keeping_nan(x, static_cast<float>(detail::load_as_double(s.data, s.dtype, os)));
    });
  }
  std::vector<float> download(const float* src, int64_t n) override { return std::vector<float>(src, src + n); }
  void upload_to(const std::vector<float>& values, float* dst) override {
    std::copy(values.begin(), values.end(), dst);
  }
  void merge(QkvFormat format, const TensorView& block_out, const TensorView& block_lse, const TensorView& acc_out,
             const TensorView& acc_lse) override {
    const MergeRows m = merge_rows(format, block_out, block_lse, acc_out, acc_lse);
    const auto* lse = static_cast<const float*>(block_lse.data);
    auto* acc_l = static_cast<float*>(acc_lse.data);
    auto* acc = static_cast<float*>(acc_out.data);
    for (int64_t x0 = 0; x0 < m.dims[0]; ++x0)
      for (int64_t x1 = 0; x1 < m.dims[1]; ++x1)
        for (int64_t x2 = 0; x2 < m.dims[2]; ++x2) {
          const double l2 = lse[x0 * m.lse_stride[0] + x1 * m.lse_stride[1] + x2 * m.lse_stride[2]];
          if (l2 == kNegInf) continue;  // the block gave this row nothing
          float& l1 = acc_l[x0 * m.acc_lse_stride[0] + x1 * m.acc_lse_stride[1] + x2 * m.acc_lse_stride[2]];
          const double mx = std::max<double>(l1, l2);
          const double merged = mx + std::log(std::exp(l1 - mx) + std::exp(l2 - mx));
          const double w1 = l1 == kNegInf ? 0.0 : std::exp(l1 - merged), w2 = std::exp(l2 - merged);
          const int64_t o = x0 * m.out_stride[0] + x1 * m.out_stride[1] + x2 * m.out_stride[2];
          float* a = acc + x0 * m.acc_stride[0] + x1 * m.acc_stride[1] + x2 * m.acc_stride[2];
          for (int64_t c = 0; c < m.d; ++c)
            a[c] = static_cast<float>(w1 * a[c] + w2 * detail::load_as_double(block_out.data, block_out.dtype, o + c));
          l1 = static_cast<float>(merged);
        }
  }

 private:
  std::vector<std::vector<unsigned char>> storage_;
  std::vector<std::vector<int32_t>> ints_;
};

}  // namespace

std::unique_ptr<Ops> host_ops() { return std::make_unique<HostOps>(); }

}  // namespace attn::cp::internal
