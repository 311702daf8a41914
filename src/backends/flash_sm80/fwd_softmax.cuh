// Scores of one S tile in registers -> probabilities, in DESIGN.md's order:
// softcap and ALiBi (score_mods), the visibility mask (boundary tiles only),
// the online softmax (running max and sum, rescaling O), then dropout on the
// probabilities that feed P.V (the sum, hence lse, is taken before dropout).
//
// Register layout (mma.cuh): s[ma][na][2 * half + e] is row
// row0 + 16 ma + 8 half + lane / 4, column n0 + 8 na + 2 (lane % 4) + e.
#pragma once

#include <cstdint>

#include "attn/philox.h"
#include "backends/flash_sm80/fwd_params.h"
#include "backends/flash_sm80/fwd_schedule.cuh"
#include "kernels/sm80/mma.cuh"

namespace attn::flash_sm80 {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The score of row i, key j: scale, softcap and ALiBi (natural units), then
// into log2 units (the caller exponentiates with scale 1). `softcap_grad`
// gets the softcap's derivative 1 - tanh^2 (1 without softcap), which the
// backward folds into dP.
__device__ __forceinline__ float modified_score(float raw, const FwdParams& p, float slope, int i, int j, int shift,
                                                float& softcap_grad) {
  float x = raw * p.scale;
  softcap_grad = 1.f;
  if (p.softcap > 0.f) {
    const float t = sm80::fast_tanh(x * p.softcap_inv);
    x = p.softcap * t;
    softcap_grad = 1.f - t * t;
  }
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

// Pairs outside a row's visible keys become -inf (boundary tiles only). The
// ranges are recomputed here rather than kept in registers across the loop.
// Key j of element s[ma][na][e] is n0 + 2 (lane % 4) + c with c = 8 na +
// e % 2 known at compile time, so each row's range becomes bounds on c, and
// an element costs two compares with constants and a select (the masked
// tile of a d 64 flash_sm90 forward: 267 instructions, 480 key by key).
// kCheckBegin = false: the caller knows no row's first key lies past n0 (a
// causal diagonal, a sequence's last tile), so only the ends cut: one
// compare per element fewer.
template <bool kCheckBegin = true, int MA, int NA>
__device__ __forceinline__ void apply_mask(float (&s)[MA][NA][4], const FwdParams& p, const SeqExtent& seq, int row0,
                                           int n0, int lane) {
  const int col0 = n0 + 2 * (lane & 3);
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const KeyRange<int> keys = row_keys(p, seq, row0 + 16 * ma + 8 * h + (lane >> 2));
      const int begin = keys.begin - col0, end = keys.end - col0;  // visible c: [begin, end)
#pragma unroll
      for (int na = 0; na < NA; ++na)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if ((kCheckBegin && 8 * na + e < begin) || 8 * na + e >= end) s[ma][na][2 * h + e] = -INFINITY;
    }
}

// The bits of a row's first `count` accumulator elements (count <= 0: none;
// PTX's shl gives 0 for shifts of 32 or more, so a count >= 32 sets all).
__device__ __forceinline__ uint32_t prefix_bits(int count) {
  uint32_t bits;
  asm("shl.b32 %0, 1, %1;" : "=r"(bits) : "r"(max(count, 0)));
  return bits - 1u;
}

// Row h of accumulator block s[ma]: the elements whose bit in `visible` is
// clear become -inf.
template <int MA, int NA>
__device__ __forceinline__ void mask_row_by_bits(float (&s)[MA][NA][4], int ma, int h, uint32_t visible) {
  static_assert(2 * NA <= 32, "one word of bits per row");
#pragma unroll
  for (int k = 0; k < 2 * NA; ++k)
    if (!(visible & (1u << k))) s[ma][k / 2][2 * h + k % 2] = -INFINITY;
}

// The same mask tested key by key: the backward's form on the rows whose
// loops the bits form below spills (bwd_config.h, kMaskBits). (apply_mask's
// bounds form, in the backward, moved ptxas to 24-28 B of spills in the
// sm_80 d 128 loop, which has none with this one.)
template <int MA, int NA>
__device__ __forceinline__ void apply_mask_by_key(float (&s)[MA][NA][4], const FwdParams& p, const SeqExtent& seq,
                                                  int row0, int n0, int lane) {
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const KeyRange<int> keys = row_keys(p, seq, row0 + 16 * ma + 8 * h + (lane >> 2));
#pragma unroll
      for (int na = 0; na < NA; ++na)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = n0 + 8 * na + 2 * (lane & 3) + e;
          if (!keys.contains(j)) s[ma][na][2 * h + e] = -INFINITY;
        }
    }
}

