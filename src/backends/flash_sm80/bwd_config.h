// flash_sm80's backward per head dim: the tuning table and the tile shapes,
// compile-time numbers the kernel is built on and the host reads (shared
// memory in supports(), the grid's order at launch).
// Plain C++: no CUDA needed to include it.
#pragma once

#include "backends/flash/heuristics.h"

namespace attn::flash_sm80 {

using flash::bwd_clamp_group_chunk;
using flash::bwd_first_kv_tiles_heavy;
using flash::bwd_group_chunk;

// The backward's tuning table: the knobs that differ between head-dim rows
// of bwd_table.h, one table row per build (rows with a dropout build have a
// second table row for it, dropout_build = true). A row names only what
// differs from the defaults: FlashAttention-2's choices, which rows not
// measured (160, 192/128 today) keep. Reasons: the H100, and ptxas (CUDA 13).
// - block_m (64): query rows per tile. 128 ("wide", FlashAttention-2's sm80
//   tile) in d <= 64's main builds: twice the products per tile for the same
//   loads, barriers and setup, faster at d 32 and d 64.
// - dropout_path (true): the build has dropout's path (Philox, keep bits).
//   Where a main build has none, the row's dropout build has it, as
//   FlashAttention-2 compiles Is_dropout apart: the path's registers cost
//   every call. d <= 64: it spills in the wide loop (sm_90a), and the dropout
//   build's 64-row tiles also fit sm86/sm89 (99 KiB per block). d 128 and
//   d 256: 2-3% and 0.5-1% faster, and sm_90a's d 256 loop has no spills.
// - dq_first (false): dQ's product and adds before dV's product (dQ, dV, dK),
//   not after it (FlashAttention-2's dV, dQ, dK): the bulk reduce-add drains
//   under two products before the next item's Q/dO loads, which it slows.
//   Faster at d 64 and d 256; slower at d 128, whose sm_90a loop spills more.
// - diagonal_start (false): each head's run of query tiles starts at the
//   CTA's diagonal tile and wraps, so that without a mask neighbouring CTAs
//   do not read one Q/dO tile and add into the same dQ rows at one moment.
//   Faster at d 256, level at d 64 and d 128; spills in sm_90a's d 192 loop.
// - mask_bits (true): masked tiles' mask as one word of bits per row with
//   32-bit bounds (apply_mask_bits), 0.5-2% faster in the causal backward;
//   rows 96 and 192 test key by key, with which their sm_90a loops don't spill.
// - rebuild_{q,do}_{sm80,sm90} (false): the Q or dO copies rebuild their
//   per-thread addresses per item (an opaque thread index) instead of holding
//   them across the item loop; chosen per build and architecture so that
//   every build's loop has 0 B of spills (other choices spill 4-52 B).
// - kv_order_chosen (false): the grid may put the KV tiles slowest
//   (bwd_kv_tiles_slowest(), below); the rows not measured keep one order,
//   with which their sm_90a loops don't spill (the choice spills 4-20 B).
// - chunked_grid (false): the grid is (pairs of a chunk, KV tiles, chunks)
//   over (KV head, sequence) pairs, bwd_group_chunk() pairs a chunk: d 256's
//   only grid, ahead of FlashAttention-2 in the causal GQA backward (MHA ~1%
//   slower); as a run-time choice it spills 16-24 B in sm_90a's loops.
// kv_order_chosen and chunked_grid are the same in both builds of a row.
struct BwdTuning {
  int d_qk = 0, d_v = 0;
  bool dropout_build = false;
  int block_m = 64;
  bool dropout_path = true;
  bool dq_first = false;
  bool diagonal_start = false;
  bool mask_bits = true;
  bool rebuild_q_sm80 = false, rebuild_do_sm80 = false;
  bool rebuild_q_sm90 = false, rebuild_do_sm90 = false;
  bool kv_order_chosen = false;
  bool chunked_grid = false;
};

// clang-format off
inline constexpr BwdTuning kBwdTuning[] = {
  {.d_qk =  32, .d_v =  32, .block_m = 128, .dropout_path = false, .dq_first = true, .kv_order_chosen = true},
  {.d_qk =  32, .d_v =  32, .dropout_build = true,                 .dq_first = true, .kv_order_chosen = true},
  {.d_qk =  64, .d_v =  64, .block_m = 128, .dropout_path = false, .dq_first = true,
   .rebuild_q_sm80 = true, .rebuild_q_sm90 = true, .kv_order_chosen = true},
  {.d_qk =  64, .d_v =  64, .dropout_build = true,                 .dq_first = true, .kv_order_chosen = true},
  {.d_qk =  96, .d_v =  96, .mask_bits = false},
  {.d_qk = 128, .d_v = 128, .dropout_path = false,
   .rebuild_do_sm80 = true, .rebuild_do_sm90 = true, .kv_order_chosen = true},
  {.d_qk = 128, .d_v = 128, .dropout_build = true,
   .rebuild_q_sm80 = true, .rebuild_q_sm90 = true, .kv_order_chosen = true},
  {.d_qk = 192, .d_v = 192, .mask_bits = false},
  {.d_qk = 256, .d_v = 256, .dropout_path = false, .dq_first = true, .diagonal_start = true,
   .rebuild_q_sm90 = true, .rebuild_do_sm90 = true, .chunked_grid = true},
  {.d_qk = 256, .d_v = 256, .dropout_build = true, .dq_first = true, .diagonal_start = true,
   .rebuild_q_sm90 = true, .rebuild_do_sm90 = true, .chunked_grid = true},
};
// clang-format on

// The table's row for one build of (d_qk, d_v); the defaults where it has none.
constexpr BwdTuning bwd_tuning(int d_qk, int d_v, bool dropout_build) {
  for (const BwdTuning& t : kBwdTuning)
    if (t.d_qk == d_qk && t.d_v == d_v && t.dropout_build == dropout_build) return t;
  BwdTuning t;
  t.d_qk = d_qk, t.d_v = d_v, t.dropout_build = dropout_build;
  return t;
}
// Whether row (d_qk, d_v) compiles dropout's path apart, in a dropout build.
constexpr bool bwd_has_dropout_build(int d_qk, int d_v) { return !bwd_tuning(d_qk, d_v, false).dropout_path; }

// One table row per build; a dropout build (with the path) exactly where the
// main build has no dropout path, and with the main build's grid.
constexpr int bwd_tuning_rows(int d_qk, int d_v, bool dropout_build) {
  int n = 0;
  for (const BwdTuning& t : kBwdTuning) n += t.d_qk == d_qk && t.d_v == d_v && t.dropout_build == dropout_build;
  return n;
}
constexpr bool bwd_tuning_consistent() {
  for (const BwdTuning& t : kBwdTuning) {
    if (bwd_tuning_rows(t.d_qk, t.d_v, t.dropout_build) != 1) return false;
    const BwdTuning main = bwd_tuning(t.d_qk, t.d_v, false);
    if (t.dropout_build && (!t.dropout_path || bwd_tuning_rows(t.d_qk, t.d_v, false) != 1 || main.dropout_path ||
                            t.kv_order_chosen != main.kv_order_chosen || t.chunked_grid != main.chunked_grid))
      return false;
    if (!t.dropout_path && bwd_tuning_rows(t.d_qk, t.d_v, true) != 1) return false;
  }
  return true;
}
static_assert(bwd_tuning_consistent(), "kBwdTuning: one row per build, a dropout build where the main build lacks the path");

// One CTA owns kBlockN keys of one (sequence, KV head) and walks the query
// tiles (kBlockM rows) that see them, for every query head of the KV head's
// group, keeping dK and dV in registers (FlashAttention-2's backward). Eight
// warps tile each product's result in two dimensions (a warp's block is
// 16 * MA rows x 8 * NA columns):
//   S, dP   (kBlockM x kBlockN):  2 x 4 warps
//   dV, dK  (kBlockN x d):        (8 / kWarpsD) x kWarpsD warps
//   dQ      (kBlockM x d_qk):     4 x 2 warps
// Per thread: dK + dV hold kBlockN * (d_qk + d_v) / 256 floats for the whole
// loop (128 at d 128 and d 256), S and dP kBlockM * kBlockN / 256 each.
// The per-row knobs come from kBwdTuning (above).
template <int kDQK, int kDV, bool kDropoutBuild = false>
struct BwdConfig {
  static constexpr BwdTuning kTuning = bwd_tuning(kDQK, kDV, kDropoutBuild);
  static constexpr int kHeadDimQK = kDQK, kHeadDimV = kDV;
  static constexpr int kBlockM = kTuning.block_m;
  static constexpr int kBlockN = kDQK <= 128 ? 128 : 64;
  static constexpr int kWarps = 8;
  static constexpr bool kDropout = kTuning.dropout_path;
  static constexpr int kThreads = kWarps * 32;

