// Problem cases with random inputs (see case.h): shapes from a spec, owned
// buffers, the views attn's API takes, and the visible-pair count for FLOPs.
#include "testing/case.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "attn/error.h"
#include "attn/mask_rule.h"

namespace attn::testing {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

int64_t longest(const std::vector<int64_t>& v) {
  int64_t m = 0;
  for (int64_t x : v) m = std::max(m, x);
  return m;
}

bool is_causal(MaskType m) {
  return m == MaskType::causal || m == MaskType::causal_bottom_right || m == MaskType::padding_causal ||
         m == MaskType::padding_causal_bottom_right;
}
bool is_top_left(MaskType m) { return m == MaskType::causal || m == MaskType::padding_causal; }

// cu_seqlens are passed for thd always, for bshd/sbhd when lengths are given.
bool passes_cu_seqlens(const CaseSpec& s) { return s.format == QkvFormat::thd || !s.seqlens_q.empty(); }

// Errors in the spec itself (what validation cannot see: it only gets tensors).
void check_spec(const CaseSpec& s) {
  if (s.batch < 0) fail(ErrorKind::value, "batch is negative", str(s.batch), ">= 0", "pass a batch size");
  for (auto [v, name] : {std::pair{&s.seqlens_q, "seqlens_q"}, {&s.seqlens_kv, "seqlens_kv"}}) {
    if (!v->empty() && static_cast<int64_t>(v->size()) != s.batch)
      fail(ErrorKind::value, std::string(name) + " does not have one length per sequence",
           str(static_cast<int64_t>(v->size())) + " lengths", str(s.batch) + " (the batch)",
           "give one length per sequence, or leave the batch to be derived from them");
    for (int64_t x : *v)
      if (x < 0) fail(ErrorKind::value, std::string(name) + " holds a negative length", str(x), ">= 0", "lengths are token counts");
  }
  if (!s.seqlens_kv.empty() && s.seqlens_q.empty())
    fail(ErrorKind::value, "seqlens_kv given without seqlens_q", "kv lengths only", "both or only seqlens_q",
         "give the query lengths too");
  if (s.s_q < 0 || s.s_kv < 0)
    fail(ErrorKind::value, "sequence length is negative", str(s.s_q) + ", " + str(s.s_kv), ">= 0",
         "pass non-negative lengths");
}

std::vector<int64_t> q_like_shape(const CaseSpec& s, int64_t rows, int64_t tokens, int64_t heads, int64_t dim) {
  switch (s.format) {
    case QkvFormat::bshd: return {s.batch, rows, heads, dim};
    case QkvFormat::sbhd: return {rows, s.batch, heads, dim};
    case QkvFormat::thd: return {tokens, heads, dim};
  }
  return {};
}

// Every tensor's shape for a spec; the single place shapes are decided.
struct Shapes {
  std::vector<int64_t> q, k, v, out, lse, bias, alibi, mask, cu, per_head;
};

Shapes shapes_of(const CaseSpec& s) {
  const int64_t rq = rows_q(s), rkv = rows_kv(s);
  const int64_t tq = tokens_q(s), tkv = tokens_kv(s);
  Shapes z;
  z.q = q_like_shape(s, rq, tq, s.h_q, s.d_qk);
  z.k = q_like_shape(s, rkv, tkv, s.h_kv, s.d_qk);
  z.v = q_like_shape(s, rkv, tkv, s.h_kv, s.d_v);
  z.out = q_like_shape(s, rq, tq, s.h_q, s.d_v);
  z.lse = s.format == QkvFormat::thd ? std::vector<int64_t>{s.h_q, tq} : std::vector<int64_t>{s.batch, s.h_q, rq};
  const int64_t full[4] = {s.batch, s.h_q, rq, rkv};
  z.bias.resize(4);
  for (int d = 0; d < 4; ++d) z.bias[d] = s.bias_shape[d] == 0 ? full[d] : s.bias_shape[d];
  z.alibi = {s.h_q};
  z.per_head = {s.h_q};
  z.mask = {s.batch, 1, rq, rkv};
  z.cu = {s.batch + 1};
  return z;
}

Options options_of(const CaseSpec& s) {
  Options o;
  o.qkv_format = s.format;
  o.mask = s.mask;
  o.window = s.window;
  o.softmax_scale = s.softmax_scale;
  o.softcap = s.softcap;
  o.dropout_p = s.dropout_p;
  o.seed = s.seed;
  o.offset = s.offset;
  o.softmax_type = s.softmax_type;
  if (s.format == QkvFormat::thd) {
    o.max_seqlen_q = rows_q(s);
    o.max_seqlen_kv = rows_kv(s);
  }
  return o;
}

std::vector<int32_t> cumulative(const std::vector<int64_t>& lengths) {
  std::vector<int32_t> cu{0};
  for (int64_t x : lengths) cu.push_back(static_cast<int32_t>(cu.back() + x));
  return cu;
}

bool wants_lse(const CaseSpec& s) { return s.return_lse || s.backward; }
bool learnable(const CaseSpec& s) { return s.softmax_type == SoftmaxType::learnable; }

// Points the Options and argument views at the case's buffers.
void bind(Case& c) {
  const CaseSpec& s = c.spec;
  c.opts = options_of(s);
  Inputs in;
  in.q = c.q.view();
  in.k = c.k.view();
  in.v = c.v.view();
  in.cu_seqlens_q = c.cu_seqlens_q.view();
  in.cu_seqlens_kv = c.cu_seqlens_kv.view();
  in.bias = c.bias.view();
  in.alibi_slopes = c.alibi_slopes.view();
  in.attn_mask = c.attn_mask.view();
  in.sink = c.sink.view();
  c.fwd = ForwardArgs{};
  c.fwd.in = in;
  c.fwd.out = c.out.view();
  if (wants_lse(s)) c.fwd.lse = c.lse.view();
  c.fwd.max_logit = c.max_logit.view();
  c.bwd = BackwardArgs{};
  if (!s.backward) return;
  c.bwd.in = in;
  c.bwd.out = c.out.view();
  c.bwd.dout = c.dout.view();
  c.bwd.lse = c.lse.view();
  c.bwd.dq = c.dq.view();
  c.bwd.dk = c.dk.view();
  c.bwd.dv = c.dv.view();
  c.bwd.dbias = c.dbias.view();
  c.bwd.dsink = c.dsink.view();
}

// Allocates (and poisons) the outputs the spec asks for.
void allocate_outputs(Case& c) {
  const CaseSpec& s = c.spec;
  const Shapes z = shapes_of(s);
  c.out = TensorBuffer(s.dtype, z.out, c.device);
  c.lse = TensorBuffer(DType::f32, z.lse, c.device);
  if (s.backward) {
    c.dq = TensorBuffer(s.dtype, z.q, c.device);
    c.dk = TensorBuffer(s.dtype, z.k, c.device);
    c.dv = TensorBuffer(s.dtype, z.v, c.device);
    if (s.bias == BiasType::post_scale_bias) c.dbias = TensorBuffer(s.dtype, z.bias, c.device);
    if (learnable(s)) c.dsink = TensorBuffer(DType::f32, z.per_head, c.device);
  }
  if (s.return_max_logit) c.max_logit = TensorBuffer(DType::f32, z.per_head, c.device);
  poison_outputs(c);
}

// A buffer's values on another device, converted to `dtype` when it differs.
TensorBuffer moved(const TensorBuffer& b, Device device, DType dtype) {
  if (!b.view().defined()) return {};
  if (b.view().dtype == dtype) return b.to(device);
  TensorBuffer copy(dtype, b.shape(), device);
  copy.copy_from(b.to_doubles());
  return copy;
}

}  // namespace