// apply_mask as bits: per row one word of the elements before the row's end
// minus those before its begin, tested bit by bit. Tests of consecutive bits
// of one word compile to R2P, seven predicates per instruction, instead of
// one ISETP per element (FlashAttention 4's mask does the same). The bounds
// are row_key_begin() and row_key_end(), in 32 bits: with row_keys()'s 64-bit
// bounds per row the backward gained nothing over the key-by-key mask
// (PERF.md). kCheckBegin = false as in apply_mask (only the ends cut; begin 0
// clears no bit): flash_sm90's forward, d 64 1k causal +3% (PERF.md, v18).
// With both ends: the backward's masked tiles (bwd_config.h, kMaskBits).
template <bool kCheckBegin = true, int MA, int NA>
__device__ __forceinline__ void apply_mask_bits(float (&s)[MA][NA][4], const FwdParams& p, const SeqExtent& seq,
                                                int row0, int n0, int lane) {
  const int col0 = n0 + 2 * (lane & 3);
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 16 * ma + 8 * h + (lane >> 2);
      const int begin = kCheckBegin ? row_key_begin(p, seq, row) - col0 : 0, end = row_key_end(p, seq, row) - col0;
      mask_row_by_bits(s, ma, h, prefix_bits(accumulator_prefix(end)) & ~prefix_bits(accumulator_prefix(begin)));
    }
}

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
  // no key: out = 0) times `out_scale`, and writes lse (natural log) when wanted.
  __device__ __forceinline__ void finish(float (&inv)[MA][2], float (&lse)[MA][2], float unit, float out_scale) {
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
        // The fast reciprocal and log (2 ulp; 2^-21 absolute near 1): l >= 1
        // once a key is seen (the row max contributes exp2(0)), and these sit
        // on the path from the last product to the store.
        inv[ma][h] = l > 0.f ? __fdividef(out_scale, l) : 0.f;
        lse[ma][h] = l > 0.f ? max[ma][h] * unit * kLn2 + __logf(l) : -INFINITY;
      }
  }
};

// Dropout's keep bits for this thread's MA x NA x 4 scores of one tile, by
// include/attn/philox.h's rule bit for bit: one Philox block covers keys
// 4 (j / 4) .. 4 (j / 4) + 3 of a row, and a lane's two adjacent columns
// (2 (lane % 4), +1) always fall in the same block. Computed before Q.K^T,
// while S's registers are free (Philox beside live S and O spills).
template <int MA, int NA>
struct KeepBits {
  static constexpr int kBits = MA * NA * 4;
  uint32_t word[(kBits + 31) / 32];

  __device__ __forceinline__ static constexpr int bit(int ma, int na, int e) { return (ma * NA + na) * 4 + e; }

  // The keep bits of row i's keys 4 (j / 4) .. + 3 as bits 0-3: one Philox
  // block, include/attn/philox.h's counter.
  __device__ __forceinline__ static uint32_t quad(const FwdParams& p, uint32_t bh, uint32_t i, uint32_t j) {
    const PhiloxBlock r = philox4x32_10(PhiloxBlock{{j >> 2, i, bh, p.offset}}, static_cast<uint32_t>(p.seed),
                                        static_cast<uint32_t>(p.seed >> 32));
    uint32_t bits = 0u;
#pragma unroll
    for (int e = 0; e < 4; ++e) bits |= (r.x[e] >= p.dropout_threshold ? 1u : 0u) << e;
    return bits;
  }

  // The bits of this thread's columns, lane % 4 giving columns 2 (lane % 4)
  // and + 1 of each 8-column block na. Lanes l and l ^ 1 hold the two column
  // pairs of one Philox block (keys 4 (j / 4) .. + 3), so each lane computes
  // the blocks of every other na for both and hands its partner two bits per
  // block, one shuffle per word: half the Philox blocks of computing each
  // lane's own. Every lane of the warp takes part.
  __device__ __forceinline__ void compute_paired(const FwdParams& p, uint32_t bh, int row0, int n0, int lane) {
    // bit(ma, k, .) for even k starts an even 4-bit group ((ma NA + k) is even),
    // so na = k and k + 1 share a word: a lane's partner fills the same words.
    static_assert(NA % 2 == 0, "na in pairs");
    constexpr int kWords = (kBits + 31) / 32;
    uint32_t theirs[kWords];
#pragma unroll
    for (int w = 0; w < kWords; ++w) word[w] = theirs[w] = 0u;
    const uint32_t odd = lane & 1;
#pragma unroll
    for (int ma = 0; ma < MA; ++ma)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t i = static_cast<uint32_t>(row0 + 16 * ma + 8 * h + (lane >> 2));
#pragma unroll
        for (int k = 0; k < NA; k += 2) {
          // na = k + odd: the block of this lane's columns there, bits 0-1
          // the even lane's, 2-3 the odd lane's.
          const uint32_t j = static_cast<uint32_t>(n0 + 8 * k + 2 * (lane & 2)) + 8 * odd;
          const uint32_t both = quad(p, bh, i, j);
          const int b = bit(ma, k, 2 * h);  // na = k; na = k + 1 is 4 bits on, in the same word
          const uint32_t shift = b % 32 + 4 * odd;
          word[b / 32] |= (both >> (2 * odd) & 3u) << shift;
          theirs[b / 32] |= (both >> (2 - 2 * odd) & 3u) << shift;
        }
      }
#pragma unroll
    for (int w = 0; w < kWords; ++w) word[w] |= __shfl_xor_sync(0xffffffffu, theirs[w], 1);
  }

  // Zeroes the dropped probabilities (the sum, hence lse, already has them).
  __device__ __forceinline__ void apply(float (&s)[MA][NA][4]) const {
#pragma unroll
    for (int ma = 0; ma < MA; ++ma)
#pragma unroll
      for (int na = 0; na < NA; ++na)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int b = bit(ma, na, e);
          if (!((word[b / 32] >> (b % 32)) & 1u)) s[ma][na][e] = 0.f;
        }
  }
};

}  // namespace attn::flash_sm80
