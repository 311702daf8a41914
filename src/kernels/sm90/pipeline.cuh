// Typed handles over mbarrier.cuh for Hopper kernels: an mbarrier by its
// shared-memory address, a named barrier (bar.sync id), the position in a
// ring of pipeline stages (stage index and phase).
#pragma once

#include <cstdint>

#include "kernels/sm90/mbarrier.cuh"

namespace attn::sm90 {

// An mbarrier in shared memory (8 bytes), by its shared-space address.
struct Barrier {
  uint32_t addr;

  __device__ __forceinline__ void init(uint32_t count) const { mbar_init(addr, count); }
  __device__ __forceinline__ void arrive() const { mbar_arrive(addr); }
  // One arrival that also expects `bytes` of asynchronous copies (TMA) to land.
  __device__ __forceinline__ void arrive_expect_tx(uint32_t bytes) const { mbar_arrive_expect_tx(addr, bytes); }
  // Expects `bytes` more in the current phase without arriving (a stage
  // whose copies are issued in two parts).
  __device__ __forceinline__ void expect_tx(uint32_t bytes) const { mbar_expect_tx(addr, bytes); }
  // Until the phase of parity `phase` has completed.
  __device__ __forceinline__ void wait(uint32_t phase) const { mbar_wait(addr, phase); }
};

// A named barrier (0 is __syncthreads) over `threads` threads.
struct NamedBarrier {
  int id, threads;

  __device__ __forceinline__ void sync() const { named_sync(id, threads); }
  __device__ __forceinline__ void arrive() const { named_arrive(id, threads); }
};

// Where a ring of kStages buffers stands: `count` uses so far, over every
// work item. Use count + ahead is in stage (count + ahead) % kStages, whose
// barriers are then in phase ((count + ahead) / kStages) & 1. A consumer
// waits on "full" in that phase; a producer waits on "empty" in the other
// one (a fresh barrier's "previous phase" counts as complete).
template <int kStages>
struct PipelineState {
  int count = 0;

  __device__ __forceinline__ int stage(int ahead = 0) const { return (count + ahead) % kStages; }
  __device__ __forceinline__ uint32_t phase(int ahead = 0) const { return ((count + ahead) / kStages) & 1; }
  __device__ __forceinline__ uint32_t producer_phase(int ahead = 0) const { return phase(ahead) ^ 1; }
  __device__ __forceinline__ void advance(int n = 1) { count += n; }
};

}  // namespace attn::sm90
