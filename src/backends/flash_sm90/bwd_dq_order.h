// flash_sm90's deterministic backward: the fixed order in which the KV tiles
// that see a query tile add its dQ (each behind the tile's counter,
// BwdParams::dq_semaphore). A fixed order repeats bitwise; the right one
// also keeps the CTAs from waiting on each other, because the tile whose
// turn comes next is the one that reaches the query tile next.
//   ascending   KV tile 0 first. Safe for every mask (a CTA waits only on
//               lower grid rows, launched before it) but, where every KV tile
//               starts its walk at the same query tile, each add waits on
//               the one before: a chain per query tile.
//   descending  The diagonal's KV tile first (causal masks and windows with
//               a right edge: KV tile n starts its walk at query tile ~2n, so
//               tile n + 1 has been there first). The grid's rows run in
//               reverse, so the tiles a CTA waits on were launched first.
//   rotated     Full visibility (no causal edge, no window): KV tile n walks
//               the query tiles from k n on, k = query tiles / KV tiles, and
//               wraps, so each query tile is reached by one KV tile at a
//               time; its adds go in that order. A CTA may wait on a later
//               grid row, so the host takes it only where a chunk's CTAs fit
//               on the GPU at once (one CTA per SM).
// Host and device: the plan picks the order, the kernel takes its turns, and
// tests/backends/test_flash_tile_ranges.cpp checks the turns are a
// permutation in the order the walks arrive.
#pragma once

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE

namespace attn::flash_sm90 {

enum : int { kDqAscending = 0, kDqDescending = 1, kDqRotated = 2 };

inline int dq_order(long long window_left, long long window_right, int group_chunk, int kv_tiles, int sm_count) {
  if (window_right >= 0) return kDqDescending;
  if (window_left < 0 && static_cast<long long>(group_chunk) * kv_tiles <= sm_count) return kDqRotated;
  return kDqAscending;
}

// Where KV tile n of kv_tiles starts its walk over q_tiles query tiles
// (rotated order); 0 where there are more KV tiles than query tiles (such
// sequences add in ascending order).
ATTN_HOST_DEVICE int dq_rotation(int q_tiles, int kv_tiles, int n) {
  return kv_tiles > 0 && kv_tiles <= q_tiles ? (q_tiles / kv_tiles) * n : 0;
}

// The last KV tile that adds into a query tile: kv_tiles()' last, held to
// the sequence's keys (it counts rows whose keys lie past the end as seeing
// a tile there, which no CTA walks).
ATTN_HOST_DEVICE int last_adding_kv_tile(int kv_tiles_last, int len_kv, int block_n) {
  const int end = (len_kv - 1) / block_n;
  return kv_tiles_last < end ? kv_tiles_last : end;
}

// KV tile n's turn among the KV tiles first..last that add into a query
// tile (last from last_adding_kv_tile): 0 adds first. `c`: the query tile's place in the walk's range (m -
// mt.first), `q_tiles`: that range's length (rotated order only).
ATTN_HOST_DEVICE int dq_turn(int order, int first, int last, int n, int c, int q_tiles) {
  const int j = n - first, count = last - first + 1;
  if (order == kDqDescending) return last - n;
  if (order != kDqRotated || count > q_tiles) return j;
  // KV tile j arrives at c after (c - k j) mod q_tiles steps: first the
  // tiles j <= c / k, from the nearest down, then the others from the last.
  const int k = q_tiles / count, near = c / k < count - 1 ? c / k : count - 1;
  return j <= near ? near - j : near + count - j;
}

}  // namespace attn::flash_sm90
