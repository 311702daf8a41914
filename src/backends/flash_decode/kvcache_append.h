// forward_with_kvcache's device work before the attention: the new keys and
// values written into the cache (rotated), and q rotated into scratch. Every
// length, row and block index comes from the device and is bounded there:
// a token whose position falls outside the cache is not written, an index
// outside the cache is clamped into it, a position past the rotary table
// rotates to NaN (visible), so no value moves a read or write outside the
// caller's tensors (the host checks them first unless told not to).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attn/tensor.h"
#include "backends/flash/cache_params.h"

namespace attn::flash_decode {

struct AppendParams {
  // New tokens [b, s_new, h_kv, d] and their cache; strides in elements:
  // (sequence, token, head) for k / v, (row or block, position, head) for the caches.
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_stride[3] = {}, v_stride[3] = {};
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t kc_stride[3] = {}, vc_stride[3] = {};
  int batch = 0, h_kv = 0, d_qk = 0, d_v = 0;
  flash::CacheParams cache;  // s_new: the new tokens per sequence

  // Rotary: cos / sin [s_ro, half] (f32, or the tensors' dtype), pairs
  // (2c, 2c + 1) when interleaved, else (c, c + half). half = 0: none.
  const void* cos = nullptr;
  const void* sin = nullptr;
  int64_t cos_stride = 0, sin_stride = 0;
  bool trig_f32 = true;
  int half = 0, s_ro = 0;
  bool interleaved = true;

  // q [b, s_q, h_q, d_qk] rotated into q_out (contiguous), at position
  // len + s_new - s_q + j when q_by_row, else len.
  const void* q = nullptr;
  int64_t q_stride[3] = {};
  void* q_out = nullptr;
  int s_q = 0, h_q = 0;
  bool q_by_row = false;
};

// Launches the append (s_new > 0) and q's rotation (q_out set) on `stream`;
// whether it launched either. Both let the next kernel start early
// (kernels/dependent_launch.cuh), which must wait before reading what they write.
bool launch_kvcache_prologue(const AppendParams& a, DType dtype, cudaStream_t stream);

}  // namespace attn::flash_decode
