// Host-side view of the backward: its parameters (flash_sm80_backward.cpp)
// and the launch declarations (definitions in bwd_instantiate.cu, one object
// per table row, and bwd_prepass.cu for the per-dtype pre- and post-passes).
#pragma once

#include <cuda_runtime.h>

#include "attn/backend.h"
#include "backends/flash_sm80/bwd_params.h"

namespace attn::flash_sm80 {

// The backward's parameters for one call: the forward's fields, dout / dq /
// dk / dv and their strides, and the workspace carved on `stream` (row
// terms, the fp32 dQ accumulator, deterministic mode's counters, zeroed).
// flash_sm90's backward takes them too, with the two passes below.
BwdParams backward_params(const Problem& p, const BackwardArgs& a, cudaStream_t stream);

// D = rowsum(dO * O) per (query head, token) and dq_accum = 0.
template <typename T>
void launch_bwd_prepass(const BwdParams& p, int d_qk, int d_v, cudaStream_t stream);

// The main kernel: dK, dV written, dQ accumulated into dq_accum.
// kDropoutBuild: the row's build with dropout's path, where it is compiled
// apart (bwd_config.h).
template <typename T, int kDQK, int kDV, bool kDropoutBuild>
void launch_bwd(const BwdParams& p, cudaStream_t stream);

// dq = softmax_scale * dq_accum in T and the caller's strides.
template <typename T>
void launch_bwd_convert_dq(const BwdParams& p, int d_qk, cudaStream_t stream);

}  // namespace attn::flash_sm80
