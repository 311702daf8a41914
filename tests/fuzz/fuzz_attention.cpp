// libFuzzer target over an attention call's description: formats, masks,
// windows, dtypes, shapes, strides, cu_seqlens contents, bias / ALiBi /
// attn_mask shapes, dropout, softcap, scale, softmax sinks and the max logit,
// on tiny host tensors. Each input
// becomes one forward or backward call that goes through validation
// (validate_forward / validate_backward, check_problem) and, when validation
// accepts it, the CPU reference backend, as attn::forward()/backward() would.
//
// The invariant: the call either throws attn::Error (with a message) or runs,
// and then, where its inputs are finite and moderate, every output element is
// written and finite, a row with no visible key (and a padded position) has
// out = 0 and lse = -inf (a padded position: the sink's logit with a softmax
// sink), padded positions get zero gradients, and max_logit and dsink are
// finite or -inf. Anything
// else (a crash, an ASan or UBSan report, another exception type, a write
// outside a tensor) is a finding. Buffers are allocated with the exact span
// of their view, so ASan sees any access outside it.
//
// The input is read front to back, one byte per field (0 once it runs out,
// so a short input is a plain call); tests/fuzz/make_corpus.py writes the
// seeds of tests/fuzz/corpus/ field by field in the same order (keep the two
// in step):
//   0 flags (1 backward, 2 check_seqlens off, 4 shape-only, 8 deterministic,
//     16 no lse, 32 dbias, 64 cu_seqlens for bshd/sbhd, 128 attn_mask always)
//   1 format  2 mask  3 dtype  4 batch  5 s_q  6 s_kv  7 h_kv  8 group
//   9 d_qk  10 d_v  11 window left  12 window right  13 scale  14 softcap
//   15 dropout  16 seed  17 offset  18 rng_state (bit 0: given; the rest
//   picks its seed and offset)  19 bias kind (% 5; / 5: softmax sinks,
//   read_call)  20 bias shape/dtype
//   21 attn_mask dtype  22 attn_mask shape  23-28 lengths (q, kv) x 3
//   29 max_seqlen_q  30 max_seqlen_kv  31 cu_seqlens damage  32 its index
//   33-48 one layout byte per tensor (Tensor order)  49-52 value seed
//   53 special values (count, then tensor, index, value: 3 bytes each)
//   then up to 8 perturbations (tensor, op, argument: 3 bytes each).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "attn/backend.h"
#include "attn/error.h"
#include "attn/problem.h"
#include "attn/tensor.h"
#include "backends/reference/reference.h"
#include "core/numeric.h"
#include "core/validate_internal.h"

namespace {

using namespace attn;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
// A tensor whose span passes this many elements gets no memory (data = nullptr):
// shape-only questions go to validation alone, and the reference never runs.
constexpr int64_t kMaxAllocElems = int64_t{1} << 16;

[[noreturn]] void violated(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_attention: invariant violated: %s: %s\n", what, detail.c_str());
  std::abort();
}

// Reads the input front to back; 0 once it is used up, so a short input is a
// plain default call.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  uint8_t u8() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(u8()) << (8 * i);
    return v;
  }
  bool empty() const { return n_ == 0; }

 private:
  const uint8_t* p_;
  size_t n_;
};

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Field tables: one byte picks an entry (modulo the table's size).
constexpr DType kDTypes[8] = {DType::f32, DType::bf16, DType::f16, DType::f64,
                              DType::i32, DType::i64,  DType::u8,  DType::boolean};
constexpr int64_t kWindows[16] = {-1, 0, 1, 2, 3, 5, 8, -2, kI64Max, kI64Max - 1, int64_t{1} << 62,
                                  int64_t{1} << 31, kI64Min, 4, 6, 7};
// The first entry: no softmax_scale (the default 1/sqrt(d_qk)).
constexpr double kScales[16] = {kNaN, 1.0, 0.5, 0.125, 2.0, 0.0, -1.0, 1e3, 1e300, kInf, kNaN, -kInf,
                                1e-300, 0.25, 4.0, -0.5};
constexpr double kSoftcaps[12] = {0.0, 1.0, 5.0, 30.0, 0.5, 0.01, -1.0, kNaN, kInf, 1e300, 1e-300, 2.0};
constexpr double kDropouts[12] = {0.0, 0.1, 0.5, 0.25, 0.9, 0.999999, 1.0, -0.1, kNaN, 1e-10, 0.75, 0.3};
constexpr uint64_t kOffsets[8] = {0, 1, 7, 0xFFFFFFFFull, 0x100000000ull, ~0ull, 12345, 3};
// Sizes in shape-only mode, where nothing is allocated and validation alone runs.
constexpr int64_t kBigSizes[16] = {0, 1, 2, 3, 7, 64, (int64_t{1} << 31) - 1, int64_t{1} << 31,
                                   int64_t{1} << 32, int64_t{1} << 40, int64_t{1} << 62, kI64Max,
                                   -1, -(int64_t{1} << 31), 4096, 1 << 20};
constexpr int64_t kStrides[8] = {0, 1, -1, 2, 7, int64_t{1} << 40, -(int64_t{1} << 40), kI64Max};
constexpr double kSpecials[8] = {kNaN, kInf, -kInf, 1e30, -1e30, 131008.0, 1e-42, -0.0};

// The tensors of a call, in the order of the layout bytes and perturbation ids.
// The first kTensors have a layout byte and can be perturbed; the sink's
// tensors (read from byte 19's upper values, so the seeds written before
// them keep their meaning) are contiguous float32 [h_q] unless said otherwise.
enum Tensor : int {
  Q, K, V, OUT, LSE, DOUT, DQ, DK, DV, BIAS, DBIAS, ALIBI, MASK, CU_Q, CU_KV, RNG, kTensors,
  SINK = kTensors, MAX_LOGIT, DSINK, kAll
};
const char* const kNames[kAll] = {"q",         "k",            "v",             "out",       "lse",  "dout",
                                  "dq",        "dk",           "dv",            "bias",      "dbias", "alibi",
                                  "attn_mask", "cu_seqlens_q", "cu_seqlens_kv", "rng_state", "sink", "max_logit",
                                  "dsink"};

// One tensor before it exists: what the call will pass.
struct Spec {
  bool present = false;
  DType dtype = DType::f32;
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  Device device{};
  bool null_data = false;
  int alias_of = -1;  // shares another tensor's view (perturbation 7)
};

// Stride arithmetic saturates: shape-only mode has sizes near 2^63, and a view
// that large is refused (make_view, validation) or never allocated.
int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? kI64Max : r;
}
int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? kI64Max : r;
}

