// The attention call: what the caller asks for (Options + the tensors of
// ForwardArgs / BackwardArgs) and the validated, derived description every
// backend reads (Problem). Semantics are those of ../docs/SEMANTICS.md.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "attn/tensor.h"

namespace attn {

enum class QkvFormat : uint8_t { bshd, sbhd, thd };

enum class MaskType : uint8_t {
  no_mask,
  causal,                       // top-left aligned
  causal_bottom_right,          // aligned so the last query sees the last key
  padding,                      // per-sequence lengths from cu_seqlens
  padding_causal,               // padding + causal, top-left
  padding_causal_bottom_right,  // padding + causal, bottom-right per sequence
  arbitrary,                    // an explicit mask tensor (attn_mask)
};

enum class BiasType : uint8_t { none, post_scale_bias, alibi };

enum class Pass : uint8_t { forward, backward };

// The softmax's denominator (TransformerEngine's softmax_type): `vanilla` sums
// the visible keys' exp(s); `off_by_one` adds exp(0), a sink logit 0 per head;
// `learnable` adds exp(sink[h]), a per-query-head logit with a gradient. The
// sink carries no value (docs/SEMANTICS.md "Softmax sinks").
enum class SoftmaxType : uint8_t { vanilla, off_by_one, learnable };

const char* format_name(QkvFormat f);
const char* mask_name(MaskType m);
const char* bias_name(BiasType b);
const char* softmax_type_name(SoftmaxType t);  // "vanilla", "off-by-one", "learnable"
std::optional<QkvFormat> parse_format(const std::string& s);
std::optional<MaskType> parse_mask(const std::string& s);
std::optional<SoftmaxType> parse_softmax_type(const std::string& s);  // also "off_by_one"

// Sliding window, inclusive at both ends: key j is visible to query i when
// i + shift - left <= j <= i + shift + right. -1 means unbounded on that side.
struct Window {
  int64_t left = -1;
  int64_t right = -1;
  friend bool operator==(const Window&, const Window&) = default;
};

// What a caller chooses besides the tensors. Grows by adding defaulted fields.
struct Options {
  QkvFormat qkv_format = QkvFormat::bshd;
  MaskType mask = MaskType::no_mask;
  Window window{};
  std::optional<double> softmax_scale;  // default 1/sqrt(d_qk)
  double softcap = 0.0;                 // > 0: scores become c*tanh(s/c)
  int64_t max_seqlen_q = 0;             // thd: longest sequence; 0 = derive from cu_seqlens
  int64_t max_seqlen_kv = 0;
  double dropout_p = 0.0;
  uint64_t seed = 0;
  uint64_t offset = 0;  // must be < 2^32 (one word of the Philox counter)
  bool deterministic = false;
  SoftmaxType softmax_type = SoftmaxType::vanilla;  // learnable: Inputs::sink holds the logits
  // Read the values of cu_seqlens to validate them (one wait for the device and
  // a small device-to-host copy when they live on the GPU; the GPU idles until
  // the call's kernel is launched). Turn off, with max_seqlen given, under CUDA
  // graph capture or where the caller built cu_seqlens itself. Their values are
  // then not checked: wrong ones give wrong answers without an error, but every
  // backend stays inside the tensors (the GPU kernels bound each sequence by
  // them, src/core/sequence_bounds.h; the host-driven backends report them).
  bool check_seqlens = true;
};

// Tensors both passes read.
struct Inputs {
  TensorView q;  // bshd [b, s_q, h_q, d_qk] | sbhd [s_q, b, h_q, d_qk] | thd [t_q, h_q, d_qk]
  TensorView k;  // same with s_kv, h_kv, d_qk
  TensorView v;  // same with s_kv, h_kv, d_v
  // int32 [batch + 1], first 0, non-decreasing, on q's device. thd: token
  // offsets of each packed sequence (required). bshd/sbhd: optional, the
  // cumulative true lengths of padded sequences (padding masks), as in
  // TransformerEngine.
  TensorView cu_seqlens_q;
  TensorView cu_seqlens_kv;
  TensorView bias;          // post_scale_bias, broadcastable to [b, h_q, s_q, s_kv]
  TensorView alibi_slopes;  // fp32 [h_q] or [b, h_q]
  // mask == arbitrary: broadcastable to [b, h_q, s_q, s_kv]; boolean/u8 with
  // true = key visible (PyTorch's convention), or floating and added to the scores.
  TensorView attn_mask;
  // Optional int64 [2] on q's device: dropout's (seed, offset), read by the
  // kernels when they run instead of Options::seed / offset, so a CUDA graph
  // replays with the values written since capture (offset: its low 32 bits).
  TensorView rng_state;
  // softmax_type == learnable: fp32 [h_q], the sink logit of each query head.
  TensorView sink;
};

struct ForwardArgs {
  Inputs in;
  TensorView out;  // like q with d_v, same dtype as q
  TensorView lse;  // optional fp32: [b, h_q, s_q] (bshd, sbhd) or [h_q, t_q] (thd)
  // Optional fp32 [h_q]: the largest score (after scale, softcap, bias) over
  // the visible pairs of the whole call, per query head; -inf for a head with
  // none (TransformerEngine's return_max_logit).
  TensorView max_logit;
};

struct BackwardArgs {
  Inputs in;
  TensorView out;
  TensorView dout;   // like out
  TensorView lse;    // as the forward wrote it
  TensorView dq;     // like q
  TensorView dk;     // like k
  TensorView dv;     // like v
  TensorView dbias;  // optional: shape of bias, written when given
  TensorView dsink;  // optional fp32 [h_q] with softmax_type == learnable: written when given
};

// The validated description of one call, derived from Options and the tensor
// shapes. Plain numbers and enums (no pointers): printable, comparable, and the
// input of every backend's supports().
struct Problem {
  Pass pass = Pass::forward;
  QkvFormat qkv_format = QkvFormat::bshd;
  DType dtype = DType::bf16;  // of q, k, v, out (and dout, dq, dk, dv)
  Device device{};
  int64_t batch = 1;
  int64_t s_q = 1;  // thd: max_seqlen_q
  int64_t s_kv = 1;
  int64_t total_q = 1;  // tokens in q: batch * s_q, or thd's t_q
  int64_t total_kv = 1;
  int64_t h_q = 1;
  int64_t h_kv = 1;
  int64_t d_qk = 64;
  int64_t d_v = 64;
  bool has_seqlens = false;  // per-sequence lengths come from cu_seqlens (always for thd)