  // S and dP: 2 warps along the queries, 4 along the keys.
  static constexpr int kWarpsMS = 2, kWarpsNS = 4;
  static constexpr int kMAS = kBlockM / (16 * kWarpsMS), kNAS = kBlockN / (8 * kWarpsNS);
  // dK (d_qk columns) and dV (d_v columns): split d in 4 when a quarter is still
  // a multiple of 16 columns and the keys are few, in 2 otherwise.
  static constexpr int warps_d(int d) { return (kBlockN == 64 && d % 64 == 0) ? 4 : 2; }
  static constexpr int kWarpsDK = warps_d(kDQK), kWarpsDV = warps_d(kDV);
  static constexpr int kMAK = kBlockN / (16 * (kWarps / kWarpsDK)), kNAK = kDQK / (8 * kWarpsDK);
  static constexpr int kMAV = kBlockN / (16 * (kWarps / kWarpsDV)), kNAV = kDV / (8 * kWarpsDV);
  // dQ: 4 warps along the queries, 2 along d_qk; at d 256, 2 x 4 as
  // FlashAttention-2 has it there: each warp then reads 32 x 64 of dS and 64 x
  // 64 of K per k-step instead of 16 x 64 and 64 x 128 (a third less shared
  // memory for dQ's product), and ptxas keeps the loop spill-free (4 -> 0 B).
  static constexpr int kWarpsMQ = kDQK >= 256 ? 2 : 4, kWarpsDQ = 8 / kWarpsMQ;
  static constexpr int kMAQ = kBlockM / (16 * kWarpsMQ), kNAQ = kDQK / (8 * kWarpsDQ);

