// Dropout's keep bits for a tile of probabilities, by include/attn/philox.h's
// rule bit for bit (the sum, hence lse, is taken before dropout).
//
// Register layout (mma.cuh): s[ma][na][2 * half + e] is row
// row0 + 16 ma + 8 half + lane / 4, column n0 + 8 na + 2 (lane % 4) + e
// (keep_bits_layout.h).
#pragma once

#include <cstdint>

#include "attn/philox.h"
#include "backends/flash/keep_bits_layout.h"
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
// include/attn/philox.h's rule bit for bit (keep_bits_layout.h: which blocks
// a lane draws, where their bits land). Computed before Q.K^T, while S's
// registers are free (Philox beside live S and O spills).
template <int MA, int NA>
struct KeepBits {
  using Layout = KeepLayout<MA, NA>;
  uint32_t word[Layout::kWords];

  __device__ __forceinline__ static constexpr int bit(int ma, int na, int e) { return Layout::bit(ma, na, e); }

  // A quad's lanes share every block: each draws a quarter of them and
  // hands out their bits in 4 shuffles per word of draws, each lane taking
  // its 2 bits of every byte at once. Every lane of the warp takes part.
  __device__ __forceinline__ void compute(const FwdParams& p, uint32_t bh, int row0, int n0, int lane) {
    uint64_t seed;
    uint32_t offset;
    dropout_key(p, seed, offset);
    uint32_t drawn[Layout::kDrawnWords];
    Layout::draw(lane, row0, n0, bh, seed, offset, p.dropout_threshold, drawn);
#pragma unroll
    for (int w = 0; w < Layout::kWords; ++w) word[w] = 0u;
#pragma unroll
    for (int src = 0; src < 4; ++src)
#pragma unroll
      for (int w = 0; w < Layout::kDrawnWords; ++w)
        Layout::take(__shfl_sync(0xffffffffu, drawn[w], (lane & ~3) | src) >> (2 * (lane & 3)), src, w, word);
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
