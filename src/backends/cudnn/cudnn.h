// The `cudnn` backend: cuDNN's fused flash attention (its SDPA graph, built with
// the cudnn-frontend headers), with attn's semantics translated inside:
// inclusive windows (cuDNN's left bound is exclusive: left + 1 is passed),
// bottom-right alignment, thd through ragged offsets, LSE in attn's layout,
// and rows that see no key written as out = 0, lse = -inf.
// Its dropout draws cuDNN's own random pattern, not attn's Philox pattern.
#pragma once

#include <string>
#include <vector>

#include "attn/backend.h"

namespace attn::cudnn {

// The cuDNN library version this process runs (e.g. 91900 for 9.19.0).
int library_version();
// "9.19.0"
std::string version_string();

const Backend& backend();

}  // namespace attn::cudnn
