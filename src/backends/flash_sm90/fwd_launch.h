// Host-side view of the forward instantiations: the launch declaration (its
// definitions live in fwd_instantiate.cu, one object per table row, sm_90a).
#pragma once

#include <cuda_runtime.h>

#include "backends/flash_sm90/fwd_params.h"

namespace attn::flash_sm90 {

// kDropout: the build with dropout's path (fwd_kernel.cuh), for calls with dropout.
template <typename T, int kDQK, int kDV, bool kDropout>
void launch_fwd(const Sm90FwdParams& p, int sm_count, cudaStream_t stream);

}  // namespace attn::flash_sm90
