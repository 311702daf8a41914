// flash_sm90's forward kernel: FlashAttention's algorithm on Hopper's
// asynchronous units. A persistent grid (one CTA per SM) takes the (query
// tile of 64 rows per consumer, query head, sequence) work items one at a
// time from a global counter, in an order that puts the heaviest tiles first
// (fwd_tiles.h: work_item); in each CTA:
// - warpgroup 0, the producer: one thread loads Q once and K/V tiles into a
//   kStages-deep ring with TMA, each stage guarded by a "full" mbarrier (bytes
//   landed) and an "empty" one (every consumer done reading);
// - warpgroups 1.. (two, or three at d 64), the consumers, 64 query rows each: S = Q.K^T on wgmma
//   (both operands in shared memory), the softmax in registers (flash_sm80's
//   code: the accumulator layout per warp is mma.sync's), O += P.V on wgmma
//   with P from registers and V read MN-major, then the epilogue (O staged
//   with stmatrix, written by TMA stores). Tile i's
//   Q.K^T runs beside tile i-1's P.V, and the consumers take turns issuing
//   them (FlashAttention-3's intra-warpgroup overlap and ping-pong).
// KV tiles run from the first to the last, and only the tiles some row can
// see (flash/sequence.cuh): a window costs its width. (Last to first put a
// causal diagonal's masked softmax at the item's start, where no P.V of the
// consumer's runs under it: d 128 1k causal 0.94 -> 0.98 of cuDNN, five
// packed documents 1.43-1.51x -> 1.50-1.57x FlexAttention; PERF.md v15.)
// The producer takes the next work item and runs ahead into it while the
// consumers finish the current one (its K/V stages, and its Q once Q's buffer
// is free); it hands each item's index to the consumers through shared memory.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/flash/epilogue.cuh"
#include "backends/flash/sequence.cuh"
#include "backends/flash/dropout_bits.cuh"
#include "backends/flash/mask.cuh"
#include "backends/flash/online_softmax.cuh"
#include "backends/flash/score_mods.cuh"
#include "backends/flash_sm90/fwd_config.h"
#include "backends/flash_sm90/fwd_params.h"
#include "backends/flash_sm90/fwd_tiles.h"
#include "core/cuda_check.h"
#include "kernels/sm80/mma.cuh"
#include "kernels/sm90/mbarrier.cuh"
#include "kernels/sm90/stmatrix.cuh"
#include "kernels/sm90/tma.cuh"
#include "kernels/sm90/wgmma.cuh"
#include "kernels/sm90/wgmma_ops.cuh"