std::vector<int64_t> lengths_q(const CaseSpec& s) {
  if (!s.seqlens_q.empty()) return s.seqlens_q;
  return std::vector<int64_t>(static_cast<size_t>(std::max<int64_t>(s.batch, 0)), s.s_q);
}

std::vector<int64_t> lengths_kv(const CaseSpec& s) {
  if (!s.seqlens_kv.empty()) return s.seqlens_kv;
  if (!s.seqlens_q.empty()) return s.seqlens_q;
  return std::vector<int64_t>(static_cast<size_t>(std::max<int64_t>(s.batch, 0)), s.s_kv);
}

// Uniform lengths are answered from (batch, s) so that a shape-only question
// about 2^31 sequences allocates nothing per sequence.
int64_t rows_q(const CaseSpec& s) {
  if (s.format != QkvFormat::thd) return s.s_q;
  return s.seqlens_q.empty() ? (s.batch > 0 ? s.s_q : 0) : longest(s.seqlens_q);
}

int64_t rows_kv(const CaseSpec& s) {
  if (s.format != QkvFormat::thd) return s.s_kv;
  if (!s.seqlens_kv.empty()) return longest(s.seqlens_kv);
  if (!s.seqlens_q.empty()) return longest(s.seqlens_q);
  return s.batch > 0 ? s.s_kv : 0;
}