  MaskType mask = MaskType::no_mask;
  // The window in effect after the mask type is applied (causal clips right to
  // 0); -1 = unbounded. `bottom_right` selects shift = len_kv - len_q.
  int64_t window_left = -1;
  int64_t window_right = -1;
  bool bottom_right = false;

  double softmax_scale = 0.125;
  double softcap = 0.0;

  BiasType bias = BiasType::none;
  std::array<int64_t, 4> bias_shape{};  // post_scale_bias: [b|1, h_q|1, s_q|1, s_kv|1]
  DType bias_dtype = DType::f32;
  bool bias_grad = false;         // backward writes dbias
  bool alibi_per_batch = false;   // slopes [b, h_q] rather than [h_q]
  bool mask_additive = false;     // arbitrary: floating mask added to scores
  std::array<int64_t, 4> mask_shape{};

  double dropout_p = 0.0;
  uint64_t seed = 0;
  uint64_t offset = 0;
  bool rng_state_in_memory = false;  // dropout's seed and offset come from Inputs::rng_state
  bool deterministic = false;
  bool return_lse = false;
  SoftmaxType softmax_type = SoftmaxType::vanilla;
  bool return_max_logit = false;  // forward: ForwardArgs::max_logit is written
  bool sink_grad = false;         // backward: BackwardArgs::dsink is written
  // The largest power of two, at most 16, dividing the base address and every
  // stride but the last (in bytes) of q, k, v, out (and in the backward dout,
  // dq, dk, dv): kernels that move rows in 16-byte pieces need 16.
  int row_alignment_bytes = 16;
  // The call's stream is capturing a CUDA graph: a backend that reads values
  // back to the host while it runs (lengths from cu_seqlens) refuses.
  bool capturing = false;

  bool has_window() const { return window_left >= 0 || window_right >= 0; }
  bool has_sink() const { return softmax_type != SoftmaxType::vanilla; }
};

// One line: "fwd bshd bf16 b=2 s_q=128 s_kv=128 h=16/4 d=128/128 mask=causal window=(-1,0) ..."
std::string describe_problem(const Problem& p);

// Rejects a bad call before any kernel runs (attn::Error with what/got/expected/fix).
// The first two derive the Problem from tensors; check_problem validates the
// numbers alone (tools that describe a problem without tensors call it too).
Problem validate_forward(const Options& opts, const ForwardArgs& args);
Problem validate_backward(const Options& opts, const BackwardArgs& args);
void check_problem(const Problem& p);

// Limits the core enforces for every backend; backends narrow them in supports().
inline constexpr int64_t kMaxHeadDim = 512;

}  // namespace attn
