// One attention problem with owned random inputs and poisoned outputs: the unit
// that the `attn` command and the test grids build, run on a backend and compare.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attn/problem.h"
#include "testing/tensor_buffer.h"

namespace attn::testing {

// The numbers of a problem, before any tensor exists.
struct CaseSpec {
  QkvFormat format = QkvFormat::bshd;
  int64_t batch = 1;
  // Per-sequence true lengths (size batch). Empty: every sequence is s_q / s_kv
  // long and no cu_seqlens are passed. thd: the packed sequences. bshd/sbhd: the
  // true lengths of a padded batch, passed as cu_seqlens (needs a padding mask).
  // seqlens_kv empty with seqlens_q given: the same lengths as q.
  std::vector<int64_t> seqlens_q, seqlens_kv;
  // bshd/sbhd: the padded sequence dimension. thd: the length of every sequence
  // when seqlens are empty (ignored otherwise).
  int64_t s_q = 128, s_kv = 128;
  int64_t h_q = 8, h_kv = 8;
  int64_t d_qk = 64, d_v = 64;
  DType dtype = DType::bf16;
  MaskType mask = MaskType::no_mask;
  Window window{};
  std::optional<double> softmax_scale;
  double softcap = 0.0;
  BiasType bias = BiasType::none;
  // post_scale_bias shape; 0 = the problem's size in that dimension
  // ([batch, h_q, s_q, s_kv], s = max_seqlen in thd), 1 = broadcast.
  std::array<int64_t, 4> bias_shape{1, 0, 0, 0};
  double dropout_p = 0.0;
  uint64_t seed = 0;  // dropout
  uint64_t offset = 0;
  bool backward = false;
  bool return_lse = false;  // forward writes lse (always when backward)
  SoftmaxType softmax_type = SoftmaxType::vanilla;  // learnable: a sink [h_q] input, dsink with backward
  bool return_max_logit = false;                    // forward writes max_logit [h_q]
};

// The spec's per-sequence lengths (seqlens or the uniform s_q / s_kv). These
// hold one entry per sequence: shape-only questions (explain, visible_pairs)
// use rows_q and tokens_q instead, so a batch of 2^31 costs no memory.
std::vector<int64_t> lengths_q(const CaseSpec& s);
std::vector<int64_t> lengths_kv(const CaseSpec& s);
// Rows of the q-like tensors' sequence dimension: padded s_q, or thd's max_seqlen.
int64_t rows_q(const CaseSpec& s);
int64_t rows_kv(const CaseSpec& s);
// Tokens over all sequences (thd's packed dimension); throws attn::Error when
// the count exceeds int64.
int64_t tokens_q(const CaseSpec& s);
int64_t tokens_kv(const CaseSpec& s);

// A spec with owned tensors and the views attn's API takes. Copies share the
// storage (TensorBuffer holds it by shared_ptr), so views stay valid.
struct Case {
  CaseSpec spec;
  Device device{};
  // Inputs.
  TensorBuffer q, k, v, dout, bias, alibi_slopes, attn_mask, cu_seqlens_q, cu_seqlens_kv, sink;
  // Outputs, filled with NaN until a backend writes them.
  TensorBuffer out, lse, dq, dk, dv, dbias, max_logit, dsink;
  Options opts;
  ForwardArgs fwd;   // out, lse (when spec.return_lse or spec.backward)
  BackwardArgs bwd;  // reads the out and lse the forward wrote
};

// Fresh random inputs on `device`: q, k, v, dout uniform in [-1, 1), bias in
// [-0.5, 0.5), ALiBi slopes 2^(-8(h+1)/h_q), arbitrary masks ~90% visible,
// learnable sink logits uniform in [-1, 2).
// Throws attn::Error when the spec is inconsistent (seqlens vs batch).
Case make_case(const CaseSpec& spec, Device device, uint64_t data_seed);

// The same input values on another device (and optionally another floating
// dtype, e.g. f64 for an exact reference), with fresh poisoned outputs.
Case copy_inputs_to(const Case& c, Device device, std::optional<DType> dtype = std::nullopt);

// Fills every output with NaN again, so a second run is checked afresh.
void poison_outputs(Case& c);

// The Problem attn derives for this spec on `device`, without allocating
// tensors: runs the real validation on shape-only views. Throws attn::Error.
Problem problem_of(const CaseSpec& spec, Pass pass, Device device);

// Visible (i, j) pairs summed over sequences and query heads (docs/SEMANTICS.md,
// "Visibility"). An arbitrary mask's tensor is not consulted: its pairs are
// those of the window and the lengths, as a dense kernel computes them.
// Closed form per sequence (no loop over rows), in 128 bits: seqlen 2^32 alone
// gives 2^64 pairs, past int64.
unsigned __int128 visible_pairs_wide(const CaseSpec& s);
// The same count; throws attn::Error when it exceeds int64 (use the wide form).
int64_t visible_pairs(const CaseSpec& s);
// A 128-bit count in decimal, for reports and JSON.
std::string decimal(unsigned __int128 v);
// FlashAttention's FLOP count: forward 4 * d * pairs with d = (d_qk + d_v) / 2.
double forward_flops(const CaseSpec& s);
double backward_flops(const CaseSpec& s);  // 2.5x forward

}  // namespace attn::testing
