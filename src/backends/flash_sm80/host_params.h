// Host helpers shared by the forward and backward entry points: the caller's
// views -> kernel strides and the forward's parameter struct (defined in
// flash_sm80_forward.cpp; the backward reuses it for q, k, v, out and lse).
#pragma once

#include <cstdint>

#include "attn/problem.h"
#include "backends/flash_sm80/fwd_params.h"

namespace attn::flash_sm80 {

struct Strides {
  int64_t batch, row, head;
};

// (sequence, token, head) strides of a q-like view in format f; thd has no
// batch stride (its sequences start at cu_seqlens offsets).
Strides strides_of(const TensorView& t, QkvFormat f);

FwdParams forward_params(const Problem& p, const ForwardArgs& a);

}  // namespace attn::flash_sm80
