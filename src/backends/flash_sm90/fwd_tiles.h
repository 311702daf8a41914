// Which query rows a work item of flash_sm90's forward owns. Plain C++ (host
// and device), so the CPU tests check the tiling the kernel uses.
#pragma once

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE
#include "backends/flash/heuristics.h"

namespace attn::flash_sm90 {

// Query tile `idx` of a sequence, counted from its end (0 = the last tile,
// the heaviest under a causal mask): kM rows from m0. The tiles end where the
// sequence's rows end (`extent`: its length in thd, the padded s_q otherwise),
// so where kM does not divide the length the partial tile is the *first*,
// which sees the fewest keys under a causal mask (with 192-row tiles and
// 128-key tiles, 1024 causal rows cost 27 tile products instead of 32).
// Rows [row_begin, rows) of the tile are the sequence's query rows and
// [row_begin, rows_out) the rows it writes (bshd/sbhd with cu_seqlens: also
// the padding rows up to s_q, as out = 0 and lse = -inf); rows before
// row_begin lie before the sequence (m0 < 0) and are neither read as the
// sequence's nor written.
struct QueryTile {
  int m0 = 0;
  int row_begin = 0, rows = 0, rows_out = 0;
  ATTN_HOST_DEVICE bool has_rows() const { return rows > row_begin; }
  ATTN_HOST_DEVICE bool writes() const { return rows_out > row_begin; }
};

// len_q: the sequence's query rows; s_q: the padded length (bshd/sbhd) or the
// longest sequence (thd, `packed`).
ATTN_HOST_DEVICE QueryTile query_tile(int idx, int kM, int len_q, int s_q, bool packed) {
  QueryTile t;
  const int extent = packed ? len_q : s_q;
  t.m0 = extent - (idx + 1) * kM;
  t.row_begin = t.m0 < 0 ? -t.m0 : 0;
  if (t.row_begin > kM) t.row_begin = kM;
  const int rows = len_q - t.m0, rows_out = extent - t.m0;
  t.rows = rows < 0 ? 0 : rows > kM ? kM : rows;
  t.rows_out = rows_out < 0 ? 0 : rows_out > kM ? kM : rows_out;
  return t;
}

// The walk's order: work item t (the t-th a CTA takes from the counter) is
// query tile `tile` (counted from the sequence's end, as above) of query head
// h of sequence b. The (sequence, head) pairs go in sections of `section`
// pairs, and within a section tile-major: every pair's last tile, then every
// pair's last but one, ... With section 1 that is one pair's tiles side by
// side, from the heaviest under a causal mask to the lightest, so the CTAs
// running at once read the same K/V, from L2 (heads fastest would read K/V
// from memory once per query tile). Under a causal mask that order ends the
// walk on heavy tiles too, each pair's last (the heaviest) among the final
// items, where an SM that draws one runs on alone; sections of several pairs
// put every heavy tile of the section first and end it on light ones, as
// FlashAttention-3's scheduler does (fwd_section_pairs() sizes them).
struct WorkItem {
  int b, h, tile;
};
ATTN_HOST_DEVICE WorkItem work_item(int t, int m_blocks, int h_q, int pairs, int section) {
  const int per_section = section * m_blocks;
  const int first = t / per_section * section;  // the section's first pair
  const int left = pairs - first;
  const int n = left < section ? left : section;  // pairs in this section (the last may hold fewer)
  const int r = t - first * m_blocks;
  const int tile = r / n;
  const int pair = first + (r - tile * n);
  return {pair / h_q, pair % h_q, tile};
}

// Pairs per section of the walk: 1 (plain order) unless the tiles of a pair
// differ in work the way a causal mask makes them (a right bound, no left
// one: the last tile the heaviest). Then as many pairs as have K/V within
// about 16 MiB together, so the section's heavy tiles, run side by side,
// still read their K/V from L2 (h_per_kv query heads share one KV head's
// s_kv x (d_qk + d_v) x 2 bytes). Faster than the plain order on the H100's
// causal GQA forward at d 64 and d 128 (level at 1k); a 32 MiB budget is
// slower at d 128 1k (too many pairs at once), 8 MiB at 16k.
constexpr int fwd_section_pairs(int h_per_kv, long long window_left, long long window_right, long long s_kv,
                                int d_qk, int d_v, int pairs) {
  if (!flash::causal_shape(window_left, window_right) || pairs < 1) return 1;
  const long long kv_head_bytes = s_kv * (d_qk + d_v) * 2;
  const long long n = kv_head_bytes > 0 ? flash::units_in_l2_budget(16LL << 20, kv_head_bytes) * h_per_kv : pairs;
  return static_cast<int>(n < 1 ? 1 : n > pairs ? pairs : n);
}

}  // namespace attn::flash_sm90