namespace {

int64_t checked_tokens(const CaseSpec& s, const std::vector<int64_t>& lengths, int64_t uniform, const char* which) {
  int64_t total = 0;
  bool overflow = false;
  if (lengths.empty())
    overflow = __builtin_mul_overflow(std::max<int64_t>(s.batch, 0), uniform, &total);
  else
    for (int64_t x : lengths) overflow = overflow || __builtin_add_overflow(total, x, &total);
  if (overflow)
    fail(ErrorKind::value, std::string("the ") + which + " token count exceeds int64",
         "batch " + str(s.batch) + " x seqlen " + str(uniform), "at most 2^63 - 1 tokens",
         "shrink the batch or the lengths");
  return total;
}

}  // namespace

int64_t tokens_q(const CaseSpec& s) { return checked_tokens(s, s.seqlens_q, s.s_q, "query"); }
int64_t tokens_kv(const CaseSpec& s) {
  return checked_tokens(s, s.seqlens_kv.empty() ? s.seqlens_q : s.seqlens_kv, s.s_kv, "key/value");
}

void poison_outputs(Case& c) {
  for (TensorBuffer* b : {&c.out, &c.lse, &c.dq, &c.dk, &c.dv, &c.dbias, &c.max_logit, &c.dsink})
    if (b->view().defined()) b->fill_nan();
}

Case make_case(const CaseSpec& spec, Device device, uint64_t data_seed) {
  check_spec(spec);
  Case c;
  c.spec = spec;
  c.device = device;
  const Shapes z = shapes_of(spec);
  std::mt19937_64 rng(data_seed);
  c.q = TensorBuffer(spec.dtype, z.q, device);
  c.k = TensorBuffer(spec.dtype, z.k, device);
  c.v = TensorBuffer(spec.dtype, z.v, device);
  c.q.fill_uniform(rng, -1.0, 1.0);
  c.k.fill_uniform(rng, -1.0, 1.0);
  c.v.fill_uniform(rng, -1.0, 1.0);
  if (spec.backward) {
    c.dout = TensorBuffer(spec.dtype, z.out, device);
    c.dout.fill_uniform(rng, -1.0, 1.0);
  }
  if (passes_cu_seqlens(spec)) {
    const std::vector<int32_t> cq = cumulative(lengths_q(spec)), ckv = cumulative(lengths_kv(spec));
    c.cu_seqlens_q = TensorBuffer(DType::i32, z.cu, device);
    c.cu_seqlens_kv = TensorBuffer(DType::i32, z.cu, device);
    c.cu_seqlens_q.copy_from_bytes(cq.data(), cq.size() * sizeof(int32_t));
    c.cu_seqlens_kv.copy_from_bytes(ckv.data(), ckv.size() * sizeof(int32_t));
  }
  if (spec.bias == BiasType::post_scale_bias) {
    c.bias = TensorBuffer(spec.dtype, z.bias, device);
    c.bias.fill_uniform(rng, -0.5, 0.5);
  } else if (spec.bias == BiasType::alibi) {
    // ALiBi's geometric slopes (Press et al.): head h gets 2^(-8 (h + 1) / H).
    std::vector<double> slopes(static_cast<size_t>(spec.h_q));
    for (int64_t h = 0; h < spec.h_q; ++h)
      slopes[h] = std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(spec.h_q));
    c.alibi_slopes = TensorBuffer(DType::f32, z.alibi, device);
    c.alibi_slopes.copy_from(slopes);
  }
  if (spec.mask == MaskType::arbitrary) {
    c.attn_mask = TensorBuffer(DType::boolean, z.mask, device);
    std::bernoulli_distribution visible(0.9);
    std::vector<double> bits(static_cast<size_t>(c.attn_mask.numel()));
    for (double& x : bits) x = visible(rng) ? 1.0 : 0.0;
    c.attn_mask.copy_from(bits);
  }
  if (learnable(spec)) {
    c.sink = TensorBuffer(DType::f32, z.per_head, device);
    c.sink.fill_uniform(rng, -1.0, 2.0);
  }
  allocate_outputs(c);
  bind(c);
  return c;
}

