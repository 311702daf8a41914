// The TMA tensor map of one of a call's q-like tensors (q, k, v, out, dout),
// shared by flash_sm90's forward and backward entry points.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "attn/problem.h"

namespace attn::flash_sm90 {

// A 4-D (column, token, head, sequence) view of t, copied in boxes of 64
// columns x box_rows tokens (thd is one "sequence" of all tokens). Throws
// attn::Error naming `name` where TMA cannot describe the strides.
CUtensorMap tile_map(const Problem& p, const TensorView& t, int64_t tokens, int64_t heads, int64_t cols,
                     int box_rows, const char* name);

}  // namespace attn::flash_sm90
