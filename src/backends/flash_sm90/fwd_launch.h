// Host-side view of the forward instantiations: the launch declaration (its
// definitions live in fwd_instantiate.cu, one object per table row, sm_90a).
#pragma once

#include <cuda_runtime.h>

#include "backends/flash_sm90/fwd_params.h"

namespace attn::flash_sm90 {

// kDropout: the build with dropout's path (fwd_kernel.cuh), for calls with
// dropout. `early`: launched to start under the kernel before it on the
// stream (detail::launch_fill's, which zeroes the work counter and fills
// max_logit), waiting for its end before the first touch of either.
template <typename T, int kDQK, int kDV, bool kDropout>
void launch_fwd(const Sm90FwdParams& p, int sm_count, bool early, cudaStream_t stream);

}  // namespace attn::flash_sm90
