// Host-side view of flash_sm80's backward kernel: the launch declaration
// (definitions in bwd_instantiate.cu, one object per table row). The passes
// around it are the flash library's (backends/flash/bwd_prepass.h).
#pragma once

#include <cuda_runtime.h>

#include "backends/flash/params.h"

namespace attn::flash_sm80 {

using flash::BwdParams;

// The main kernel of row (kDQK, kDV): dK, dV written, dQ accumulated into
// dq_accum. dropout_build: run the row's build with dropout's path, where it
// is compiled apart (bwd_uses_dropout_build(), bwd_config.h).
template <typename T, int kDQK, int kDV>
void launch_bwd(const flash::BwdParams& p, bool dropout_build, cudaStream_t stream);

}  // namespace attn::flash_sm80
