// flash_sm90's forward: a consumer warpgroup's main loop over one item's KV
// tiles. S = Q.K^T on wgmma (both operands in shared memory), the softmax in
// registers (fwd_softmax.cuh), O +=
// P.V on wgmma with P from registers and V read MN-major. Tile i's Q.K^T runs
// beside tile i-1's P.V, and the consumers take turns issuing their products
// (FlashAttention-3's intra-warpgroup overlap and ping-pong), so one's
// softmax runs while another's products occupy the tensor cores.
#pragma once

#include <cstdint>

#include "backends/flash/online_softmax.cuh"
#include "backends/flash/tile_ranges.h"
#include "backends/flash_sm90/fwd_epilogue.cuh"
#include "backends/flash_sm90/fwd_smem.cuh"
#include "backends/flash_sm90/fwd_softmax.cuh"
#include "backends/flash_sm90/fwd_storage.cuh"
#include "backends/flash_sm90/fwd_work_queue.cuh"
#include "kernels/sm90/pipeline.cuh"
#include "kernels/sm90/wgmma.cuh"
#include "kernels/sm90/wgmma_ops.cuh"

namespace attn::flash_sm90 {

template <typename T, class Cfg, bool kDropout>
struct FwdMainloop {
  static constexpr int kDQK = Cfg::kHeadDimQK, kDV = Cfg::kHeadDimV;
  static constexpr int kN = Cfg::kBlockN, NO = kDV / 8;
  const flash::FwdParams& p;
  const FwdSmem<Cfg>& smem;
  FwdWorkQueue<Cfg>& queue;
  const FwdEpilogue<T, Cfg>& epilogue;
  FwdRegisters<Cfg>& regs;
  const int wg, ctid, lane, row0;  // row0: this warp's first row in the tile
  const float unit;          // score units -> log2 units
  // Uses of the Q buffers (one per item with work) and of the K/V stages
  // (one per KV tile), counted as the producer counts them, so both roles'
  // barrier phases agree.
  sm90::PipelineState<Cfg::kQBuffers> q_state;
  sm90::PipelineState<Cfg::kStages> kv_state;

  __device__ __forceinline__ float (&o_flat())[kDV / 2] { return regs.o_flat(); }
  __device__ __forceinline__ float (&s_flat())[kN / 2] { return regs.s_flat(); }

  // This warpgroup's first row in the tile, from lane 0's wg: ptxas then
  // knows it is warp-uniform and keeps what is derived from it in uniform
  // registers (Q's descriptors: not 4 vector instructions each).
  __device__ __forceinline__ int wg_row0() const { return __shfl_sync(0xffffffff, wg, 0) * 64; }

  // Ping-pong: the turn to issue products passes round the consumers once
  // per KV tile; the first holds it first. No consumer waits on the producer
  // (an item, a stage) while holding the turn: the producer may be waiting
  // for another consumer to take an item, and that consumer for the turn.
  __device__ __forceinline__ void turn_begin() const { sm90::named_sync(kBarTurn0 + wg, 256); }
  __device__ __forceinline__ void turn_end() const { sm90::named_arrive(kBarTurn0 + (wg + 1) % Cfg::kConsumers, 256); }
  __device__ __forceinline__ void first_turn() const {
    if (wg == 0) sm90::named_arrive(kBarTurn0, 256);
  }

  __device__ __forceinline__ uint32_t head_index(const FwdItem& c) const {
    return static_cast<uint32_t>(c.b) * static_cast<uint32_t>(p.h_q) + static_cast<uint32_t>(c.h);
  }
  __device__ __forceinline__ bool dropout() const { return kDropout && p.dropout_threshold; }

  // The next item with work from the queue (index -1 once the walk is
  // over), derived once and kept, and its first tile's dropout bits in
  // `keep` (computed here, while S's registers are free); items no row of
  // which sees a key get out = 0 and lse = -inf here (the producer loads
  // nothing for them).
  __device__ __forceinline__ FwdItem take_item() {
    for (;; queue.advance()) {
      const int t = queue.read_index();
      if (t >= queue.items()) return FwdItem{};
      const FwdItem c = queue.item(t);
      if (c.rows_out <= c.row_begin) continue;
      if (c.has_work()) {
        if (dropout()) regs.keep.compute(p, head_index(c), c.m0 + row0, c.tiles.first * kN, lane);
        queue.advance();
        return c;
      }
      epilogue.store_empty(c);
    }
  }

