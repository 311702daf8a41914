// Comparison of a backend's output with the reference, with DESIGN.md's
// tolerances ("Accuracy"): an elementwise bound plus a relative Frobenius bound.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/tensor.h"

namespace attn::testing {

// x passes when every element has |x - ref| <= atol + rtol * |ref| and
// ||x - ref|| / ||ref|| <= frob.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
  double frob = 0.0;
};

// bf16: 2e-2 on out (and lse), 5e-2 on gradients, Frobenius 1e-2; fp16 half of
// bf16's; fp32 1e-5; fp64 1e-9.
Tolerance tolerance_for(DType dtype, bool gradient);

struct Comparison {
  double max_abs = 0.0;        // max |x - ref| over finite pairs
  double max_rel = 0.0;        // max |x - ref| / |ref| where |ref| > atol (tiny refs are judged by atol)
  double rel_frobenius = 0.0;  // ||x - ref|| / ||ref|| (||x - ref|| when ref is all zero)
  int64_t bad = 0;             // elements outside atol + rtol * |ref| (mismatched infinities included)
  int64_t nan = 0;             // NaN in x: an unwritten (poisoned) or broken output
  int64_t count = 0;           // elements compared
  bool pass = false;
};

// Infinities equal to ref's (lse = -inf on rows with no visible key) count as
// exact; any NaN in x, or a size mismatch, fails.
Comparison compare(const std::vector<double>& x, const std::vector<double>& ref, Tolerance tol);

}  // namespace attn::testing
