// The online softmax over a row's tiles of scores: running max and sum,
// scores -> probabilities, O's rescale factor, and at the end 1 / sum and lse.
//
// Register layout (mma.cuh): s[ma][na][2 * half + e] is row
// row0 + 16 ma + 8 half + lane / 4, column n0 + 8 na + 2 (lane % 4) + e.
#pragma once

#include "backends/common/softmax_sink.cuh"
#include "backends/flash/score_mods.cuh"  // kLn2
#include "kernels/sm80/mma.cuh"

namespace attn::flash {

// Running max (in score units: times `unit` gives log2 units) and this
// thread's part of the running sum, per owned row. The quad's four parts are
// added once, at the end.
// kQuadSums (MA = 2: four rows per thread, four lanes per quad): each tile's
// row sums are completed across the quad at once, and lane k of the quad
// keeps row k's running sum alone: one register for the sums instead of
// four, for a loop whose S and O fill 192 registers (flash_sm80's wide
// forward at d 128 spilled three of the four to local memory, a load and a
// store each per tile; fwd_config.h). Eight shuffles per tile more.
template <int MA, bool kQuadSums = false>
struct OnlineSoftmax {
  static_assert(!kQuadSums || MA == 2, "one row per lane of the quad");
  static constexpr int kSumRows = kQuadSums ? 1 : MA;
  float max[MA][2];
  float sum[kSumRows][2];  // kQuadSums: sum[0][0] is row lane % 4's (ma = k / 2, half k % 2)

  __device__ __forceinline__ OnlineSoftmax() {
#pragma unroll
    for (int ma = 0; ma < MA; ++ma)
#pragma unroll
      for (int h = 0; h < 2; ++h) max[ma][h] = -INFINITY;
#pragma unroll
    for (int ma = 0; ma < kSumRows; ++ma) sum[ma][0] = sum[ma][1] = 0.f;
  }

  // kQuadSums: of four per-row values (the quad's rows), this lane's row's.
  __device__ __forceinline__ static float lane_row(const float (&v)[MA][2]) {
    const int k = threadIdx.x & 3;
    return k < 2 ? (k == 0 ? v[0][0] : v[0][1]) : (k == 2 ? v[MA - 1][0] : v[MA - 1][1]);
  }

  // s -> exp2(unit * s - unit * new max); O's rows rescaled to the new max.
  // A row that has seen only -inf keeps max -inf and uses 0 as its base, so
  // exp2(-inf) = 0 and no NaN appears.
  template <int NA, int NO>
  __device__ __forceinline__ void step(float (&s)[MA][NA][4], float (&o)[MA][NO][4], float unit) {
    float correction[MA][2];
    update(s, unit, correction);
    rescale(o, correction);
  }

  // The scores' half of step(): the new running max and sum, s -> probabilities,
  // and per row the factor O must be multiplied by (flash_sm90 applies it
  // later, once the previous tile's P.V has left O's registers).
  template <int NA>
  __device__ __forceinline__ void update(float (&s)[MA][NA][4], float unit, float (&correction)[MA][2]) {
    [[maybe_unused]] float tile_sum[MA][2];  // kQuadSums: each row's sum over this tile
#pragma unroll
    for (int ma = 0; ma < MA; ++ma)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float m = max[ma][h];
#pragma unroll
        for (int na = 0; na < NA; ++na) m = fmaxf(m, fmaxf(s[ma][na][2 * h], s[ma][na][2 * h + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        const float base = m == -INFINITY ? 0.f : m * unit;
        correction[ma][h] = sm80::fast_exp2(max[ma][h] * unit - base);
        max[ma][h] = m;
        float part = kQuadSums ? 0.f : sum[ma][h] * correction[ma][h];
#pragma unroll
        for (int na = 0; na < NA; ++na)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pr = sm80::fast_exp2(s[ma][na][2 * h + e] * unit - base);
            s[ma][na][2 * h + e] = pr;
            part += pr;
          }
        if constexpr (kQuadSums) {
          part += __shfl_xor_sync(0xffffffffu, part, 1);
          tile_sum[ma][h] = part + __shfl_xor_sync(0xffffffffu, part, 2);
        } else {
          sum[ma][h] = part;
        }
      }
    if constexpr (kQuadSums) sum[0][0] = sum[0][0] * lane_row(correction) + lane_row(tile_sum);
  }

  // A row whose max did not change has correction exactly 1: where that holds
  // for every row of the warp, O is left as it is (the same bits, without
  // MA x NO x 4 multiplies; once the running max settles, most tiles).
  template <int NO>
  __device__ __forceinline__ static void rescale(float (&o)[MA][NO][4], const float (&correction)[MA][2]) {
    bool changed = false;
#pragma unroll
    for (int ma = 0; ma < MA; ++ma) changed |= correction[ma][0] != 1.f || correction[ma][1] != 1.f;
    if (!__any_sync(0xffffffffu, changed)) return;
#pragma unroll
    for (int ma = 0; ma < MA; ++ma)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int no = 0; no < NO; ++no) {
          o[ma][no][2 * h] *= correction[ma][h];
          o[ma][no][2 * h + 1] *= correction[ma][h];
        }
  }