namespace attn::flash_sm90 {

using flash::KeepBits;
using flash::KvTiles;
using flash::OnlineSoftmax;
using flash::SeqExtent;

using sm90::swizzled_offset;

// Named barriers (0 is __syncthreads): all consumers; each consumer alone.
constexpr int kBarConsumers = 1;
constexpr int kBarConsumer0 = 2;  // 2..4: each consumer's epilogue
constexpr int kBarTurn0 = 5;      // 5..7: whose turn it is to issue products

// kDropout: the build with dropout's path (Philox bits per tile), run for
// calls with dropout. Compiled into every call, its bits and code cost d 64
// 240 B of spills (the softmax's running max and sum reloaded on every tile;
// PERF.md v17), so it is a build apart, as FlashAttention's dropout kernels
// are; with KeepBits::compute_paired every build has 0 B (v18). Its tests
// keep p.dropout_threshold beside kDropout: with kDropout alone ptxas spilled
// 480 B at d 64 (v17), not 240.
template <typename T, int kDQK, int kDV, bool kDropout>
__global__ void __launch_bounds__(FwdConfig<kDQK, kDV>::kThreads, 1)
    flash_fwd_sm90_kernel(const __grid_constant__ Sm90FwdParams args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = FwdConfig<kDQK, kDV>;
  constexpr int kM = Cfg::kBlockM, kN = Cfg::kBlockN, kS = Cfg::kStages, kQB = Cfg::kQBuffers;
  const FwdParams& p = args.p;

  extern __shared__ char smem_raw[];
  // The swizzle repeats every 1024 bytes, and TMA and wgmma assume tiles start on it.
  // (An offset from smem_raw, not an integer cast: the compiler then knows
  // that pointers derived from it address shared memory.)
  char* const smem = smem_raw + ((1024u - (sm90::smem_addr(smem_raw) & 1023u)) & 1023u);
  const uint32_t q_s = sm90::smem_addr(smem);  // kQB buffers
  const uint32_t k_s = q_s + kQB * Cfg::kSmemQ;
  const uint32_t v_s = k_s + kS * Cfg::kSmemK;
  const uint32_t o_s = v_s + kS * Cfg::kSmemV;  // the output staging tile, when separate
  auto q_tile = [&](int buf) { return q_s + buf * Cfg::kSmemQ; };
  // Where an item whose Q is in buffer `buf` stages its output: a tile of
  // its own, or that Q buffer (after the item's last Q.K^T).
  auto o_tile = [&](int buf) { return Cfg::kSeparateO ? o_s : q_tile(buf); };
  const uint32_t bars = o_s + (Cfg::kSeparateO ? Cfg::kSmemO : 0);
  auto q_full = [&](int b) { return bars + 8 * b; };
  auto q_empty = [&](int b) { return bars + 8 * (2 + b); };
  auto k_full = [&](int s) { return bars + 8 * (4 + s); };
  auto k_empty = [&](int s) { return bars + 8 * (4 + kS + s); };
  auto v_full = [&](int s) { return bars + 8 * (4 + 2 * kS + s); };
  auto v_empty = [&](int s) { return bars + 8 * (4 + 3 * kS + s); };
  // The work-item ring: the producer writes an item's index into a slot,
  // the consumers read it; two slots let the producer run an item ahead.
  auto item_full = [&](int s) { return bars + 8 * (4 + 4 * kS + s); };
  auto item_empty = [&](int s) { return bars + 8 * (6 + 4 * kS + s); };
  const uint32_t item_slots = bars + 8 * (8 + 4 * kS);
  // Per warp, written and never read (store_after).
  auto order_word = [&](int warp) { return item_slots + 8 + 4 * warp; };
  static_assert(8 * (8 + 4 * kS) + 8 + 4 * (Cfg::kThreads / 32) <= Cfg::kSmemBarriers, "barrier area");
  constexpr int kConsumerThreads = 128 * Cfg::kConsumers;

  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int b = 0; b < kQB; ++b) {
      sm90::mbar_init(q_full(b), 1);
      sm90::mbar_init(q_empty(b), kConsumerThreads);
    }
    for (int s = 0; s < kS; ++s) {
      sm90::mbar_init(k_full(s), 1);
      sm90::mbar_init(v_full(s), 1);
      sm90::mbar_init(k_empty(s), kConsumerThreads);
      sm90::mbar_init(v_empty(s), kConsumerThreads);
    }
    for (int s = 0; s < 2; ++s) {
      sm90::mbar_init(item_full(s), 1);
      sm90::mbar_init(item_empty(s), kConsumerThreads);
    }
    sm90::mbar_init_fence();
  }
  __syncthreads();

  const int items = ((p.s_q + kM - 1) / kM) * p.h_q * p.batch;
  // Both roles walk the same items (the producer publishes each index) and
  // derive the same facts from each, so their barrier phases agree: `loaded`
  // counts items with loads (Q's buffer and phase), `it` counts KV tiles over all items
  // (the stages' phases), `taken` counts items (the item ring's phase).
  int loaded = 0, it = 0, taken = 0;

  // One work item, as both roles derive it: which of its tiles have loads
  // (the producer) and which rows it computes and writes (the consumers).
  struct Item {
    int t = -1;  // its index; -1: the walk is over (take_item)
    int b, h, m0;
    int row_begin;  // rows [row_begin, rows) of the tile are its sequence's (fwd_tiles.h)
    int rows;
    int rows_out;  // rows it writes: a padded batch (bshd/sbhd with cu_seqlens) also gets out = 0, lse = -inf
                   // on its padding rows; in thd the rows past a sequence belong to the next one
    SeqExtent seq;
    KvTiles tiles;
    // Some row sees a key: the producer loads Q and K/V tiles, the
    // consumers compute (otherwise they write out = 0 and lse = -inf).
    __device__ bool has_work() const { return rows > row_begin && tiles.last >= tiles.first; }
    __device__ bool writes(int r) const { return r >= row_begin && r < rows_out; }
  };
  // The item at index t.
  auto load_item = [&](int t) {
    Item c;
    c.t = t;
    const WorkItem w = work_item(t, (p.s_q + kM - 1) / kM, p.h_q, p.h_q * p.batch, args.section_pairs);
    c.b = w.b;
    c.h = w.h;
    c.seq = flash::sequence_extent(p, c.b);
    const QueryTile q = query_tile(w.tile, kM, c.seq.len_q, p.s_q, p.packed);
    c.m0 = q.m0;
    c.row_begin = q.row_begin;
    c.rows = q.rows;
    c.rows_out = q.rows_out;
    c.tiles = q.has_rows() ? flash::kv_tiles<kM, kN>(p, c.seq, c.m0) : KvTiles{};
    return c;
  };
  if (tid < 128) {  // producer warpgroup
    sm90::regs_decrease<Cfg::kProducerRegs>();
    if (tid != 0) return;
    sm90::tma_prefetch_map(&args.q);
    sm90::tma_prefetch_map(&args.k);
    sm90::tma_prefetch_map(&args.v);
    // The next item is taken once this one's loads are issued (a few KV
    // tiles before the consumers need it), not earlier: an item reserved
    // while another runs is one an idle SM cannot take.
    // The grid's size read where it is used (a volatile read of %nctaid.x):
    // ptxas otherwise keeps gridDim.x across the loop in the producer's 24
    // registers and spills it (the 4 B of d >= 128).
    auto grid_ctas = [] {
      int n;
      asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(n));
      return n;
    };
    for (int t = blockIdx.x;; t = atomicAdd(args.item_counter, 1) + grid_ctas(), ++taken) {
      sm90::mbar_wait(item_empty(taken & 1), ((taken >> 1) & 1) ^ 1);
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(item_slots + 4 * (taken & 1)), "r"(t) : "memory");
      sm90::mbar_arrive(item_full(taken & 1));  // release: the consumers see the index
      if (t >= items) break;
      const Item w = load_item(t);
      if (!w.has_work()) continue;
      const SeqExtent& seq = w.seq;
      const KvTiles& tiles = w.tiles;
      // TMA coordinates: thd addresses tokens of the packed tensor (one
      // "sequence"); the others (token within the sequence, sequence).
      const int seq_coord = p.packed ? 0 : w.b, h_kv = w.h / p.h_per_kv;
      const int kv_row0 = static_cast<int>(seq.start_kv);
      const int qb = loaded % kQB;
      sm90::mbar_wait(q_empty(qb), ((loaded / kQB) & 1) ^ 1);  // a fresh barrier's "previous phase" is complete
      sm90::mbar_arrive_expect_tx(q_full(qb), Cfg::kSmemQ);
