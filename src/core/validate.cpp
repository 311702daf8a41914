// Validation of an attention call before any backend runs: shapes against the
// format, dtypes, devices, masks, bias, dropout, the outputs (sequence offsets
// and lengths: validate_sequences.cpp). Each failure is an attn::Error saying
// what is wrong, what was received, what was expected and how to fix it.
// Backends trust a Problem that passed here.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "attn/error.h"
#include "attn/problem.h"
#include "core/validate_internal.h"
#include "core/view_checks.h"

namespace attn {
namespace {

using detail::bad_type;
using detail::bad_value;
using detail::derive_sequences;
using detail::layout_of;
using detail::require_device;
using detail::require_last_dim_contiguous;
using detail::require_rank;
using detail::str;
using detail::check_alibi_slopes;
using detail::check_lse;
using detail::check_per_head;
using detail::check_sink;
using detail::row_alignment;

void require_defined(const TensorView& t, const char* name, const char* why) {
  if (!t.defined())
    bad_value(std::string(name) + " is missing", "no tensor", std::string("a tensor: ") + why,
              std::string("pass ") + name);
}

void require_floating(const TensorView& t, const char* name) {
  if (!(t.dtype == DType::bf16 || t.dtype == DType::f16 || t.dtype == DType::f32 ||
        t.dtype == DType::f64))
    bad_type(std::string(name) + " has an unsupported dtype", dtype_name(t.dtype),
             "bfloat16, float16 or float32 (float64 on the CPU reference)",
             std::string("convert ") + name + " to bfloat16 or float16");
}

void require_same_dtype(const TensorView& t, const char* name, DType expected) {
  if (t.dtype != expected)
    bad_type(std::string(name) + "'s dtype differs from q's", dtype_name(t.dtype),
             std::string(dtype_name(expected)) + " (q's dtype): q, k, v, out and the gradients share one dtype",
             std::string("convert ") + name + " to " + dtype_name(expected));
}

// Exact shape check for outputs and gradients: `expected` holds the shape.
void require_shape(const TensorView& t, const char* name, const std::vector<int64_t>& expected,
                   const std::string& layout) {
  bool same = t.rank == static_cast<int>(expected.size());
  for (int i = 0; same && i < t.rank; ++i) same = t.shape[i] == expected[i];
  if (same) return;
  std::string want = "[";
  for (size_t i = 0; i < expected.size(); ++i) want += (i ? ", " : "") + str(expected[i]);
  want += "] " + layout;
  bad_value(std::string(name) + " has the wrong shape", t.shape_str(), want,
            std::string("allocate ") + name + " with the expected shape");
}

// Sizes of q, k, v read in the format's order.
struct Sizes {
  int64_t batch = 0, s = 0, tokens = 0, heads = 0, dim = 0;
};

Sizes read_sizes(const TensorView& t, QkvFormat f, const char* name) {
  Sizes z;
  switch (f) {
    case QkvFormat::bshd: z = {t.shape[0], t.shape[1], 0, t.shape[2], t.shape[3]}; break;
    case QkvFormat::sbhd: z = {t.shape[1], t.shape[0], 0, t.shape[2], t.shape[3]}; break;
    case QkvFormat::thd: return {0, 0, t.shape[0], t.shape[1], t.shape[2]};
  }
  // make_view bounds the product of all sizes, but a view with an empty
  // dimension (heads or head_dim 0) leaves batch * seq unbounded.
  if (__builtin_mul_overflow(z.batch, z.s, &z.tokens))
    bad_value(std::string(name) + " has more tokens than int64 can count", t.shape_str(),
              "batch * seq below 2^63", "check the tensor's shape");
  return z;
}

std::vector<int64_t> shape_like(QkvFormat f, int64_t batch, int64_t s, int64_t tokens, int64_t heads,
                                int64_t dim) {
  switch (f) {
    case QkvFormat::bshd: return {batch, s, heads, dim};
    case QkvFormat::sbhd: return {s, batch, heads, dim};
    case QkvFormat::thd: return {tokens, heads, dim};
  }
  return {};
}

void require_match(int64_t got, int64_t want, const std::string& what, const std::string& fix) {
  if (got != want) bad_value(what, str(got), str(want), fix);
}

bool is_causal_mask(MaskType m) {
  return m == MaskType::causal || m == MaskType::causal_bottom_right ||
         m == MaskType::padding_causal || m == MaskType::padding_causal_bottom_right;
}
bool is_top_left(MaskType m) { return m == MaskType::causal || m == MaskType::padding_causal; }

// The part of validation both passes share: inputs, sequences, masks, bias.
Problem derive(const Options& o, const Inputs& in, Pass pass) {
  Problem p;
  p.pass = pass;
  p.qkv_format = o.qkv_format;
  const QkvFormat f = o.qkv_format;
  require_defined(in.q, "q", "the queries");
  require_defined(in.k, "k", "the keys");
  require_defined(in.v, "v", "the values");
  p.device = in.q.device;
  p.dtype = in.q.dtype;
  require_floating(in.q, "q");
  require_same_dtype(in.k, "k", p.dtype);
  require_same_dtype(in.v, "v", p.dtype);
  require_device(in.k, "k", p.device);
  require_device(in.v, "v", p.device);
  require_rank(in.q, "q", f, layout_of(f, "seq_q", "heads_q", "head_dim_qk"));
  require_rank(in.k, "k", f, layout_of(f, "seq_kv", "heads_kv", "head_dim_qk"));
  require_rank(in.v, "v", f, layout_of(f, "seq_kv", "heads_kv", "head_dim_v"));
  for (auto [t, n] : {std::pair{&in.q, "q"}, {&in.k, "k"}, {&in.v, "v"}}) require_last_dim_contiguous(*t, n);

  const Sizes q = read_sizes(in.q, f, "q"), k = read_sizes(in.k, f, "k"), v = read_sizes(in.v, f, "v");
  p.h_q = q.heads;
  p.h_kv = k.heads;
  p.d_qk = q.dim;
  p.d_v = v.dim;
  require_match(k.dim, q.dim, "k's head_dim differs from q's (q.k needs one head_dim_qk)",
                "give q and k the same last dimension; only v may differ (d_v)");
  require_match(v.heads, k.heads, "v's number of heads differs from k's",
                "k and v share the key/value heads (h_kv)");
  if (f == QkvFormat::thd) {
    require_match(v.tokens, k.tokens, "v's token count differs from k's", "k and v hold the same tokens");
  } else {
    require_match(k.batch, q.batch, "k's batch differs from q's", "q, k and v share the batch dimension");
    require_match(v.batch, q.batch, "v's batch differs from q's", "q, k and v share the batch dimension");
    require_match(v.s, k.s, "v's sequence length differs from k's", "k and v hold the same positions");
  }
  p.total_q = q.tokens;
  p.total_kv = k.tokens;

  // Sequences: batch, s_q, s_kv from cu_seqlens or the tensors (validate_sequences.cpp).
  derive_sequences(o, in, q.batch, q.s, k.s, p);

  // Mask and window.
  p.mask = o.mask;
  for (auto [value, side] : {std::pair{o.window.left, "left"}, {o.window.right, "right"}})
    if (value < -1)
      bad_value(std::string("window ") + side + " is below -1", str(value), "-1 (unbounded) or >= 0",
                "use -1 for an unbounded side, or a non-negative number of keys");
  p.window_left = o.window.left;
  p.window_right = is_causal_mask(o.mask) ? 0 : o.window.right;
  p.bottom_right = !is_top_left(o.mask);
  if (o.mask == MaskType::arbitrary) {
    require_defined(in.attn_mask, "attn_mask", "mask=arbitrary needs the mask tensor");
  } else if (in.attn_mask.defined()) {
    bad_value("attn_mask is given but the mask type ignores it", std::string("mask=") + mask_name(o.mask),
              "mask=\"arbitrary\" with attn_mask", "pass mask=\"arbitrary\", or drop attn_mask");
  }

  // Scale, softcap.
  p.softmax_scale = o.softmax_scale ? *o.softmax_scale : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(p.d_qk, 1)));
  p.softcap = o.softcap;