  // Completes the quad's sums; returns per row 1 / sum (0 for a row that saw
  // no key: out = 0) times `out_scale`, and lse (natural log). `sink_log2`:
  // the softmax sink's logit in log2 units (-inf: none), one more term of
  // the sum with no value.
  __device__ __forceinline__ void finish(float (&inv)[MA][2], float (&lse)[MA][2], float unit, float out_scale,
                                         float sink_log2) {
#pragma unroll
    for (int ma = 0; ma < MA; ++ma)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float l;
        if constexpr (kQuadSums) {
          l = __shfl_sync(0xffffffffu, sum[0][0], (threadIdx.x & 28) | (2 * ma + h));
        } else {
          l = sum[ma][h];
          l += __shfl_xor_sync(0xffffffffu, l, 1);
          l += __shfl_xor_sync(0xffffffffu, l, 2);
        }
        const float top = max[ma][h] * unit;  // log2 units; -inf for a row that saw no key
        // O and l are relative to exp2(top); the sink's term joins them
        // relative to the larger of the two, so neither overflows (without a
        // sink: c = 1 and nothing is added, the same bits as before).
        float base = fmaxf(top, sink_log2);
        base = base == -INFINITY ? 0.f : base;
        const float c = sm80::fast_exp2(top - base);
        l = l * c + sm80::fast_exp2(sink_log2 - base);
        // The fast reciprocal and log (2 ulp; 2^-21 absolute near 1): l >= 1
        // once a key or a sink is seen (the larger term is exp2(0)), and these
        // sit on the path from the last product to the store.
        // A NaN score makes l NaN: lse stays NaN (and so does the max logit
        // read from it); only a row that saw nothing (l = 0) gets -inf.
        const bool seen = !(l <= 0.f);
        inv[ma][h] = seen ? __fdividef(out_scale * c, l) : 0.f;
        lse[ma][h] = seen ? base * kLn2 + __logf(l) : -INFINITY;
      }
  }

  // The largest score of this thread's rows that `valid` keeps (natural
  // units; -inf: none), NaN where a row's lse is (a NaN score). finish()'s
  // lse in hand; the quad's four lanes hold the same rows.
  __device__ __forceinline__ float largest_score(const float (&lse)[MA][2], float unit, const bool (&valid)[MA][2]) const {
    float m = -INFINITY;
#pragma unroll
    for (int ma = 0; ma < MA; ++ma)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!valid[ma][h]) continue;
        const float x = max[ma][h] * unit * kLn2;
        m = lse[ma][h] != lse[ma][h] || m != m ? lse[ma][h] + m : fmaxf(m, x);
      }
    return m;
  }
};

// A float as an int in the same order, NaN (made one positive quiet NaN)
// above +inf: one integer max then reduces floats and keeps a NaN.
__device__ __forceinline__ int ordered_key(float x) {
  const int b = x != x ? 0x7fffffff : __float_as_int(x);
  return b >= 0 ? b : b ^ 0x7fffffff;
}
__device__ __forceinline__ float from_ordered_key(int key) { return __int_as_float(key >= 0 ? key : key ^ 0x7fffffff); }

// The ordered key of the warp's largest score, NaN kept: one redux, where
// shuffles took three dependent steps on the epilogue's path.
__device__ __forceinline__ int warp_max_key(float score) {
  return __reduce_max_sync(0xffffffffu, ordered_key(score));
}

// One warp's share of the max logit for a tile (flash_sm80): lane 0 reads the
// value where it goes before the output's staging and store, and max-es the
// warp's score in after them where that value is smaller. Every row of a head
// aims at one address (and every head at one line), whose atomics queue up:
// one per quad cost a 1k causal forward 26-49%.
struct PendingMaxLogit {
  float* addr = nullptr;
  float m = -INFINITY, seen = 0.f;

  __device__ __forceinline__ void hold(float* max_logit, float score, int lane) {
    addr = max_logit;
    m = from_ordered_key(warp_max_key(score));
    seen = lane == 0 && m != -INFINITY ? __ldcg(max_logit) : INFINITY;
  }
  __device__ __forceinline__ void settle(int lane) {
    if (addr && lane == 0 && m != -INFINITY && (m != m ? seen == seen : m > seen))
      detail::atomic_max_keeping_nan(addr, m);
    addr = nullptr;
  }
};

}  // namespace attn::flash
