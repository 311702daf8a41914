// The shared GPU test grid's cases (test_backend_grid.cpp): every format and
// mask, windows at their boundaries, GQA, head dims, edge lengths, several
// tiles, score changes, dropout. Most ask for the backward too.
#pragma once

#include <vector>

#include "testing/case.h"

namespace attn::testing {

std::vector<CaseSpec> backend_grid();

}  // namespace attn::testing
