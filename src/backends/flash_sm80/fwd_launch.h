// Host-side view of the forward instantiations: the launch declaration (its
// definitions live in fwd_instantiate.cu, one object per table row).
#pragma once

#include <cuda_runtime.h>

#include "backends/flash_sm80/fwd_config.h"
#include "backends/flash/params.h"

namespace attn::flash_sm80 {

// kBuild: which of the row's builds (fwd_config.h).
template <typename T, int kDQK, int kDV, FwdBuild kBuild>
void launch_fwd(const flash::FwdParams& p, cudaStream_t stream);

}  // namespace attn::flash_sm80
