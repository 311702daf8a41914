// The backward's two light passes around either backend's main kernel
// (bwd_prepass.cu): the rows' terms before it, dQ's conversion after it.
#pragma once

#include <cuda_runtime.h>

#include "backends/flash/params.h"

namespace attn::flash {

// D = rowsum(dO * O) and lse in log2 units per (query head, token), and
// dq_accum = 0. Its blocks let the next kernel launch early once all have
// started (a kernel so launched waits for this grid's end before it reads).
template <typename T>
void launch_bwd_prepass(const BwdParams& p, int d_qk, int d_v, cudaStream_t stream);

// dsink[h] = -sum over the real rows of exp(sink_h - lse) D from the row
// terms (after launch_bwd_prepass), one block per head, summed in a fixed
// order (deterministic); 0 without rows. Nothing to do without p.dsink.
void launch_bwd_dsink(const BwdParams& p, cudaStream_t stream);

// dq = softmax_scale * dq_accum / (1 - p) in T and the caller's strides (the
// main kernels leave dropout's factor out of dq_accum: params.h). `early`
// (sm_90): launched while the kernel before it still runs, its blocks
// waiting for that grid's end (kernels/dependent_launch.cuh).
template <typename T>
void launch_bwd_convert_dq(const BwdParams& p, int d_qk, cudaStream_t stream, bool early = false);

}  // namespace attn::flash
