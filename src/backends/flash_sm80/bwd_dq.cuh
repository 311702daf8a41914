// dQ of one (query tile, KV tile) pair into the fp32 accumulator that the
// convert pass turns into dq: red.global adds, two floats at a time where the
// hardware has them (sm_90). In deterministic mode the KV tiles of a query
// tile add in ascending order, one after another, behind a per-tile counter
// (FlashAttention-2's ordered accumulation), so every sum has one order.
#pragma once

#include <cstdint>

namespace attn::flash_sm80 {

// acc rows row0 + 16 ma + 8 half + lane / 4 (those < rows), columns
// col0 + 8 na + 2 (lane % 4) + e, added to dq[row * kD + column].
template <int kD, int MA, int NA>
__device__ __forceinline__ void add_dq(float* dq, const float (&acc)[MA][NA][4], int row0, int col0, int rows,
                                       int lane) {
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + 16 * ma + 8 * h + (lane >> 2);
      if (r >= rows) continue;  // rows past the sequence (thd: the next sequence's)
      float* row = dq + static_cast<int64_t>(r) * kD + col0 + 2 * (lane & 3);
#pragma unroll
      for (int na = 0; na < NA; ++na) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        // red, not atomicAdd: here the compiler turned atomicAdd(float2) into
        // an ATOMG that returns a value (to RZ), which waits on a scoreboard.
        asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(row + 8 * na), "f"(acc[ma][na][2 * h]),
                     "f"(acc[ma][na][2 * h + 1])
                     : "memory");
#else
        asm volatile("red.global.add.f32 [%0], %1;" ::"l"(row + 8 * na), "f"(acc[ma][na][2 * h]) : "memory");
        asm volatile("red.global.add.f32 [%0], %1;" ::"l"(row + 8 * na + 1), "f"(acc[ma][na][2 * h + 1]) : "memory");
#endif
      }
    }
}

// Deterministic mode: thread 0 waits until `done` earlier KV tiles have added
// into this query tile; then the whole CTA may add.
__device__ __forceinline__ void wait_turn(const int* counter, int done, int tid) {
  if (tid == 0) {
    while (*reinterpret_cast<const volatile int*>(counter) != done) {
    }
    __threadfence();  // their adds are visible before ours start
  }
  __syncthreads();
}

// ... and, once every thread's adds are issued and fenced, passes the turn on.
__device__ __forceinline__ void pass_turn(int* counter, int tid) {
  __threadfence();
  __syncthreads();
  if (tid == 0) atomicAdd(counter, 1);
}

}  // namespace attn::flash_sm80
