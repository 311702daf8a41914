// Timing of attention calls for `attn run` and `attn bench`: CUDA events on
// the GPU (wall clock on the CPU), warm-up, rotation over input sets larger
// than L2, medians.
#pragma once

#include <functional>
#include <vector>

#include "attn/select.h"
#include "testing/case.h"

namespace attn::cli {

// Milliseconds of one call (CUDA events when gpu, else the wall clock).
double time_call(bool gpu, const std::function<void()>& call);

// How many input sets to rotate through so one cycle exceeds L2 (>= 256 MiB), 1..8.
int input_sets(const testing::Case& c);

struct Timing {
  Selection selection;      // of the first call
  double first_ms = 0.0;    // the first call alone: workspace growth, plan building, ...
  std::vector<double> ms;   // the timed calls, after warm-up
};

// warmup + iters calls rotating over the sets.
Timing time_pass(std::vector<testing::Case>& sets, bool gpu, int warmup, int iters,
                 const std::function<Selection(testing::Case&)>& call);

}  // namespace attn::cli
