// What the reference's forward and backward share: reading rows of the
// caller's tensors as doubles, and one query row's scores, softmax and dropout
// factors computed in fp64 exactly as docs/SEMANTICS.md states them.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/mask_rule.h"
#include "attn/problem.h"
#include "core/sequences.h"

namespace attn::reference::internal {

using detail::Sequences;

using detail::checked_sequences;  // core/sequences.h

// Positions a q-like (kv-like) tensor holds for sequence b: the padded length
// in bshd/sbhd, where positions past the true length must still be written
// (with zeros), or just the sequence's tokens in thd.
int64_t stored_rows_q(const Problem& p, const Sequences& seqs, int64_t b);
int64_t stored_rows_kv(const Problem& p, const Sequences& seqs, int64_t b);

// Row (sequence b, position pos, head) of a [.., heads, dim] tensor.
std::vector<double> load_row(const TensorView& t, const Problem& p, int64_t start, int64_t b,
                             int64_t pos, int64_t head, int64_t dim);
void store_row(const TensorView& t, const Problem& p, int64_t start, int64_t b, int64_t pos,
               int64_t head, const std::vector<double>& values);

// One key/value head of one sequence as doubles, loaded once per task and
// reused by every query row that reads it.
struct KvHead {
  int64_t len = 0;                // true length of the sequence's keys
  int64_t d_qk = 0, d_v = 0;
  std::vector<double> k, v;       // [len, d_qk], [len, d_v]
  const double* k_row(int64_t j) const { return k.data() + j * d_qk; }
  const double* v_row(int64_t j) const { return v.data() + j * d_v; }
};
KvHead load_kv_head(const Problem& p, const Inputs& in, const Sequences& seqs, int64_t b,
                    int64_t h_kv);

// The attention row of query i of sequence b, query head h. Vectors are
// indexed by key position j in [0, len_kv); entries outside `keys` are zero.
struct Row {
  KeyRange<int64_t> keys{0, 0};  // keys that padding and the window allow
  std::vector<double> x;         // softmax_scale * q.k (before softcap)
  std::vector<double> p;         // softmax probability exp(s - lse); 0 where masked
  std::vector<double> z;         // dropout factor: keep / (1 - p_drop), 1 without dropout
  double lse = 0.0;              // log-sum-exp of the scores and the sink; the sink's logit when no key counts
  double max_score = 0.0;        // the largest score s over the visible keys (-inf: none; NaN if one is NaN)
};

// The sink logit of query head h (SEMANTICS.md "Softmax sinks"): -inf for
// vanilla (no sink), 0 for off-by-one, sink[h] for learnable.
double sink_logit(const Problem& p, const Inputs& in, int64_t h);


// Requires i < len_q(b). q holds the query row (d_qk doubles). The forward
// passes no `given_lse` and gets the row's own; the backward passes the
// caller's lse (SEMANTICS.md "Backward": the given out and lse are the
// forward's result), so p = exp(s - given_lse) and r.lse = given_lse.
Row attention_row(const Problem& p, const Inputs& in, const Sequences& seqs, const KvHead& kv,
                  const double* q, int64_t b, int64_t h, int64_t i, const double* given_lse = nullptr);

double dot(const double* a, const double* b, int64_t n);

}  // namespace attn::reference::internal
