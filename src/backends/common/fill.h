// A float vector filled on the stream: max_logit's -inf before rows max into
// it, dsink's 0 before rows add into it (any GPU backend).
#pragma once

#include <cstdint>

namespace attn::detail {

// base[i * stride] = value for i < n, on `stream` (a cudaStream_t); with
// `counter`, *counter = 0 in the same launch (a kernel's work counter, whose
// own memset would be one more operation on the stream). The next kernel
// may be launched early behind it (kernels/dependent_launch.cuh): it starts
// under this one and waits for it before touching what this one writes.
void launch_fill(float* base, int64_t n, int64_t stride, float value, void* stream, int* counter = nullptr);

}  // namespace attn::detail
