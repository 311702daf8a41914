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
// 8 (j / 8) .. + 7 of a row, an 8-column block na of the tile, which the 4
// lanes of a quad (lane / 4) hold, 2 columns each. Computed before Q.K^T,
// while S's registers are free (Philox beside live S and O spills).
template <int MA, int NA>
struct KeepBits {
  static constexpr int kBits = MA * NA * 4;
  uint32_t word[(kBits + 31) / 32];

  __device__ __forceinline__ static constexpr int bit(int ma, int na, int e) { return (ma * NA + na) * 4 + e; }

  // The bits of this thread's columns, lane % 4 giving columns 2 (lane % 4)
  // and + 1 of each 8-column block na. A quad's lanes share every block: the
  // quad's blocks t = (2 ma + half) NA + na are drawn by lane t % 4, 8 bits
  // each (a byte of `mine`), and traded in 4 shuffles per 4 blocks a lane
  // drew, each lane taking its 2 bits of every byte: a quarter of the Philox
  // blocks of drawing each lane's own. Every lane of the warp takes part.
  __device__ __forceinline__ void compute(const FwdParams& p, uint32_t bh, int row0, int n0, int lane) {
    constexpr int kBlocks = MA * 2 * NA, kDrawn = kBlocks / 4, kMine = (kDrawn + 3) / 4;
    static_assert(kBlocks % 4 == 0, "the quad's blocks split over its 4 lanes");
    uint64_t seed;
    uint32_t offset;
    dropout_key(p, seed, offset);
    const int q = lane & 3;
    uint32_t mine[kMine];
#pragma unroll
    for (int w = 0; w < kMine; ++w) mine[w] = 0u;
#pragma unroll
    for (int u = 0; u < kDrawn; ++u) {
      const int t = 4 * u + q, na = t % NA, row = t / NA;  // row = 2 ma + half
      const auto i = static_cast<uint32_t>(row0 + 8 * row + (lane >> 2));  // 16 ma + 8 half
      const auto block = static_cast<uint32_t>(n0 + 8 * na) >> 3;
      mine[u / 4] |= dropout_keep_block(seed, offset, bh, i, block, p.dropout_threshold) << (8 * (u % 4));
    }
#pragma unroll
    for (int w = 0; w < (kBits + 31) / 32; ++w) word[w] = 0u;
#pragma unroll
    for (int src = 0; src < 4; ++src)
#pragma unroll
      for (int w = 0; w < kMine; ++w) {
        const uint32_t theirs = __shfl_sync(0xffffffffu, mine[w], (lane & ~3) | src) >> (2 * q);
#pragma unroll
        for (int by = 0; by < 4 && 4 * w + by < kDrawn; ++by) {
          const int t = 4 * (4 * w + by) + src, na = t % NA, row = t / NA;
          const int b = bit(row / 2, na, 2 * (row % 2));  // bits b, b + 1: this lane's two columns
          word[b / 32] |= (theirs >> (8 * by) & 3u) << (b % 32);
        }
      }
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
