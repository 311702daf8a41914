// Tile shapes of flash_sm80's forward per head dim: compile-time numbers the
// kernel is built on and the host reads (shared-memory need in supports()).
// Plain C++: no CUDA needed to include it.
#pragma once

namespace attn::flash_sm80 {

// One CTA computes kBlockM query rows of one (sequence, head) against KV tiles
// of kBlockN keys. Each warp owns kBlockM / kWarps rows (kRowBlocks blocks of
// 16) and every column of the tile, so softmax statistics never leave a quad.
// Choices follow the register budget (<= 255 per thread): per thread the S
// tile holds 4 * kRowBlocks * kBlockN / 8 floats and O 4 * kRowBlocks * d_v / 8.
//   d <= 64:   128 x 128, 4 warps  (S 128, O <= 64 registers)
//   d 96, 128: 128 x 64,  4 warps  (S 64,  O <= 128)
//   d >= 160:  128 x 64,  8 warps  (S 32,  O <= 128)
// d 256 also has a narrow build: 64 x 64 on 4 warps, 96 KiB instead of 128.
// Where an SM holds two of them (Hopper's 228 KiB) the two CTAs' barriers
// and loads hide each other's waits, as FlashAttention-2 chose for the H100;
// where a block cannot hold the wide one (sm86/sm89: 99 KiB) it is the only
// one that runs. The A100 (163 KiB: one CTA either way) keeps the wide one.
// Rows d 64 and d 128 also have a dropout build. Their S and O fill 192
// registers per thread, and Philox beside them spilled in the main loop (84
// and 44 bytes on sm_90a) in every call, dropout or not. Their wide build has
// no dropout path; with dropout they run 128 x 64 (d 64) and 128 x 32 (d 128)
// tiles, FlashAttention-2's dropout tiles there (S 64 or 32 registers).
// Macros because fwd_instantiate.cu tests them in the preprocessor.
#define ATTN_SM80_FWD_NARROW(dqk) ((dqk) >= 256)
#define ATTN_SM80_FWD_DROPOUT_APART(dqk) ((dqk) == 64 || (dqk) == 128)

enum class FwdBuild { wide, narrow, dropout };

template <int kDQK, int kDV, FwdBuild kBuild = FwdBuild::wide>
struct FwdConfig {
  static constexpr bool kNarrow = kBuild == FwdBuild::narrow;
  static constexpr int kHeadDimQK = kDQK;
  static constexpr int kHeadDimV = kDV;
  static constexpr int kBlockM = kNarrow ? 64 : 128;
  static constexpr int kBlockN = (kDQK <= 64 ? 128 : 64) / (kBuild == FwdBuild::dropout ? 2 : 1);
  static constexpr int kWarps = kDQK >= 160 && !kNarrow ? 8 : 4;
  // Whether the build has dropout's path (the wide build of a row with a
  // dropout build has not).
  static constexpr bool kDropout = !(kBuild == FwdBuild::wide && ATTN_SM80_FWD_DROPOUT_APART(kDQK));
  static constexpr int kThreads = kWarps * 32;
  // d 128's wide build (S and O fill 192 registers) spilled 44 B in its tile
  // loop on sm_80: a load and a store of three running sums per tile. With
  // the sums kept one per lane (flash/online_softmax.cuh, kQuadSums) it reloaded
  // three held values per tile (20 B); with the K/V copies' addresses also
  // rebuilt per tile (kRebuildCopyAddressesSm80), 0 B. sm_90a's loop has
  // 0 B either way, and there the rebuilt addresses slow the H100's d 128
  // forward, so they are sm_80's only.
  // Not at d 64 (S 128 and O 64 registers), where either measure moved
  // ptxas from 36 / 16 B (sm_80 / sm_90a) to 56-128 B.
  static constexpr bool kQuadSums = kBuild == FwdBuild::wide && kDQK == 128;
  static constexpr bool kRebuildCopyAddressesSm80 = kQuadSums;
  static constexpr int kRowBlocks = kBlockM / (16 * kWarps);  // 16-row mma blocks per warp
  static constexpr int kColBlocksS = kBlockN / 8;            // 8-column mma blocks of S
  static constexpr int kColBlocksO = kDV / 8;                // of O
  // One buffer each for Q, K and V (2-byte elements); the output tile reuses
  // Q's. K and V alternate in flight (K[n-1] loads during softmax and P.V of
  // tile n, V[n] during Q.K^T of tile n), as in FlashAttention-2.
  static constexpr int kSmemQ = kBlockM * kDQK * 2;
  static constexpr int kSmemK = kBlockN * kDQK * 2;
  static constexpr int kSmemV = kBlockN * kDV * 2;
  static constexpr int kSmemBytes = kSmemQ + kSmemK + kSmemV;

