// Host-side view of the backward instantiations: the launch declaration (its
// definitions live in bwd_instantiate.cu, one object per table row, sm_90a).
#pragma once

#include <cuda_runtime.h>

#include "backends/flash_sm90/bwd_params.h"

namespace attn::flash_sm90 {

// The main kernel: dK, dV written, dQ added into the fp32 accumulator.
// kScoreMods: the build with softcap and ALiBi (bwd_mainloop.cuh), for calls
// with either; kDropout: the build with dropout, with or without them. The
// plain builds keep the plain path's registers and speed. `early`: launched
// while the kernel before it (the pre-pass) still runs; it waits for that
// grid's end (kernels/dependent_launch.cuh).
template <typename T, int kDQK, int kDV, bool kScoreMods, bool kDropout>
void launch_bwd(const Sm90BwdParams& p, bool early, cudaStream_t stream);

// With a head split (p.dkv_accum): dK and dV from the fp32 accumulators into
// the caller's tensors (bwd_convert_dkv.cu), after launch_bwd.
template <typename T>
void launch_bwd_convert_dkv(const Sm90BwdParams& p, int d_qk, int d_v, cudaStream_t stream);

}  // namespace attn::flash_sm90