void set_contiguous(Spec& s) {
  int64_t running = 1;
  for (int d = s.rank - 1; d >= 0; --d) {
    s.strides[d] = running;
    running = sat_mul(running, s.shape[d] > 0 ? s.shape[d] : 1);
  }
}

Spec make_spec(DType t, std::initializer_list<int64_t> shape) {
  Spec s;
  s.present = true;
  s.dtype = t;
  s.rank = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t v : shape) s.shape[d++] = v;
  set_contiguous(s);
  return s;
}

// A layout byte: 0 keeps the tensor contiguous. Bits 0-1: padding added to
// each leading stride; bit 2: leading dimensions stored in reverse order;
// bit 3: the first dimension runs backwards (negative stride); bit 4: last
// dimension strided by 2; bit 5: a stride-0 leading dimension; bit 6: on
// cuda:0; bit 7: no data.
void apply_layout(Spec& s, uint8_t code) {
  if (!s.present || code == 0) return;
  const int64_t pad = code & 3;
  const int64_t last = (code & 16) ? 2 : 1;
  s.strides[s.rank - 1] = last;
  int64_t running = sat_add(sat_mul(last, std::max<int64_t>(s.shape[s.rank - 1], 1)), pad);
  for (int k = 0; k < s.rank - 1; ++k) {
    const int d = (code & 4) ? k : s.rank - 2 - k;  // reversed: dimension 0 innermost
    s.strides[d] = running;
    running = sat_add(sat_mul(running, std::max<int64_t>(s.shape[d], 1)), pad);
  }
  if ((code & 8) && s.rank > 1) s.strides[0] = -s.strides[0];
  if ((code & 32) && s.rank > 1) s.strides[s.rank > 2 ? 1 : 0] = 0;
  if (code & 64) s.device = Device::cuda(0);
  if (code & 128) s.null_data = true;
}

// Elements between the lowest and the highest offset the view reaches, and
// the first element's position in that range; span 0 when some dimension is
// empty or negative (no element at all). False when the span or the element
// count passes kMaxAllocElems: a stride-0 view of 2^31 elements fits in one
// element of memory, but visiting it (here, in validation reading
// cu_seqlens, in the reference) takes minutes or gigabytes, which libFuzzer
// would report as a timeout or out-of-memory.
bool span_of(const Spec& s, int64_t& span, int64_t& first) {
  span = 0;
  first = 0;
  for (int d = 0; d < s.rank; ++d)
    if (s.shape[d] <= 0) return true;
  int64_t count = 1;
  for (int d = 0; d < s.rank; ++d)
    if (__builtin_mul_overflow(count, s.shape[d], &count) || count > kMaxAllocElems) return false;
  __int128 lo = 0, hi = 0;
  for (int d = 0; d < s.rank; ++d) {
    const __int128 reach = static_cast<__int128>(s.shape[d] - 1) * s.strides[d];
    if (reach > kMaxAllocElems || -reach > kMaxAllocElems) return false;
    (reach < 0 ? lo : hi) += reach;
  }
  const __int128 n = hi - lo + 1;
  if (n > kMaxAllocElems) return false;
  span = static_cast<int64_t>(n);
  first = static_cast<int64_t>(-lo);
  return true;
}