  static constexpr bool kDqFirst = kTuning.dq_first;
  static constexpr bool kDiagonalStart = kTuning.diagonal_start;
  static constexpr bool kMaskBits = kTuning.mask_bits;
  static constexpr bool kRebuildQAddresses = kTuning.rebuild_q_sm80;
  static constexpr bool kRebuildQAddressesSm90 = kTuning.rebuild_q_sm90;
  static constexpr bool kRebuildDoAddresses = kTuning.rebuild_do_sm80;
  static constexpr bool kRebuildDoAddressesSm90 = kTuning.rebuild_do_sm90;
  static constexpr bool kKvOrderChosen = kTuning.kv_order_chosen;
  static constexpr bool kChunkedGrid = kTuning.chunked_grid;

  // Shared memory: Q and dO of kStages query tiles (the next tile loads while
  // this one computes), K, V (this CTA's keys), P and dS (kBlockM x kBlockN
  // each), 2-byte elements. dK and dV are staged through K's and V's buffers
  // at the end. Two stages where they fit an A100's 163 KiB (all rows but
  // d 256: 208 KiB, which only Hopper has), one otherwise.
  static constexpr int kSmemQ = kBlockM * kDQK * 2;
  static constexpr int kSmemDO = kBlockM * kDV * 2;
  static constexpr int kSmemK = kBlockN * kDQK * 2;
  static constexpr int kSmemV = kBlockN * kDV * 2;
  static constexpr int kSmemP = kBlockM * kBlockN * 2;
  static constexpr int smem_bytes(int stages) {
    return stages * (kSmemQ + kSmemDO) + kSmemK + kSmemV + 2 * kSmemP;
  }
  static constexpr int kStages = smem_bytes(2) <= 163 * 1024 ? 2 : 1;
  static constexpr int kSmemBytes = smem_bytes(kStages);
  // dQ's stage for the bulk adds (sm_90 only, bwd_dq.cuh): fp32 rows of the
  // query tile, after the buffers above. 192-208 KiB in all where it is used.
  static constexpr int kSmemDqStage = kBlockM * kDQK * 4;

