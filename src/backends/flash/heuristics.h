// Scheduling heuristics both flash backends share: the mask shape whose
// first KV tiles (and last query tiles) carry the most work, and how many
// (sequence, head) pairs keep their K/V or Q/dO within an L2 budget.
// Plain C++: the host chooses with them, the CPU tests check them.
#pragma once

namespace attn::flash {

// A right bound and no left one (causal, bottom-right causal; not a band):
// a query tile's keys grow with its row, so the last query tile is the
// heaviest and the first KV tile is seen by the most query tiles.
constexpr bool causal_shape(long long window_left, long long window_right) {
  return window_right >= 0 && window_left < 0;
}

// How many units of `unit_bytes` fit an L2 budget of `budget_bytes` (the
// data CTAs running side by side read together); 0 when unit_bytes is 0.
constexpr long long units_in_l2_budget(long long budget_bytes, long long unit_bytes) {
  return unit_bytes > 0 ? budget_bytes / unit_bytes : 0;
}

// The backward's first KV tiles carry the most work: GQA under a causal
// shape, where each CTA of those tiles walks most query tiles for every head
// of its group.
constexpr bool bwd_first_kv_tiles_heavy(int h_per_kv, long long window_left, long long window_right) {
  return h_per_kv > 1 && causal_shape(window_left, window_right);
}

// The backward's chunked grid (pairs of a chunk, KV tiles, chunks): (KV
// head, sequence) pairs in chunks, the KV tiles slowest within a chunk. Under
// bwd_first_kv_tiles_heavy the heavy first KV tiles of a chunk's pairs start
// together, and only the chunk's Q/dO rows are in flight: chunks of about
// 32 MiB of them (h_per_kv x s_q x (d_qk + d_v) x 2 bytes per pair);
// otherwise one pair per chunk.
// `chunk` pairs per chunk held to what the grid takes: at least 1, and
// enough that at most 65535 chunks (grid z) cover the pairs; at most pairs.
constexpr int bwd_clamp_group_chunk(long long chunk, int pairs) {
  const long long fewest = (pairs + 65534LL) / 65535;
  chunk = chunk > pairs ? pairs : chunk;
  return static_cast<int>(chunk < fewest ? fewest : chunk < 1 ? 1 : chunk);
}
// flash_sm90's backward: how many CTAs share a KV tile's query heads under
// bwd_first_kv_tiles_heavy with 8 or more heads per KV head, where the first
// KV tiles' CTAs each walking every head's query tiles would set the call's
// length (GQA 8, causal, 4k: one CTA's walk was 83% of the call). Two: each
// takes half the heads, and their dK / dV partials meet in an fp32 sum,
// 0 + a + b, the same bits in either order. 1: no split.
constexpr int bwd_head_split(int h_per_kv, long long window_left, long long window_right) {
  return h_per_kv >= 8 && h_per_kv % 2 == 0 && causal_shape(window_left, window_right) ? 2 : 1;
}

// The backward chunks' budget of rows in flight (bwd_group_chunk, bwd_ascending_dq_chunk).
inline constexpr long long kBwdChunkBytes = 32LL << 20;

constexpr int bwd_group_chunk(int h_per_kv, long long window_left, long long window_right, long long s_q, int d_qk,
                              int d_v, int pairs) {
  const long long pair_bytes = static_cast<long long>(h_per_kv) * s_q * (d_qk + d_v) * 2;
  const bool heavy = bwd_first_kv_tiles_heavy(h_per_kv, window_left, window_right) && pair_bytes > 0;
  return bwd_clamp_group_chunk(heavy ? units_in_l2_budget(kBwdChunkBytes, pair_bytes) : 1, pairs);
}

// flash_sm90's backward in the default mode: as bwd_group_chunk, and under a
// causal shape with one query head per unit (MHA) chunks of about 8 MiB of
// Q/dO rows too. One pair per chunk walked a pair's KV tiles in turn, so the
// last pairs' heavy first KV tiles started near the call's end; in chunks
// the first KV tiles of a chunk's pairs start together. H200, bf16, against
// SDPA cuDNN: d 128 4k causal 0.90x -> 0.95x, d 256 4k causal 1.18x ->
// 1.21x; 32 MiB chunks and all pairs in one chunk were slower at d 256 1k
// causal (1.01x, 0.59x against 1.13x: the rows in flight outgrow L2).
inline constexpr long long kSm90BwdMhaChunkBytes = 8LL << 20;

constexpr int sm90_bwd_group_chunk(int heads, long long window_left, long long window_right, long long s_q, int d_qk,
                                   int d_v, int pairs) {
  if (heads > 1 || !causal_shape(window_left, window_right))
    return bwd_group_chunk(heads, window_left, window_right, s_q, d_qk, d_v, pairs);
  return bwd_clamp_group_chunk(units_in_l2_budget(kSm90BwdMhaChunkBytes, s_q * (d_qk + d_v) * 2), pairs);
}

// flash_sm90's deterministic backward in the ascending dQ order (no right
// edge): chunks of about 32 MiB of Q, dO and dQ's fp32 rows. KV tile n of a
// chunk's pairs launches after tile n - 1 of all of them, so a pair's tiles
// start staggered, as the CTAs of tile n - 1 finish, where one pair per
// chunk started them together each wave and tile n waited n hand-offs (the
// mode's cost at d 128: 1.05x -> 1.01x the default's time, H200). A pair's
// CTAs share a chunk, so each still waits only on CTAs launched before it.
constexpr int bwd_ascending_dq_chunk(int h_per_kv, long long s_q, int d_qk, int d_v, int pairs) {
  const long long pair_bytes = static_cast<long long>(h_per_kv) * s_q * ((d_qk + d_v) * 2 + d_qk * 4);
  return bwd_clamp_group_chunk(units_in_l2_budget(kBwdChunkBytes, pair_bytes), pairs);
}

}  // namespace attn::flash