Case copy_inputs_to(const Case& src, Device device, std::optional<DType> dtype) {
  Case c;
  c.spec = src.spec;
  if (dtype) c.spec.dtype = *dtype;
  c.device = device;
  const DType t = c.spec.dtype;
  c.q = moved(src.q, device, t);
  c.k = moved(src.k, device, t);
  c.v = moved(src.v, device, t);
  c.dout = moved(src.dout, device, t);
  c.bias = moved(src.bias, device, t);
  c.alibi_slopes = moved(src.alibi_slopes, device, DType::f32);
  c.attn_mask = moved(src.attn_mask, device, DType::boolean);
  c.cu_seqlens_q = moved(src.cu_seqlens_q, device, DType::i32);
  c.cu_seqlens_kv = moved(src.cu_seqlens_kv, device, DType::i32);
  c.sink = moved(src.sink, device, DType::f32);
  allocate_outputs(c);
  bind(c);
  return c;
}

Problem problem_of(const CaseSpec& spec, Pass pass, Device device) {
  check_spec(spec);
  const Shapes z = shapes_of(spec);
  // Views with shapes but no memory: validation reads only shapes once it is
  // told not to read cu_seqlens' values (which it would copy from `device`).
  auto view = [&](DType t, const std::vector<int64_t>& shape) {
    return make_view(nullptr, t, static_cast<int>(shape.size()), shape.data(), nullptr, device);
  };
  Options o = options_of(spec);
  o.check_seqlens = false;
  if (spec.format == QkvFormat::thd) {  // 0 would mean "derive from the values"
    o.max_seqlen_q = std::max<int64_t>(o.max_seqlen_q, 1);
    o.max_seqlen_kv = std::max<int64_t>(o.max_seqlen_kv, 1);
  }
  Inputs in;
  in.q = view(spec.dtype, z.q);
  in.k = view(spec.dtype, z.k);
  in.v = view(spec.dtype, z.v);
  if (passes_cu_seqlens(spec)) {
    in.cu_seqlens_q = view(DType::i32, z.cu);
    in.cu_seqlens_kv = view(DType::i32, z.cu);
  }
  if (spec.bias == BiasType::post_scale_bias) in.bias = view(spec.dtype, z.bias);
  if (spec.bias == BiasType::alibi) in.alibi_slopes = view(DType::f32, z.alibi);
  if (spec.mask == MaskType::arbitrary) in.attn_mask = view(DType::boolean, z.mask);
  if (learnable(spec)) in.sink = view(DType::f32, z.per_head);
  Problem p;
  if (pass == Pass::forward) {
    ForwardArgs a;
    a.in = in;
    a.out = view(spec.dtype, z.out);
    if (wants_lse(spec)) a.lse = view(DType::f32, z.lse);
    if (spec.return_max_logit) a.max_logit = view(DType::f32, z.per_head);
    p = validate_forward(o, a);
  } else {
    BackwardArgs a;
    a.in = in;
    a.out = view(spec.dtype, z.out);
    a.dout = a.out;
    a.lse = view(DType::f32, z.lse);
    a.dq = view(spec.dtype, z.q);
    a.dk = view(spec.dtype, z.k);
    a.dv = view(spec.dtype, z.v);
    if (spec.bias == BiasType::post_scale_bias) a.dbias = view(spec.dtype, z.bias);
    if (learnable(spec)) a.dsink = view(DType::f32, z.per_head);
    p = validate_backward(o, a);
  }
  if (spec.format == QkvFormat::thd) {  // undo the "at least 1" above
    p.s_q = rows_q(spec);
    p.s_kv = rows_kv(spec);
  }
  return p;
}

