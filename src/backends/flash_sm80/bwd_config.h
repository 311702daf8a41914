// Tile shapes of flash_sm80's backward per head dim: compile-time numbers the
// kernel is built on and the host reads (shared memory in supports()).
// Plain C++: no CUDA needed to include it.
#pragma once

#include "backends/flash/heuristics.h"

namespace attn::flash_sm80 {

using flash::bwd_clamp_group_chunk;
using flash::bwd_first_kv_tiles_heavy;
using flash::bwd_group_chunk;

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
//
// 128 query rows at d <= 64 ("wide", FlashAttention-2's sm80 tile there):
// twice the products per tile for the same loads, barriers and setup: faster
// on the H100 at d 32 and d 64, with dropout's path (which spills there) kept
// out of the wide build (kDropout below).
#define ATTN_SM80_BWD_WIDE_M(dqk) ((dqk) <= 64)
// Rows whose dropout path is compiled apart, as FlashAttention-2 compiles its
// dropout kernels apart (Is_dropout): Philox and the keep bits beside S, dP,
// dK and dV cost registers in every call, dropout or not. The main build of
// these rows has no dropout path; their dropout build (kDropoutBuild) has it.
// - d <= 64: dropout's path spills in the wide build's loop at d 64 (sm_90a); the
//   dropout build has 64-row tiles (64 / 96 KiB), so it is also the build
//   for GPUs whose shared memory per block cannot hold the wide one
//   (sm86/sm89: 99 KiB).
// - d 128 and d 256: same tiles; the main build is 2-3% (d 128) and 0.5-1%
//   (d 256) faster on the H100, and sm_90a's d 256 loop has no spills.
// A macro because bwd_instantiate.cu tests it in the preprocessor.
#define ATTN_SM80_BWD_DROPOUT_APART(dqk) ((dqk) <= 64 || (dqk) == 128 || (dqk) == 256)

template <int kDQK, int kDV, bool kDropoutBuild = false>
struct BwdConfig {
  static constexpr int kHeadDimQK = kDQK, kHeadDimV = kDV;
  static constexpr int kBlockM = ATTN_SM80_BWD_WIDE_M(kDQK) && !kDropoutBuild ? 128 : 64;
  static constexpr int kBlockN = kDQK <= 128 ? 128 : 64;
  static constexpr int kWarps = 8;
  // Whether the build has dropout's path (ATTN_SM80_BWD_DROPOUT_APART).
  static constexpr bool kDropout = !ATTN_SM80_BWD_DROPOUT_APART(kDQK) || kDropoutBuild;
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

  // dQ's product and its adds before dV's product (dQ, dV, dK), or after it
  // (FlashAttention-2's dV, dQ, dK). dQ first gives its bulk reduce-add two
  // products' time to drain before the next item's Q/dO loads, which it slows:
  // faster on the H100 at d 256 and d 64, slower at d 128, whose sm_90a loop
  // spills more that way. Rows 96, 160 and 192 are not measured: FA2's order.
  static constexpr bool kDqFirst = kDQK <= 64 || kDQK == 256;

  // Each head's run of query tiles from the CTA's diagonal tile, wrapping
  // around, instead of from the first. Without a mask, the CTAs running
  // together (neighbouring KV tiles of one head) otherwise read the same
  // Q/dO tile and bulk-add into the same dQ rows at the same moment: faster
  // in d 256's non-causal backward on the H100. Level at d 64 and d 128 in a
  // full grid; rows 96, 160 and 192 are not measured, and the start tile's
  // register spills in sm_90a's d 192 loop.
  static constexpr bool kDiagonalStart = kDQK == 256;

  // Masked tiles' per-element mask as one word of bits per row with 32-bit
  // bounds (apply_mask_bits): the causal backward 0.5-2% faster at d 64, 128
  // and 256 on the H100. Rows 96 and 192 keep the key-by-key
  // form, with which ptxas keeps their sm_90a loops free of spills (24 and
  // 16 B with bits).
  static constexpr bool kMaskBits = !((kDQK == 96 && kDV == 96) || (kDQK == 192 && kDV == 192));

