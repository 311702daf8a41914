// DESIGN.md's visibility rule as one function, shared by the CPU reference and
// every GPU kernel so that all backends agree on the same (i, j) pairs.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ATTN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ATTN_HOST_DEVICE inline
#endif

// #pragma unroll in device code of host + device functions (host compilers
// do not know it).
#if defined(__CUDA_ARCH__)
#define ATTN_DEVICE_UNROLL _Pragma("unroll")
#else
#define ATTN_DEVICE_UNROLL
#endif

namespace attn {

// Keys visible to one query row form one contiguous range [begin, end).
template <typename Int>
struct KeyRange {
  Int begin;
  Int end;
  ATTN_HOST_DEVICE bool empty() const { return begin >= end; }
  ATTN_HOST_DEVICE bool contains(Int j) const { return begin <= j && j < end; }
};

// shift aligns queries to keys: 0 for top-left, len_kv - len_q for bottom-right
// (per sequence, from its actual lengths).
template <typename Int>
ATTN_HOST_DEVICE Int alignment_shift(bool bottom_right, Int len_q, Int len_kv) {
  return bottom_right ? len_kv - len_q : Int(0);
}

// Query i (0 <= i < len_q) sees key j when 0 <= j < len_kv and
// i + shift - left <= j <= i + shift + right (left/right = -1: unbounded).
// A query at or past len_q sees nothing.
template <typename Int>
ATTN_HOST_DEVICE KeyRange<Int> visible_keys(Int i, Int len_q, Int len_kv, Int shift, Int left,
                                            Int right) {
  if (i >= len_q) return {Int(0), Int(0)};
  Int begin = Int(0);
  Int end = len_kv;
  if (left >= 0 && i + shift - left > begin) begin = i + shift - left;
  if (right >= 0 && i + shift + right + 1 < end) end = i + shift + right + 1;
  if (end < begin) end = begin;
  return {begin, end};
}

// ALiBi's bias for the pair (i, j): -slope * |i + shift - j|.
template <typename Real, typename Int>
ATTN_HOST_DEVICE Real alibi_bias(Real slope, Int i, Int j, Int shift) {
  Int dist = i + shift - j;
  if (dist < 0) dist = -dist;
  return -slope * static_cast<Real>(dist);
}

}  // namespace attn
