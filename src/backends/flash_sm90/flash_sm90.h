// The `flash_sm90` backend: attn's own Hopper attention kernels (TMA, wgmma,
// warp specialization), forward and backward, sm_90a only. docs/FLASH_SM90.md describes the design.
#pragma once

#include <string>
#include <vector>

#include "attn/backend.h"

namespace attn::flash_sm90 {

// Reasons this build's kernels cannot run p on dev (empty: they can).
std::vector<std::string> obstacles(const Problem& p, const DeviceInfo& dev);

void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx);
void backward(const Problem& p, const BackwardArgs& args, const RunContext& ctx);

const Backend& backend();

}  // namespace attn::flash_sm90