  // Bias.
  if (in.bias.defined() && in.alibi_slopes.defined())
    bad_value("bias and alibi_slopes are both given", "both", "at most one of them",
              "fold ALiBi into the bias tensor, or pass only alibi_slopes");
  auto check_broadcast4 = [&](const TensorView& t, const char* name, std::array<int64_t, 4>& shape_out) {
    const int64_t full[4] = {p.batch, p.h_q, p.s_q, p.s_kv};
    std::string want = "[" + str(full[0]) + "|1, " + str(full[1]) + "|1, " + str(full[2]) + "|1, " + str(full[3]) + "|1]";
    want += " (broadcastable to [batch, heads_q, seq_q, seq_kv]";
    want += f == QkvFormat::thd ? ", seq = max_seqlen in thd)" : ")";
    if (t.rank != 4)
      bad_value(std::string(name) + " must have rank 4", t.shape_str(), want,
                std::string("add size-1 dimensions, e.g. ") + name + ".view(1, heads, seq_q, seq_kv)");
    for (int d = 0; d < 4; ++d)
      if (t.shape[d] != 1 && t.shape[d] != full[d])
        bad_value(std::string(name) + " is not broadcastable to the scores", t.shape_str(), want,
                  "each dimension must equal the problem's or be 1");
    require_device(t, name, p.device);
    require_last_dim_contiguous(t, name);
    for (int d = 0; d < 4; ++d) shape_out[d] = t.shape[d];
  };
  if (in.bias.defined()) {
    p.bias = BiasType::post_scale_bias;
    if (!(in.bias.dtype == p.dtype || in.bias.dtype == DType::f32))
      bad_type("bias has an unsupported dtype", dtype_name(in.bias.dtype),
               std::string(dtype_name(p.dtype)) + " (q's dtype) or float32",
               std::string("convert bias to ") + dtype_name(p.dtype));
    p.bias_dtype = in.bias.dtype;
    check_broadcast4(in.bias, "bias", p.bias_shape);
  } else if (in.alibi_slopes.defined()) {
    p.bias = BiasType::alibi;
    p.alibi_per_batch = check_alibi_slopes(in.alibi_slopes, p);
  }
  if (o.mask == MaskType::arbitrary) {
    const TensorView& m = in.attn_mask;
    if (!(m.dtype == DType::boolean || m.dtype == DType::u8 || is_floating(m.dtype)))
      bad_type("attn_mask has an unsupported dtype", dtype_name(m.dtype),
               "bool/uint8 (true = visible) or a floating type (added to the scores)",
               "convert attn_mask to bool");
    p.mask_additive = is_floating(m.dtype);
    check_broadcast4(m, "attn_mask", p.mask_shape);
  }