  static_assert(kDQK % 32 == 0 && kDV % 32 == 0, "head dims are multiples of 32 (64-byte rows)");
  static_assert(kDV <= kDQK, "the output tile is staged in Q's shared memory");
  static_assert(kRowBlocks >= 1 && kBlockM % (16 * kWarps) == 0, "rows split evenly into 16-row blocks");
  static_assert(!kNarrow || ATTN_SM80_FWD_NARROW(kDQK), "only rows listed in ATTN_SM80_FWD_NARROW have a narrow build");
  static_assert(kBuild != FwdBuild::dropout || ATTN_SM80_FWD_DROPOUT_APART(kDQK),
                "only rows listed in ATTN_SM80_FWD_DROPOUT_APART have a dropout build");
  static_assert(kBuild != FwdBuild::wide ||
                    ATTN_SM80_FWD_DROPOUT_APART(kDQK) == (kRowBlocks * (kBlockN + kDV) / 2 >= 192),
                "the rows with a dropout build are those whose S and O fill 192 registers per thread");
};

// Whether row (kDQK, kDV) runs its narrow build on a device that allows
// `optin` bytes of shared memory per block (0: not known, the wide build):
// where the wide build does not fit, or where two narrow CTAs fit one SM
// (a block's limit stands in for the SM's: 227 of 228 KiB on Hopper).
template <int kDQK, int kDV>
constexpr bool fwd_uses_narrow(long long optin) {
  if constexpr (ATTN_SM80_FWD_NARROW(kDQK))
    return optin > 0 && (FwdConfig<kDQK, kDV>::kSmemBytes > optin ||
                         2 * FwdConfig<kDQK, kDV, FwdBuild::narrow>::kSmemBytes <= optin);
  else
    return false;
}
// The build that runs row (kDQK, kDV) (the dispatch and supports() ask here).
template <int kDQK, int kDV>
// `dropout`: the call needs the dropout path's build (dropout, or a max logit:
// fwd_needs_dropout_build).
constexpr FwdBuild fwd_build(long long optin, bool dropout) {
  if (ATTN_SM80_FWD_DROPOUT_APART(kDQK) && dropout) return FwdBuild::dropout;
  return fwd_uses_narrow<kDQK, kDV>(optin) ? FwdBuild::narrow : FwdBuild::wide;
}
template <int kDQK, int kDV>
constexpr int fwd_smem_bytes(long long optin, bool dropout) {
  switch (fwd_build<kDQK, kDV>(optin, dropout)) {
    case FwdBuild::narrow:
      if constexpr (ATTN_SM80_FWD_NARROW(kDQK)) return FwdConfig<kDQK, kDV, FwdBuild::narrow>::kSmemBytes;
      break;
    case FwdBuild::dropout:
      if constexpr (ATTN_SM80_FWD_DROPOUT_APART(kDQK)) return FwdConfig<kDQK, kDV, FwdBuild::dropout>::kSmemBytes;
      break;
    case FwdBuild::wide: break;
  }
  return FwdConfig<kDQK, kDV>::kSmemBytes;
}

}  // namespace attn::flash_sm80
