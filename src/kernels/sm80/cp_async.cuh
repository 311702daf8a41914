// cp.async: 16-byte copies from global to shared memory that run behind the
// warp's other work (sm_80+). Out-of-range rows are zero-filled rather than
// skipped, so a tile past a sequence's end holds zeros, never stale data.
#pragma once

#include <cstdint>

namespace attn::sm80 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes from src to shared address dst, or writes 16 zero bytes when
// !valid (src-size 0: nothing is read, so src may be any address then).
// .cg: cache in L2 only; K/V tiles are reused across CTAs, not within one.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// Copies 4 bytes (an index a later copy's address needs), or writes 4 zero
// bytes when !valid. .ca: the only cache mode for copies under 16 bytes.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most kPending committed groups of this thread are in flight.
// Other threads' copies need a barrier after this to be visible.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace attn::sm80
