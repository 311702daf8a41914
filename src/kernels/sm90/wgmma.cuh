// Around the warpgroup matrix product (wgmma_ops.cuh holds the instructions):
// shared-memory matrix descriptors for 128-byte-swizzled tiles, and the fence,
// commit and wait that order the asynchronous products against registers.
//
// A tile of R rows x C 2-byte columns lives in shared memory as C / 64 column
// blocks, each R rows of 128 bytes with the 16-byte chunks of row r XOR-ed by
// r % 8 (the layout TMA's SWIZZLE_128B writes, swizzle.h of this folder), each
// block 1024-byte aligned. wgmma reads it two ways (PTX ISA, "Matrix
// Descriptor Format"):
// - K-major (the reduced dim contiguous: Q and K for Q.K^T): 8-row groups
//   1024 bytes apart (the stride byte offset); a 16-wide k step starts 32 bytes
//   further along the row, and the next 64 columns one block further.
// - MN-major (V for P.V, 16-bit types, kTransposeB = 1): the 64 output columns
//   of a block are contiguous, the next 64 one block further (the leading byte
//   offset), 8-row groups along k 1024 bytes apart; a 16-row k step starts
//   2048 bytes further.
#pragma once

#include <cstdint>

namespace attn::sm90 {

// Byte offset of 16-byte chunk `chunk` (8 per 64-column block) of row r in a
// tile of `rows` rows per column block: where TMA puts it, and wgmma reads it.
__host__ __device__ constexpr uint32_t swizzled_offset(int rows, int r, int chunk) {
  return (chunk / 8) * rows * 128 + r * 128 + (((chunk % 8) ^ (r % 8)) * 16);
}

// Zeroes rows [first, rows) of such a tile (kCols 2-byte columns) at the
// generic address `tile`, thread t of `threads` storing every threads-th
// 16-byte chunk; the caller fences (fence_proxy_async) and syncs before an
// async read. Rows past a sequence are cleared so, where a product would
// sum 0 * NaN over them.
template <int kCols>
__device__ __forceinline__ void clear_rows(char* tile, int rows, int first, int t, int threads) {
  for (int idx = t; idx < (rows - first) * (kCols / 8); idx += threads) {
    const int r = first + idx / (kCols / 8), c = idx % (kCols / 8);
    *reinterpret_cast<uint4*>(tile + swizzled_offset(rows, r, c)) = make_uint4(0, 0, 0, 0);
  }
}

// Descriptor of a 128B-swizzled operand starting at shared address `addr`
// (bytes; the enclosing block 1024-byte aligned) with the given offsets.
__host__ __device__ constexpr uint64_t sw128_descriptor(uint32_t addr, uint32_t leading_bytes, uint32_t stride_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32;
  d |= static_cast<uint64_t>(1) << 62;  // layout type 1: 128-byte swizzle
  return d;
}

// The descriptor of the operand `bytes` (a multiple of 16) further on. The
// start address is the low 14 bits in 16-byte units, and shared memory ends
// below 2^18 bytes, so the sum never carries out of that field: one add per
// product from a base computed once, where recomputing mask, shift and or
// for every product cost 4-5 uniform instructions per wgmma (ptxas does not
// fold them), a quarter of a d 64 tile's issue slots outside the softmax.
__host__ __device__ constexpr uint64_t advance_descriptor(uint64_t descriptor, uint32_t bytes) {
  return descriptor + (bytes >> 4);
}

// K-major: k step `ks` (16 columns) of rows starting at `row0` (a multiple of
// 8) of a tile with `rows` rows per column block.
__host__ __device__ constexpr uint64_t kmajor_descriptor(uint32_t tile, int rows, int row0, int ks) {
  return advance_descriptor(sw128_descriptor(tile + row0 * 128, 16, 1024), (ks / 4) * rows * 128 + (ks % 4) * 32);
}

// MN-major: k step `ks` (16 rows) of a tile with `rows` rows per column block;
// the product's N columns span consecutive column blocks.
__host__ __device__ constexpr uint64_t mnmajor_descriptor(uint32_t tile, int rows, int ks) {
  return advance_descriptor(sw128_descriptor(tile, rows * 128, 1024), ks * 16 * 128);
}

// A 128B-swizzled tile of kRows rows per column block (the layout above),
// by its shared-space address: where TMA puts a column block, where a
// 16-byte chunk lies, and wgmma's descriptors of a k step.
template <int kRows>
struct SwizzledTileAt {
  uint32_t addr;

  __device__ __forceinline__ uint32_t column_block(int cb) const { return addr + cb * kRows * 128; }
  __device__ __forceinline__ uint32_t chunk(int r, int c) const { return addr + swizzled_offset(kRows, r, c); }
  // K-major, the k step `ks` of the rows from `row0` (a multiple of 8).
  __device__ __forceinline__ uint64_t kmajor(int row0, int ks) const { return kmajor_descriptor(addr, kRows, row0, ks); }
  // MN-major, the k step `ks` (16 rows).
  __device__ __forceinline__ uint64_t mnmajor(int ks) const { return mnmajor_descriptor(addr, kRows, ks); }
};

// Orders the warpgroup's register and shared-memory accesses before the next
// wgmma (after the accumulators were touched by ordinary instructions).
__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// Waits until at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Keeps the compiler from moving reads or writes of accumulators across the
// asynchronous product's issue and wait (they are in flight in between).
template <int N>
__device__ __forceinline__ void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// Lane 0 stores `value` (computed from registers by every lane) to the
// warp's shared-memory word `word`, so that ptxas keeps the computation
// before the wgmma wait that follows: it moves a wait above independent
// arithmetic, as if the wait cost nothing, but keeps it below memory
// operations. The schedule is the warp's, so one lane's store orders every
// lane's arithmetic; a word per warp keeps racecheck quiet. Nothing reads it.
__device__ __forceinline__ void store_after(uint32_t word, float value, int lane) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.eq.u32 p, %2, 0;\n@p st.shared.f32 [%0], %1;\n}\n" ::"r"(word), "f"(value),
      "r"(lane)
      : "memory");
}

}  // namespace attn::sm90
