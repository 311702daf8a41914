// The tensor memory accelerator on the device: a 4-D tile copy global ->
// shared that completes on an mbarrier (bytes counted against the barrier's
// expected transaction count), the copy shared -> global and the fp32 bulk
// reduce-add that complete in a bulk group of the issuing thread, and the
// descriptor prefetch. The tensor
// map (tma_map.h) is built on the host and passed as a __grid_constant__
// parameter. Rows outside the tensor arrive as zeros, and are not written.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace attn::sm90 {

// Coordinates innermost first: (column, row, head, batch) of attn's tensors.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// Shared -> global; the writer's generic stores to `src` must be made visible
// to the async proxy first (fence_proxy_async, then a barrier).
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

// global[0, bytes) += shared[0, bytes) in fp32, element-wise (a bulk reduce;
// both 16-byte aligned, bytes a multiple of 16); completes in a bulk group of
// the issuing thread, like tma_store_4d.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}

// Closes this thread's stores issued so far into one bulk group.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Waits until at most kPending of this thread's bulk groups still read their
// shared memory (which may then be written again).
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

// Waits until at most kPending of this thread's bulk groups are incomplete
// (their writes done).
template <int kPending>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace attn::sm90
