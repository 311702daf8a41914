// Context parallelism: one long sequence split over `cp` ranks (DESIGN.md,
// "Context parallelism"). Each sequence is cut into 2*cp chunks of equal length;
// rank r holds chunks r and 2cp-1-r, so causal work is balanced. K/V chunks
// travel around the ring; each rank merges its partial outputs by their LSE in
// fp32. The backward runs the same ring: each block's backward takes the whole
// sequence's out and lse (SEMANTICS.md "Backward"), dq accumulates in fp32 on
// its rank, dk/dv accumulate in fp32 in a buffer that travels with the K/V and
// arrives back at its owner after the last step.
//
// Status (2026-11-23): plan, rules, forward and backward over any Transport,
// for bshd, sbhd and thd, causal (top-left) and not, sliding windows (thd:
// one block call per sequence, since block bounds follow each sequence's chunk
// length), GQA; host tensors checked on the CPU with in-process ranks (cp 1-3)
// and an NCCL transport for CUDA tensors (ATTN_HAVE_NCCL builds), which
// matched the one-GPU result within bf16 tolerances on 2x H200 for bshd, sbhd,
// thd, causal or not, GQA and windows in bshd (windows in thd, added later
// the same day, are checked on the CPU only), and ran 128k tokens (h32 d128
// causal, fwd+bwd) at 1.87x one GPU (bench/cp.py, docs/PERF.md). Not yet:
// padding masks in bshd/sbhd, bias/ALiBi/arbitrary masks, dropout (each is
// refused with a reason), the unsplit fallback's passes in C++: its plan is
// here (uses_fallback, fallback_piece, rank_positions), its passes are
// Python's cp_fallback (attn/cp.py, docs/CP.md), which runs batches that break
// the rule, and padded bshd/sbhd, by gathering K/V over torch.distributed
// (CPU-tested over gloo).
//
// Local tensors: bshd [b, 2c, h, d] / sbhd [2c, b, h, d] hold chunk r then chunk
// 2cp-1-r of each sequence (c = s / (2cp)); thd holds, per sequence, its chunk r
// then its chunk 2cp-1-r, packed; thd calls pass the *global* cu_seqlens (of the
// whole sequences, as TransformerEngine does), whose values are read on the host.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/attn.h"

namespace attn::cp {

// The index of the first sequence whose length is not a multiple of 2*cp
// (length 1 included), or -1 when every sequence keeps the rule.
int64_t first_rule_breaker(const std::vector<int64_t>& lengths, int cp);

// The fix line's second half: how a caller runs a batch that breaks the rule
// unsplit instead. Callers with their own spelling (Python's shard/unshard and
// calls: cp_fallback=True) pass theirs.
inline constexpr const char* kAllowFallback =
    "allow the fallback that runs such a batch without splitting it (Python: cp_fallback=True)";

// Throws attn::Error (value) naming the first sequence whose length is not a
// multiple of 2*cp (length 1 included): the rule, the length and the fixes
// ("pad the sequence to a multiple of 2*cp, or " + allow_fallback).
void check_lengths(const std::vector<int64_t>& lengths, int cp, const std::string& allow_fallback = kAllowFallback);

// The unsplit fallback (docs/CP.md, "The fallback"; run by Python's
// cp_fallback=True): all or nothing. With the fallback allowed, one sequence
// that breaks the rule sends the whole batch into the fallback layout; without
// it, such a batch is check_lengths's error. False: the ring's chunks.
bool uses_fallback(const std::vector<int64_t>& lengths, int cp, bool allow_fallback,
                   const std::string& allow_fallback_fix = kAllowFallback);

// The fallback's piece of a sequence of `length` rows on `rank`: rows
// [rank*length/cp, (rank+1)*length/cp), contiguous; pieces differ by at most
// one row and are empty where length < cp.
struct Piece {
  int64_t begin, end;
};
Piece fallback_piece(int64_t length, int rank, int cp);

// The rows `rank` holds of sequences packed one after another (thd; for
// bshd/sbhd pass one sequence: positions along s), as global positions in the
// order they sit in its local tensors: chunks r and 2cp-1-r of each sequence
// (fallback false: every length must keep the rule), or each sequence's
// fallback piece.
std::vector<int64_t> rank_positions(const std::vector<int64_t>& lengths, int rank, int cp, bool fallback);

// How many rows each rank holds in the fallback layout (the sum of its pieces), rank order.
std::vector<int64_t> fallback_rows(const std::vector<int64_t>& lengths, int cp);

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

// Moves buffers around the ring: send to (rank+1) % size, receive from
// (rank-1+size) % size. Every rank makes the same calls in the same order.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Starts one exchange of `bytes` each way. On a device it returns at once and
  // the transfer begins after the work already queued on the compute stream;
  // on the host it may complete before returning.
  virtual void start(const void* send, void* recv, int64_t bytes) = 0;
  // Later compute waits for every exchange started so far.
  virtual void wait() {}
  // Every rank's `bytes` of host data, in rank order, on every rank (blocking).
  virtual void all_gather_host(const void* mine, void* all, int64_t bytes) = 0;
};

