// The decode kernel's shape (decode_kernel.cuh): 4 warps, 16 or 32 packed
// query rows (kRowBlocks mma row blocks), KV tiles of 64 keys (16 per warp)
// in kStages cp.async stages, and the merge of the warps' partial softmaxes
// in the stages' memory afterwards; the combine kernel's shape.
#pragma once

#include "kernels/sm80/swizzle.h"

namespace attn::flash_decode {

// Two row blocks where a KV head's group has more than 16 rows (GQA 8 with
// 4 tokens: 32), so one CTA reads its keys once for all of them; only
// where the rows are narrow (d_qk + d_v <= 256: their accumulators and the
// larger merge fit beside the stages).
inline constexpr bool two_row_blocks_fit(int d_qk, int d_v) { return d_qk + d_v <= 256; }

inline constexpr int kDecodeWarps = 4;

template <int kDQK, int kDV, int kRowBlocks = 1>
struct DecodeConfig {
  static_assert(kRowBlocks == 1 || (kRowBlocks == 2 && two_row_blocks_fit(kDQK, kDV)), "one or two row blocks");
  static constexpr int kWarps = kDecodeWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * kRowBlocks;  // packed query rows per CTA
  static constexpr int kBlockN = 16 * kWarps;    // keys per tile: each warp takes 16
  // Three stages where they fit beside two CTAs per SM (measured on the
  // H100: 2.91 -> 3.00 TB/s at batch 64, 8k keys; 2.56 -> 2.65 at one 128k
  // sequence), two for the widest rows (d 256 would not fit an A100).
  static constexpr int kStages = kDQK + kDV <= 256 ? 3 : 2;
  using TileQ = sm80::SwizzledTile<kRows, kDQK>;
  using TileK = sm80::SwizzledTile<kBlockN, kDQK>;
  using TileV = sm80::SwizzledTile<kBlockN, kDV>;
  static constexpr int kStageBytes = TileK::kBytes + TileV::kBytes;
  // The merge: each warp's unnormalized O rows, then its row maxima and
  // sums. Rows kDV + 8 floats apart, so the 8 rows of a warp's float2
  // store start 8 banks apart, not in the same bank (8-way conflicts): H200,
  // us from CUDA graphs, h 64/8, 4 tokens, b 1 2k 13.3 -> 12.5, b 1 32k
  // 47.1 -> 45.4, b 8 8k 81.8 -> 80.2; one token, b 1 2k 10.5 -> 10.2.
  static constexpr int kMergeStride = kDV + 8;
  static constexpr int kMergeBytes = kWarps * kRows * kMergeStride * 4 + 2 * kWarps * kRows * 4;
  static constexpr int kLoopBytes = kStages * kStageBytes;
  // Q, the stages (the merge reuses them), then kStages tiles' row addresses
  // (K and V, 8 bytes each) and block-table entries (4 bytes a row).
  static constexpr int kOffsetsAt = TileQ::kBytes + (kLoopBytes > kMergeBytes ? kLoopBytes : kMergeBytes);
  static constexpr int kEntriesAt = kOffsetsAt + kStages * kBlockN * 16;
  static constexpr int kSmemBytes = kEntriesAt + kStages * kBlockN * 4;
};

// The combine kernel's shape: one CTA per row; its threads are groups of
// kDV / 4 (a float4 of the row each), group g taking partial results g,
// g + groups, ... so every part's load of a row is in flight at once: the
// row's merge costs one round trip to L2, not one per part.
template <int kDV>
struct CombineConfig {
  static constexpr int kThreads = 256;
  static constexpr int kChunks = kDV / 4;  // float4 columns of a row
  static constexpr int kGroups = kThreads / kChunks;
  static constexpr int kAhead = 8;  // partial results per thread per batch of loads
  static_assert(kDV % 4 == 0 && kThreads % kChunks == 0, "a row is whole float4s, groups fill the CTA");
};

// The splits' loads a combine CTA has in flight at once for rows d_v wide
// (CombineConfig's groups x kAhead): up to this many partial results per
// row cost the combine one round trip to L2.
inline constexpr int combine_loads_at_once(int d_v) {
  return CombineConfig<64>::kThreads / (d_v / 4) * CombineConfig<64>::kAhead;
}

}  // namespace attn::flash_decode
