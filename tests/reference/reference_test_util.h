// Helpers for the reference backend's tests: a call's contents as doubles in a
// padded [b, s, h, d] layout, materialized in any format, dtype and stride
// pattern, run through validation and the reference, and read back to that
// layout so results of different formats compare element by element. Also a
// naive forward written straight from docs/SEMANTICS.md, independent of the
// reference's code, and central-difference gradients.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attn/problem.h"

namespace attn::reftest {

struct Dims {
  int64_t b = 1, s_q = 1, s_kv = 1, h_q = 1, h_kv = 1, d_qk = 1, d_v = 1;
};

// A tensor broadcastable to [b, h_q, s_q, s_kv] (bias, attn_mask): row-major
// doubles of `shape`. Stored as q's dtype when follow_q, else as `dtype`.
struct Broadcast4 {
  std::array<int64_t, 4> shape{};
  std::vector<double> values;
  bool follow_q = true;
  DType dtype = DType::f32;
  bool defined() const { return !values.empty(); }
  int64_t index(int64_t b, int64_t h, int64_t i, int64_t j) const;  // with broadcasting
  double at(int64_t b, int64_t h, int64_t i, int64_t j) const { return values[index(b, h, i, j)]; }
};

// The contents of one call. q, k, v, dout are padded [b, s, h, d] arrays; the
// positions past a sequence's true length hold values the reference must ignore.
struct Data {
  Dims dims;
  std::vector<int64_t> len_q, len_kv;  // true lengths per sequence; empty = full
  std::vector<double> q, k, v, dout;   // [b,s_q,h_q,d_qk] [b,s_kv,h_kv,d_qk] [b,s_kv,h_kv,d_v] [b,s_q,h_q,d_v]
  Broadcast4 bias;                     // post_scale_bias when defined
  Broadcast4 mask;                     // attn_mask when defined (pass mask=arbitrary)
  std::vector<double> alibi;           // slopes [h_q] or [b, h_q]
  bool alibi_per_batch = false;
  std::vector<double> sink;            // learnable sink logits [h_q] (stored as fp32) when not empty

  int64_t lq(int64_t b) const { return len_q.empty() ? dims.s_q : len_q[b]; }
  int64_t lkv(int64_t b) const { return len_kv.empty() ? dims.s_kv : len_kv[b]; }
  bool has_lengths() const { return !len_q.empty(); }
  int64_t iq(int64_t b, int64_t s, int64_t h, int64_t c) const {
    return ((b * dims.s_q + s) * dims.h_q + h) * dims.d_qk + c;
  }
  int64_t ik(int64_t b, int64_t s, int64_t h, int64_t c) const {
    return ((b * dims.s_kv + s) * dims.h_kv + h) * dims.d_qk + c;
  }
  int64_t iv(int64_t b, int64_t s, int64_t h, int64_t c) const {
    return ((b * dims.s_kv + s) * dims.h_kv + h) * dims.d_v + c;
  }
  int64_t io(int64_t b, int64_t s, int64_t h, int64_t c) const {  // out, dout
    return ((b * dims.s_q + s) * dims.h_q + h) * dims.d_v + c;
  }
  int64_t il(int64_t b, int64_t h, int64_t s) const { return (b * dims.h_q + h) * dims.s_q + s; }  // lse
};

// Random q, k, v, dout uniform in [lo, hi); no bias, mask or ALiBi.
Data make_data(const Dims& dims, uint64_t seed, double lo = -1.0, double hi = 1.0);
// q = k = 0 (every score 0) and v[j] = e_j (d_v = s_kv), so out[i] is row i of
// the probabilities (times the dropout factors): the matrix made visible.
Data probe_data(Dims dims, uint64_t seed);
Broadcast4 random_broadcast4(std::array<int64_t, 4> shape, uint64_t seed, double lo = -1.0, double hi = 1.0);

struct Spec {
  QkvFormat format = QkvFormat::bshd;
  DType dtype = DType::f64;
  bool strided = false;   // every tensor a non-contiguous view inside a larger buffer
  bool backward = true;
  bool dbias = false;     // ask backward for dbias (the data must have a bias)
  // When set, the backward is given this out (padded layout of Data) instead of
  // the forward's: the backward takes its out as given (SEMANTICS.md "Backward").
  const std::vector<double>* given_out = nullptr;
  bool max_logit = false;  // ask the forward for max_logit
  bool dsink = false;      // ask the backward for dsink (opts.softmax_type learnable)
};

// Outputs in the padded layouts of Data (out like dout, lse [b, h_q, s_q], dq
// like q, ...). Positions a thd tensor does not hold read as 0 (lse as the
// sink logit: -inf without a sink). max_logit and dsink are [h_q].
struct Result {
  std::vector<double> out, lse, dq, dk, dv, dbias, max_logit, dsink;
};

// The sink logit of each query head for opts.softmax_type (SEMANTICS.md
// "Softmax sinks"): -inf (vanilla), 0 (off-by-one) or d.sink rounded to fp32.
std::vector<double> sink_logits(const Data& d, const Options& opts);

// Validates with validate_forward/validate_backward (opts.qkv_format is set
// from spec; thd's max_seqlen from dims when 0), runs the reference and reads
// the outputs back. Outputs start as NaN: the run fails the current test
// (ADD_FAILURE) if an element of an output view stays unwritten or an element
// outside the views is written.
Result run_reference(const Data& d, Options opts, const Spec& spec);

// The same call with q, k, v, out packed in one [b, s, 3, h, d] buffer (needs
// h_q == h_kv, d_qk == d_v, s_q == s_kv) and dq, dk, dv likewise; bshd only.
Result run_reference_packed_qkv(const Data& d, Options opts);

// Forward written from docs/SEMANTICS.md alone (out, lse and max_logit), in the padded layout.
Result naive_forward(const Data& d, const Options& opts);

// sum(out * dout) of an fp64 bshd forward: the loss whose gradients backward
// computes.
double loss(const Data& d, const Options& opts);

// Central differences of loss() w.r.t. every element of the vector `member`
// selects in a copy of d.
std::vector<double> numeric_grad(const Data& d, const Options& opts,
                                 const std::function<std::vector<double>&(Data&)>& member,
                                 double eps = 1e-5);

// The reference backward's dq, dk, dv (dbias with a bias, dsink with a
// learnable sink) against central differences of its forward with `step`,
// each within `tol`, and each with some signal (a zero gradient would pass
// trivially). `what` names the case in failures.
void expect_gradients_match_differences(const Data& d, const Options& opts, double step, double tol,
                                        const std::string& what = "");

// Largest |x|.
double max_abs(const std::vector<double>& v);

// Each value rounded to dtype t and back (identity for f64).
std::vector<double> round_to(const std::vector<double>& values, DType t);
// q, k, v, dout rounded to t; a bias that follows q rounded to t as well.
Data rounded(const Data& d, DType t);

// Sets an environment variable for a scope (ATTN_NUM_THREADS), restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Largest |a_i - b_i|; NaN compares as infinitely far. Sizes must match.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);
// True when every element is bitwise the same double (so -inf == -inf, 0 == 0).
bool identical(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace attn::reftest