// One ring step's work: the local query rows [q_begin, q_end) against the key
// rows [kv_begin, kv_end) of the K/V held at that step (local coordinates per
// sequence, in [0, 2c)), with the mask (no_mask or causal) and window
// (bottom-right aligned, equal lengths) that reproduce the whole sequence's.
struct BlockCall {
  int64_t q_begin, q_end, kv_begin, kv_end;
  MaskType mask;
  Window window;
  // thd in the ring: 0 = the block covers whole halves of every sequence;
  // n > 0 = one sequence's block of n query and n key tokens (windowed thd,
  // whose block bounds depend on each sequence's chunk length).
  int64_t seq_tokens = 0;
};
// The calls of step `step` on rank `rank` (whose K/V comes from rank - step),
// chunk length c; empty when the mask hides the whole step. `whole_halves`
// (thd, and any windowed call) keeps each call inside one chunk per side; else
// a step is one call. Pure: the plan tests and `explain` read it.
std::vector<BlockCall> plan_step(int rank, int step, int cp, int64_t chunk, bool causal, Window window,
                                 bool per_chunk);

// The plan in words: chunks per rank, calls per step and the steps skipped.
std::string describe_plan(const Options& opts, int cp, int64_t chunk);

// One rank's forward and backward over a transport. Tensors are local shards
// (see above) on the host or one CUDA device; ctx.stream is the compute stream.
// Every block runs through attn::forward / attn::backward with `policy`, so any
// backend that returns lse computes a step. Throws attn::Error before any
// transfer when the call cannot run (rule, mismatch between ranks, feature).
void ring_forward(const Options& opts, const ForwardArgs& local, Transport& transport,
                  const Policy& policy = Policy::from_env(), const RunContext& ctx = {});
void ring_backward(const Options& opts, const BackwardArgs& local, Transport& transport,
                   const Policy& policy = Policy::from_env(), const RunContext& ctx = {});

// A communicator handle: the caller's NCCL communicator (ncclComm_t) with this
// process's rank and the ring's size. Absent (nccl_comm == nullptr) = one GPU.
struct Communicator {
  void* nccl_comm = nullptr;  // ncclComm_t, owned by the caller
  int rank = 0;
  int size = 1;
};

// True when this build has the NCCL transport (ATTN_HAVE_NCCL).
bool nccl_available();
// For callers without a communicator of their own (Python): a fresh NCCL unique
// id (rank 0 makes it, every rank receives it), a communicator over it on
// `device`, and its destruction. Throw attn::Error without NCCL.
std::vector<unsigned char> nccl_unique_id();
Communicator nccl_init(const std::vector<unsigned char>& unique_id, int rank, int size, int device);
void nccl_destroy(Communicator& comm);

// attn::forward / attn::backward with context parallelism over `comm`: CUDA
// tensors of one device, the ring's exchanges on attn's own communication
// stream, the blocks on ctx.stream. comm.nccl_comm == nullptr runs the plain call.
void forward(const Options& opts, const ForwardArgs& local, const Communicator& comm, const RunContext& ctx = {},
             const Policy& policy = Policy::from_env());
void backward(const Options& opts, const BackwardArgs& local, const Communicator& comm, const RunContext& ctx = {},
              const Policy& policy = Policy::from_env());

}  // namespace attn::cp
