// The context-parallel plan: the divisibility rule, the fallback's layout for
// batches that break it, chunk ownership and which query/key chunk blocks a
// causal mask skips (see attn/cp.h).
#include <climits>
#include <string>

#include "attn/cp.h"

namespace attn::cp {

namespace {

void check_size(int cp) {
  if (cp < 1)
    fail(ErrorKind::value, "the context-parallel size must be at least 1", std::to_string(cp), "cp >= 1",
         "pass the number of ranks of the communicator");
}

void check_rank(int rank, int cp) {
  check_size(cp);
  if (rank < 0 || rank >= cp)
    fail(ErrorKind::value, "a context-parallel rank is outside the ring", "rank " + std::to_string(rank),
         "0 <= rank < cp = " + std::to_string(cp), "pass this process's rank in the communicator");
}

}  // namespace

int64_t first_rule_breaker(const std::vector<int64_t>& lengths, int cp) {
  check_size(cp);
  for (size_t s = 0; s < lengths.size(); ++s)
    if (lengths[s] % (2 * int64_t{cp}) != 0) return static_cast<int64_t>(s);
  return -1;
}

void check_lengths(const std::vector<int64_t>& lengths, int cp, const std::string& allow_fallback) {
  const int64_t s = first_rule_breaker(lengths, cp);
  if (s < 0) return;
  const std::string two_cp = std::to_string(2 * int64_t{cp});
  fail(ErrorKind::value,
       "sequence " + std::to_string(s) + " cannot be split for context parallelism over " + std::to_string(cp) +
           " ranks",
       "length " + std::to_string(lengths[static_cast<size_t>(s)]),
       "every sequence length divisible by 2*cp = " + two_cp +
           " (each rank holds two of the 2*cp equal chunks, for balanced causal work)",
       "pad the sequence to a multiple of " + two_cp + ", or " + allow_fallback);
}

bool uses_fallback(const std::vector<int64_t>& lengths, int cp, bool allow_fallback,
                   const std::string& allow_fallback_fix) {
  if (!allow_fallback) {
    check_lengths(lengths, cp, allow_fallback_fix);
    return false;
  }
  return first_rule_breaker(lengths, cp) >= 0;
}

Piece fallback_piece(int64_t length, int rank, int cp) {
  check_rank(rank, cp);
  if (length < 0)
    fail(ErrorKind::value, "a sequence length is negative", std::to_string(length), "length >= 0",
         "pass the lengths of the whole sequences");
  return {rank * length / cp, (rank + 1) * length / cp};
}

std::vector<int64_t> rank_positions(const std::vector<int64_t>& lengths, int rank, int cp, bool fallback) {
  check_rank(rank, cp);
  if (!fallback) check_lengths(lengths, cp);
  std::vector<int64_t> pos;
  int64_t start = 0;
  for (const int64_t n : lengths) {
    if (fallback) {
      const Piece p = fallback_piece(n, rank, cp);
      for (int64_t i = p.begin; i < p.end; ++i) pos.push_back(start + i);
    } else {
      const int64_t c = n / (2 * int64_t{cp});
      const Chunks ch = chunks_of(rank, cp);
      for (const int64_t chunk : {ch.first, ch.second})
        for (int64_t i = 0; i < c; ++i) pos.push_back(start + chunk * c + i);
    }
    start += n;
  }
  return pos;
}

std::vector<int64_t> fallback_rows(const std::vector<int64_t>& lengths, int cp) {
  check_size(cp);
  std::vector<int64_t> rows(static_cast<size_t>(cp), 0);
  for (int r = 0; r < cp; ++r)
    for (const int64_t n : lengths) {
      const Piece p = fallback_piece(n, r, cp);
      rows[static_cast<size_t>(r)] += p.end - p.begin;
    }
  return rows;
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
