// The score changes before the mask, in DESIGN.md's order: softmax_scale,
// softcap, ALiBi; then into log2 units for exp2.
//
// Register layout (mma.cuh): s[ma][na][2 * half + e] is row
// row0 + 16 ma + 8 half + lane / 4, column n0 + 8 na + 2 (lane % 4) + e.
#pragma once

#include "attn/mask_rule.h"  // alibi_bias
#include "backends/flash/params.h"
#include "kernels/sm80/mma.cuh"

namespace attn::flash {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// softcap: c tanh(x / c); `grad` gets its derivative 1 - tanh^2.
__device__ __forceinline__ float softcapped(float x, const FwdParams& p, float& grad) {
  const float t = sm80::fast_tanh(x * p.softcap_inv);
  const float capped = p.softcap * t;
  grad = 1.f - t * t;
  return capped;
}

// The score of row i, key j: scale, softcap and ALiBi (natural units), then
// into log2 units (the caller exponentiates with scale 1). `softcap_grad`
// gets the softcap's derivative 1 - tanh^2 (1 without softcap), which the
// backward folds into dP.
__device__ __forceinline__ float modified_score(float raw, const FwdParams& p, float slope, int i, int j, int shift,
                                                float& softcap_grad) {
  float x = raw * p.scale;
  softcap_grad = 1.f;
  if (p.softcap > 0.f) x = softcapped(x, p, softcap_grad);
  if (p.alibi) x += alibi_bias<float, int>(slope, i, j, shift);
  return x * kLog2e;
}

// Calls f(ma, na, e, i, j) for each of the warp's fragment elements, with
// its row i and key j.
template <int MA, int NA, typename F>
__device__ __forceinline__ void for_each_score(int row0, int n0, int lane, F&& f) {
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int na = 0; na < NA; ++na)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        f(ma, na, e, row0 + 16 * ma + 8 * (e >> 1) + (lane >> 2), n0 + 8 * na + 2 * (lane & 3) + (e & 1));
}

// modified_score over a tile.
template <int MA, int NA>
__device__ __forceinline__ void apply_score_mods(float (&s)[MA][NA][4], const FwdParams& p, float slope, int row0,
                                                 int n0, int shift, int lane) {
  for_each_score<MA, NA>(row0, n0, lane, [&](int ma, int na, int e, int i, int j) {
    float unused;
    s[ma][na][e] = modified_score(s[ma][na][e], p, slope, i, j, shift, unused);
  });
}

}  // namespace attn::flash
