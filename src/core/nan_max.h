// max(a, b) that keeps a NaN of either: fmax / std::max drop a NaN operand,
// and a NaN score must stay visible in a max logit or a row's max (SEMANTICS.md).
// Host and device alike (the reference, unfused's row kernels, the ring's ops).
#pragma once

#include <cmath>

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE

namespace attn::detail {

ATTN_HOST_DEVICE float max_keeping_nan(float a, float b) { return a != a || b != b ? a + b : fmaxf(a, b); }
ATTN_HOST_DEVICE double max_keeping_nan(double a, double b) { return a != a || b != b ? a + b : fmax(a, b); }

}  // namespace attn::detail
