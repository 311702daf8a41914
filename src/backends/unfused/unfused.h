// The `unfused` backend: attention as separate steps on any CUDA GPU. cuBLAS
// batched products (Q.K^T, P.V and the backward's four), with attn's own
// kernels for everything between them (scores -> probabilities with every mask,
// bias and dropout; the softmax gradient). It materializes the score matrices,
// so it states their memory need up front. Supports every feature; exists for
// coverage and as a second opinion, not for speed.
#pragma once

#include <cstdint>

#include "attn/backend.h"

namespace attn::unfused {

// Bytes of device workspace a call needs (score matrices and accumulators).
int64_t workspace_bytes(const Problem& p);

void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx);
void backward(const Problem& p, const BackwardArgs& args, const RunContext& ctx);

const Backend& backend();

}  // namespace attn::unfused
