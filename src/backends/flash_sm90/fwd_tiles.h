// Which query rows a work item of flash_sm90's forward owns. Plain C++ (host
// and device), so the CPU tests check the tiling the kernel uses.
#pragma once

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE

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

}  // namespace attn::flash_sm90
