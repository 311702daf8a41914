// flash_sm90's backward: its shared storage's members (bwd_storage.cuh) as
// the stages use them: tiles with their wgmma descriptors, typed barriers,
// by shared-space address (kernels/sm90/shared_storage.cuh: SharedBase).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/flash_sm90/bwd_storage.cuh"
#include "kernels/sm90/mbarrier.cuh"
#include "kernels/sm90/pipeline.cuh"
#include "kernels/sm90/shared_storage.cuh"
#include "kernels/sm90/wgmma.cuh"

namespace attn::flash_sm90 {

template <class Cfg>
struct BwdSmem : sm90::SharedBase {
  using Storage = BwdSharedStorage<Cfg>;
  static constexpr int kConsumerThreads = 128 * Cfg::kConsumers;
  static_assert(sizeof(Storage) + 1024 <= Cfg::kSmemBytes, "the launch's shared memory");

  __device__ __forceinline__ explicit BwdSmem(char* smem_raw) : SharedBase(smem_raw) {}

  using KeyTile = sm90::SwizzledTileAt<Cfg::kBlockN>;    // K, V, dS^T, dK and dV: the CTA's keys as rows
  using QueryTile = sm90::SwizzledTileAt<Cfg::kBlockM>;  // Q and dO: a query tile's rows

  __device__ __forceinline__ KeyTile k_tile() const { return {at(offsetof(Storage, k))}; }
  __device__ __forceinline__ KeyTile v_tile() const { return {at(offsetof(Storage, v))}; }
  __device__ __forceinline__ QueryTile q_tile(int stage) const {
    return {at(offsetof(Storage, q)) + stage * Cfg::kSmemQ};
  }
  __device__ __forceinline__ QueryTile do_tile(int stage) const {
    return {at(offsetof(Storage, dout)) + stage * Cfg::kSmemDo};
  }
  __device__ __forceinline__ KeyTile ds_tile(int buf) const { return {at(offsetof(Storage, ds)) + buf * Cfg::kSmemDs}; }
  __device__ __forceinline__ uint32_t dq_stage() const { return at(offsetof(Storage, dq)); }
  __device__ __forceinline__ uint32_t terms(int stage) const {
    return at(offsetof(Storage, terms)) + stage * Cfg::kSmemTerms;
  }
  // The epilogue's dK and dV tiles (kBlockN rows), where the Q and dO stages were.
  __device__ __forceinline__ KeyTile dk_stage() const { return {at(offsetof(Storage, q))}; }
  __device__ __forceinline__ KeyTile dv_stage() const { return {at(offsetof(Storage, dout))}; }

  __device__ __forceinline__ sm90::Barrier kv_full() const { return {at(offsetof(Storage, kv_full))}; }
  __device__ __forceinline__ sm90::Barrier full(int stage) const { return bar(offsetof(Storage, full), stage); }
  __device__ __forceinline__ sm90::Barrier empty(int stage) const { return bar(offsetof(Storage, empty), stage); }
  __device__ __forceinline__ sm90::Barrier do_empty(int stage) const { return bar(offsetof(Storage, do_empty), stage); }
  __device__ __forceinline__ sm90::Barrier dq_full() const { return {at(offsetof(Storage, dq_full))}; }
  __device__ __forceinline__ sm90::Barrier dq_empty() const { return {at(offsetof(Storage, dq_empty))}; }

  // Every mbarrier's arrival count, by one thread before the CTA's first sync.
  __device__ __forceinline__ void init_barriers() const {
    kv_full().init(1);
    for (int s = 0; s < Cfg::kStages; ++s) {
      full(s).init(32);  // the producer warp's lanes (row terms), one with the TMA bytes
      empty(s).init(kConsumerThreads);
      do_empty(s).init(kConsumerThreads);
    }
    dq_full().init(kConsumerThreads);  // the consumers, each staging its part
    dq_empty().init(1);
    sm90::mbar_init_fence();
  }
};

}  // namespace attn::flash_sm90
