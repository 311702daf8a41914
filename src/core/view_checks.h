// Checks of a q/k/v/out-like view against a format, shared by the attention
// call's validation (validate.cpp) and the ops beside it (rotary). Each failure
// is an attn::Error(value) with what / got / expected / fix.
#pragma once

#include <string>

#include "attn/problem.h"
#include "attn/tensor.h"

namespace attn::detail {

// The dimension names of a q/k/v/out-like tensor in format f, e.g.
// layout_of(bshd, "seq_q", "heads_q", "head_dim_qk") = "[batch, seq_q, heads_q, head_dim_qk]".
std::string layout_of(QkvFormat f, const char* seq, const char* heads, const char* dim);

int rank_of(QkvFormat f);  // 3 for thd, else 4

// Rank against the format, with the fix for the common mistakes.
void require_rank(const TensorView& t, const char* name, QkvFormat f, const std::string& layout);

// Stride 1 along the last dimension (empty views, where DLPack may give stride 0, pass).
void require_last_dim_contiguous(const TensorView& t, const char* name);

}  // namespace attn::detail
