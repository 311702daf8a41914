// The ring forward of one rank (see attn/cp.h): for each ring step, the blocks
// (query chunk x key chunk) the mask leaves visible run through attn::forward,
// and their outputs merge into fp64 accumulators by their log-sum-exp.
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "attn/cp.h"
#include "core/numeric.h"

namespace attn::cp {
namespace {

using Bytes = std::vector<unsigned char>;

// The sub-view of chunk `c` (0 or 1) along the sequence dimension of a local bshd tensor.
TensorView chunk_view(const TensorView& t, int c, int64_t chunk) {
  TensorView v = t;
  v.shape[1] = chunk;
  v.data = static_cast<unsigned char*>(t.data) + c * chunk * t.strides_elems[1] * dtype_size_bytes(t.dtype);
  return v;
}

// A contiguous copy of t's elements into dst (same shape, row-major).
void pack(const TensorView& t, unsigned char* dst) {
  const int64_t n = t.numel();
  for (int64_t e = 0; e < n; ++e) {
    int64_t rem = e, off = 0;
    for (int d = t.rank - 1; d >= 0; --d) {
      off += (rem % t.shape[d]) * t.strides_elems[d];
      rem /= t.shape[d];
    }
    detail::store_from_double(dst, t.dtype, e, detail::load_as_double(t.data, t.dtype, off));
  }
}

TensorView contiguous_view(void* data, const TensorView& like) {
  return make_view(data, like.dtype, like.rank, like.shape.data(), nullptr, like.device);
}

void require(bool ok, const std::string& what, const std::string& got, const std::string& expected) {
  if (!ok)
    fail(ErrorKind::unsupported, "ring attention: " + what, got, expected,
         "this first version of context parallelism runs bshd host tensors with no_mask or causal; "
         "the rest comes with the NCCL version (issue 9)");
}

}  // namespace

void ring_forward(const Options& opts, const ForwardArgs& local, Transport& transport, const Policy& policy) {
  const TensorView &q = local.in.q, &k = local.in.k, &v = local.in.v;
  require(opts.qkv_format == QkvFormat::bshd, "qkv_format", format_name(opts.qkv_format), "bshd");
  require(opts.mask == MaskType::no_mask || opts.mask == MaskType::causal, "mask", mask_name(opts.mask),
          "no_mask or causal");
  require(opts.window.left < 0 && opts.window.right < 0 && opts.dropout_p == 0.0, "window or dropout", "given",
          "neither");
  require(!q.device.is_cuda(), "device", device_name(q.device), "host tensors");
  require(q.rank == 4 && k.rank == 4 && q.shape[1] % 2 == 0 && q.shape[1] == k.shape[1], "local q/k shapes",
          q.shape_str() + ", " + k.shape_str(), "[b, 2*chunk, h, d] each, the same 2*chunk");
  const int cp = transport.size(), r = transport.rank();
  const int64_t b = q.shape[0], chunk = q.shape[1] / 2, h_q = q.shape[2], d_v = v.shape[3];
  const bool causal = opts.mask == MaskType::causal;

  // K and V travel as one contiguous buffer; two of them alternate.
  const int64_t k_bytes = k.numel() * static_cast<int64_t>(dtype_size_bytes(k.dtype));
  const int64_t kv_bytes = k_bytes + v.numel() * static_cast<int64_t>(dtype_size_bytes(v.dtype));
  Bytes cur(static_cast<size_t>(kv_bytes)), next(static_cast<size_t>(kv_bytes));
  pack(k, cur.data());
  pack(v, cur.data() + k_bytes);

  const double neg_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> out_acc(static_cast<size_t>(b * 2 * chunk * h_q * d_v), 0.0);
  std::vector<double> lse_acc(static_cast<size_t>(b * h_q * 2 * chunk), neg_inf);
  const size_t block_out = static_cast<size_t>(b * chunk * h_q * d_v) * dtype_size_bytes(q.dtype);
  Bytes out_block(block_out), lse_block(static_cast<size_t>(b * h_q * chunk) * sizeof(float));

  for (int step = 0; step < cp; ++step) {
    const int source = (r - step + cp) % cp;  // whose K/V this rank holds now
    if (step + 1 < cp) transport.ring_step(cur.data(), next.data(), kv_bytes);
    const TensorView k_all = contiguous_view(cur.data(), k), v_all = contiguous_view(cur.data() + k_bytes, v);
    const Chunks mine = chunks_of(r, cp), theirs = chunks_of(source, cp);
    for (int qc = 0; qc < 2; ++qc)
      for (int kc = 0; kc < 2; ++kc) {
        const Block kind = block_kind(qc ? mine.second : mine.first, kc ? theirs.second : theirs.first, causal);
        if (kind == Block::skip) continue;
        Options o = opts;
        o.mask = kind == Block::diagonal ? MaskType::causal : MaskType::no_mask;
        ForwardArgs a;
        a.in = local.in;
        a.in.q = chunk_view(q, qc, chunk);
        a.in.k = chunk_view(k_all, kc, chunk);
        a.in.v = chunk_view(v_all, kc, chunk);
        a.out = make_view(out_block.data(), q.dtype, {b, chunk, h_q, d_v}, q.device);
        a.lse = make_view(lse_block.data(), DType::f32, {b, h_q, chunk}, q.device);
        forward(o, a, {}, policy);
        const float* lse = reinterpret_cast<const float*>(lse_block.data());
        for (int64_t bb = 0; bb < b; ++bb)
          for (int64_t h = 0; h < h_q; ++h)
            for (int64_t i = 0; i < chunk; ++i) {
              const double l2 = lse[(bb * h_q + h) * chunk + i];
              if (l2 == neg_inf) continue;
              double& l1 = lse_acc[static_cast<size_t>((bb * h_q + h) * 2 * chunk + qc * chunk + i)];
              const double m = std::max(l1, l2);
              const double merged = m + std::log(std::exp(l1 - m) + std::exp(l2 - m));
              const double w1 = l1 == neg_inf ? 0.0 : std::exp(l1 - merged), w2 = std::exp(l2 - merged);
              double* acc = &out_acc[static_cast<size_t>(((bb * 2 * chunk + qc * chunk + i) * h_q + h) * d_v)];
              const int64_t src = ((bb * chunk + i) * h_q + h) * d_v;
              for (int64_t c = 0; c < d_v; ++c)
                acc[c] = w1 * acc[c] + w2 * detail::load_as_double(out_block.data(), q.dtype, src + c);
              l1 = merged;
            }
      }
    std::swap(cur, next);
  }

  // This rank's rows: rows that saw no key keep out = 0 and lse = -inf.
  for (int64_t bb = 0; bb < b; ++bb)
    for (int64_t i = 0; i < 2 * chunk; ++i)
      for (int64_t h = 0; h < h_q; ++h) {
        const int64_t o_off = bb * local.out.strides_elems[0] + i * local.out.strides_elems[1] + h * local.out.strides_elems[2];
        for (int64_t c = 0; c < d_v; ++c)
          detail::store_from_double(local.out.data, local.out.dtype, o_off + c * local.out.strides_elems[3],
                                    out_acc[static_cast<size_t>(((bb * 2 * chunk + i) * h_q + h) * d_v + c)]);
        if (local.lse.defined())
          detail::store_from_double(local.lse.data, DType::f32,
                                    bb * local.lse.strides_elems[0] + h * local.lse.strides_elems[1] + i * local.lse.strides_elems[2],
                                    lse_acc[static_cast<size_t>((bb * h_q + h) * 2 * chunk + i)]);
      }
}

}  // namespace attn::cp