  static_assert(kDQK % 32 == 0 && kDV % 32 == 0, "head dims are multiples of 32 (64-byte rows)");
  static_assert(kMAS >= 1 && kNAS % 2 == 0, "S: whole 16-row blocks, pairs of 8-column blocks");
  static_assert(kMAK >= 1 && kNAK % 2 == 0 && kMAV >= 1 && kNAV % 2 == 0, "dK, dV: warps tile whole blocks");
  static_assert(kMAQ >= 1 && kNAQ % 2 == 0, "dQ: warps tile whole blocks");
  static_assert(kBlockM % 64 == 0 && kBlockN % 64 == 0, "tile copies and the swizzle repeat every 8 rows");
  static_assert(!kDropoutBuild || bwd_has_dropout_build(kDQK, kDV), "only rows with dropout apart have a dropout build");
};

// Whether row (kDQK, kDV) runs its dropout build on a device that allows
// `optin` bytes of shared memory per block (0: not known): with dropout (the
// main build has no dropout path), and where the main build does not fit
// (the wide rows' dropout build has smaller tiles). The host's dispatch and
// supports() both ask here.
template <int kDQK, int kDV>
constexpr bool bwd_uses_dropout_build(long long optin, bool dropout) {
  return bwd_has_dropout_build(kDQK, kDV) &&
         (dropout || (optin > 0 && BwdConfig<kDQK, kDV>::kSmemBytes > optin));
}
// Whether the backward's grid puts the KV tiles slowest, (h_kv, batch, KV
// tiles) instead of (KV tiles, h_kv, batch): under a causal mask (no left
// window) the first KV tiles see the most query tiles, and with GQA each CTA
// walks them for every head of its group, so a few CTAs carry a large share
// of the work; launched first, they no longer set the tail: on the H100 the
// causal GQA backward's kernel is 5-19% faster at d 64 and d 128. Not without
// GQA: the CTAs running together then no longer share Q/dO tiles in L2 (MHA
// is slower). Not at d 256 (its Q/dO rows in flight outgrow L2; d 256 has its
// own grid), nor without a mask (level); the rows whose kv_order_chosen is
// false keep one order.
constexpr bool bwd_kv_tiles_slowest(int d_qk, int d_v, int h_per_kv, long long window_left, long long window_right) {
  return bwd_tuning(d_qk, d_v, false).kv_order_chosen && bwd_first_kv_tiles_heavy(h_per_kv, window_left, window_right);
}

// Shared memory of the build that row (kDQK, kDV) runs (bwd_uses_dropout_build()).
template <int kDQK, int kDV>
constexpr int bwd_smem_bytes(long long optin, bool dropout) {
  if constexpr (bwd_has_dropout_build(kDQK, kDV))
    if (bwd_uses_dropout_build<kDQK, kDV>(optin, dropout)) return BwdConfig<kDQK, kDV, true>::kSmemBytes;
  return BwdConfig<kDQK, kDV>::kSmemBytes;
}

}  // namespace attn::flash_sm80