  // Dropout.
  p.dropout_p = o.dropout_p;
  p.seed = o.seed;
  p.offset = o.offset;
  if (in.rng_state.defined()) {
    const TensorView& r = in.rng_state;
    if (r.dtype != DType::i64)
      bad_type("rng_state has the wrong dtype", dtype_name(r.dtype), "int64",
               "convert rng_state to int64 (dropout's seed and offset)");
    if (r.rank != 1 || r.shape[0] != 2 || r.strides_elems[0] != 1)
      bad_value("rng_state has the wrong shape", r.shape_str(), "[2], contiguous: (seed, offset)",
                "pass a contiguous int64 tensor of two elements: seed, then offset");
    require_device(r, "rng_state", p.device);
    p.rng_state_in_memory = o.dropout_p > 0;
  }
  p.deterministic = o.deterministic;

  // Softmax sinks.
  p.softmax_type = o.softmax_type;
  check_sink(in.sink, p);
  check_problem(p);
  return p;
}

void check_q_like_output(const TensorView& t, const char* name, const Problem& p, int64_t heads,
                         int64_t tokens, int64_t s, int64_t dim, const char* layout_seq,
                         const char* layout_heads, const char* layout_dim) {
  require_defined(t, name, "the output buffer");
  require_same_dtype(t, name, p.dtype);
  require_device(t, name, p.device);
  require_shape(t, name, shape_like(p.qkv_format, p.batch, s, tokens, heads, dim),
                layout_of(p.qkv_format, layout_seq, layout_heads, layout_dim));
  require_last_dim_contiguous(t, name);
}

}  // namespace

