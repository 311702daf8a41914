// Rotary position embedding as TransformerEngine applies it (non-interleaved,
// "rotate half"), in one pass over the tensor instead of PyTorch's six
// elementwise kernels. attn.torch.TransformerLayer calls it on q and k.
//
// For a token at position p, channels c < r/2 pair with c + r/2 (r = the
// angles' last dimension, even, r <= d); with a = freqs[p, c]:
//   out[c]       = x[c] cos a[c]       - x[c + r/2] sin a[c]
//   out[c + r/2] = x[c + r/2] cos a[c + r/2] + x[c] sin a[c + r/2]
// and channels r..d-1 are copied. `backward` applies the transpose of that
// linear map (the gradient with respect to x). Math in float32 on the GPU
// (float64 on the CPU); cos and sin are not rounded to x's dtype first,
// which TE's unfused path does.
#pragma once

#include <cstdint>

#include "attn/problem.h"
#include "attn/tensor.h"

namespace attn {

struct RotaryArgs {
  // [s, b, h, d] (sbhd), [b, s, h, d] (bshd) or [t, h, d] (thd); any strides
  // but the last dimension contiguous. f32, f16, bf16 (and f64 on the CPU).
  TensorView x;
  // float32 angles, [max_s, 1, 1, r] (TE's RotaryPositionEmbedding) or
  // [max_s, r]; last dimension contiguous.
  TensorView freqs;
  // thd only: int32 [batch + 1]. A token's position restarts at each
  // sequence; tokens past cu_seqlens[batch] are copied unrotated. Positions
  // must be below max_s: sbhd/bshd are checked here; for thd the caller
  // checks (it knows the longest sequence; a position past the table gives
  // NaN, never a read outside it).
  TensorView cu_seqlens;
  TensorView out;  // x's shape, dtype and device; last dimension contiguous; may be x itself
  QkvFormat format = QkvFormat::bshd;
  bool backward = false;
  void* stream = nullptr;  // cudaStream_t for CUDA tensors
};

// Validates (attn::Error naming what, got, expected, fix) and runs on x's device.
void rotary(const RotaryArgs& args);

}  // namespace attn