// Visits every element offset of a view (row-major over its index space).
template <typename F>
void for_each_offset(const TensorView& t, F&& fn) {
  if (!t.defined()) return;
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] <= 0) return;  // no elements (a negative size has none either)
  int64_t idx[kMaxRank] = {};
  for (;;) {
    int64_t off = 0;
    for (int d = 0; d < t.rank; ++d) off += idx[d] * t.strides_elems[d];
    fn(off);
    int d = t.rank - 1;
    while (d >= 0 && ++idx[d] == t.shape[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

// The call being built.
struct Call {
  bool backward = false, shape_only = false, want_dbias = false;
  bool moderate = true;  // inputs finite and small enough that outputs must be finite
  QkvFormat format = QkvFormat::bshd;
  MaskType mask = MaskType::no_mask;
  DType dtype = DType::f32;
  int64_t batch = 1, s_q = 1, s_kv = 1, h_q = 1, h_kv = 1, d_qk = 4, d_v = 4;
  int64_t len_q[3] = {}, len_kv[3] = {};
  bool seqlens_exact = true;  // cu_seqlens hold exactly len_q / len_kv and match the tensors
  bool use_cu = false;
  Options opts;
  Spec spec[kAll];
  std::vector<int32_t> cu_q, cu_kv;
  bool use_rng_state = false;
  int64_t rng_state[2] = {};  // dropout's (seed, offset) in memory (Inputs::rng_state)
  std::vector<std::unique_ptr<unsigned char[]>> memory;
  TensorView view[kAll];
  uint64_t rng = 0;
  struct Special {
    int tensor;
    int64_t index;
    double value;
  };
  std::vector<Special> specials;
};

// Reads the fields (in kFields order) and builds every tensor's spec.
void read_call(Bytes& in, Call& c) {
  const uint8_t flags = in.u8();
  c.backward = flags & 1;
  c.opts.check_seqlens = !(flags & 2);
  c.shape_only = flags & 4;
  c.opts.deterministic = flags & 8;
  const bool no_lse = flags & 16;
  c.want_dbias = flags & 32;
  const bool cu_padded = flags & 64;
  const bool mask_anyway = flags & 128;
  c.format = static_cast<QkvFormat>(in.u8() % 3);
  c.mask = static_cast<MaskType>(in.u8() % 7);
  c.dtype = kDTypes[in.u8() % 8];
  // Small sizes by default; byte value 0 gives the common case (batch 1, length 1...).
  uint8_t b = in.u8();
  c.batch = c.shape_only ? kBigSizes[b % 16] : (b + 1) % 4;
  b = in.u8();
  c.s_q = c.shape_only ? kBigSizes[b % 16] : (b + 1) % 6;
  b = in.u8();
  c.s_kv = c.shape_only ? kBigSizes[b % 16] : (b + 1) % 6;
  const uint8_t h_kv_byte = in.u8(), group_byte = in.u8();
  if (c.shape_only) {
    c.h_kv = kBigSizes[h_kv_byte % 16];
    c.h_q = kBigSizes[group_byte % 16];
  } else {
    c.h_kv = 1 + h_kv_byte % 2;
    c.h_q = c.h_kv * (1 + group_byte % 3);
  }
  b = in.u8();
  c.d_qk = c.shape_only ? kBigSizes[b % 16] : 1 + (b + 3) % 8;
  b = in.u8();
  c.d_v = c.shape_only ? kBigSizes[b % 16] : 1 + (b + 3) % 8;

  c.opts.qkv_format = c.format;
  c.opts.mask = c.mask;
  c.opts.window.left = kWindows[in.u8() % 16];
  c.opts.window.right = kWindows[in.u8() % 16];
  const int scale_code = in.u8() % 16;
  if (scale_code != 0) c.opts.softmax_scale = kScales[scale_code];
  c.opts.softcap = kSoftcaps[in.u8() % 12];
  c.opts.dropout_p = kDropouts[in.u8() % 12];
  uint64_t seed_state = in.u8();
  c.opts.seed = splitmix64(seed_state);
  c.opts.offset = kOffsets[in.u8() % 8];
  const uint8_t rng = in.u8();
  if (rng & 1) {
    uint64_t rng_seed_state = rng;
    c.rng_state[0] = static_cast<int64_t>(splitmix64(rng_seed_state));
    c.rng_state[1] = static_cast<int64_t>(kOffsets[(rng >> 1) % 8]);
  }
  c.use_rng_state = rng & 1;
  if (scale_code != 0 && !(std::fabs(kScales[scale_code]) <= 1.0)) c.moderate = false;
  if (!std::isfinite(c.opts.softcap) || !(c.opts.dropout_p <= 0.5)) c.moderate = false;

  const uint8_t bias_byte = in.u8();
  const int bias_kind = bias_byte % 5;  // none, bias, alibi [h_q], alibi [b, h_q], bias and alibi
  // Softmax sinks from the byte's upper values (0-4: none, as before them):
  // the type, a sink tensor where the type wants none or none where it wants
  // one (a quarter of the cases), max_logit, dsink, a sink of h_kv heads.
  const int sink_code = bias_byte / 5;
  c.opts.softmax_type = static_cast<SoftmaxType>(sink_code % 3);
  const bool sink_mismatch = (sink_code / 3) % 4 == 3;
  const bool give_sink = (c.opts.softmax_type == SoftmaxType::learnable) != sink_mismatch;
  const bool give_max_logit = (sink_code / 12) % 2, give_dsink = (sink_code / 24) % 2;
  const bool sink_of_kv_heads = sink_code >= 48;
  const uint8_t bias_bits = in.u8();
  const uint8_t mask_dtype = in.u8();
  const uint8_t mask_bits = in.u8();

  // Sequence lengths (three sequences' worth of bytes, whatever the batch).
  for (int i = 0; i < 3; ++i) {
    const int64_t cap_q = c.format == QkvFormat::thd ? 5 : std::max<int64_t>(c.s_q, 0);
    const int64_t cap_kv = c.format == QkvFormat::thd ? 5 : std::max<int64_t>(c.s_kv, 0);
    const uint8_t lq = in.u8(), lkv = in.u8();
    c.len_q[i] = c.shape_only ? 0 : cap_q - lq % (std::min<int64_t>(cap_q, 250) + 1);
    c.len_kv[i] = c.shape_only ? 0 : cap_kv - lkv % (std::min<int64_t>(cap_kv, 250) + 1);
  }
  const uint8_t max_q_code = in.u8(), max_kv_code = in.u8();
  const uint8_t cu_bad = in.u8(), cu_bad_index = in.u8();
  uint8_t layout[kTensors];
  for (uint8_t& l : layout) l = in.u8();
  c.rng = in.u32();
  const int n_specials = in.u8() % 4;
  for (int i = 0; i < n_specials; ++i) {
    const int t = in.u8() % kTensors;
    const int64_t index = in.u8();
    c.specials.push_back({t, index, kSpecials[in.u8() % 8]});
  }

  // Packed or padded batch.
  const bool thd = c.format == QkvFormat::thd;
  const bool small_batch = !c.shape_only && c.batch >= 0 && c.batch <= 3;
  int64_t tok_q = 0, tok_kv = 0, longest_q = 0, longest_kv = 0;
  if (small_batch) {
    for (int64_t i = 0; i < c.batch; ++i) {
      tok_q += c.len_q[i];
      tok_kv += c.len_kv[i];
      longest_q = std::max(longest_q, c.len_q[i]);
      longest_kv = std::max(longest_kv, c.len_kv[i]);
    }
  }
  if (thd) {
    if (c.shape_only) {
      tok_q = c.s_q;  // the big sizes stand for the token counts
      tok_kv = c.s_kv;
    }
    auto max_of = [](uint8_t code, int64_t longest) -> int64_t {
      switch (code % 8) {
        case 0: return 0;
        case 1: return longest;
        case 2: return longest + 1;
        case 3: return longest - 1;
        case 4: return -1;
        case 5: return int64_t{1} << 40;
        case 6: return longest + 5;
        default: return 0;
      }
    };
    c.opts.max_seqlen_q = max_of(max_q_code, longest_q);
    c.opts.max_seqlen_kv = max_of(max_kv_code, longest_kv);
  }
  c.use_cu = thd || cu_padded;
  if (c.use_cu && small_batch) {
    c.cu_q.push_back(0);
    c.cu_kv.push_back(0);
    for (int64_t i = 0; i < c.batch; ++i) {
      c.cu_q.push_back(c.cu_q.back() + static_cast<int32_t>(c.len_q[i]));
      c.cu_kv.push_back(c.cu_kv.back() + static_cast<int32_t>(c.len_kv[i]));
    }
  } else if (c.use_cu) {
    c.cu_q = {0, 1};  // a batch too large to list: one entry, validation says which
    c.cu_kv = {0, 1};
    c.seqlens_exact = false;
  }
  // Corrupt cu_seqlens' values or length.
  if (c.use_cu && cu_bad % 8 != 0) {
    c.seqlens_exact = false;
    std::vector<int32_t>& cu = (cu_bad & 8) ? c.cu_kv : c.cu_q;
    const size_t i = cu_bad_index % cu.size();
    switch (cu_bad % 8) {
      case 1: cu.back() += 1; break;
      case 2: cu[0] = 1; break;
      case 3: cu[i] = cu[i] - 2; break;
      case 4: cu[i] = std::numeric_limits<int32_t>::max(); break;
      case 5: cu[i] = std::numeric_limits<int32_t>::min(); break;
      case 6: cu.pop_back(); break;
      case 7: cu.push_back(cu.back()); break;
    }
  }
  if (!thd && !c.use_cu) {
    for (int i = 0; i < 3; ++i) {
      c.len_q[i] = c.s_q;
      c.len_kv[i] = c.s_kv;
    }
  }

  // The tensors.
  const DType dt = c.dtype;
  auto qlike = [&](int64_t tokens, int64_t s, int64_t h, int64_t d) {
    switch (c.format) {
      case QkvFormat::bshd: return make_spec(dt, {c.batch, s, h, d});
      case QkvFormat::sbhd: return make_spec(dt, {s, c.batch, h, d});
      case QkvFormat::thd: break;
    }
    return make_spec(dt, {tokens, h, d});
  };
  Spec* sp = c.spec;
  sp[Q] = qlike(tok_q, c.s_q, c.h_q, c.d_qk);
  sp[K] = qlike(tok_kv, c.s_kv, c.h_kv, c.d_qk);
  sp[V] = qlike(tok_kv, c.s_kv, c.h_kv, c.d_v);
  sp[OUT] = qlike(tok_q, c.s_q, c.h_q, c.d_v);
  if (c.backward || !no_lse)
    sp[LSE] = thd ? make_spec(DType::f32, {c.h_q, tok_q}) : make_spec(DType::f32, {c.batch, c.h_q, c.s_q});
  if (c.backward) {
    sp[DOUT] = sp[OUT];
    sp[DQ] = sp[Q];
    sp[DK] = sp[K];
    sp[DV] = sp[V];
  }
  const int64_t full[4] = {c.batch, c.h_q, thd ? longest_q : c.s_q, thd ? longest_kv : c.s_kv};
  auto broadcast_spec = [&](DType t, uint8_t bits) {
    Spec s = make_spec(t, {full[0], full[1], full[2], full[3]});
    for (int d = 0; d < 4; ++d)
      if (bits & (1 << d)) s.shape[d] = 1;
    if (bits & 16) s.shape[bits % 4] = sat_add(s.shape[bits % 4], 1);
    set_contiguous(s);
    return s;
  };
  if (bias_kind == 1 || bias_kind == 4) {
    const int code = bias_bits >> 5;
    const DType bt = code == 0 ? dt : code == 1 ? DType::f32 : kDTypes[code];
    sp[BIAS] = broadcast_spec(bt, bias_bits);
    if (c.backward && c.want_dbias) sp[DBIAS] = sp[BIAS];
  }
  if (bias_kind == 2 || bias_kind == 4) sp[ALIBI] = make_spec(DType::f32, {c.h_q});
  if (bias_kind == 3) sp[ALIBI] = make_spec(DType::f32, {c.batch, c.h_q});
  if (c.mask == MaskType::arbitrary || mask_anyway) {
    constexpr DType kMaskTypes[8] = {DType::boolean, DType::u8, DType::f32, DType::bf16,
                                     DType::f16,     DType::f64, DType::i32, DType::i64};
    const DType mt = (mask_dtype % 8) == 3 ? dt : kMaskTypes[mask_dtype % 8];
    sp[MASK] = broadcast_spec(mt, mask_bits);
  }
  if (c.use_rng_state) sp[RNG] = make_spec(DType::i64, {2});
  if (give_sink) sp[SINK] = make_spec(DType::f32, {sink_of_kv_heads ? c.h_kv : c.h_q});
  if (give_max_logit && !c.backward) sp[MAX_LOGIT] = make_spec(DType::f32, {c.h_q});
  if (give_dsink && c.backward) sp[DSINK] = make_spec(DType::f32, {c.h_q});
  if (c.use_cu) {
    sp[CU_Q] = make_spec(DType::i32, {static_cast<int64_t>(c.cu_q.size())});
    sp[CU_KV] = make_spec(DType::i32, {static_cast<int64_t>(c.cu_kv.size())});
  }
  for (int t = 0; t < kTensors; ++t) apply_layout(sp[t], layout[t]);
  if (c.shape_only)
    for (int t = 0; t < kAll; ++t)
      if (t != CU_Q && t != CU_KV && t != RNG) sp[t].null_data = true;
}

// The rest of the input: up to 8 perturbations of three bytes (tensor, what, value).
void read_perturbations(Bytes& in, Call& c) {
  for (int n = 0; n < 8 && !in.empty(); ++n) {
    const int t = in.u8() % kTensors;
    const int op = in.u8() % 8;
    const uint8_t arg = in.u8();
    Spec& s = c.spec[t];
    c.moderate = false;
    c.seqlens_exact = c.seqlens_exact && (t != CU_Q && t != CU_KV);
    switch (op) {
      case 0: s.dtype = kDTypes[arg % 8]; break;
      case 1: {  // another rank: new trailing dimensions of size 2, or dropped ones
        if (!s.present) {
          s = make_spec(c.dtype, {2});
        }
        const int rank = 1 + arg % kMaxRank;
        for (int d = s.rank; d < rank; ++d) s.shape[d] = 2;
        s.rank = rank;
        set_contiguous(s);
        break;
      }
      case 2:
        if (s.rank > 0) {
          s.shape[arg % s.rank] = sat_add(s.shape[arg % s.rank], (arg / 8) % 2 ? 1 : -1);
          set_contiguous(s);
        }
        break;
      case 3:
        if (s.rank > 0) {
          s.shape[arg % s.rank] = kBigSizes[(arg / 8) % 16];
          set_contiguous(s);
        }
        break;
      case 4: s = Spec{}; break;
      case 5:
        if (s.rank > 0) s.strides[arg % s.rank] = kStrides[(arg / 8) % 8];
        break;
      case 6: s.device = (arg & 1) ? Device::cuda(arg % 3) : Device::cpu(); break;
      case 7: s.alias_of = arg % kTensors; break;
    }
  }
}

double draw(Call& c) {  // uniform in [-1, 1]
  return static_cast<double>(splitmix64(c.rng) >> 11) * 0x1.0p-52 - 1.0;
}

// Allocates each tensor with exactly its span and fills the inputs: random
// values in [-1, 1] (slopes in [0, 1], masks mostly visible), cu_seqlens as
// built, outputs NaN so that an unwritten element shows.
void materialize(Call& c) {
  for (int t = 0; t < kAll; ++t) {
    Spec& s = c.spec[t];
    if (!s.present) continue;
    int64_t span = 0, first = 0;
    void* data = nullptr;
    if (!s.null_data && span_of(s, span, first)) {
      const size_t bytes = static_cast<size_t>(span) * dtype_size_bytes(s.dtype);
      c.memory.emplace_back(new unsigned char[bytes]);
      data = c.memory.back().get() + static_cast<size_t>(first) * dtype_size_bytes(s.dtype);
    } else if (!s.null_data) {
      c.moderate = false;  // too large to hold: validation alone
    }
    c.view[t] = make_view(data, s.dtype, s.rank, s.shape, s.strides, s.device);  // may throw attn::Error
    TensorView& v = c.view[t];
    if (!data) continue;
    const bool output = t == OUT || t == LSE || t == DQ || t == DK || t == DV || t == DBIAS || t == MAX_LOGIT ||
                        t == DSINK;
    if (t == RNG) {
      int64_t i = 0;
      for_each_offset(v, [&](int64_t off) {
        detail::store_from_double(v.data, v.dtype, off, 0.0);  // whatever its dtype, then the two words exactly
        if (v.dtype == DType::i64) static_cast<int64_t*>(v.data)[off] = c.rng_state[std::min<int64_t>(i, 1)];
        ++i;
      });
      continue;
    }
    if (t == CU_Q || t == CU_KV) {
      const std::vector<int32_t>& cu = t == CU_Q ? c.cu_q : c.cu_kv;
      int64_t i = 0;
      for_each_offset(v, [&](int64_t off) {
        const int32_t value = i < static_cast<int64_t>(cu.size()) ? cu[i] : cu.empty() ? 0 : cu.back();
        if (v.dtype == DType::i32) static_cast<int32_t*>(v.data)[off] = value;
        else detail::store_from_double(v.data, v.dtype, off, value);
        ++i;
      });
      continue;
    }
    for_each_offset(v, [&](int64_t off) {
      double x = draw(c);
      if (output) x = is_floating(v.dtype) ? kNaN : -1.0;  // integer outputs never pass validation
      else if (t == ALIBI) x = std::fabs(x);
      else if (t == SINK) x = 0.5 + 1.5 * x;  // sink logits in [-1, 2)
      else if (t == MASK && !is_floating(v.dtype)) x = x > -0.5 ? 1.0 : 0.0;
      else if (t == MASK && x < -0.875) x = -kInf;
      if (!is_floating(v.dtype)) x = std::nearbyint(x);
      detail::store_from_double(v.data, v.dtype, off, x);
    });
  }
  for (const Call::Special& sp : c.specials) {
    const TensorView& v = c.view[sp.tensor];
    if (!v.data || !is_floating(v.dtype) || v.numel() <= 0) continue;
    int64_t i = 0, target = sp.index % v.numel();
    for_each_offset(v, [&](int64_t off) {
      if (i++ == target) detail::store_from_double(v.data, v.dtype, off, sp.value);
    });
    c.moderate = false;
  }
  for (int t = 0; t < kTensors; ++t)
    if (c.spec[t].alias_of >= 0) {
      c.view[t] = c.view[c.spec[t].alias_of];
      c.moderate = false;
    }
  // An output whose elements overlap (a stride 0) holds whichever write came
  // last: no row-by-row check applies, only the absence of crashes.
  for (int t : {OUT, LSE, DQ, DK, DV, DBIAS}) {
    if (!c.view[t].data) continue;  // never written: the call stops at require_tensor_data
    std::vector<int64_t> offsets;
    for_each_offset(c.view[t], [&](int64_t off) { offsets.push_back(off); });
    std::sort(offsets.begin(), offsets.end());
    if (std::adjacent_find(offsets.begin(), offsets.end()) != offsets.end()) c.moderate = false;
  }
}

Inputs inputs_of(const Call& c) {
  Inputs in;
  in.q = c.view[Q];
  in.k = c.view[K];
  in.v = c.view[V];
  in.cu_seqlens_q = c.view[CU_Q];
  in.cu_seqlens_kv = c.view[CU_KV];
  in.bias = c.view[BIAS];
  in.alibi_slopes = c.view[ALIBI];
  in.attn_mask = c.view[MASK];
  in.rng_state = c.view[RNG];
  in.sink = c.view[SINK];
  return in;
}

// The lse of a padded position of head h: the sink's logit (-inf without one).
double sink_logit(const Call& c, int64_t h) {
  if (c.opts.softmax_type == SoftmaxType::off_by_one) return 0.0;
  if (c.opts.softmax_type != SoftmaxType::learnable) return -kInf;
  const TensorView& s = c.view[SINK];
  return detail::load_as_double(s.data, s.dtype, h * s.strides_elems[0]);
}

// max_logit: finite, or -inf for a head without a visible pair.
void check_max_logit(const TensorView& t) {
  for_each_offset(t, [&](int64_t off) {
    const double x = detail::load_as_double(t.data, t.dtype, off);
    if (std::isnan(x) || x == kInf) violated("max_logit is NaN, +inf or unwritten", "max_logit");
  });
}

// Element (b, pos, head, col) of a q-like tensor; token `start + pos` in thd.
double q_like(const TensorView& t, QkvFormat f, int64_t start, int64_t b, int64_t pos, int64_t h, int64_t col) {
  int64_t off = 0;
  switch (f) {
    case QkvFormat::bshd: off = b * t.strides_elems[0] + pos * t.strides_elems[1] + h * t.strides_elems[2]; break;
    case QkvFormat::sbhd: off = pos * t.strides_elems[0] + b * t.strides_elems[1] + h * t.strides_elems[2]; break;
    case QkvFormat::thd: off = (start + pos) * t.strides_elems[0] + h * t.strides_elems[1]; break;
  }
  return detail::load_as_double(t.data, t.dtype, off + col * t.strides_elems[t.rank - 1]);
}

double lse_at(const TensorView& t, QkvFormat f, int64_t start, int64_t b, int64_t pos, int64_t h) {
  const int64_t off = f == QkvFormat::thd ? h * t.strides_elems[0] + (start + pos) * t.strides_elems[1]
                                          : b * t.strides_elems[0] + h * t.strides_elems[1] + pos * t.strides_elems[2];
  return detail::load_as_double(t.data, t.dtype, off);
}

std::string where(const char* name, int64_t b, int64_t pos, int64_t h) {
  return std::string(name) + " sequence " + std::to_string(b) + " position " + std::to_string(pos) + " head " +
         std::to_string(h);
}

// Rows of a q-like output: every element written and finite; zero past the
// sequence's true length (bshd/sbhd padding) and, with `lse`, where lse is -inf.
void check_rows(const Call& c, const Problem& p, const TensorView& t, const char* name, bool kv_side,
                const TensorView* lse) {
  int64_t start = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t len = kv_side ? c.len_kv[b] : c.len_q[b];
    const int64_t rows = p.qkv_format == QkvFormat::thd ? len : (kv_side ? p.s_kv : p.s_q);
    const int64_t heads = kv_side ? p.h_kv : p.h_q;
    const int64_t cols = t.size(-1);
    for (int64_t pos = 0; pos < rows; ++pos) {
      for (int64_t h = 0; h < heads; ++h) {
        bool zero_row = pos >= len;
        if (lse) {
          const double l = lse_at(*lse, p.qkv_format, start, b, pos, h);
          const double sink = static_cast<float>(sink_logit(c, h));  // lse is float32
          if (std::isnan(l) || l == kInf) violated("lse is NaN or +inf", where("lse", b, pos, h));
          if (pos >= len && l != sink)
            violated("a padded position's lse is not the sink's logit (-inf without one)", where("lse", b, pos, h));
          // Without a sink, lse = -inf marks a row with no visible key; with
          // one, such a row's lse is the sink's logit, which a row whose keys
          // all underflow beside it reaches too: only padding is known empty.
          zero_row = zero_row || (l == -kInf && !p.has_sink());
        }
        for (int64_t col = 0; col < cols; ++col) {
          const double x = q_like(t, p.qkv_format, start, b, pos, h, col);
          if (!std::isfinite(x)) violated("an output element is not finite (or not written)", where(name, b, pos, h));
          if (zero_row && x != 0.0) violated("a row with no visible key is not 0", where(name, b, pos, h));
        }
      }
    }
    start += len;
  }
}

void check_finite(const TensorView& t, const char* name) {
  for_each_offset(t, [&](int64_t off) {
    if (!std::isfinite(detail::load_as_double(t.data, t.dtype, off)))
      violated("an output element is not finite (or not written)", name);
  });
}

// The checks an output can take: only when the inputs were moderate and the
// sequences are the ones the fuzzer built (else the values are the caller's
// problem, SEMANTICS.md: wrong cu_seqlens without check_seqlens give wrong answers).
bool checkable(const Call& c) { return c.moderate && c.seqlens_exact; }

void run_forward(Call& c) {
  ForwardArgs a;
  a.in = inputs_of(c);
  a.out = c.view[OUT];
  a.lse = c.view[LSE];
  a.max_logit = c.view[MAX_LOGIT];
  if (c.shape_only) {  // a shape-only question (explain, the CLI's plans): validation alone
    const Problem p = validate_forward(c.opts, a);
    if (describe_problem(p).empty()) violated("describe_problem", "empty");
    return;
  }
  detail::require_tensor_data(a);  // as attn::forward(): before validation reads cu_seqlens
  const Problem p = validate_forward(c.opts, a);
  const Backend& ref = reference::backend();  // what selection gives a host call
  if (!ref.supports(p, DeviceInfo{}).empty()) return;
  ref.forward(p, a, RunContext{});
  if (!checkable(c)) return;
  check_rows(c, p, a.out, "out", false, a.lse.defined() ? &a.lse : nullptr);
  if (a.max_logit.defined()) check_max_logit(a.max_logit);
}

void run_backward(Call& c) {
  BackwardArgs a;
  a.in = inputs_of(c);
  a.out = c.view[OUT];
  a.dout = c.view[DOUT];
  a.lse = c.view[LSE];
  a.dq = c.view[DQ];
  a.dk = c.view[DK];
  a.dv = c.view[DV];
  a.dbias = c.view[DBIAS];
  a.dsink = c.view[DSINK];
  if (c.shape_only) {
    const Problem p = validate_backward(c.opts, a);
    if (describe_problem(p).empty()) violated("describe_problem", "empty");
    return;
  }
  detail::require_tensor_data(a);
  // out and lse as the forward writes them (SEMANTICS.md "Backward"), where
  // the same tensors make a valid forward; else they keep their random values
  // (out) or NaN (lse), and the gradients are only required not to crash.
  bool from_forward = false;
  try {
    ForwardArgs f;
    f.in = a.in;
    f.out = a.out;
    f.lse = a.lse;
    const Problem pf = validate_forward(c.opts, f);
    if (reference::backend().supports(pf, DeviceInfo{}).empty()) {
      reference::backend().forward(pf, f, RunContext{});
      from_forward = true;
    }
  } catch (const Error&) {
  }
  const Problem p = validate_backward(c.opts, a);
  const Backend& ref = reference::backend();
  if (!ref.supports(p, DeviceInfo{}).empty()) return;
  ref.backward(p, a, RunContext{});
  if (!from_forward || !checkable(c)) return;
  check_rows(c, p, a.dq, "dq", false, &a.lse);
  check_rows(c, p, a.dk, "dk", true, nullptr);
  check_rows(c, p, a.dv, "dv", true, nullptr);
  if (a.dbias.defined()) check_finite(a.dbias, "dbias");
  if (a.dsink.defined()) check_finite(a.dsink, "dsink");
}

// ATTN_FUZZ_PRINT=1: the call an input stands for, on stderr (to turn a
// crash file into a report: fuzz_attention crash-...).
void print_call(const Call& c) {
  std::fprintf(stderr, "%s %s mask=%s dtype=%s b=%lld s_q=%lld s_kv=%lld h=%lld/%lld d=%lld/%lld window=(%lld,%lld)",
               c.backward ? "backward" : "forward", format_name(c.format), mask_name(c.mask), dtype_name(c.dtype),
               (long long)c.batch, (long long)c.s_q, (long long)c.s_kv, (long long)c.h_q, (long long)c.h_kv,
               (long long)c.d_qk, (long long)c.d_v, (long long)c.opts.window.left, (long long)c.opts.window.right);
  std::fprintf(stderr, " scale=%g softcap=%g softmax=%s dropout=%g offset=%llu check_seqlens=%d max_seqlen=%lld/%lld%s\n",
               c.opts.softmax_scale.value_or(0.0), c.opts.softcap, softmax_type_name(c.opts.softmax_type), c.opts.dropout_p,
               (unsigned long long)c.opts.offset, c.opts.check_seqlens, (long long)c.opts.max_seqlen_q,
               (long long)c.opts.max_seqlen_kv, c.shape_only ? " shape-only" : "");
  for (int t = 0; t < kAll; ++t) {
    const Spec& s = c.spec[t];
    if (!s.present) continue;
    std::string shape, strides;
    for (int d = 0; d < s.rank; ++d) {
      shape += (d ? ", " : "") + std::to_string(s.shape[d]);
      strides += (d ? ", " : "") + std::to_string(s.strides[d]);
    }
    std::fprintf(stderr, "  %s: %s [%s] strides [%s] on %s%s%s\n", kNames[t], dtype_name(s.dtype), shape.c_str(),
                 strides.c_str(), device_name(s.device).c_str(), s.null_data ? " no data" : "",
                 s.alias_of >= 0 ? (std::string(" = ") + kNames[s.alias_of]).c_str() : "");
  }
  auto list = [](const std::vector<int32_t>& v) {
    std::string r;
    for (size_t i = 0; i < v.size(); ++i) r += (i ? "," : "") + std::to_string(v[i]);
    return r;
  };
  if (c.use_cu) std::fprintf(stderr, "  cu_seqlens_q={%s} cu_seqlens_kv={%s}\n", list(c.cu_q).c_str(), list(c.cu_kv).c_str());
  if (c.use_rng_state)
    std::fprintf(stderr, "  rng_state={%lld, %lld}\n", (long long)c.rng_state[0], (long long)c.rng_state[1]);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("ATTN_NUM_THREADS", "1", 1);  // one worker: the reference's loop runs inline, each input in microseconds
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  Call c;
  try {
    read_call(in, c);
    read_perturbations(in, c);
    if (std::getenv("ATTN_FUZZ_PRINT")) print_call(c);
    materialize(c);
    if (c.backward)
      run_backward(c);
    else
      run_forward(c);
    if (std::getenv("ATTN_FUZZ_PRINT"))
      std::fprintf(stderr, "  -> %s\n", c.shape_only     ? "validated (shape-only)"
                                       : checkable(c) ? "ran, outputs checked"
                                                      : "ran");
  } catch (const Error& e) {
    if (std::getenv("ATTN_FUZZ_PRINT")) std::fprintf(stderr, "  -> %s\n", e.what());
    // A clear error: it says what is wrong and what was expected.
    if (e.info().what.empty() || e.info().expected.empty())
      violated("attn::Error without what/expected", format_error(e.info()));
    if (std::string(e.what()).rfind("attn: ", 0) != 0) violated("attn::Error message", e.what());
  }
  return 0;
}