  // One tile's products, issued asynchronously (committed as one group each).
  __device__ __forceinline__ void issue_qk(int stage, int q_buf) {
    const auto k_tile = smem.k_tile(stage);
    const auto q_tile = smem.q_tile(q_buf);
    const int q_row0 = wg_row0();
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kDQK / 16; ++ks)
      sm90::Wgmma<kN, T>::template ss<0>(s_flat(), q_tile.kmajor(q_row0, ks), k_tile.kmajor(0, ks), ks > 0);
    sm90::wgmma_commit();
  }
  __device__ __forceinline__ void issue_pv(int stage) {
    const auto v_tile = smem.v_tile(stage);
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kN / 16; ++ks)
      sm90::Wgmma<kDV, T>::template rs<1>(o_flat(), regs.pa[ks], v_tile.mnmajor(ks), 1);
    sm90::wgmma_commit();
  }

  // Scores of the tile at key n0 -> probabilities, O's rescale factors
  // (fwd_softmax.cuh). `row`: this warp's first row in the sequence (c.m0 +
  // row0, computed once per item by the caller).
  __device__ __forceinline__ void probabilities(const FwdItem& c, int row, float slope, int n0) {
    fwd_probabilities<Cfg>(regs, p, c, row, slope, n0, unit, wg, lane);
  }
  __device__ __forceinline__ void pack_p() { fwd_pack_p<T, Cfg>(regs); }

  // An item's first product is Q.K^T of its first KV tile, in the next K/V
  // stage, with its Q in the next Q buffer. These wait until its Q and K are in.
  __device__ __forceinline__ void await_first() {
    smem.q_full(q_state.stage()).wait(q_state.phase());
    q_state.advance();
    smem.k_full(kv_state.stage()).wait(kv_state.phase());
  }
  // The first scores of an item, alone (at the start of the walk, and
  // where they do not run under the previous item's epilogue); returns the
  // item's Q buffer.
  template <class Under>
  __device__ __forceinline__ int first_scores(Under&& under) {
    const int q_buf = q_state.stage();
    await_first();
    turn_begin();
    issue_qk(kv_state.stage(), q_buf);
    turn_end();
    under();  // work that waits on nothing, under the product
    sm90::wgmma_wait<0>();
    sm90::fence_registers(s_flat());
    return q_buf;
  }
  // Every Q.K^T of the item is done: with a separate output tile, the next
  // item's Q may load now.
  __device__ __forceinline__ void release_q(int q_buf) const {
    if (Cfg::kSeparateO) smem.q_empty(q_buf).arrive();
  }
  // How many of an item's KV tiles this consumer's rows see: up to the one
  // holding its last valid row's last key (the ends grow with the row), at
  // least the first (its scores are in flight before this is asked).
  __device__ __forceinline__ int consumer_tiles(const FwdItem& c) const {
    const int r0 = wg_row0(), r_end = min(c.rows, r0 + 64);
    if (max(c.row_begin, r0) >= r_end) return 1;
    const int key_end = flash::row_keys(p, c.seq, c.m0 + r_end - 1).end;
    const int own_last = max(c.tiles.first, min(c.tiles.last, (key_end - 1) / kN));
    return own_last - c.tiles.first + 1;
  }

  // The stage of a consumer's last P.V of an item, and whether it is done.
  struct LastPv {
    int stage;
    uint32_t phase;
    bool done;  // this consumer's rows end before the item's last tile: issued and waited for already
  };

  // Item `cur`'s tiles, its first scores already in S, up to (not including)
  // its last P.V, which the caller issues (with the next item's first
  // Q.K^T where the epilogue overlaps) unless this consumer's rows end
  // early; then the K/V stages move past the item.
  __device__ __forceinline__ LastPv run_tiles(const FwdItem& cur, int q_cur) {
    const int n_tiles = cur.tiles.last - cur.tiles.first + 1;
    // This consumer's tiles: the item's first ones, up to the last its own
    // rows see. With 192-row items (d 64) a consumer's rows can end before
    // the item's last tile on a causal diagonal (at 1k causal 9 of 81
    // consumer tiles); it passes those tiles' turns without products.
    const int own_tiles = Cfg::kConsumers == 3 ? consumer_tiles(cur) : n_tiles;
    const float slope = p.alibi ? p.alibi[cur.b * p.alibi_batch_stride + cur.h * p.alibi_head_stride] : 0.f;
    const int row = cur.m0 + row0;
    regs.softmax = flash::OnlineSoftmax<1>();
#pragma unroll
    for (int no = 0; no < NO; ++no)
#pragma unroll
      for (int e = 0; e < 4; ++e) regs.o[0][no][e] = 0.f;

    // Tile 0 (the first KV tile): its scores.
    {
      const int n0 = cur.tiles.first * kN;
      smem.k_empty(kv_state.stage()).arrive();
      if (own_tiles == 1) release_q(q_cur);
      probabilities(cur, row, slope, n0);  // O is 0: nothing to rescale
      if (dropout()) regs.keep.apply(regs.s);
      pack_p();
    }
    // Steady state: S[i] = Q.K[i] and O += P[i-1].V[i-1] in flight together;
    // the softmax of S[i] runs while P.V finishes, and O is rescaled after it.
    for (int i = 1; i < own_tiles; ++i) {
      const int stage = kv_state.stage(i), prev = kv_state.stage(i - 1);
      const int n0 = (cur.tiles.first + i) * kN;
      if (dropout()) regs.keep.compute(p, head_index(cur), row, n0, lane);
      smem.k_full(stage).wait(kv_state.phase(i));
      smem.v_full(prev).wait(kv_state.phase(i - 1));
      turn_begin();
      issue_qk(stage, q_cur);
      issue_pv(prev);
      turn_end();
      sm90::wgmma_wait<1>();
      sm90::fence_registers(s_flat());
      smem.k_empty(stage).arrive();
      if (i == own_tiles - 1) release_q(q_cur);
      probabilities(cur, row, slope, n0);
      // The softmax runs here, under this tile's P.V, only if ptxas keeps
      // the wait below it: ptxas moves a wgmma wait above arithmetic it does
      // not depend on, but not above a store. With two consumers that
      // overlap pays; with three (d 64) the softmax after the wait is faster.
      if constexpr (Cfg::kConsumers == 2)
        sm90::store_after(smem.order_word(threadIdx.x / 32), regs.softmax.sum[0][0] + regs.softmax.sum[0][1], lane);
      sm90::wgmma_wait<0>();
      sm90::fence_registers(o_flat());
      smem.v_empty(prev).arrive();
      flash::OnlineSoftmax<1>::rescale(regs.o, regs.correction);
      if (dropout()) regs.keep.apply(regs.s);
      pack_p();
    }
    const LastPv last_pv{kv_state.stage(own_tiles - 1), kv_state.phase(own_tiles - 1), own_tiles < n_tiles};
    if (last_pv.done) {
      // Its last P.V now, so its V stage is free before the producer refills
      // it (kS tiles on); then the tiles past its rows: their turns passed,
      // their stages released once full (an arrival before then would count
      // toward the stage's previous use). No product is issued for them.
      smem.v_full(last_pv.stage).wait(last_pv.phase);
      issue_pv(last_pv.stage);
      sm90::wgmma_wait<0>();
      sm90::fence_registers(o_flat());
      smem.v_empty(last_pv.stage).arrive();
      for (int i = own_tiles; i < n_tiles; ++i) {
        const int stage = kv_state.stage(i);
        const uint32_t phase = kv_state.phase(i);
        smem.k_full(stage).wait(phase);
        turn_begin();
        turn_end();
        smem.k_empty(stage).arrive();
        smem.v_full(stage).wait(phase);
        smem.v_empty(stage).arrive();
      }
    }
    clear_past_sequence(cur, n_tiles - 1);
    kv_state.advance(n_tiles);
    return last_pv;
  }

  // The last KV tile's V with the rows past the sequence cleared: keys
  // there have probability 0, but their V rows (padding, or the next
  // sequence's) may hold Inf or NaN, and 0 * NaN = NaN. Rows past the
  // tensor map's extent (s_kv in bshd/sbhd) arrive from TMA as zeros, so
  // only a padded batch or thd needs this. Every consumer passes here (the
  // condition is the item's), holding no turn. `ahead`: the item's last
  // tile, counted from kv_state.
  __device__ __forceinline__ void clear_past_sequence(const FwdItem& cur, int ahead) {
    if ((cur.tiles.last + 1) * kN > cur.seq.len_kv && (p.packed || cur.seq.len_kv < p.s_kv)) {
      const int stage = kv_state.stage(ahead);
      smem.v_full(stage).wait(kv_state.phase(ahead));
      const int valid = max(0, cur.seq.len_kv - cur.tiles.last * kN);
      sm90::clear_rows<kDV>(smem.to_generic(smem.v_tile(stage).addr), kN, valid, ctid, 128 * Cfg::kConsumers);
      sm90::fence_proxy_async();
      sm90::named_sync(kBarConsumers, 128 * Cfg::kConsumers);
    }
  }
};

}  // namespace attn::flash_sm90
