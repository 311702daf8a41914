// flash_sm90's forward: its shared storage's members (fwd_storage.cuh) as
// the stages use them: tiles with their wgmma descriptors, typed barriers,
// by shared-space address (kernels/sm90/shared_storage.cuh: SharedBase).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/flash_sm90/fwd_storage.cuh"
#include "kernels/sm90/mbarrier.cuh"
#include "kernels/sm90/pipeline.cuh"
#include "kernels/sm90/shared_storage.cuh"
#include "kernels/sm90/wgmma.cuh"

namespace attn::flash_sm90 {

template <class Cfg>
struct FwdSmem : sm90::SharedBase {
  using Storage = FwdSharedStorage<Cfg>;
  static constexpr int kConsumerThreads = 128 * Cfg::kConsumers;
  static_assert(sizeof(Storage) + 1024 <= Cfg::kSmemBytes, "the launch's shared memory");

  __device__ __forceinline__ explicit FwdSmem(char* smem_raw) : SharedBase(smem_raw) {}

  using QTile = sm90::SwizzledTileAt<Cfg::kBlockM>;  // Q and the output: the item's rows
  using KvTile = sm90::SwizzledTileAt<Cfg::kBlockN>;  // K and V: one KV tile's keys

  __device__ __forceinline__ QTile q_tile(int buf) const { return {at(offsetof(Storage, q)) + buf * Cfg::kSmemQ}; }
  __device__ __forceinline__ KvTile k_tile(int stage) const { return {at(offsetof(Storage, k)) + stage * Cfg::kSmemK}; }
  __device__ __forceinline__ KvTile v_tile(int stage) const { return {at(offsetof(Storage, v)) + stage * Cfg::kSmemV}; }
  // Where an item whose Q is in buffer `buf` stages its output: a tile of
  // its own, or that Q buffer (after the item's last Q.K^T).
  __device__ __forceinline__ QTile o_tile(int buf) const {
    if constexpr (Cfg::kSeparateO) return {at(offsetof(Storage, o))};
    else return q_tile(buf);
  }

  __device__ __forceinline__ sm90::Barrier q_full(int b) const { return bar(offsetof(Storage, q_full), b); }
  __device__ __forceinline__ sm90::Barrier q_empty(int b) const { return bar(offsetof(Storage, q_empty), b); }
  __device__ __forceinline__ sm90::Barrier k_full(int stage) const { return bar(offsetof(Storage, k_full), stage); }
  __device__ __forceinline__ sm90::Barrier k_empty(int stage) const { return bar(offsetof(Storage, k_empty), stage); }
  __device__ __forceinline__ sm90::Barrier v_full(int stage) const { return bar(offsetof(Storage, v_full), stage); }
  __device__ __forceinline__ sm90::Barrier v_empty(int stage) const { return bar(offsetof(Storage, v_empty), stage); }
  __device__ __forceinline__ sm90::Barrier item_full(int slot) const { return bar(offsetof(Storage, item_full), slot); }
  __device__ __forceinline__ sm90::Barrier item_empty(int slot) const { return bar(offsetof(Storage, item_empty), slot); }
  __device__ __forceinline__ uint32_t item_slot(int slot) const { return at(offsetof(Storage, item_slot)) + 4 * slot; }
  __device__ __forceinline__ uint32_t item_copy(int k) const { return at(offsetof(Storage, item_copy)) + 4 * k; }
  __device__ __forceinline__ uint32_t order_word(int warp) const { return at(offsetof(Storage, order_word)) + 4 * warp; }
  __device__ __forceinline__ uint32_t warp_max(int warp) const { return at(offsetof(Storage, warp_max)) + 4 * warp; }
  __device__ __forceinline__ uint32_t held_head(int wg) const { return at(offsetof(Storage, held_head)) + 4 * wg; }

  // Every mbarrier's arrival count, by one thread before the CTA's first sync;
  // `kv_arrivals`: the producer threads that arrive on a K or V stage's full
  // barrier (one, or a paged cache's kv_warps).
  __device__ __forceinline__ void init_barriers(int kv_arrivals) const {
    for (int b = 0; b < Cfg::kQBuffers; ++b) {
      q_full(b).init(1);
      q_empty(b).init(kConsumerThreads);
    }
    for (int st = 0; st < Cfg::kStages; ++st) {
      k_full(st).init(kv_arrivals);
      v_full(st).init(kv_arrivals);
      k_empty(st).init(kConsumerThreads);
      v_empty(st).init(kConsumerThreads);
    }
    for (int slot = 0; slot < 2; ++slot) {
      item_full(slot).init(1);
      item_empty(slot).init(kConsumerThreads);
    }
    for (int wg = 0; wg < 4; ++wg) asm volatile("st.shared.s32 [%0], -1;\n" ::"r"(held_head(wg)) : "memory");
    sm90::mbar_init_fence();
  }
};

}  // namespace attn::flash_sm90
