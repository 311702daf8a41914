// The tile ranges of flash_sm80's kernels (and flash_sm90's forward): which
// KV tiles a query tile sees, which query tiles see a KV tile, and which of
// them need no per-element mask. Plain C++ over mask_rule.h, so the host
// tests check them against the rule row by row (tests/backends).
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"
#include "backends/flash/params.h"

namespace attn::flash {

template <typename Int>
ATTN_HOST_DEVICE Int lesser(Int a, Int b) { return a < b ? a : b; }
template <typename Int>
ATTN_HOST_DEVICE Int greater(Int a, Int b) { return a < b ? b : a; }

struct SeqExtent {
  int64_t start_q = 0, start_kv = 0;  // first token (thd); 0 otherwise
  int len_q = 0, len_kv = 0;
  int shift = 0;  // alignment of queries to keys (bottom-right: len_kv - len_q)
};

// Keys [begin, end) visible to query row i, clamped to [0, len_kv].
ATTN_HOST_DEVICE KeyRange<int> row_keys(const FwdParams& p, const SeqExtent& s, int i) {
  const KeyRange<int64_t> r =
      visible_keys<int64_t>(i, s.len_q, s.len_kv, s.shift, p.window_left, p.window_right);
  return {static_cast<int>(r.begin), static_cast<int>(r.end)};
}

// Row i's end of keys, for a tile at or past every row's first key (where
// only the ends cut): for any key j >= row_keys(p, s, i).begin, j < this end
// exactly when j < row_keys(p, s, i).end. In 32 bits and without the clamp of
// an empty row's end up to its begin (at or before such a tile anyway), so a
// fraction of row_keys()'s 64-bit cost on the masked tiles' critical path.
// Rows outside [0, len_q) are not valid rows: their end is not 0 here.
// i + shift >= -len_q, so a window wider than len_q + len_kv reaches the
// last key and is clamped to that (no overflow below 2^29 tokens per sequence).
ATTN_HOST_DEVICE int row_key_end(const FwdParams& p, const SeqExtent& s, int i) {
  if (p.window_right < 0) return s.len_kv;
  const int right = static_cast<int>(lesser(p.window_right, static_cast<int64_t>(s.len_q) + s.len_kv));
  return lesser(i + s.shift + right + 1, s.len_kv);
}

// Row i's first key in 32 bits, the partner of row_key_end(): for every key
// j, begin <= j < row_key_end() exactly when row_keys(p, s, i) contains j
// (an empty row's end then lies at or before its begin). A window wider than
// len_q + len_kv reaches key 0 and is clamped to that.
ATTN_HOST_DEVICE int row_key_begin(const FwdParams& p, const SeqExtent& s, int i) {
  if (p.window_left < 0) return 0;
  const int left = static_cast<int>(lesser(p.window_left, static_cast<int64_t>(s.len_q) + s.len_kv));
  return greater(i + s.shift - left, 0);
}

// How many of a row's accumulator elements lie before key column `end`
// (relative to the thread's first column): element k = 2 na + e is column
// 8 na + e (mma.cuh's layout), so elements [0, count) are the visible ones.
// Non-positive when end is.
ATTN_HOST_DEVICE int accumulator_prefix(int end) {
  return (end >> 3) * 2 + lesser(end & 7, 2);
}

// The KV tiles of query rows [m0, m0 + kBlockM): tiles first..last (none when
// last < first), and the keys [all_begin, all_end) that every valid row sees,
// so a tile inside them needs no per-element mask. Both ends of a row's range
// grow with the row (mask_rule.h), so the first and last valid rows bound them
// (rows before 0, in flash_sm90's first tile of a sequence, are not valid).
struct KvTiles {
  int first = 0, last = -1;
  int all_begin = 0, all_end = 0;
};

template <int kBlockM, int kBlockN>
ATTN_HOST_DEVICE KvTiles kv_tiles(const FwdParams& p, const SeqExtent& s, int m0) {
  KvTiles t;
  const int last_row = lesser(m0 + kBlockM, s.len_q) - 1;
  const KeyRange<int> top = row_keys(p, s, greater(m0, 0)), bottom = row_keys(p, s, last_row);
  if (bottom.end <= top.begin) return t;
  t.first = top.begin / kBlockN;
  t.last = (bottom.end - 1) / kBlockN;
  t.all_begin = bottom.begin;
  t.all_end = top.end;
  return t;
}

// Query tiles [first, last] that may see keys [n0, n0 + kN): a superset from
// the window's bounds (rows whose last key reaches n0 and whose first key is
// before n0 + kN); the backward trims both ends with kv_tiles().
struct QTiles {
  int first = 0, last = -1;
};

template <int kM, int kN>
ATTN_HOST_DEVICE QTiles q_tiles(const FwdParams& p, const SeqExtent& s, int n0) {
  QTiles t;
  if (n0 >= s.len_kv || s.len_q <= 0) return t;
  int64_t lo = 0, hi = s.len_q;
  if (p.window_right >= 0) lo = greater(int64_t{0}, int64_t{n0} - s.shift - p.window_right);
  if (p.window_left >= 0) hi = lesser(int64_t{s.len_q}, int64_t{n0} + kN - s.shift + p.window_left);
  if (lo >= hi) return t;
  t.first = static_cast<int>(lo / kM);
  t.last = static_cast<int>((hi - 1) / kM);
  return t;
}

// Query tiles [first, last] whose every valid row sees all of keys [n0, n0 +
// kN), so they need no per-element mask: found once per CTA instead of per
// tile (kv_tiles() per query tile cost ~70 instructions of 64-bit bounds
// before each tile's first product). Both conditions are monotone in the tile
// (mask_rule.h: both ends of a row's range grow with the row), so the tiles
// form a range:
//   the last valid row's first key <= n0: row + shift - left <= n0;
//   the first row's end >= n0 + kN: row + shift + right + 1 >= n0 + kN.
// The second ignores kv_tiles()'s clamp of an empty row's end up to its
// begin: a subset of the tiles its exact test exempts, so masks stay exact.
template <int kM, int kN>
ATTN_HOST_DEVICE QTiles unmasked_q_tiles(const FwdParams& p, const SeqExtent& s, int n0) {
  QTiles t;
  if (n0 + kN > s.len_kv || s.len_q <= 0) return t;  // a partial KV tile is always masked
  int64_t first = 0, last = (s.len_q - 1) / kM;
  if (p.window_right >= 0) {
    const int64_t row = int64_t{n0} + kN - s.shift - p.window_right - 1;  // the first row allowed
    if (row > 0) first = (row + kM - 1) / kM;
  }
  if (p.window_left >= 0) {
    const int64_t row = int64_t{n0} - s.shift + p.window_left;  // the last row allowed
    if (row < s.len_q - 1) last = row + 1 >= 0 ? (row + 1) / kM - 1 : -1;  // whole tiles up to it
  }
  t.first = static_cast<int>(lesser(first, int64_t{INT32_MAX}));
  t.last = static_cast<int>(last);
  return t;
}

}  // namespace attn::flash
