// What the rotary kernel and its CPU twin need, resolved from the views:
// a grid of tokens (n0 x n1), each with `heads` rows of d channels.
#pragma once

#include <cstdint>

#include "attn/tensor.h"
#include "core/sequence_bounds.h"

namespace attn::rotary_detail {

enum class PositionAxis : uint8_t { dim0, dim1, packed };  // sbhd, bshd, thd

struct RotaryParams {
  const void* x = nullptr;
  void* out = nullptr;
  DType dtype = DType::bf16;
  int64_t n0 = 0, n1 = 1;              // tokens: x[i0, i1] (n1 = 1 for thd)
  int64_t x_s0 = 0, x_s1 = 0, x_sh = 0;  // strides in elements: dim 0, dim 1, head
  int64_t o_s0 = 0, o_s1 = 0, o_sh = 0;
  int heads = 0, d = 0, half = 0;  // half = rotated channels / 2
  const float* freqs = nullptr;
  int64_t f_stride = 0, max_s = 0;  // freqs[p * f_stride + c], p < max_s
  PositionAxis axis = PositionAxis::dim1;
  const int32_t* cu_seqlens = nullptr;  // thd: n_seqs + 1 entries
  int64_t n_seqs = 0;
  bool backward = false;
};

// Position of token (i0, i1): its index along the sequence axis, or for thd
// its offset in its sequence (-1 past the last sequence: copied unrotated).
#ifdef __CUDACC__
__host__ __device__
#endif
inline int64_t token_position(const RotaryParams& p, int64_t i0, int64_t i1) {
  if (p.axis == PositionAxis::dim0) return i0;
  if (p.axis == PositionAxis::dim1) return i1;
  const int64_t b = sequence_holding(p.cu_seqlens, 1, p.n_seqs, i0);
  return b < 0 ? -1 : i0 - p.cu_seqlens[b];
}

// The rotation of one channel pair (x_i = channel c, x_j = channel c + half),
// angles a_i, a_j, forward or transposed; F = float (GPU) or double (CPU).
template <typename F>
#ifdef __CUDACC__
__host__ __device__
#endif
inline void rotate_pair(bool backward, F cos_i, F sin_i, F cos_j, F sin_j, F x_i, F x_j, F& o_i, F& o_j) {
  if (!backward) {
    o_i = x_i * cos_i - x_j * sin_i;
    o_j = x_j * cos_j + x_i * sin_j;
  } else {
    o_i = x_i * cos_i + x_j * sin_j;
    o_j = x_j * cos_j - x_i * sin_i;
  }
}

// Launches the CUDA kernel (rotary_kernel.cu); params already validated.
void launch_rotary(const RotaryParams& p, void* stream);

}  // namespace attn::rotary_detail