void check_problem(const Problem& p) {
  for (auto [value, name] : {std::pair{p.batch, "batch"}, {p.s_q, "s_q"}, {p.s_kv, "s_kv"},
                             {p.total_q, "tokens_q"}, {p.total_kv, "tokens_kv"}})
    if (value < 0) bad_value(std::string(name) + " is negative", str(value), ">= 0", "check the tensor shapes");
  if (p.h_q < 1 || p.h_kv < 1)
    bad_value("the number of heads must be at least 1", "h_q=" + str(p.h_q) + ", h_kv=" + str(p.h_kv), ">= 1",
              "check the heads dimension of q, k, v");
  if (p.h_q % p.h_kv != 0)
    bad_value("h_q is not a multiple of h_kv", "h_q=" + str(p.h_q) + ", h_kv=" + str(p.h_kv),
              "h_q % h_kv == 0 (MHA: equal; GQA: each KV head serves h_q/h_kv query heads; MQA: h_kv=1)",
              "choose h_kv dividing h_q (e.g. " + str(p.h_q) + "/" + str(p.h_q) + ", or 1)");
  for (auto [value, name] : {std::pair{p.d_qk, "head_dim_qk"}, {p.d_v, "head_dim_v"}})
    if (value < 1 || value > kMaxHeadDim)
      bad_value(std::string(name) + " is out of range", str(value), "1 to " + str(kMaxHeadDim),
                "use a supported head dimension (common: 64, 128, 192, 256)");
  if (p.window_left < -1 || p.window_right < -1)
    bad_value("window values must be -1 (unbounded) or >= 0",
              "(" + str(p.window_left) + ", " + str(p.window_right) + ")", "each >= -1",
              "use -1 for an unbounded side");
  // A window past 2^62 keys reaches every key of any problem that fits in
  // memory, and the mask rule's sums (i + shift + right + 1) would pass int64.
  constexpr int64_t kMaxWindow = int64_t{1} << 62;
  if (p.window_left > kMaxWindow || p.window_right > kMaxWindow)
    bad_value("window values must be at most 2^62",
              "(" + str(p.window_left) + ", " + str(p.window_right) + ")",
              "-1 (unbounded) or 0 to 2^62 = " + str(kMaxWindow), "use -1 for an unbounded side");
  if (!std::isfinite(p.softmax_scale))
    bad_value("softmax_scale is not finite", std::to_string(p.softmax_scale), "a finite number",
              "omit it for the default 1/sqrt(head_dim_qk)");
  if (!(p.softcap >= 0.0) || !std::isfinite(p.softcap))
    bad_value("softcap must be a finite number >= 0", std::to_string(p.softcap), "0 (off) or > 0",
              "pass 0 to disable softcapping");
  if (!(p.dropout_p >= 0.0 && p.dropout_p < 1.0))
    bad_value("dropout probability outside [0, 1)", std::to_string(p.dropout_p), "0 <= p < 1",
              "pass a probability below 1 (0 disables dropout)");
  if (p.offset > 0xFFFFFFFFull)
    bad_value("dropout offset does not fit the Philox counter word", std::to_string(p.offset),
              "offset < 2^32", "advance the seed instead of the offset past 2^32 calls");
  if (p.mask_additive && p.mask != MaskType::arbitrary)
    bad_value("an additive mask needs mask=arbitrary", mask_name(p.mask), "arbitrary", "pass mask=\"arbitrary\"");
}

