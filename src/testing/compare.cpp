// Comparison with the reference (see compare.h).
#include "testing/compare.h"

#include <algorithm>
#include <cmath>

namespace attn::testing {

Tolerance tolerance_for(DType dtype, bool gradient) {
  switch (dtype) {
    case DType::bf16: return gradient ? Tolerance{5e-2, 5e-2, 1e-2} : Tolerance{2e-2, 2e-2, 1e-2};
    case DType::f16: return gradient ? Tolerance{2.5e-2, 2.5e-2, 5e-3} : Tolerance{1e-2, 1e-2, 5e-3};
    case DType::f64: return {1e-9, 1e-9, 1e-9};
    default: return {1e-5, 1e-5, 1e-5};
  }
}

Comparison compare(const std::vector<double>& x, const std::vector<double>& ref, Tolerance tol) {
  Comparison c;
  c.count = static_cast<int64_t>(std::min(x.size(), ref.size()));
  double err2 = 0.0, ref2 = 0.0;
  for (int64_t i = 0; i < c.count; ++i) {
    const double a = x[i], r = ref[i];
    if (std::isnan(a)) {
      ++c.nan;
      continue;
    }
    if (std::isinf(a) || !std::isfinite(r)) {
      if (a != r) ++c.bad;  // equal infinities are exact; anything else with an inf or a NaN ref is wrong
      continue;
    }
    const double diff = std::abs(a - r);
    c.max_abs = std::max(c.max_abs, diff);
    if (std::abs(r) > tol.atol) c.max_rel = std::max(c.max_rel, diff / std::abs(r));
    if (diff > tol.atol + tol.rtol * std::abs(r)) ++c.bad;
    err2 += diff * diff;
    ref2 += r * r;
  }
  c.rel_frobenius = ref2 > 0.0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  c.pass = x.size() == ref.size() && c.bad == 0 && c.nan == 0 && c.rel_frobenius <= tol.frob;
  return c;
}

}  // namespace attn::testing
