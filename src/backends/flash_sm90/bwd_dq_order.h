// flash_sm90's deterministic backward: the fixed order in which the KV tiles
// that see a query tile add its dQ (each behind the tile's counter,
// BwdParams::dq_semaphore). A fixed order repeats bitwise; the right one
// also keeps the CTAs from waiting on each other, because the tile whose
// turn comes next is the one that reaches the query tile next.
//   descending  The diagonal's KV tile first (causal masks and windows with
//               a right edge: KV tile n starts its walk at query tile ~2n, so
//               tile n + 1 has been there first). The grid's KV rows run in
//               reverse, so the tiles a CTA waits on were launched first.
//   ascending   KV tile 0 first, for the other masks: a CTA waits only on
//               lower grid rows, launched before it.
// Either way a CTA waits only on CTAs launched before it, so the order holds
// however few SMs the call gets (another stream's kernels, MPS, green
// contexts). A rotated order for full visibility (KV tile n starting its
// walk at query tile k n, so that the tiles reach a query tile one at a
// time) needed a chunk's CTAs all resident at once and measured no faster
// (docs/perf/LEDGER.md, session 7): not kept.
// Host and device: the launch picks the order, the kernel takes its turns,
// and tests/backends/test_sm90_dq_order.cpp checks the turns are a
// permutation that waits only on CTAs launched earlier.
#pragma once

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE

namespace attn::flash_sm90 {

enum : int { kDqAscending = 0, kDqDescending = 1 };

inline int dq_order(long long window_right) { return window_right >= 0 ? kDqDescending : kDqAscending; }

// The last KV tile that adds into a query tile: kv_tiles()' last, held to
// the sequence's keys (it counts rows whose keys lie past the end as seeing
// a tile there, which no CTA walks).
ATTN_HOST_DEVICE int last_adding_kv_tile(int kv_tiles_last, int len_kv, int block_n) {
  const int end = (len_kv - 1) / block_n;
  return kv_tiles_last < end ? kv_tiles_last : end;
}

// KV tile n's turn among the KV tiles first..last that add into a query
// tile (last from last_adding_kv_tile): 0 adds first.
ATTN_HOST_DEVICE int dq_turn(int order, int first, int last, int n) {
  return order == kDqDescending ? last - n : n - first;
}

}  // namespace attn::flash_sm90