// See Problem::row_alignment_bytes. Size-1 dimensions never advance, so their
// strides do not count. Byte strides in unsigned arithmetic: a stride near
// 2^63 elements wraps there, and wrapping modulo 2^64 keeps divisibility by 16.
void detail::check_per_head(const TensorView& t, const char* name, const Problem& p) {
  if (t.dtype != DType::f32)
    bad_type(std::string(name) + " has the wrong dtype", dtype_name(t.dtype), "float32",
             std::string("convert ") + name + " to float32");
  require_shape(t, name, {p.h_q}, "[heads_q] (one value per query head)");
  require_device(t, name, p.device);
}

void detail::check_sink(const TensorView& sink, const Problem& p) {
  if (p.softmax_type == SoftmaxType::learnable) {
    require_defined(sink, "sink", "softmax_type=learnable needs the sink logits, float32 [heads_q]");
    check_per_head(sink, "sink", p);
  } else if (sink.defined()) {
    bad_value("sink is given but the softmax type ignores it",
              std::string("softmax_type=") + softmax_type_name(p.softmax_type), "softmax_type=\"learnable\" with sink",
              "pass softmax_type=\"learnable\", or drop sink");
  }
}

void detail::check_lse(const TensorView& lse, const Problem& p) {
  if (lse.dtype != DType::f32)
    bad_type("lse has the wrong dtype", dtype_name(lse.dtype), "float32", "allocate lse as float32");
  require_device(lse, "lse", p.device);
  if (p.qkv_format == QkvFormat::thd)
    require_shape(lse, "lse", {p.h_q, p.total_q}, "[heads_q, tokens_q]");
  else
    require_shape(lse, "lse", {p.batch, p.h_q, p.s_q}, "[batch, heads_q, seq_q]");
}

bool detail::check_alibi_slopes(const TensorView& a, const Problem& p) {
  if (a.dtype != DType::f32)
    bad_type("alibi_slopes has the wrong dtype", dtype_name(a.dtype), "float32", "convert alibi_slopes to float32");
  const bool per_head = a.rank == 1 && a.shape[0] == p.h_q;
  const bool per_batch = a.rank == 2 && a.shape[0] == p.batch && a.shape[1] == p.h_q;
  if (!per_head && !per_batch)
    bad_value("alibi_slopes has the wrong shape", a.shape_str(),
              "[" + str(p.h_q) + "] (one slope per query head) or [" + str(p.batch) + ", " + str(p.h_q) + "]",
              "pass one slope per query head");
  require_device(a, "alibi_slopes", p.device);
  return per_batch;
}

int detail::row_alignment(std::initializer_list<const TensorView*> views) {
  uint64_t align = 16;
  auto fit = [&](uint64_t bytes) {
    while (align > 1 && bytes % align != 0) align /= 2;
  };
  for (const TensorView* t : views) {
    if (!t->defined()) continue;
    const uint64_t elem = dtype_size_bytes(t->dtype);
    fit(reinterpret_cast<uintptr_t>(t->data));
    for (int d = 0; d + 1 < t->rank; ++d)
      if (t->shape[d] > 1) fit(static_cast<uint64_t>(t->strides_elems[d]) * elem);
  }
  return static_cast<int>(align);
}

Problem validate_forward(const Options& opts, const ForwardArgs& args) {
  Problem p = derive(opts, args.in, Pass::forward);
  check_q_like_output(args.out, "out", p, p.h_q, p.total_q, p.s_q, p.d_v, "seq_q", "heads_q", "head_dim_v");
  p.row_alignment_bytes = row_alignment({&args.in.q, &args.in.k, &args.in.v, &args.out});
  if (args.lse.defined()) {
    check_lse(args.lse, p);
    p.return_lse = true;
  }
  if (args.max_logit.defined()) {
    check_per_head(args.max_logit, "max_logit", p);
    p.return_max_logit = true;
  }
  return p;
}

