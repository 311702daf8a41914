// flash_sm90's forward: the softmax of a consumer's tile, in registers. The
// flash library's score changes, masks, online softmax and dropout bits run
// on wgmma's accumulators as they are (per warp, mma.sync's layout); P then
// becomes wgmma's A fragments for O += P.V.
#pragma once

#include <cstdint>

#include "backends/flash/dropout_bits.cuh"
#include "backends/flash/mask.cuh"
#include "backends/flash/online_softmax.cuh"
#include "backends/flash/params.h"
#include "backends/flash/score_mods.cuh"
#include "backends/flash_sm90/fwd_work_queue.cuh"
#include "kernels/sm80/mma.cuh"

namespace attn::flash_sm90 {

// A consumer thread's registers for one item: O's accumulator, the scores
// S (then the probabilities P, in place), P as wgmma's A fragments, the
// online softmax's running max and sum, O's rescale factors and dropout's
// keep bits. A struct of its own, not FwdMainloop's members: beside the
// parameters' reference in one object, the compiler could not tell that
// their stores leave the parameters alone, reloaded the score changes'
// parameters for every element, and d 64 spilled.
template <class Cfg>
struct FwdRegisters {
  static constexpr int kN = Cfg::kBlockN, kDV = Cfg::kHeadDimV, NA = kN / 8, NO = kDV / 8;
  flash::OnlineSoftmax<1> softmax;
  float o[1][NO][4];
  float s[1][NA][4];
  float correction[1][2];
  uint32_t pa[kN / 16][4];
  flash::KeepBits<1, NA> keep;

  // The accumulators as wgmma's flat fragments.
  __device__ __forceinline__ float (&o_flat())[kDV / 2] { return *reinterpret_cast<float(*)[kDV / 2]>(&o); }
  __device__ __forceinline__ float (&s_flat())[kN / 2] { return *reinterpret_cast<float(*)[kN / 2]>(&s); }
};

// Scores of the tile at key n0 -> probabilities in place: score changes
// (scale, softcap, ALiBi), the mask where the tile needs it, the online
// softmax's update; O's rescale factors per row in regs.correction. `row`:
// this warp's first row in the sequence; `wg`: the consumer warpgroup.
template <class Cfg>
__device__ __forceinline__ void fwd_probabilities(FwdRegisters<Cfg>& regs, const flash::FwdParams& p,
                                                  const FwdItem& c, int row, float slope, int n0, float unit, int wg,
                                                  int lane) {
  constexpr int kN = Cfg::kBlockN, NA = kN / 8;
  // This warpgroup's first row in the tile, from lane 0's wg (warp-uniform for ptxas).
  auto wg_row0 = [&] { return __shfl_sync(0xffffffff, wg, 0) * 64; };
  if (p.score_mods) flash::apply_score_mods(regs.s, p, slope, row, n0, c.seq.shift, lane);
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
        flash::apply_mask<false>(regs.s, p, c.seq, row, n0, lane);
      } else if (flash::row_keys(p, c.seq, c.m0 + wg_row0()).end < n0 + kN) {
        // Where this consumer's last row sees nothing of the tile's right
        // half (a diagonal in its left half: at 1k causal, half of the
        // masked consumer tiles), the softmax runs on the left half alone
        // and the right half's probabilities are 0.
        const int r_last = min(c.rows, wg_row0() + 64) - 1;
        if (flash::row_keys(p, c.seq, c.m0 + r_last).end <= n0 + kN / 2) {
          auto& s_left = *reinterpret_cast<float(*)[1][NA / 2][4]>(&regs.s);
          flash::apply_mask_bits<false>(s_left, p, c.seq, row, n0, lane);
          regs.softmax.update(s_left, unit, regs.correction);
#pragma unroll
          for (int na = NA / 2; na < NA; ++na)
#pragma unroll
            for (int e = 0; e < 4; ++e) regs.s[0][na][e] = 0.f;
          return;
        }
        flash::apply_mask_bits<false>(regs.s, p, c.seq, row, n0, lane);
      }
    } else {
      flash::apply_mask(regs.s, p, c.seq, row, n0, lane);
    }
  }
  regs.softmax.update(regs.s, unit, regs.correction);
}

// P as wgmma's A fragments: two adjacent n8 accumulator blocks are one k16 step.
template <typename T, class Cfg>
__device__ __forceinline__ void fwd_pack_p(FwdRegisters<Cfg>& regs) {
  constexpr int kN = Cfg::kBlockN;
#pragma unroll
  for (int ks = 0; ks < kN / 16; ++ks) {
    regs.pa[ks][0] = sm80::pack2<T>(regs.s[0][2 * ks][0], regs.s[0][2 * ks][1]);
    regs.pa[ks][1] = sm80::pack2<T>(regs.s[0][2 * ks][2], regs.s[0][2 * ks][3]);
    regs.pa[ks][2] = sm80::pack2<T>(regs.s[0][2 * ks + 1][0], regs.s[0][2 * ks + 1][1]);
    regs.pa[ks][3] = sm80::pack2<T>(regs.s[0][2 * ks + 1][2], regs.s[0][2 * ks + 1][3]);
  }
}

}  // namespace attn::flash_sm90
