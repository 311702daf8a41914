// One S / dP tile of the backward in registers -> P (for dV) and dS (for dQ,
// dK), in SEMANTICS.md's order, with the caller's lse (FlashAttention's and
// cuDNN's contract: the backward reuses the forward's out and lse):
//   dP' = z * dP - D           (z = keep / (1 - p): dropout; D = rowsum(dO * O))
//   s   = scale q.k, softcap (dP' *= 1 - tanh^2, its derivative), ALiBi, mask
//   P   = exp(s - lse)          (0 for rows with lse = -inf: they see no key)
//   dS  = P * dP',  and P * z is what dV needs.
// With dropout the tile holds (1 - p) times dP' and P * z: keep * dP - (1 - p)
// D, with D (1 - p) from the row terms (flash::BwdParams::delta_scale), and P
// * keep; dK, dV and dQ take the 1 / (1 - p) once, when they are stored.
// Register layout as in flash/mask.cuh: s[ma][na][2 * half + e] is row
// row0 + 16 ma + 8 half + lane / 4, column n0 + 8 na + 2 (lane % 4) + e.
#pragma once

#include <cstdint>

#include "backends/flash/params.h"
#include "backends/flash/epilogue.cuh"
#include "backends/flash/dropout_bits.cuh"
#include "backends/flash/mask.cuh"
#include "backends/flash/online_softmax.cuh"
#include "backends/flash/score_mods.cuh"
#include "kernels/sm80/mma.cuh"

namespace attn::flash_sm80 {

// Per owned row: lse in log2 units (+inf for rows that see no key or lie past
// the sequence, so that every P of theirs is exp2(-inf) = 0) and D (0 past
// the sequence, where out and dout may hold anything), from the pre-pass's
// row_terms (bwd_params.h): one pointer and one 8-byte load per row, the rows
// 8 apart at constant offsets.
template <int MA>
struct RowTerms {
  float lse2[MA][2];
  float delta[MA][2];

  // terms: the tile's row 0; rows: the rows of the tile in the sequence;
  // delta_scale: D's factor (flash::BwdParams::delta_scale, or 1 for terms
  // staged with it).
  __device__ __forceinline__ void load(const float2* terms, int row0, int rows, int lane, float delta_scale) {
    const int r0 = row0 + (lane >> 2);
    const float2* at = terms + r0;
#pragma unroll
    for (int ma = 0; ma < MA; ++ma)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 t = r0 + 16 * ma + 8 * h < rows ? at[16 * ma + 8 * h] : make_float2(INFINITY, 0.f);
        lse2[ma][h] = t.x;
        delta[ma][h] = t.y * delta_scale;
      }
  }
};

// dP -> z * dP - D, times 1 - p under dropout (dropped pairs: -D; their P * z
// is 0 and their dS is P * -D, as d(out)/d(s) through the kept pairs alone
// requires). kDropout is a template argument, chosen once per tile by the
// caller: a per-element test of p.dropout_threshold made the compiler keep
// the 32 keep bits as predicates packed into registers on the path without
// dropout too (~100 instructions a tile in the d 128 loop).
template <bool kDropout, int MA, int NA>
__device__ __forceinline__ void dp_minus_delta(float (&dp)[MA][NA][4], const RowTerms<MA>& rt,
                                               const flash::KeepBits<MA, NA>& keep) {
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int na = 0; na < NA; ++na)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float d = dp[ma][na][e];
        if constexpr (kDropout) {
          const int b = flash::KeepBits<MA, NA>::bit(ma, na, e);
          d = ((keep.word[b / 32] >> (b % 32)) & 1u) ? d : 0.f;
        }
        dp[ma][na][e] = d - rt.delta[ma][e >> 1];
      }
}

// The forward's score changes (flash/score_mods.cuh's apply_score_mods, the same
// operations so that P matches the forward's lse), and softcap's derivative
// 1 - tanh^2 folded into dP'. Scores end in log2 units.
template <int MA, int NA>
__device__ __forceinline__ void score_mods_bwd(float (&s)[MA][NA][4], float (&dp)[MA][NA][4], const flash::FwdParams& p,
                                               float slope, int row0, int n0, int shift, int lane) {
  flash::for_each_score<MA, NA>(row0, n0, lane, [&](int ma, int na, int e, int i, int j) {
    float softcap_grad;
    s[ma][na][e] = flash::modified_score(s[ma][na][e], p, slope, i, j, shift, softcap_grad);
    if (p.softcap > 0.f) dp[ma][na][e] *= softcap_grad;
  });
}

// s -> P = exp2(unit * s - lse2); dp -> dS = P * dp; s -> P * keep (dropout).
template <bool kDropout, int MA, int NA>
__device__ __forceinline__ void probabilities_and_grads(float (&s)[MA][NA][4], float (&dp)[MA][NA][4],
                                                        const RowTerms<MA>& rt, const flash::KeepBits<MA, NA>& keep,
                                                        float unit) {
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int na = 0; na < NA; ++na)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pr = sm80::fast_exp2(s[ma][na][e] * unit - rt.lse2[ma][e >> 1]);
        dp[ma][na][e] *= pr;
        float pz = pr;
        if constexpr (kDropout) {
          const int b = flash::KeepBits<MA, NA>::bit(ma, na, e);
          pz = ((keep.word[b / 32] >> (b % 32)) & 1u) ? pr : 0.f;
        }
        s[ma][na][e] = pz;
      }
}

}  // namespace attn::flash_sm80
