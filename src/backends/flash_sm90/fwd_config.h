// Tile shapes of flash_sm90's forward per head dim: compile-time numbers the
// kernel is built on and the host reads (shared-memory need in supports()).
// Plain C++: no CUDA needed to include it.
#pragma once

#include "backends/flash_sm90/register_split.h"

namespace attn::flash_sm90 {

// One persistent CTA per SM walks the query tiles: a producer warpgroup (one
// thread issues TMA copies) and two or three consumer warpgroups of 64 query
// rows each (kBlockM = 64 x consumers), against KV tiles of kBlockN keys in a
// kStages-deep ring of shared-memory buffers.
// Per consumer thread the S tile holds kBlockN / 2 floats and O d_v / 2:
//   d 64:      N 128 (S 64, O 32), three consumers of 160 registers each:
//              at d 64 a tile's softmax takes as long as its products, and a
//              third warpgroup keeps the tensor cores fed (FlashAttention-3
//              uses 192-row tiles here too)
//   d 128:     N 128 (S 64, O 64), two consumers of 240 registers
//   d 192:     N 112 (S 56, O <= 96)
//   d 256:     N 80  (S 40, O 128), as FlashAttention-3 chose for shared memory
// Head dims are multiples of 64: every tile is whole 128-byte swizzled blocks.
template <int kDQK, int kDV>
struct FwdConfig {
  static constexpr int kHeadDimQK = kDQK;
  static constexpr int kHeadDimV = kDV;
  static constexpr int kConsumers = kDQK <= 64 ? 3 : 2;  // warpgroups
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kDQK <= 128 ? 128 : kDQK <= 192 ? 112 : 80;
  static constexpr int kStages = kDQK <= 64 ? 3 : 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  // setmaxnreg's split (register_split.h): the producer gives up what the
  // consumers take, so with two consumers it drops to 24 for them to reach
  // 240, with three to 32 for 160.
  static constexpr int kProducerRegs = kConsumers == 3 ? 32 : 24;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : 240;
  static_assert(setmaxnreg_split_fits(kThreads, kProducerRegs, kConsumers, kConsumerRegs),
                "setmaxnreg's split exceeds the launch's pool");
  static constexpr int kSmemQ = kBlockM * kDQK * 2;
  static constexpr int kSmemK = kBlockN * kDQK * 2;  // one stage
  static constexpr int kSmemV = kBlockN * kDV * 2;
  static constexpr int kSmemO = kBlockM * kDV * 2;
  static constexpr int kSmemBarriers = 1024;  // mbarriers, after the tiles
  static constexpr int kSmemLimit = 227 * 1024;  // per block on sm_90
  static constexpr int kSmemKV = kStages * (kSmemK + kSmemV);
  static constexpr int kSmemFixed = kSmemKV + kSmemBarriers + 1024;
  // + 1024: the dynamic buffer is aligned up to 1024 bytes (the swizzle's period).
  // Two Q buffers where they fit beside an output tile of its own (d 64,
  // d 128): the producer loads the next item's Q while this one runs.
  static constexpr int kQBuffers = 2 * kSmemQ + kSmemO + kSmemFixed <= kSmemLimit ? 2 : 1;
  // The output tile is staged in its own buffer where it fits (d 64, 128,
  // 192/128): Q's buffer is free for the next item's Q after the item's last
  // Q.K^T; otherwise (d 192/192, 256) it is staged in Q's, free after the epilogue.
  static constexpr bool kSeparateO = kQBuffers * kSmemQ + kSmemO + kSmemFixed <= kSmemLimit;
  // The next item's first Q.K^T runs under this item's epilogue where its Q
  // can be in shared memory by then (the output does not go through Q's
  // buffer) and the registers allow (S in flight beside O: not within three
  // consumers' 160).
  static constexpr bool kOverlapEpilogue = kSeparateO && kConsumers == 2;
  static constexpr int kSmemBytes = kQBuffers * kSmemQ + (kSeparateO ? kSmemO : 0) + kSmemFixed;
  static_assert(kSmemBytes <= kSmemLimit, "shared memory");

  static_assert(kDQK % 64 == 0 && kDV % 64 == 0, "head dims are whole 64-column swizzled blocks");
  static_assert(kBlockN % 16 == 0, "P.V steps over 16 keys");
  static_assert(kDV <= kDQK, "the output tile is staged in Q's shared memory");
};

}  // namespace attn::flash_sm90
