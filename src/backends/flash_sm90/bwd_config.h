// Tile shapes of flash_sm90's backward per head dim: compile-time numbers the
// kernel is built on and the host reads (shared memory in supports()).
// Plain C++: no CUDA needed to include it.
#pragma once

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE
#include "backends/flash_sm90/register_split.h"

namespace attn::flash_sm90 {

// One CTA per (KV tile of kBlockN keys, KV head, sequence): a producer
// warpgroup (one warp: TMA copies of Q and dO, the rows' lse and D; one
// thread of another: dQ's bulk reduce-adds) and two consumer warpgroups,
// which keep dK and dV in registers and walk the query tiles of kBlockM rows
// that see their keys, in a kStages-deep ring.
// - d <= 128: each consumer owns 64 keys (S^T = K.Q^T, keys on the
//   accumulator's rows, bwd_mainloop.cuh). Per consumer thread at d 128: dK
//   and dV 64 floats each, S^T and dP^T 32 each, dQ's half 32
//   (FlashAttention-3's split, 240 registers per consumer). d 64 walks query
//   tiles of 128 rows, as FlashAttention-3 does there: its dK and dV take 32
//   floats each, so S^T and dP^T can take 64 each, and each barrier, wait
//   and row-term load serves products twice as long.
// - d_qk 192 and 256 (kWide): dK and dV of 64 keys over all of d would take
//   192-256 registers per thread, so the two consumers share the CTA's 64
//   keys and split d: each computes S = Q.K^T and dP for 32 of the keys over
//   all of d (the forward's layout, queries on the rows; in the plain build
//   consumer 0 computes S and consumer 1 dP over all 64,
//   bwd_split_by_product), P and dS go to shared memory, and each takes the
//   dV, dK and dQ products of its half of d's columns
//   (bwd_mainloop_wide.cuh): at d 256 dK, dV and dQ 64 floats each, S and dP
//   16 (32 split by product). A half is whole 64-column blocks (wgmma reads an
//   MN-major operand by blocks), and at d 192 half of the middle block (a
//   product of its own: consumer 0 its first 32 columns, consumer 1 its last
//   32; ConsumerColumns). d_v may differ (192 / 128). Shared memory holds two Q / dO stages at d 192, one at
//   d 256 (dQ's fp32 stage takes 64 KiB there).
// A consumer's columns of a tensor kWidth wide (dK's and dQ's: d_qk; dV's:
// d_v): all of them, or with the wide tiles its half as whole 64-column
// blocks (kWhole) and at most half a block (kHalf); BwdRegisters' column()
// places them.
template <int kWidth_, bool kWide>
struct ConsumerColumns {
  static constexpr int kWidth = kWidth_;
  static constexpr int kCols = kWide ? kWidth / 2 : kWidth;
  static constexpr int kWhole = kCols / 64 * 64, kHalf = kCols % 64;
  static_assert(kWidth % 64 == 0 && (kHalf == 0 || (kWide && kHalf == 32)),
                "a consumer's columns: whole blocks and at most a half");
};

// The deterministic mode's dQ counters are per query tile of this many rows,
// the smallest kBlockM of the table, so one workspace layout serves every row.
constexpr int kSemaphoreBlockM = 64;

// The first column of accumulator block i (8 columns) of consumer wg's
// part of a tensor split as Cols: all of it, or with the wide tiles its
// whole column blocks first (consumer 0 the first ones, consumer 1 the
// last), then its half of the middle block (tests/backends/test_sm90_bwd_columns.cpp).
template <class Cols>
ATTN_HOST_DEVICE constexpr int consumer_column(int wg, int i) {
  if constexpr (Cols::kCols == Cols::kWidth) return 8 * i;
  constexpr int NA = Cols::kWhole / 8;
  return i < NA ? wg * (Cols::kWidth - Cols::kWhole) + 8 * i : Cols::kWhole + wg * Cols::kHalf + 8 * (i - NA);
}

// The wide tiles' plain loop (no score changes, no dropout, d_qk == d_v)
// splits S and dP by product (bwd_mainloop_wide.cuh: run_tile_split).
template <class Cfg>
ATTN_HOST_DEVICE constexpr bool bwd_split_by_product(bool score_mods, bool dropout) {
  return Cfg::kWide && !score_mods && !dropout && Cfg::kHeadDim == Cfg::kHeadDimV;
}
// With one Q / dO stage (d 256) that loop frees the stage's dO after dV's
// product, before Q, and the producer loads the next tile's dO first, under
// dK's and dQ's products (H200: d 256 +0.9-3.9%; with d 192's two stages it
// cost 0.4-2.5%, the loop's extra wait buying nothing there).
template <class Cfg>
ATTN_HOST_DEVICE constexpr bool bwd_early_do(bool score_mods, bool dropout) {
  return bwd_split_by_product<Cfg>(score_mods, dropout) && Cfg::kStages == 1;
}

template <int kDQK, int kDV>
struct BwdConfig {
  static constexpr bool kWide = kDQK > 128;
  static_assert(kWide || kDQK == kDV, "the narrow tiles assume d_qk == d_v");
  static constexpr int kHeadDim = kDQK, kHeadDimV = kDV;
  static constexpr int kConsumers = 2;  // warpgroups
  static constexpr int kBlockM = kDQK == 64 ? 128 : 64;  // query rows per step
  static_assert(kBlockM >= kSemaphoreBlockM, "the dQ counters are per tile of at least kSemaphoreBlockM rows");
  static constexpr int kBlockN = kWide ? 64 : 64 * kConsumers;
  static constexpr int kConsumerKeys = kWide ? kBlockN / kConsumers : 64;  // S's (or S^T's) keys per consumer
  using ColsK = ConsumerColumns<kDQK, kWide>;  // of dK and dQ
  using ColsV = ConsumerColumns<kDV, kWide>;   // of dV
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static_assert(setmaxnreg_split_fits(kThreads, kProducerRegs, kConsumers, kConsumerRegs),
                "setmaxnreg's split exceeds the launch's pool");
  static constexpr int kSmemQ = kBlockM * kDQK * 2, kSmemDo = kBlockM * kDV * 2;  // one stage
  static constexpr int kSmemK = kBlockN * kDQK * 2, kSmemV = kBlockN * kDV * 2;
  // dQ = dS.K over all the tile's keys, from both consumers' dS^T (two
  // buffers by tile parity, one fp32 stage): at d 128 each consumer takes a
  // 64-column half of d; at d 64, whose half would be an n32 product, each
  // takes 64 of the 128 query rows over all of d (kDqRowHalves), so one
  // partial dQ per tile goes to the accumulator (a partial per consumer over
  // its own keys sends twice the bulk reduce-adds' bytes to L2; measured 1%
  // slower).
  // Wide: each its half of d over the 64 keys (one stage); P and dS
  // (queries on the rows) take two buffers each by tile parity: a consumer
  // writes tile i + 1's while the other may still read tile i's dS in dQ's
  // product, which runs after the stage is handed back.
  static constexpr bool kDqRowHalves = kDQK == 64;
  static_assert(kDqRowHalves ? kBlockM == 64 * kConsumers : kBlockM == 64, "dQ: an m64 product per consumer");
  static constexpr int kDsBuffers = kWide ? 4 : 2;
  static constexpr int kSmemDs = kBlockN * kBlockM * 2;  // dS^T, one buffer
  static constexpr int kSmemTerms = kBlockM * 8;  // {lse2, D} per row, one stage
  static constexpr int kSmemDq = kBlockM * kDQK * 4;  // a query tile's dQ in fp32 (one stage), for the bulk reduce-add
  // The mbarriers, after the terms: the storage struct (bwd_storage.cuh)
  // rounds up to the tiles' 1024-byte alignment.
  static constexpr int kSmemBarriers = 1024;
  static constexpr int kSmemLimit = 227 * 1024;  // per block on sm_90
  // + 1024: the dynamic buffer is aligned up to 1024 bytes (the swizzle's period).
  static constexpr int smem_bytes(int stages) {
    return kSmemK + kSmemV + stages * (kSmemQ + kSmemDo + kSmemTerms) + kDsBuffers * kSmemDs + kSmemDq +
           kSmemBarriers + 1024;
  }
  // Two stages of the query tiles' ring where they fit (d 256: one).
  static constexpr int kStages = smem_bytes(2) <= kSmemLimit ? 2 : 1;
  static constexpr int kSmemBytes = smem_bytes(kStages);
  static_assert(kSmemBytes <= kSmemLimit, "shared memory");
  static_assert(kDqRowHalves || kDQK % 64 == 0, "dQ's product splits d in column blocks");
  // The epilogue stages dK and dV (kBlockN rows each) where the Q and dO stages were.
  static_assert(kStages * kSmemQ >= kSmemK && kStages * kSmemDo >= kSmemV, "dK's and dV's staging fits");
};

}  // namespace attn::flash_sm90
