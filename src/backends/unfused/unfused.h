// The `unfused` backend: attention as separate steps on any CUDA GPU. cuBLAS
// batched products (Q.K^T, P.V and the backward's four), with attn's own
// kernels for everything between them (scores -> probabilities with every mask,
// bias and dropout; the softmax gradient). It materializes the score matrices,
// so it states their memory need up front. Supports every feature; exists for
// coverage and as a second opinion, not for speed.
#pragma once

#include <cstdint>

#include "attn/backend.h"
#include "core/workspace.h"

namespace attn::unfused {

// Bytes of device workspace a call needs: the staged copies (staging.h), then
// the score matrices and accumulators of the products.
int64_t workspace_bytes(const Problem& p);
int64_t products_workspace_bytes(const Problem& p);

// The passes: stage misaligned views (staging.h), then the products.
void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx);
void backward(const Problem& p, const BackwardArgs& args, const RunContext& ctx);

// The products on views cuBLAS reads correctly, their workspace taken from `ws`.
void forward_products(const Problem& p, const ForwardArgs& args, detail::Carver& ws, void* stream);
void backward_products(const Problem& p, const BackwardArgs& args, detail::Carver& ws, void* stream);

const Backend& backend();

}  // namespace attn::unfused
