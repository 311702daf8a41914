// dQ of one (query tile, KV tile) pair into the fp32 accumulator that the
// convert pass turns into dq. Two ways in:
// - red.global adds from registers, two floats at a time where the hardware
//   has them (sm_90), everywhere a bulk add cannot run, and always in
//   deterministic mode: there the KV tiles of a query tile add in ascending
//   order, one after another, behind a per-tile counter (FlashAttention-2's
//   ordered accumulation), so every sum has one order;
// - on sm_90, through shared memory: the warps that share a band of rows
//   stage it, and one thread hands the band to the TMA unit as one bulk
//   reduce-add (cp.reduce.async.bulk). The reds had stalled the warps: a
//   register that an in-flight red still reads cannot be written, and the
//   load/store unit throttles them.
// The accumulator's byte order: flash/dq_layout.h.
#pragma once

#include <cstdint>

#include "backends/flash/dq_layout.h"

namespace attn::flash_sm80 {

// Walks a warp's dQ accumulator as the pairs it holds: add(r, c, x, y) for
// acc rows r = row0 + 16 ma + 8 half + lane / 4 and the two columns from
// col0 + 8 na + 2 (lane % 4), c being their place in the accumulator row of
// workspace token t0 + r (flash/dq_layout.h). A thread's rows are 8 apart, so
// they share one swizzle key.
template <int MA, int NA, class Add>
__device__ __forceinline__ void for_each_dq_pair(const float (&acc)[MA][NA][4], int64_t t0, int row0, int col0,
                                                 int lane, Add&& add) {
  const int sw = static_cast<int>(t0 + row0 + (lane >> 2)) & 3;
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + 16 * ma + 8 * h + (lane >> 2);
#pragma unroll
      for (int na = 0; na < NA; ++na)
        add(r, flash::dq_column<NA>(col0, na, sw, lane), acc[ma][na][2 * h], acc[ma][na][2 * h + 1]);
    }
}

// The pairs added to row r of dq (row stride kD), those with r < rows (rows
// past the sequence are thd's next sequence).
template <int kD, int MA, int NA>
__device__ __forceinline__ void add_dq(float* dq, int64_t t0, const float (&acc)[MA][NA][4], int row0, int col0,
                                       int rows, int lane) {
#if !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
  // The addresses' per-thread parts are the same in every query tile, and
  // for sm_80 the compiler hoisted them out of the loop as 64-bit pointers
  // (two scalar reds per pair), which spilled: 188 B at d 256, 44 B at d 192.
  // An opaque t0 keeps them here, a few integer ops per tile; 0 B then. (On
  // sm_90, whose v2 reds need half the addresses, it added spills instead.)
  asm volatile("" : "+l"(t0));
#endif
  for_each_dq_pair(acc, t0, row0, col0, lane, [&](int r, int c, float x, float y) {
    if (r >= rows) return;
    float* const at = dq + static_cast<int64_t>(r) * kD + c;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // red, not atomicAdd: here the compiler turned atomicAdd(float2) into
    // an ATOMG that returns a value (to RZ), which waits on a scoreboard.
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(at), "f"(x), "f"(y) : "memory");
#else
    asm volatile("red.global.add.f32 [%0], %1;" ::"l"(at), "f"(x) : "memory");
    asm volatile("red.global.add.f32 [%0], %1;" ::"l"(at + 1), "f"(y) : "memory");
#endif
  });
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The same adds by bulk reduce: the kPair warps that share rows
// [row0, row0 + 16 MA) of the tile (warp w is the (w % kPair)-th of pair
// `band`) write their part of the band into `stage` (kD floats per row, the
// accumulator's byte order), and the first warp's lane 0 adds the band's
// rows < rows to dq in one cp.reduce.async.bulk. That thread waits for the
// copy to have read `stage` (bulk_wait_read) before `stage` is written again.
template <int kD, int MA, int NA, int kPair>
__device__ __forceinline__ void add_dq_bulk(float* dq, int64_t t0, uint32_t stage, const float (&acc)[MA][NA][4],
                                            int row0, int col0, int rows, int band, int warp, int lane) {
  for_each_dq_pair(acc, t0, row0, col0, lane, [&](int r, int c, float x, float y) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(stage + 4u * static_cast<uint32_t>(r * kD + c)), "f"(x),
                 "f"(y)
                 : "memory");
  });
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores, before the bulk copy reads them
  asm volatile("bar.sync %0, %1;" ::"r"(1 + band), "n"(32 * kPair) : "memory");
  const int n = min(rows - row0, 16 * MA);
  if (warp % kPair == 0 && lane == 0 && n > 0) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                     dq + static_cast<int64_t>(row0) * kD),
                 "r"(stage + static_cast<uint32_t>(row0 * kD) * 4u), "r"(n * kD * 4)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
}

// Before `stage` is written again, and before the CTA exits: the bulk adds
// issued by this thread have read it.
__device__ __forceinline__ void dq_bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
#endif

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
