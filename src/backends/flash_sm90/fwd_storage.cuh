// flash_sm90's forward: its shared memory as one struct. The tiles start on
// the swizzle's 1024-byte period, as TMA and wgmma assume; the barriers and
// the work-item slots follow them. fwd_smem.cuh addresses its members.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backends/flash_sm90/fwd_config.h"
#include "kernels/sm90/shared_storage.cuh"

namespace attn::flash_sm90 {

template <class Cfg>
struct FwdSharedStorage {
  static constexpr int kS = Cfg::kStages;
  sm90::AlignedBlock<Cfg::kSmemQ> q[Cfg::kQBuffers];
  sm90::AlignedBlock<Cfg::kSmemK> k[kS];  // the KV ring: K and V of stage s
  sm90::AlignedBlock<Cfg::kSmemV> v[kS];
  // The output's staging tile where it has one of its own; otherwise the
  // output is staged in the item's Q buffer (fwd_config.h: kSeparateO).
  [[no_unique_address]] std::conditional_t<Cfg::kSeparateO, sm90::AlignedBlock<Cfg::kSmemO>, sm90::NoBlock> o;
  // Q buffer b: loaded (full, one arrival and Q's bytes) and free again
  // (empty, every consumer thread). Two slots whatever kQBuffers is.
  uint64_t q_full[2], q_empty[2];
  uint64_t k_full[kS], k_empty[kS], v_full[kS], v_empty[kS];  // the same per KV stage
  // The work-item ring: the producer writes an item's index into a slot and
  // arrives on item_full; the consumers read it and arrive on item_empty. Two
  // slots let the producer run an item ahead.
  uint64_t item_full[2], item_empty[2];
  int item_slot[2];
  int item_copy[2];  // a paged cache's producer warps 1-3: warp 0's next index (fwd_producer.cuh)
  int order_word[Cfg::kThreads / 32];  // per warp, written and never read (sm90::store_after)
  alignas(16) int warp_max[Cfg::kThreads / 32];  // per warp, its item's largest score as an ordered key (max logit)
  int held_head[4];  // per consumer warpgroup, the head of the keys in warp_max; -1: none
};
static_assert(std::is_standard_layout_v<FwdSharedStorage<FwdConfig<128, 128>>>, "members are found by offsetof");

// Named barriers (0 is __syncthreads).
constexpr int kBarConsumers = 1;  // every consumer thread
constexpr int kBarConsumer0 = 2;  // 2..4: each consumer's epilogue
constexpr int kBarTurn0 = 5;      // 5..7: whose turn it is to issue products
constexpr int kBarProducers = 8;  // a paged cache's producer warps

}  // namespace attn::flash_sm90
