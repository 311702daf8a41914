// What both ring passes set up before any transfer (ring_setup.cpp): the checks
// (features, the 2*cp rule, a fingerprint compared across ranks), the shard's
// shape, the work layout (thd: chunk-major token order, so each half of every
// sequence is one packed thd tensor), and the per-block call arguments.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attn/cp.h"
#include "cp/ring_ops.h"

namespace attn::cp::internal {

class Ring {
 public:
  // Checks the call and builds the plan; throws attn::Error before any
  // transfer. `in` holds the local shards.
  Ring(const Options& opts, const Inputs& in, Pass pass, Transport& transport, const Policy& policy,
       const RunContext& ctx);

  int rank() const { return rank_; }
  int size() const { return cp_; }
  Ops& ops() { return *ops_; }
  Transport& transport() { return transport_; }
  std::vector<BlockCall> step(int t) const;

  // The caller's q/k-like tensor in work order (thd: a permuted copy; else itself).
  TensorView to_work(const TensorView& user);
  TensorView lse_to_work(const TensorView& user);
  // Copies the caller's tensor into a work-order buffer of its shape.
  void into_work(const TensorView& user, const TensorView& work);
  // Writes a work-order tensor (fp32 accumulator) back to the caller's.
  void from_work(const TensorView& work, const TensorView& user);
  void lse_from_work(const TensorView& work, const TensorView& user);
  // A fresh contiguous tensor shaped like a work tensor with last dimension `d`.
  TensorView alloc_like(const TensorView& t, DType dtype, int64_t d);
  // lse for a work q (fp32 [b, h_q, s] or [h_q, t]), fresh or over `data`.
  TensorView alloc_lse(const TensorView& q);
  TensorView lse_over(void* data, const TensorView& q_rows) const;
  // Rows [begin, end) of a work q/k-like tensor / lse (a step's call coordinates).
  TensorView rows(const TensorView& t, int64_t begin, int64_t end) const;
  TensorView lse_rows(const TensorView& lse, int64_t begin, int64_t end) const;
  // A contiguous view over `data` shaped like `like` (a block's outputs).
  static TensorView over(void* data, const TensorView& like, DType dtype, int64_t d);

  // Options and Inputs of one block: the call's mask and window, thd's half cu_seqlens.
  Options block_options(const BlockCall& call) const;
  Inputs block_inputs(const BlockCall& call, const TensorView& q, const TensorView& k, const TensorView& v) const;
  const Policy& policy() const { return policy_; }
  const RunContext& ctx() const { return ctx_; }
  QkvFormat format() const { return opts_.qkv_format; }
  void log(const std::string& what) const;
  // A sink / dsink / max_logit view: float32 [h_q] on q's device, else an error.
  static void check_per_head(const TensorView& t, const char* name, const TensorView& q);

 private:
  void check_features(const Inputs& in, Pass pass) const;
  void read_lengths(const Inputs& in);
  void check_ranks_agree(const Inputs& in, Pass pass);
  TensorView cu_single(int64_t n) const;

  Options opts_;
  Policy policy_;
  RunContext ctx_;
  Transport& transport_;
  std::unique_ptr<Ops> ops_;
  int cp_ = 1, rank_ = 0;
  bool causal_ = false, per_chunk_ = false;
  int64_t chunk_ = 0;            // bshd/sbhd: tokens per chunk; thd: 2 (plan units; a call is whole halves)
  int64_t half_tokens_ = 0;      // thd: tokens in one half of the local shard
  std::vector<int64_t> lengths_; // global length of each sequence
  std::vector<int32_t> to_work_index_, to_user_index_;  // thd token permutations (host)
  const int32_t* to_work_ = nullptr;  // uploaded: work token p reads user token index[p]
  const int32_t* to_user_ = nullptr;
  TensorView cu_half_;           // thd: int32 [b + 1], cumulative chunk lengths
  std::vector<int64_t> chunk_start_;  // thd (host): the same, each sequence's first row in a half
  mutable std::map<int64_t, TensorView> cu_single_;  // thd: [0, n] for one sequence's block of n tokens
  int64_t max_chunk_ = 0;
};

}  // namespace attn::cp::internal
