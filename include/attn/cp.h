// Context parallelism: one long sequence split over `cp` ranks (DESIGN.md,
// "Context parallelism"). Each sequence is cut into 2*cp chunks of equal length;
// rank r holds chunks r and 2cp-1-r, so causal work is balanced. K/V chunks
// travel around the ring; each rank merges its partial outputs by their LSE.
//
// Status (2026-11-23): the plan (rules, chunk ownership, which blocks a causal
// mask skips), the LSE merge and a ring forward over an abstract transport,
// checked on the CPU with in-process ranks. The NCCL transport, the backward,
// thd and the Python API are the next steps (issue 9).
//
// The backward needs a decision first: a ring backward runs each block's
// backward with the *final* out and lse (P = exp(s - lse_final), D = rowsum(dout
// * out_final)), so the blocks' gradients add up to the whole. cudnn (and
// FlashAttention-style kernels) read the given out and lse; `reference` and
// `unfused` recompute them from q, k, v and ignore the caller's, so their
// block gradients come out normalized per block (tried: off by 0.2-2 on the CPU).
// Either they honour the given out/lse (the reference then inherits fp32 lse
// rounding, ~1e-7) or the call gets an option saying so.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/attn.h"

namespace attn::cp {

// Throws attn::Error (value) naming the first sequence whose length is not a
// multiple of 2*cp (length 1 included): the rule, the length and the fixes.
void check_lengths(const std::vector<int64_t>& lengths, int cp);

// The two chunks rank r holds, in the order they sit in its local tensors.
struct Chunks {
  int64_t first, second;  // chunk indices in [0, 2cp): r and 2cp-1-r
};
Chunks chunks_of(int rank, int cp);

// What a query chunk sees of a key chunk under a causal mask (top-left, chunks
// of equal length): everything, its own diagonal (causal inside), or nothing.
// Without a causal mask every block is `full`.
enum class Block { skip, full, diagonal };
Block block_kind(int64_t q_chunk, int64_t kv_chunk, bool causal);

// Moves one rank's K/V buffer to the next rank of the ring and receives the
// previous rank's, in one step (NCCL send/recv on the device; in-process in tests).
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // send to (rank+1) % size, receive from (rank-1+size) % size; bytes each.
  virtual void ring_step(const void* send, void* recv, int64_t bytes) = 0;
};

// One rank's forward, bshd, no_mask or causal (top-left): q, k, v hold this
// rank's two chunks of every sequence ([b, 2*chunk, h, d], chunk order of
// chunks_of()); out and lse (fp32 [b, h_q, 2*chunk]) receive this rank's rows of
// the full-sequence result. Host tensors (fp32/fp64) in this version; every
// block runs through attn::forward with `policy`.
void ring_forward(const Options& opts, const ForwardArgs& local, Transport& transport, const Policy& policy = {});

}  // namespace attn::cp