namespace {

using i128 = __int128;
using u128 = unsigned __int128;

// sum over i in [lo, hi) of max(0, a + slope * i), slope in {-1, 0, 1}. The
// terms that count form one arithmetic run whose ends lie in [1, len_kv], so
// n * (first + last) < 2^63 * 2^64 fits in 128 bits.
u128 positive_run(i128 a, int slope, i128 lo, i128 hi) {
  if (slope == 1) lo = std::max(lo, 1 - a);  // a + i > 0
  if (slope == -1) hi = std::min(hi, a);     // a - i > 0
  if (lo >= hi || (slope == 0 && a <= 0)) return 0;
  const i128 first = a + slope * lo, last = a + slope * (hi - 1);
  const u128 n = static_cast<u128>(hi - lo);
  const u128 ends = static_cast<u128>(first + last);
  // One of n and (first + last) is even when slope != 0; when slope == 0 they are n * 2a.
  return n % 2 == 0 ? (n / 2) * ends : n * (ends / 2);
}

// Visible pairs of one sequence: visible_keys' begin and end are each linear in
// i with slope 0 or 1 between two breakpoints (where the window's left edge
// passes key 0 and its right edge passes len_kv), so the count is at most three
// arithmetic runs instead of a loop over 2^32 rows.
u128 sequence_pairs(int64_t len_q, int64_t len_kv, bool bottom_right, int64_t left, int64_t right) {
  const i128 shift = alignment_shift<int64_t>(bottom_right, len_q, len_kv);
  const i128 c_begin = shift - left;     // begin(i) = max(0, i + c_begin) when left >= 0
  const i128 c_end = shift + right + 1;  // end(i) = min(len_kv, i + c_end) when right >= 0
  std::vector<i128> cuts{0, len_q};
  if (left >= 0) cuts.push_back(std::clamp<i128>(-c_begin, 0, len_q));
  if (right >= 0) cuts.push_back(std::clamp<i128>(len_kv - c_end, 0, len_q));
  std::sort(cuts.begin(), cuts.end());
  u128 pairs = 0;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const i128 lo = cuts[k], hi = cuts[k + 1];
    if (lo >= hi) continue;
    // On [lo, hi) each edge is on one side of its breakpoint throughout.
    const bool begin_moves = left >= 0 && lo + c_begin >= 0;
    const bool end_moves = right >= 0 && lo + c_end < len_kv;
    const i128 b0 = begin_moves ? c_begin : 0;
    const i128 e0 = end_moves ? c_end : len_kv;
    const int slope = (end_moves ? 1 : 0) - (begin_moves ? 1 : 0);
    pairs += positive_run(e0 - b0, slope, lo, hi);
  }
  return pairs;
}

u128 times(u128 a, u128 b, const CaseSpec& s) {
  u128 r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    fail(ErrorKind::value, "the visible-pair count exceeds 128 bits",
         "batch " + str(s.batch) + ", s_q " + str(s.s_q) + ", s_kv " + str(s.s_kv) + ", h_q " + str(s.h_q),
         "a count below 2^128", "shrink the problem");
  return r;
}

}  // namespace

std::string decimal(unsigned __int128 v) {
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v != 0);
  return digits;
}

unsigned __int128 visible_pairs_wide(const CaseSpec& s) {
  check_spec(s);
  const int64_t left = s.window.left;
  const int64_t right = is_causal(s.mask) ? 0 : s.window.right;  // causal clips right to 0
  const bool bottom_right = !is_top_left(s.mask);
  u128 pairs = 0;
  if (s.seqlens_q.empty()) {  // every sequence alike: count one, never list 2^31 of them
    pairs = times(sequence_pairs(s.s_q, s.s_kv, bottom_right, left, right), static_cast<u128>(s.batch), s);
  } else {
    const std::vector<int64_t>& lkv = s.seqlens_kv.empty() ? s.seqlens_q : s.seqlens_kv;
    for (size_t b = 0; b < s.seqlens_q.size(); ++b)
      if (__builtin_add_overflow(pairs, sequence_pairs(s.seqlens_q[b], lkv[b], bottom_right, left, right), &pairs))
        times(~u128{0}, 2, s);  // reports the overflow
  }
  return times(pairs, static_cast<u128>(s.h_q), s);
}

int64_t visible_pairs(const CaseSpec& s) {
  const u128 pairs = visible_pairs_wide(s);
  if (pairs > static_cast<u128>(std::numeric_limits<int64_t>::max()))
    fail(ErrorKind::value, "the visible-pair count exceeds int64", decimal(pairs), "at most 2^63 - 1",
         "use testing::visible_pairs_wide, or shrink the problem");
  return static_cast<int64_t>(pairs);
}

double forward_flops(const CaseSpec& s) {
  const double d = 0.5 * static_cast<double>(s.d_qk + s.d_v);
  return 4.0 * d * static_cast<double>(visible_pairs_wide(s));
}

double backward_flops(const CaseSpec& s) { return 2.5 * forward_flops(s); }

}  // namespace attn::testing
