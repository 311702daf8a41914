// Device helpers for softmax sinks and the max logit, shared by the GPU
// backends' kernels (docs/SEMANTICS.md "Softmax sinks", "Max logit").
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "backends/common/sink_logits.h"

namespace attn::detail {

// The sink logit of query head h: -inf (none), 0 or the caller's fp32 logit.
__device__ __forceinline__ float sink_logit(const SinkLogits& s, int64_t h) {
  if (s.kind == 2) return s.logits[h * s.stride];
  return s.kind == 1 ? 0.f : -INFINITY;
}

// *addr = max(*addr, x) for floats, NaN winning (so a NaN score stays visible
// in the max logit). *addr must start at -inf or a value written here.
__device__ __forceinline__ void atomic_max_keeping_nan(float* addr, float x) {
  if (x != x) x = __int_as_float(0x7fc00000);  // one positive quiet NaN: above every float as an int
  if (__float_as_int(x) >= 0)
    atomicMax(reinterpret_cast<int*>(addr), __float_as_int(x));
  else
    atomicMin(reinterpret_cast<unsigned int*>(addr), __float_as_uint(x));
}

}  // namespace attn::detail
