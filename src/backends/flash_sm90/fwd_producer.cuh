// flash_sm90's forward: the producer. One thread of warpgroup 0 walks the
// work queue and, for each item some row of which sees a key, loads the
// item's Q tile into a Q buffer and its visible K/V tiles, first to last,
// into the kStages-deep ring with TMA. Each buffer is guarded by a "full"
// barrier (its bytes landed) and an "empty" one (every consumer thread done
// reading). It takes the next item once this one's loads are issued (a few
// KV tiles before the consumers need it), not earlier: an item reserved
// while another runs is one an idle SM cannot take. Over a KV cache
// (p.cache) K/V come from the sequence's cache row, or, paged, box by box
// from the blocks the block table names.
#pragma once

#include <cstdint>

#include "backends/flash_sm90/fwd_params.h"
#include "backends/flash_sm90/fwd_smem.cuh"
#include "backends/flash_sm90/fwd_work_queue.cuh"
#include "kernels/sm90/pipeline.cuh"
#include "kernels/sm90/tma.cuh"

namespace attn::flash_sm90 {

// The lane and the warp, read where they are used: held across the walk they
// would take the producer's 24 registers.
__device__ __forceinline__ int lane_id() {
  int lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}
__device__ __forceinline__ int warp_id() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  return tid / 32;
}

// A paged cache's tile is kBlockN / kv_box_rows boxes per 64 columns; box j
// is warp j % kv_warps's, lane j / kv_warps's. The box's first key in the
// tile, kBlockN or more for lanes without one.
__device__ __forceinline__ int paged_box_key(const Sm90FwdParams& args) {
  return (lane_id() * args.kv_warps + warp_id()) * args.kv_box_rows;
}

// The bytes of a kCols-column tile each warp's boxes bring (kv_warps divides
// the tile's boxes), from the parameters: no division on the way to a load.
template <int kCols>
__device__ __forceinline__ uint32_t paged_warp_bytes(const Sm90FwdParams& args) {
  return static_cast<uint32_t>(args.kv_warp_rows * kCols * 2);
}

// A paged cache: where this lane's box of a KV tile (sequence b) lies: its
// block (the table's entry at column at.column) and first row in it (at.row;
// kv_box_rows keys that never cross a block), and where the box goes in each
// 64-column part of the tile (bytes; -1 for lanes without a box). Positions
// past the cache read its last block's entry (their rows are cleared as past
// the sequence). The block id is the block table's value as read: it is
// clamped where it is used (block()), so that nothing waits for the read
// before then. Everything a copy needs but the block id is here, computed
// before the producer waits for the stage: after the wait only the copies
// are issued.
struct PagedBox {
  int table_entry = 0, dst = -1;
  flash::BlockPosition at;
  __device__ __forceinline__ int block(const flash::CacheParams& c) const {
    return flash::clamp_index(table_entry, c.rows);
  }
};
// The box of an item's first tile, keys from key0 (divisions, once per item).
template <class Cfg>
__device__ __forceinline__ PagedBox paged_box(const Sm90FwdParams& args, int b, int key0) {
  const int r = paged_box_key(args);
  if (r >= Cfg::kBlockN) return {};
  const flash::CacheParams& c = args.p.cache;
  const flash::BlockPosition at = flash::block_position(c, args.kv_step, key0 + r);
  return {*flash::block_table_column(c, b, at.column), r * 128, at};
}
// The same lane's box one tile further: additions, no division.
__device__ __forceinline__ PagedBox paged_box_next(const Sm90FwdParams& args, int b, PagedBox box) {
  if (box.dst < 0) return box;
  const flash::CacheParams& c = args.p.cache;
  box.at = flash::next_block_position(c, args.kv_step, box.at);
  box.table_entry = *flash::block_table_column(c, b, box.at.column);
  return box;
}

