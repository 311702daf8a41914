// The `flash_sm80` backend: attn's own tiled flash-attention kernels on
// mma.sync (Ampere and later), FlashAttention-2's algorithm, forward and
// backward. docs/FLASH_SM80.md describes the design.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/backend.h"

namespace attn::flash_sm80 {

// Reasons this build's kernels cannot run p (its pass) on dev (empty: they can).
std::vector<std::string> obstacles(const Problem& p, const DeviceInfo& dev);

void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx);
void backward(const Problem& p, const BackwardArgs& args, const RunContext& ctx);
// Device workspace of each pass: none in the forward; the backward's D, fp32
// dQ accumulator and counters.
int64_t forward_workspace_bytes(const Problem& p);
int64_t backward_workspace_bytes(const Problem& p);

// Whether a forward runs a row's dropout build: for dropout, or for a max
// logit, which lives only there (fwd_kernel.cuh). supports() and the dispatch
// both ask.
bool fwd_needs_dropout_build(const Problem& p);

const Backend& backend();

}  // namespace attn::flash_sm80
