// flash_sm90's backward: the work of one CTA, from its grid position. The
// grid is (units of a chunk, KV tiles, chunks) over units of (KV head,
// sequence) pairs (flash/heuristics.h: sm90_bwd_group_chunk): under a
// causal mask the first KV tiles carry the most work, and a chunk's units
// start theirs together (the deterministic mode chunks GQA only,
// bwd_group_chunk); in that mode's ascending dQ order chunks stagger each
// unit's tiles (bwd_ascending_dq_chunk); otherwise one unit per chunk, each
// unit's tiles in turn.
// A unit is a pair, or with a head split (bwd_head_split) a part of a pair's
// query heads. A CTA owns kBlockN keys of one pair and walks the query tiles
// that see them, for each query head of its part of the KV head's group
// (GQA: nothing repeated).
#pragma once

#include <cstdint>

#include "backends/flash/params.h"
#include "backends/flash/sequence.cuh"
#include "backends/flash/tile_ranges.h"
#include "backends/flash_sm90/bwd_dq_order.h"
#include "backends/flash_sm90/bwd_params.h"

namespace attn::flash_sm90 {

struct BwdKvBlock {
  int b, h_kv;
  int n, n0;  // its KV tile, and the tile's first key in the sequence
  flash::SeqExtent seq;
  // Key rows it writes: in a padded batch also those past len_kv (dK = dV =
  // 0 there); in thd the rows past a sequence are the next one's.
  int rows_out;
  flash::QTiles mt;  // the query tiles that see its keys
  int64_t tok0;      // the workspace's token of the sequence's row 0
  int hh0, hh1;      // its query heads of the group: [hh0, hh1)
  __device__ bool has_work() const { return mt.first <= mt.last; }
};

// This CTA's block; false where it has none (the last chunk's spare CTAs, or
// a KV tile past its sequence).
template <class Cfg>
__device__ __forceinline__ bool bwd_kv_block(const Sm90BwdParams& args, BwdKvBlock& blk) {
  constexpr int kM = Cfg::kBlockM, kN = Cfg::kBlockN;
  const flash::BwdParams& bp = args.p;
  const flash::FwdParams& p = bp.fwd;
  const int heads_kv = p.h_q / p.h_per_kv, unit = blockIdx.z * bp.group_chunk + blockIdx.x;
  const int pair = unit / args.head_split, part = unit % args.head_split, heads = p.h_per_kv / args.head_split;
  if (pair >= heads_kv * p.batch) return false;
  blk.hh0 = part * heads;
  blk.hh1 = blk.hh0 + heads;
  // Descending dQ order: the later KV tiles, whose adds come first, launch first.
  blk.n = bp.dq_order == kDqDescending ? static_cast<int>(gridDim.y - 1 - blockIdx.y) : static_cast<int>(blockIdx.y);
  blk.h_kv = pair % heads_kv;
  blk.b = pair / heads_kv;
  blk.n0 = blk.n * kN;
  blk.seq = flash::sequence_extent(p, blk.b);
  blk.rows_out = p.packed ? min(kN, blk.seq.len_kv - blk.n0) : min(kN, p.s_kv - blk.n0);
  if (blk.rows_out <= 0) return false;
  // A contiguous run, found exactly from the superset (as flash_sm80's backward does).
  blk.mt = flash::q_tiles<kM, kN>(p, blk.seq, blk.n0);
  auto sees = [&](int m) {
    const flash::KvTiles kt = flash::kv_tiles<kM, kN>(p, blk.seq, m * kM);
    return kt.first <= blk.n && blk.n <= kt.last;
  };
  while (blk.mt.first <= blk.mt.last && !sees(blk.mt.first)) ++blk.mt.first;
  while (blk.mt.first <= blk.mt.last && !sees(blk.mt.last)) --blk.mt.last;
  blk.tok0 = p.packed ? blk.seq.start_q : static_cast<int64_t>(blk.b) * p.s_q;
  return true;
}

}  // namespace attn::flash_sm90