Problem validate_backward(const Options& opts, const BackwardArgs& args) {
  Problem p = derive(opts, args.in, Pass::backward);
  const char *sq = "seq_q", *skv = "seq_kv", *hq = "heads_q", *hkv = "heads_kv";
  check_q_like_output(args.out, "out", p, p.h_q, p.total_q, p.s_q, p.d_v, sq, hq, "head_dim_v");
  check_q_like_output(args.dout, "dout", p, p.h_q, p.total_q, p.s_q, p.d_v, sq, hq, "head_dim_v");
  check_q_like_output(args.dq, "dq", p, p.h_q, p.total_q, p.s_q, p.d_qk, sq, hq, "head_dim_qk");
  check_q_like_output(args.dk, "dk", p, p.h_kv, p.total_kv, p.s_kv, p.d_qk, skv, hkv, "head_dim_qk");
  check_q_like_output(args.dv, "dv", p, p.h_kv, p.total_kv, p.s_kv, p.d_v, skv, hkv, "head_dim_v");
  p.row_alignment_bytes = row_alignment(
      {&args.in.q, &args.in.k, &args.in.v, &args.out, &args.dout, &args.dq, &args.dk, &args.dv});
  require_defined(args.lse, "lse", "the forward's log-sum-exp (call forward with an lse output)");
  check_lse(args.lse, p);
  if (args.dbias.defined()) {
    if (p.bias != BiasType::post_scale_bias)
      bad_value("dbias is given but there is no bias", "dbias " + args.dbias.shape_str(), "a bias tensor",
                "pass the forward's bias too, or drop dbias");
    require_shape(args.dbias, "dbias",
                  {p.bias_shape[0], p.bias_shape[1], p.bias_shape[2], p.bias_shape[3]}, "(the bias's shape)");
    if (args.dbias.dtype != p.bias_dtype)
      bad_type("dbias's dtype differs from bias's", dtype_name(args.dbias.dtype), dtype_name(p.bias_dtype),
               "allocate dbias like bias");
    require_device(args.dbias, "dbias", p.device);
    require_last_dim_contiguous(args.dbias, "dbias");
    p.bias_grad = true;
  }
  if (args.dsink.defined()) {
    if (p.softmax_type != SoftmaxType::learnable)
      bad_value("dsink is given but the sink is not learnable",
                std::string("softmax_type=") + softmax_type_name(p.softmax_type), "softmax_type=\"learnable\"",
                "drop dsink: only a learnable sink has a gradient");
    check_per_head(args.dsink, "dsink", p);
    p.sink_grad = true;
  }
  return p;
}

}  // namespace attn

namespace attn::detail {
namespace {

void require_input_data(const Inputs& in) {
  require_data(in.q, "q");
  require_data(in.k, "k");
  require_data(in.v, "v");
  require_data(in.cu_seqlens_q, "cu_seqlens_q");
  require_data(in.cu_seqlens_kv, "cu_seqlens_kv");
  require_data(in.bias, "bias");
  require_data(in.alibi_slopes, "alibi_slopes");
  require_data(in.attn_mask, "attn_mask");
  require_data(in.rng_state, "rng_state");
  require_data(in.sink, "sink");
}

}  // namespace

void require_tensor_data(const ForwardArgs& args) {
  require_input_data(args.in);
  require_data(args.out, "out");
  require_data(args.lse, "lse");
  require_data(args.max_logit, "max_logit");
}

void require_tensor_data(const BackwardArgs& args) {
  require_input_data(args.in);
  require_data(args.out, "out");
  require_data(args.dout, "dout");
  require_data(args.lse, "lse");
  require_data(args.dq, "dq");
  require_data(args.dk, "dk");
  require_data(args.dv, "dv");
  require_data(args.dbias, "dbias");
  require_data(args.dsink, "dsink");
}

}  // namespace attn::detail
