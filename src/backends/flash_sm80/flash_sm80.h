// The `flash_sm80` backend: attn's own tiled flash-attention kernels on
// mma.sync (Ampere and later), FlashAttention-2's algorithm. Forward only so
// far; selection falls back to another backend for the backward.
// docs/FLASH_SM80.md describes the design.
#pragma once

#include <string>
#include <vector>

#include "attn/backend.h"

namespace attn::flash_sm80 {

// Reasons this build's forward kernels cannot run p on dev (empty: they can).
std::vector<std::string> forward_obstacles(const Problem& p, const DeviceInfo& dev);

void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx);

const Backend& backend();

}  // namespace attn::flash_sm80
