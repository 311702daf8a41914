// The context-parallel plan: the divisibility rule, chunk ownership and which
// query/key chunk blocks a causal mask skips (see attn/cp.h).
#include <climits>
#include <string>

#include "attn/cp.h"

namespace attn::cp {

void check_lengths(const std::vector<int64_t>& lengths, int cp) {
  if (cp < 1)
    fail(ErrorKind::value, "the context-parallel size must be at least 1", std::to_string(cp), "cp >= 1",
         "pass the number of ranks of the communicator");
  for (size_t s = 0; s < lengths.size(); ++s)
    if (lengths[s] % (2 * cp) != 0)
      fail(ErrorKind::value,
           "sequence " + std::to_string(s) + " cannot be split for context parallelism over " + std::to_string(cp) +
               " ranks",
           "length " + std::to_string(lengths[s]),
           "every sequence length divisible by 2*cp = " + std::to_string(2 * cp) +
               " (each rank holds two of the 2*cp equal chunks, for balanced causal work)",
           "pad the sequence to a multiple of " + std::to_string(2 * cp) +
               ", or allow the fallback that runs such a batch without splitting it (Python: cp_fallback=True)");
}

Chunks chunks_of(int rank, int cp) { return {rank, 2 * int64_t{cp} - 1 - rank}; }

Block block_kind(int64_t q_chunk, int64_t kv_chunk, bool causal) {
  if (!causal || kv_chunk < q_chunk) return Block::full;
  return kv_chunk == q_chunk ? Block::diagonal : Block::skip;
}

}  // namespace attn::cp

namespace attn::cp {
namespace {

// A side of the window seen from a block whose query chunk sits `d` positions
// after its key chunk: key j' is visible to query i' when lo <= j' - i' <= hi.
constexpr int64_t kNone = INT64_MIN;  // unbounded on that side

// The call for query chunk a against key chunk b (chunk length c), offset by
// the halves they sit in; false when nothing in the block is visible.
bool chunk_call(int64_t a, int64_t b, int64_t c, int64_t left, int64_t right, int q_half, int kv_half,
                BlockCall& call) {
  const int64_t d = (a - b) * c;
  const int64_t lo = left < 0 ? kNone : d - left, hi = right < 0 ? kNone : d + right;
  if ((lo != kNone && lo > c - 1) || (hi != kNone && hi < -(c - 1))) return false;
  int64_t fq = 0, fk = 0, n = c;
  if (lo != kNone && lo > 0) fk = lo, n = c - lo;    // keys before lo are never seen
  if (hi != kNone && hi < 0) fq = -hi, n = c + hi;  // queries before -hi see nothing
  // In the trimmed block (equal lengths, so bottom-right = top-left), key j'' is
  // visible to query i'' when lo'' <= j'' - i'' <= hi''.
  const int64_t lo2 = lo == kNone ? kNone : lo + fq - fk, hi2 = hi == kNone ? kNone : hi + fq - fk;
  Window w;
  w.left = lo2 == kNone || -lo2 >= n - 1 ? -1 : -lo2;
  w.right = hi2 == kNone || hi2 >= n - 1 ? -1 : hi2;
  call.q_begin = q_half * c + fq, call.q_end = q_half * c + fq + n;
  call.kv_begin = kv_half * c + fk, call.kv_end = kv_half * c + fk + n;
  // A band ending on the diagonal is a causal call (the backends' fast path).
  call.mask = w.right == 0 ? MaskType::causal : MaskType::no_mask;
  call.window = w.right == 0 ? Window{w.left, -1} : w;
  return true;
}

}  // namespace

std::vector<BlockCall> plan_step(int rank, int step, int cp, int64_t chunk, bool causal, Window window,
                                 bool per_chunk) {
  const int source = ((rank - step) % cp + cp) % cp;
  const int64_t c = chunk;
  if (!per_chunk && window.left < 0 && (causal || window.right < 0)) {
    // One call per step: the local layout [chunk r | chunk 2cp-1-r] makes the
    // own step plain causal, and earlier / later sources one half-block each.
    if (!causal) return {{0, 2 * c, 0, 2 * c, MaskType::no_mask, {}}};
    if (source == rank) return {{0, 2 * c, 0, 2 * c, MaskType::causal, {}}};
    if (source < rank) return {{0, 2 * c, 0, c, MaskType::no_mask, {}}};
    return {{c, 2 * c, 0, 2 * c, MaskType::no_mask, {}}};
  }
  const int64_t left = window.left, right = causal ? 0 : window.right;
  const Chunks mine = chunks_of(rank, cp), theirs = chunks_of(source, cp);
  std::vector<BlockCall> calls;
  for (int qh = 0; qh < 2; ++qh)
    for (int kh = 0; kh < 2; ++kh) {
      BlockCall call{};
      if (chunk_call(qh ? mine.second : mine.first, kh ? theirs.second : theirs.first, c, left, right, qh, kh, call))
        calls.push_back(call);
    }
  return calls;
}

std::string describe_plan(const Options& opts, int cp, int64_t chunk) {
  const bool causal = opts.mask == MaskType::causal || opts.mask == MaskType::padding_causal;
  const bool per_chunk = opts.qkv_format == QkvFormat::thd || opts.window.left >= 0 || opts.window.right >= 0;
  std::string s = "context parallelism over " + std::to_string(cp) + " ranks: each sequence in " +
                  std::to_string(2 * cp) + " chunks";
  if (chunk > 0) s += " of " + std::to_string(chunk) + " tokens";
  s += "\n";
  for (int r = 0; r < cp; ++r) {
    const Chunks c = chunks_of(r, cp);
    int calls = 0, skipped = 0;
    for (int t = 0; t < cp; ++t) {
      const size_t n = plan_step(r, t, cp, chunk > 0 ? chunk : 1, causal, opts.window, per_chunk).size();
      calls += static_cast<int>(n);
      skipped += n == 0;
    }
    s += "  rank " + std::to_string(r) + ": chunks " + std::to_string(c.first) + " and " + std::to_string(c.second) +
         ", " + std::to_string(cp) + " steps, " + std::to_string(calls) + " block calls, " + std::to_string(skipped) +
         " steps skipped\n";
  }
  return s;
}

}  // namespace attn::cp