#pragma unroll
      for (int cb = 0; cb < kDQK / 64; ++cb)
        sm90::tma_load_4d(q_tile(qb) + cb * kM * 128, &args.q, q_full(qb), cb * 64,
                          static_cast<int>(seq.start_q) + w.m0, w.h, seq_coord);
      ++loaded;
      for (int n = tiles.first; n <= tiles.last; ++n, ++it) {
        const int stage = it % kS;
        const uint32_t parity = ((it / kS) & 1) ^ 1;
        sm90::mbar_wait(k_empty(stage), parity);
        sm90::mbar_arrive_expect_tx(k_full(stage), Cfg::kSmemK);
#pragma unroll
        for (int cb = 0; cb < kDQK / 64; ++cb)
          sm90::tma_load_4d(k_s + stage * Cfg::kSmemK + cb * kN * 128, &args.k, k_full(stage), cb * 64,
                            kv_row0 + n * kN, h_kv, seq_coord);
        sm90::mbar_wait(v_empty(stage), parity);
        sm90::mbar_arrive_expect_tx(v_full(stage), Cfg::kSmemV);
#pragma unroll
        for (int cb = 0; cb < kDV / 64; ++cb)
          sm90::tma_load_4d(v_s + stage * Cfg::kSmemV + cb * kN * 128, &args.v, v_full(stage), cb * 64,
                            kv_row0 + n * kN, h_kv, seq_coord);
      }
    }
    return;
  }

  // Consumers.
  sm90::regs_increase<Cfg::kConsumerRegs>();
  constexpr int NA = kN / 8, NO = kDV / 8;
  const int wg = tid / 128 - 1, ctid = tid - 128, lane = tid & 31;
  const int row0 = wg * 64 + ((tid / 32) & 3) * 16;  // this warp's first row in the tile
  // This warpgroup's first row in the tile, from lane 0's wg: ptxas then
  // knows it is warp-uniform and keeps what is derived from it in uniform
  // registers (Q's descriptors: not 4 vector instructions each).
  auto wg_row0 = [&] { return __shfl_sync(0xffffffff, wg, 0) * 64; };
  // Ping-pong: the consumers take turns issuing their products, so one's
  // softmax runs while another's products occupy the tensor cores. The turn
  // passes round the consumers once per KV tile; the first holds it first.
  // No consumer waits on the producer (an item, a stage) while holding the
  // turn: the producer may be waiting for another consumer to take an item,
  // and that consumer for the turn (a hang, PERF.md v11).
  auto turn_begin = [&] { sm90::named_sync(kBarTurn0 + wg, 256); };
  auto turn_end = [&] { sm90::named_arrive(kBarTurn0 + (wg + 1) % Cfg::kConsumers, 256); };
  if (wg == 0) sm90::named_arrive(kBarTurn0, 256);

  auto out_rows = [&](const Item& c) {
    return static_cast<T*>(p.out) + c.b * p.o_batch_stride + (c.seq.start_q + c.m0) * p.o_row_stride +
           c.h * p.o_head_stride;
  };
  auto lse_rows = [&](const Item& c) {
    return p.lse + c.b * p.lse_batch_stride + (c.seq.start_q + c.m0) * p.lse_row_stride + c.h * p.lse_head_stride;
  };
  const float unit = p.score_mods ? 1.f : p.scale_log2;
  auto head_index = [&](const Item& c) {
    return static_cast<uint32_t>(c.b) * static_cast<uint32_t>(p.h_q) + static_cast<uint32_t>(c.h);
  };
  OnlineSoftmax<1> softmax;
  float o[1][NO][4];
  float(&o_flat)[kDV / 2] = *reinterpret_cast<float(*)[kDV / 2]>(&o);
  float s[1][NA][4];
  float(&s_flat)[kN / 2] = *reinterpret_cast<float(*)[kN / 2]>(&s);
  float correction[1][2];
  uint32_t pa[kN / 16][4];
  KeepBits<1, NA> keep;

  // The next item with work, from the producer's ring (index -1 once the
  // walk is over), derived once and kept (deriving it again at the loop's
  // top cost 1-5% at 1k), and its first tile's dropout bits in `keep`
  // (computed here, while S's registers are free); items no row of which
  // sees a key get out = 0 and lse = -inf here (the producer loads nothing
  // for them).
  auto take_item = [&]() -> Item {
    for (;; ++taken) {
      sm90::mbar_wait(item_full(taken & 1), (taken >> 1) & 1);
      int t;
      asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(t) : "r"(item_slots + 4 * (taken & 1)) : "memory");
      sm90::mbar_arrive(item_empty(taken & 1));
      if (t >= items) return Item{};
      const Item c = load_item(t);
      if (c.rows_out <= c.row_begin) continue;
      if (c.has_work()) {
        if (kDropout && p.dropout_threshold) keep.compute_paired(p, head_index(c), c.m0 + row0, c.tiles.first * kN, lane);
        ++taken;
        return c;
      }
      flash::store_zeros<kDV, kM, kConsumerThreads>(out_rows(c) + c.row_begin * p.o_row_stride,
                                                         p.o_row_stride, c.rows_out - c.row_begin, ctid);
      if (p.lse)
        for (int r = c.row_begin + ctid; r < c.rows_out; r += kConsumerThreads)
          lse_rows(c)[r * p.lse_row_stride] = -INFINITY;
    }
  };


  // One tile's products, issued asynchronously (committed as one group each).
  auto issue_qk = [&](int stage, int q_buf) {
    const uint32_t k_tile = k_s + stage * Cfg::kSmemK;
    const int q_row0 = wg_row0();
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kDQK / 16; ++ks)
      sm90::Wgmma<kN, T>::template ss<0>(s_flat, sm90::kmajor_descriptor(q_tile(q_buf), kM, q_row0, ks),
                                          sm90::kmajor_descriptor(k_tile, kN, 0, ks), ks > 0);
    sm90::wgmma_commit();
  };
  auto issue_pv = [&](int stage) {
    const uint32_t v_tile = v_s + stage * Cfg::kSmemV;
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kN / 16; ++ks)
      sm90::Wgmma<kDV, T>::template rs<1>(o_flat, pa[ks], sm90::mnmajor_descriptor(v_tile, kN, ks), 1);
    sm90::wgmma_commit();
  };
  // Scores of the tile at key n0 -> probabilities (score mods, mask,
  // softmax), and O's rescale factor per row.
  auto probabilities = [&](const Item& c, float slope, int n0) {
    if (p.score_mods) flash::apply_score_mods(s, p, slope, c.m0 + row0, n0, c.seq.shift, lane);
    if (!(n0 >= c.tiles.all_begin && n0 + kN <= c.tiles.all_end)) {
      // Where no row's first key lies past n0 (every causal tile), only
      // the ends cut: the mask tests those alone, and only where this
      // consumer's first row (so each of its rows: the ends grow with the
      // row) does not see the whole tile. With 192-row items (d 64) a
      // consumer below a masked tile's diagonal skips it: at 1k causal, 8
      // of the 33 consumer masks per sequence and head. (Not with two
      // consumers: at d 128 an aligned diagonal cuts both, and the test
      // moved d 256 from 48 to 92 B of spills.)
      if (n0 >= c.tiles.all_begin) {
        if (Cfg::kConsumers == 2) {
          flash::apply_mask<false>(s, p, c.seq, c.m0 + row0, n0, lane);
        } else if (flash::row_keys(p, c.seq, c.m0 + wg_row0()).end < n0 + kN) {
          // Where this consumer's last row sees nothing of the tile's right
          // half (a diagonal in its left half: at 1k causal, half of the
          // masked consumer tiles), the softmax runs on the left half alone
          // and the right half's probabilities are 0.
          const int r_last = min(c.rows, wg_row0() + 64) - 1;
          if (flash::row_keys(p, c.seq, c.m0 + r_last).end <= n0 + kN / 2) {
            auto& s_left = *reinterpret_cast<float(*)[1][NA / 2][4]>(&s);
            flash::apply_mask_bits<false>(s_left, p, c.seq, c.m0 + row0, n0, lane);
            softmax.update(s_left, unit, correction);
#pragma unroll
            for (int na = NA / 2; na < NA; ++na)
#pragma unroll
              for (int e = 0; e < 4; ++e) s[0][na][e] = 0.f;
            return;
          }
          flash::apply_mask_bits<false>(s, p, c.seq, c.m0 + row0, n0, lane);
        }
      } else {
        flash::apply_mask(s, p, c.seq, c.m0 + row0, n0, lane);
      }
    }
    softmax.update(s, unit, correction);
  };
  // P as wgmma's A fragments: two adjacent n8 accumulator blocks are one k16 step.
  auto pack_p = [&] {
#pragma unroll
    for (int ks = 0; ks < kN / 16; ++ks) {
      pa[ks][0] = sm80::pack2<T>(s[0][2 * ks][0], s[0][2 * ks][1]);
      pa[ks][1] = sm80::pack2<T>(s[0][2 * ks][2], s[0][2 * ks][3]);
      pa[ks][2] = sm80::pack2<T>(s[0][2 * ks + 1][0], s[0][2 * ks + 1][1]);
      pa[ks][3] = sm80::pack2<T>(s[0][2 * ks + 1][2], s[0][2 * ks + 1][3]);
    }
  };
  // An item's first product is Q.K^T of its first KV tile, in stage it % kS,
  // with its Q in buffer loaded % kQB. These wait until its Q and K are in.
  auto await_first = [&] {
    sm90::mbar_wait(q_full(loaded % kQB), (loaded / kQB) & 1);
    ++loaded;
    sm90::mbar_wait(k_full(it % kS), (it / kS) & 1);
  };
  // The first scores of an item, alone (at the start of the walk, and
  // where they do not run under the previous item's epilogue); returns the
  // item's Q buffer.
  auto first_scores = [&] {
    const int q_buf = loaded % kQB;
    await_first();
    turn_begin();
    issue_qk(it % kS, q_buf);
    turn_end();
    sm90::wgmma_wait<0>();
    sm90::fence_registers(s_flat);
    return q_buf;
  };
  // Every Q.K^T of the item is done: with a separate output tile, the next
  // item's Q may load now.
  auto release_q = [&](int q_buf) {
    if (Cfg::kSeparateO) sm90::mbar_arrive(q_empty(q_buf));
  };
  // How many of an item's KV tiles this consumer's rows see: up to the one
  // holding its last valid row's last key (the ends grow with the row), at
  // least the first (its scores are in flight before this is asked).
  auto consumer_tiles = [&](const Item& c) {
    const int r0 = wg_row0(), r_end = min(c.rows, r0 + 64);
    if (max(c.row_begin, r0) >= r_end) return 1;
    const int key_end = flash::row_keys(p, c.seq, c.m0 + r_end - 1).end;
    const int own_last = max(c.tiles.first, min(c.tiles.last, (key_end - 1) / kN));
    return own_last - c.tiles.first + 1;
  };

  // Each pass of the loop starts with the item's first scores in S. No
  // product is in flight across a branch that ptxas cannot see through
  // (a conditional wgmma or one in flight over the loop's back edge
  // serializes every wgmma of the kernel: ptxas C7518), so the one product
  // issued without knowing whether a next item exists reads whatever K and
  // Q are in shared memory and is discarded.
  Item cur = take_item();
  int q_cur = cur.t >= 0 ? first_scores() : 0;  // the current item's Q buffer
  while (cur.t >= 0) {
    const int n_tiles = cur.tiles.last - cur.tiles.first + 1;
    // This consumer's tiles: the item's first ones, up to the last its own
    // rows see. With 192-row items (d 64) a consumer's rows can end before
    // the item's last tile on a causal diagonal (at 1k causal 9 of 81
    // consumer tiles); it passes those tiles' turns without products.
    const int own_tiles = Cfg::kConsumers == 3 ? consumer_tiles(cur) : n_tiles;
    const float slope = p.alibi ? p.alibi[cur.b * p.alibi_batch_stride + cur.h * p.alibi_head_stride] : 0.f;
    softmax = OnlineSoftmax<1>();
#pragma unroll
    for (int no = 0; no < NO; ++no)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][no][e] = 0.f;

    // Tile 0 (the first KV tile): its scores.
    {
      const int n0 = cur.tiles.first * kN, stage = it % kS;
      sm90::mbar_arrive(k_empty(stage));
      if (own_tiles == 1) release_q(q_cur);
      probabilities(cur, slope, n0);  // O is 0: nothing to rescale
      if (kDropout && p.dropout_threshold) keep.apply(s);
      pack_p();
    }
    // Steady state: S[i] = Q.K[i] and O += P[i-1].V[i-1] in flight together;
    // the softmax of S[i] runs while P.V finishes, and O is rescaled after it.
    for (int i = 1; i < own_tiles; ++i) {
      const int stage = (it + i) % kS, prev = (it + i - 1) % kS;
      const uint32_t parity = ((it + i) / kS) & 1, prev_parity = ((it + i - 1) / kS) & 1;
      const int n0 = (cur.tiles.first + i) * kN;
      if (kDropout && p.dropout_threshold) keep.compute_paired(p, head_index(cur), cur.m0 + row0, n0, lane);
      sm90::mbar_wait(k_full(stage), parity);
      sm90::mbar_wait(v_full(prev), prev_parity);
      turn_begin();
      issue_qk(stage, q_cur);
      issue_pv(prev);
      turn_end();
      sm90::wgmma_wait<1>();
      sm90::fence_registers(s_flat);
      sm90::mbar_arrive(k_empty(stage));
      if (i == own_tiles - 1) release_q(q_cur);
      probabilities(cur, slope, n0);
      // The softmax runs here, under this tile's P.V, only if ptxas keeps
      // the wait below it: ptxas moves a wgmma wait above arithmetic it does
      // not depend on, but not above a store. With two consumers that
      // overlap pays (d 128 16k +2%, d 256 4k +7%); with three (d 64) the
      // softmax after the wait is faster (4k -10% with the store; PERF.md, v12).
      if constexpr (Cfg::kConsumers == 2)
        sm90::store_after(order_word(tid / 32), softmax.sum[0][0] + softmax.sum[0][1], lane);
      sm90::wgmma_wait<0>();
      sm90::fence_registers(o_flat);
      sm90::mbar_arrive(v_empty(prev));
      OnlineSoftmax<1>::rescale(o, correction);
      if (kDropout && p.dropout_threshold) keep.apply(s);
      pack_p();
    }
    const int last = (it + own_tiles - 1) % kS;  // this consumer's last P.V
    const uint32_t last_parity = ((it + own_tiles - 1) / kS) & 1;
    const bool early = own_tiles < n_tiles;  // this consumer's rows end before the item's last tile
    if (early) {
      // Its last P.V now, so its V stage is free before the producer refills
      // it (kS tiles on); then the tiles past its rows: their turns passed,
      // their stages released once full (an arrival before then would count
      // toward the stage's previous use). No product is issued for them.
      sm90::mbar_wait(v_full(last), last_parity);
      issue_pv(last);
      sm90::wgmma_wait<0>();
      sm90::fence_registers(o_flat);
      sm90::mbar_arrive(v_empty(last));
      for (int i = own_tiles; i < n_tiles; ++i) {
        const int stage = (it + i) % kS;
        const uint32_t parity = ((it + i) / kS) & 1;
        sm90::mbar_wait(k_full(stage), parity);
        turn_begin();
        turn_end();
        sm90::mbar_arrive(k_empty(stage));
        sm90::mbar_wait(v_full(stage), parity);
        sm90::mbar_arrive(v_empty(stage));
      }
    }
    const int item_last = (it + n_tiles - 1) % kS;  // the item's last KV tile
    const uint32_t item_last_parity = ((it + n_tiles - 1) / kS) & 1;
    it += n_tiles;
    // The last KV tile's V with the rows past the sequence cleared: keys
    // there have probability 0, but their V rows (padding, or the next
    // sequence's) may hold Inf or NaN, and 0 * NaN = NaN. Rows past the
    // tensor map's extent (s_kv in bshd/sbhd) arrive from TMA as zeros, so
    // only a padded batch or thd needs this. Every consumer passes here (the
    // condition is the item's), holding no turn.
    if ((cur.tiles.last + 1) * kN > cur.seq.len_kv && (p.packed || cur.seq.len_kv < p.s_kv)) {
      sm90::mbar_wait(v_full(item_last), item_last_parity);
      const int valid = max(0, cur.seq.len_kv - cur.tiles.last * kN);
      sm90::clear_rows<kDV>(smem + (v_s - q_s) + item_last * Cfg::kSmemV, kN, valid, ctid, kConsumerThreads);
      sm90::fence_proxy_async();
      sm90::named_sync(kBarConsumers, kConsumerThreads);
    }
    Item next;
    int q_next = 0;
    if (Cfg::kOverlapEpilogue) {
      // The last P.V and the next item's first Q.K^T go in together, and
      // this item's epilogue runs under the Q.K^T.
      next = take_item();
      sm90::mbar_wait(v_full(last), last_parity);
      q_next = loaded % kQB;  // with two buffers, not the one the epilogue writes
      if (next.t >= 0) await_first();
      turn_begin();
      issue_pv(last);
      issue_qk(it % kS, q_next);
      turn_end();
      sm90::wgmma_wait<1>();
    } else if (!early) {  // otherwise done above
      sm90::mbar_wait(v_full(last), last_parity);
      issue_pv(last);
      sm90::wgmma_wait<0>();
    }
    if (!early) {
      sm90::fence_registers(o_flat);
      sm90::mbar_arrive(v_empty(last));
    }

    float inv[1][2], row_lse[1][2];
    softmax.finish(inv, row_lse, unit, p.dropout_scale);
    // Rows outside the sequence (padding, the next or the previous sequence's tokens
    // in thd, or before the first token) read whatever Q rows were there:
    // their output is 0 or unwritten.
    bool row_valid[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = row0 + 8 * hh + (lane >> 2);
      row_valid[hh] = r >= cur.row_begin && r < cur.rows;
      if (!row_valid[hh]) {
        inv[0][hh] = 0.f;
        row_lse[0][hh] = -INFINITY;
      }
    }
    // Stage O in this warpgroup's 64 rows of the output tile with stmatrix
    // (its leader's store of the previous item has read them, and every
    // thread is past its Q.K^T reads of this item's Q rows where the output
    // goes in Q's buffer), then write them out: one TMA store by the
    // leader, or row by row where the warpgroup's rows are not all the
    // sequence's (thd, where other sequences' tokens lie around it, or rows before the
    // first token, which TMA would not write but we do not ask it to).
    const uint32_t o_stage = o_tile(q_cur);
    const bool leader = (ctid & 127) == 0;
    const bool by_tma = cur.row_begin <= wg * 64 && (!p.packed || cur.rows >= wg * 64 + 64);
    if (leader) sm90::bulk_wait_read<0>();
    sm90::named_sync(kBarConsumer0 + wg, 128);
    {
      // Lane l addresses row l % 8 of matrix l / 8: matrix j holds rows
      // 8 (j % 2).. of accumulator block 2 np + j / 2 (stmatrix.cuh).
      const int st_row = row0 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
      for (int np = 0; np < NO / 2; ++np) {
        uint32_t r[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int no = 2 * np + j / 2, hh = j % 2;
          const float x = row_valid[hh] ? o[0][no][2 * hh] * inv[0][hh] : 0.f;
          const float y = row_valid[hh] ? o[0][no][2 * hh + 1] * inv[0][hh] : 0.f;
          r[j] = sm80::pack2<T>(x, y);
        }
        sm90::stmatrix_x4(o_stage + swizzled_offset(kM, st_row, 2 * np + (lane >> 4)), r[0], r[1], r[2], r[3]);
      }
    }
    sm90::fence_proxy_async();  // the stores above, before the TMA store reads them
    sm90::named_sync(kBarConsumer0 + wg, 128);
    if (by_tma) {
      if (leader) {
#pragma unroll
        for (int cb = 0; cb < kDV / 64; ++cb)
          sm90::tma_store_4d(&args.o, o_stage + cb * kM * 128 + wg * 64 * 128, cb * 64,
                             static_cast<int>(cur.seq.start_q) + cur.m0 + wg * 64, cur.h, p.packed ? 0 : cur.b);
        sm90::bulk_commit();
      }
    } else {
      constexpr int kChunks = kDV / 8;
      T* const out = out_rows(cur);
      const char* const o_gen = smem + (o_stage - q_s);
#pragma unroll
      for (int idx = ctid - wg * 128; idx < 64 * kChunks; idx += 128) {
        const int r = wg * 64 + idx / kChunks, c = idx % kChunks;
        if (cur.writes(r))
          *reinterpret_cast<uint4*>(out + r * p.o_row_stride + c * 8) =
              *reinterpret_cast<const uint4*>(o_gen + swizzled_offset(kM, r, c));
      }
    }
    if (!Cfg::kSeparateO) {
      // Q's buffer held the output until now: once the store has read it
      // (and past these generic-proxy accesses), the producer may load the
      // next Q there.
      if (leader) sm90::bulk_wait_read<0>();
      sm90::fence_proxy_async();
      sm90::mbar_arrive(q_empty(q_cur));
    }
    // Last: a proxy fence (above) waits for these global stores.
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = row0 + 8 * hh + (lane >> 2);
      if (p.lse && (lane & 3) == 0 && cur.writes(r)) lse_rows(cur)[r * p.lse_row_stride] = row_lse[0][hh];
    }
    if (Cfg::kOverlapEpilogue) {
      sm90::wgmma_wait<0>();  // the next item's first scores (or the discarded product)
      sm90::fence_registers(s_flat);
    } else {
      next = take_item();
      if (next.t >= 0) q_next = first_scores();
    }
    cur = next;
    q_cur = q_next;
  }
  if ((ctid & 127) == 0) sm90::bulk_wait<0>();  // the output tile stays until its last store is done
#endif
}

// Launches the kernel for one instantiation on the caller's stream: one
// persistent CTA per SM (fewer for fewer items). `item_counter` is a zeroed
// int in device memory; the CTAs take their second and later items from it.
template <typename T, int kDQK, int kDV, bool kDropout>
void launch_fwd(const Sm90FwdParams& args, int sm_count, cudaStream_t stream) {
  using Cfg = FwdConfig<kDQK, kDV>;
  auto* kernel = flash_fwd_sm90_kernel<T, kDQK, kDV, kDropout>;
  ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  const int64_t items =
      static_cast<int64_t>((args.p.s_q + Cfg::kBlockM - 1) / Cfg::kBlockM) * args.p.h_q * args.p.batch;
  const int grid = static_cast<int>(sm_count > 0 && items > sm_count ? sm_count : items);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(args);
  ATTN_CUDA(cudaGetLastError());
}

}  // namespace attn::flash_sm90