// One lane of the warp (elect.sync: no lane index to read).
__device__ __forceinline__ bool elect_one() {
  uint32_t pred = 0;
  asm volatile(
      "{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(pred));
  return pred != 0;
}

// One K or V tile, keys [key0, key0 + kBlockN), kCols columns: a box per 64
// columns, or in a paged cache one per kv_box_rows keys and 64 columns, each
// lane of the producer warps its box (paged_box). `bar` expects the bytes
// first: the thread's (one), or per warp its lane 0's, its own boxes' bytes.
template <class Cfg, bool kPaged, int kCols, class Tile>
__device__ __forceinline__ void load_kv_tile(const Sm90FwdParams& args, const CUtensorMap* map, Tile tile,
                                             sm90::Barrier bar, int key0, int h_kv, int seq, PagedBox box) {
  if constexpr (kPaged) {
    // One lane per warp expects the warp's bytes. The other lanes' copies may
    // land first: the barrier's byte count goes below zero until then, and
    // its phase cannot complete before this warp's arrival.
    if (elect_one()) bar.arrive_expect_tx(paged_warp_bytes<kCols>(args));
    if (box.dst >= 0) {
      const int block = box.block(args.p.cache);
#pragma unroll
      for (int cb = 0; cb < kCols / 64; ++cb)
        sm90::tma_load_4d(tile.column_block(cb) + box.dst, map, bar.addr, cb * 64, box.at.row, h_kv, block);
    }
  } else {
    bar.arrive_expect_tx(Cfg::kBlockN * kCols * 2);
#pragma unroll
    for (int cb = 0; cb < kCols / 64; ++cb)
      sm90::tma_load_4d(tile.column_block(cb), map, bar.addr, cb * 64, key0, h_kv, seq);
  }
}

// The producer: one thread (lane 0 of warpgroup 0), or for a paged cache
// (kPaged) kv_warps whole warps, each lane loading its boxes of every KV
// tile, while Q and the work queue stay with warp 0's lane 0, which hands
// each next index to the other warps through shared memory (item_copy, a
// word per parity of the items: warp 0 writes a word again two items later,
// past the next item's barrier, which every warp reaches after its read of
// it). Two instantiations in the kernel, so that the paged lanes'
// registers cost the one-thread walk nothing (it runs in the producer's 24).
template <class Cfg, bool kPaged>
__device__ __forceinline__ void fwd_producer(const Sm90FwdParams& args, const FwdSmem<Cfg>& smem,
                                             FwdWorkQueue<Cfg>& queue) {
  constexpr int kDQK = Cfg::kHeadDimQK, kDV = Cfg::kHeadDimV, kN = Cfg::kBlockN;
  const flash::FwdParams& p = args.p;
  const auto first_warp = [] { return !kPaged || warp_id() == 0; };
  const auto leader = [] { return !kPaged || (warp_id() == 0 && lane_id() == 0); };
  // The next index: warp 0 claims it; with more warps, every warp reads it
  // from the item_copy word of the items' parity (queue.taken).
  const auto next_index = [&] {
    int t = first_warp() ? queue.claim(kPaged) : 0;
    if (kPaged && args.kv_warps > 1) {
      const uint32_t word = smem.item_copy(queue.taken & 1);
      if (leader()) asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(word), "r"(t) : "memory");
      sm90::named_sync(kBarProducers, 32 * args.kv_warps);
      asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(t) : "r"(word) : "memory");
    }
    return t;
  };
  sm90::PipelineState<Cfg::kQBuffers> q_state;  // Q buffers: one use per item with loads
  sm90::PipelineState<Cfg::kStages> kv_state;   // K/V stages: one use per KV tile
  if (leader()) {
    sm90::tma_prefetch_map(&args.q);
    sm90::tma_prefetch_map(&args.k);
    sm90::tma_prefetch_map(&args.v);
  }
  for (int t = blockIdx.x;; t = next_index()) {
    if (first_warp()) queue.publish(t, leader());
    else ++queue.taken;
    if (t >= queue.items()) break;
    const FwdItem w = queue.item(t);
    if (!w.has_work()) continue;
    // TMA coordinates: thd addresses tokens of the packed tensor (one
    // "sequence"); the others (token within the sequence, sequence), K/V at
    // the sequence's cache row where a KV cache holds them (a paged cache:
    // kv_seq = w.b, its block table's row).
    const int seq_coord = p.packed ? 0 : w.b, h_kv = w.h / p.h_per_kv;
    const int kv_seq = p.packed ? 0 : flash::cache_row(p.cache, w.b);
    const int kv_row0 = static_cast<int>(w.seq.start_kv);
    if (first_warp()) {
      const int qb = q_state.stage();
      smem.q_empty(qb).wait(q_state.producer_phase());
      if (leader()) {
        smem.q_full(qb).arrive_expect_tx(Cfg::kSmemQ);
#pragma unroll
        for (int cb = 0; cb < kDQK / 64; ++cb)
          sm90::tma_load_4d(smem.q_tile(qb).column_block(cb), &args.q, smem.q_full(qb).addr, cb * 64,
                            static_cast<int>(w.seq.start_q) + w.m0, w.h, seq_coord);
      }
      q_state.advance();
    }
    // A paged cache's block ids are read a tile ahead, between a tile's K
    // and V: the block table's latency runs while the producer waits for V's
    // stage (the late one: P.V frees it), not between V and the next K, whose
    // stage is free by then and which the consumers need first. The work
    // there is kept to a few additions (paged_box_next): with two divisions
    // per tile paged caches ran 1.5% slower.
    PagedBox box = kPaged ? paged_box<Cfg>(args, kv_seq, kv_row0 + w.tiles.first * kN) : PagedBox{};
    for (int n = w.tiles.first; n <= w.tiles.last; ++n, kv_state.advance()) {
      const int stage = kv_state.stage();
      const uint32_t phase = kv_state.producer_phase();
      smem.k_empty(stage).wait(phase);
      load_kv_tile<Cfg, kPaged, kDQK>(args, &args.k, smem.k_tile(stage), smem.k_full(stage), kv_row0 + n * kN, h_kv,
                                      kv_seq, box);
      const PagedBox next = kPaged && n < w.tiles.last ? paged_box_next(args, kv_seq, box) : PagedBox{};
      smem.v_empty(stage).wait(phase);
      load_kv_tile<Cfg, kPaged, kDV>(args, &args.v, smem.v_tile(stage), smem.v_full(stage), kv_row0 + n * kN, h_kv,
                                     kv_seq, box);
      box = next;
    }
  }
}

}  // namespace attn::flash_sm90
