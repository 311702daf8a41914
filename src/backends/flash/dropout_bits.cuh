// Dropout's keep bits for a tile of probabilities, by include/attn/philox.h's
// rule bit for bit (the sum, hence lse, is taken before dropout).
//
// Register layout (mma.cuh): s[ma][na][2 * half + e] is row
// row0 + 16 ma + 8 half + lane / 4, column n0 + 8 na + 2 (lane % 4) + e.
#pragma once

#include <cstdint>

#include "attn/philox.h"
#include "backends/flash/params.h"

namespace attn::flash {

// The call's Philox seed and counter offset: from p.rng_state when the
// caller keeps them in device memory (a captured graph's replays advance
// them), else from the parameters.
// Every lane of the warp calls it: the values are broadcast from lane 0, so
// ptxas knows they are warp-uniform and keeps Philox's key schedule (one
// key pair per round, the same for every block) in uniform registers,
// folded into the rounds' XORs, rather than adding it again per block.
__device__ __forceinline__ void dropout_key(const FwdParams& p, uint64_t& seed, uint32_t& offset) {
  seed = p.seed;
  offset = p.offset;
  if (p.rng_state) {
    seed = static_cast<uint64_t>(p.rng_state[0]);
    offset = static_cast<uint32_t>(p.rng_state[1]);
  }
  const uint32_t lo = __shfl_sync(0xffffffffu, static_cast<uint32_t>(seed), 0);
  const uint32_t hi = __shfl_sync(0xffffffffu, static_cast<uint32_t>(seed >> 32), 0);
  seed = static_cast<uint64_t>(hi) << 32 | lo;
  offset = __shfl_sync(0xffffffffu, offset, 0);
}

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
  // block, include/attn/philox.h's counter (seed and offset: dropout_key,
  // read once per call of compute_paired).
  __device__ __forceinline__ static uint32_t quad(const FwdParams& p, uint64_t seed, uint32_t offset, uint32_t bh,
                                                  uint32_t i, uint32_t j) {
    const PhiloxBlock r = philox4x32_10(PhiloxBlock{{j >> 2, i, bh, offset}}, static_cast<uint32_t>(seed),
                                        static_cast<uint32_t>(seed >> 32));
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
    uint64_t seed;
    uint32_t offset;
    dropout_key(p, seed, offset);
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
          const uint32_t both = quad(p, seed, offset, bh, i, j);
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

}  // namespace attn::flash
