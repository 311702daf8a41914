// Building blocks of a Hopper kernel's shared storage (one struct per
// kernel, its members found by offsetof): blocks of bytes on the 128-byte
// swizzle's 1024-byte period, which TMA and wgmma assume of a tile (and which
// bulk copies' 16-byte rule is then met by), and where the struct lies in
// the dynamic shared-memory buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/sm90/mbarrier.cuh"
#include "kernels/sm90/pipeline.cuh"

namespace attn::sm90 {

template <int kBytes>
struct alignas(1024) AlignedBlock {
  static_assert(kBytes % 1024 == 0, "whole swizzle periods");
  char bytes[kBytes];
};
struct NoBlock {};  // a member a configuration does without (with [[no_unique_address]])

// The storage's place: the dynamic buffer's start aligned up to 1024 bytes,
// as a shared-space address (what TMA, wgmma, mbarriers and stmatrix take)
// and as a generic pointer (plain loads and stores). The stages address
// members as base + offsetof(...): constants, where addresses taken from the
// struct's generic pointer went through 64-bit arithmetic that cost the
// producers' few registers.
struct SharedBase {
  uint32_t base;
  char* generic;

  // (An offset from smem_raw, not an integer cast: the compiler then knows
  // that pointers derived from it address shared memory.)
  __device__ __forceinline__ explicit SharedBase(char* smem_raw) {
    const uint32_t raw = smem_addr(smem_raw), pad = (1024u - (raw & 1023u)) & 1023u;
    base = raw + pad;
    generic = smem_raw + pad;
  }
  // The generic pointer to shared-space address `addr` of the storage.
  __device__ __forceinline__ char* to_generic(uint32_t addr) const { return generic + (addr - base); }

 protected:
  // The shared-space address of the member at `offset` (an offsetof), and
  // the i-th mbarrier of an array of them there.
  __device__ __forceinline__ uint32_t at(size_t offset) const { return base + static_cast<uint32_t>(offset); }
  __device__ __forceinline__ Barrier bar(size_t offset, int i) const { return {at(offset) + 8 * i}; }
};

}  // namespace attn::sm90