  // Which of the Q and dO copies rebuild their per-thread addresses for
  // each item (an opaque thread index, as bwd_dq.cuh's adds do) instead of
  // holding them across the item loop. Otherwise ptxas (CUDA 13) spills
  // 4-16 B in the loops of these builds, values held across the loop reloaded
  // per item; with this choice every build has 0 B on sm_80 and sm_90a. Other
  // choices spill elsewhere (e.g. Q's addresses rebuilt at d 128 without
  // dropout: 52 B on sm_90a), so it is per build and per architecture (at
  // d 256, with its chunked grid).
  static constexpr bool kRebuildQAddresses = (kDQK == 64 && !kDropoutBuild) || (kDQK == 128 && kDropoutBuild);
  static constexpr bool kRebuildQAddressesSm90 = kRebuildQAddresses || kDQK == 256;
  static constexpr bool kRebuildDoAddresses = kDQK == 128 && !kDropoutBuild;
  static constexpr bool kRebuildDoAddressesSm90 = kRebuildDoAddresses || kDQK == 256;

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
  static_assert(!kDropoutBuild || ATTN_SM80_BWD_DROPOUT_APART(kDQK), "only rows with dropout apart have a dropout build");
};

// Whether row (kDQK, kDV) runs its dropout build on a device that allows
// `optin` bytes of shared memory per block (0: not known): with dropout (the
// main build has no dropout path), and where the main build does not fit
// (the wide rows' dropout build has smaller tiles). The host's dispatch and
// supports() both ask here.
template <int kDQK, int kDV>
constexpr bool bwd_uses_dropout_build(long long optin, bool dropout) {
  return ATTN_SM80_BWD_DROPOUT_APART(kDQK) &&
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
// own grid, below), nor without a mask (level). Rows 96, 160 and 192 are not
// measured: they keep one order, and with it their sm_90a loops' registers
// (the choice spills 4-20 B).
// A macro, as the ones above, so that the kernel can test it too.
#define ATTN_SM80_BWD_KV_ORDER_CHOSEN(dqk) ((dqk) <= 64 || (dqk) == 128)
constexpr bool bwd_kv_tiles_slowest(int d_qk, int h_per_kv, long long window_left, long long window_right) {
  return ATTN_SM80_BWD_KV_ORDER_CHOSEN(d_qk) && bwd_first_kv_tiles_heavy(h_per_kv, window_left, window_right);
}

// d 256's grid is (pairs of a chunk, KV tiles, chunks): its (KV head,
// sequence) pairs in chunks of bwd_group_chunk() pairs, the KV tiles slowest
// within a chunk (1: every pair's tiles in turn, the order above's default).
// Under a causal mask with GQA the heavy first KV tiles of a chunk's pairs
// start together, and only the chunk's Q/dO rows are in flight: chunks of
// about 32 MiB of them (h_per_kv x s_q x (d_qk + d_v) x 2 bytes per pair):
// d 256's causal GQA backward is then ahead of FlashAttention-2's on the H100;
// one pair per chunk is behind it, and all pairs in one chunk gain less.
// Compiled in as d 256's only grid: as a run-time choice beside the other
// order, its arithmetic spills 16-24 B in sm_90a's loops. Its cost: MHA at
// d 256 (one pair per chunk) is about 1% slower than with blockIdx itself.
#define ATTN_SM80_BWD_CHUNKED_GRID(dqk) ((dqk) == 256)
template <int kDQK, int kDV>
constexpr int bwd_smem_bytes(long long optin, bool dropout) {
  if constexpr (ATTN_SM80_BWD_DROPOUT_APART(kDQK))
    if (bwd_uses_dropout_build<kDQK, kDV>(optin, dropout)) return BwdConfig<kDQK, kDV, true>::kSmemBytes;
  return BwdConfig<kDQK, kDV>::kSmemBytes;
}

}  // namespace attn::flash_sm80
