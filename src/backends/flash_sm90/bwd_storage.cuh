// flash_sm90's backward: its shared memory as one struct (bwd_smem.cuh
// addresses its members). The tiles start on the swizzle's 1024-byte period,
// as TMA and wgmma assume; the rows' terms and the barriers follow them.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backends/flash_sm90/bwd_config.h"
#include "kernels/sm90/shared_storage.cuh"

namespace attn::flash_sm90 {

template <class Cfg>
struct BwdSharedStorage {
  static constexpr int kS = Cfg::kStages;
  sm90::AlignedBlock<Cfg::kSmemK> k;  // this CTA's keys, loaded once
  sm90::AlignedBlock<Cfg::kSmemV> v;
  // The query tiles' ring: Q and dO of stage s. The epilogue stages dK and
  // dV (kBlockN rows each) where they were.
  sm90::AlignedBlock<Cfg::kSmemQ> q[kS];
  sm90::AlignedBlock<Cfg::kSmemDo> dout[kS];
  sm90::AlignedBlock<Cfg::kSmemDs> ds[Cfg::kDsBuffers];  // dS^T (keys x queries), by query tile parity
  sm90::AlignedBlock<Cfg::kSmemDq> dq;                   // a query tile's dQ in fp32, for the bulk reduce-add
  float2 terms[kS][Cfg::kBlockM];                        // {lse2, D} of stage s's rows
  uint64_t kv_full;                                      // K and V landed
  // Stage s: loaded (full: the producer warp's 32 lanes, one with the TMA
  // bytes) and read (empty: every consumer thread).
  uint64_t full[kS], empty[kS];
  // Stage s's dO read (every consumer thread), where the loop frees it before
  // Q (bwd_early_do: the producer loads the next dO there first).
  uint64_t do_empty[kS];
  // dQ's stage: staged (full: every consumer thread) and read (empty: the adder
  // whose tile it is; the other adder waits on it before taking the next).
  uint64_t dq_full, dq_empty;
};
static_assert(std::is_standard_layout_v<BwdSharedStorage<BwdConfig<128, 128>>>, "members are found by offsetof");

// Named barriers (0 is __syncthreads).
constexpr int kBarDsWritten = 1;  // both consumers, once per query tile, after each wrote its half of dS^T
constexpr int kBarEpilogue = 2;   // both, before the epilogue stages dK and dV where Q and dO were
constexpr int kBarConsumer0 = 3;  // 3, 4: each consumer alone, before its TMA stores
constexpr int kBarCleared = 5;    // both, after clearing rows past a sequence

}  // namespace attn::flash_sm90
