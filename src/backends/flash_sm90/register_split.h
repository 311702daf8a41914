// setmaxnreg's split of a warp-specialized CTA's registers (the forward's and
// the backward's configs). Plain C++: no CUDA needed to include it.
#pragma once

namespace attn::flash_sm90 {

// Whether a producer warpgroup at `producer` registers a thread and
// `consumers` warpgroups at `consumer` fit the pool the CTA launched with:
// __launch_bounds__(threads, 1) gives each thread 65536 / threads registers,
// in steps of 8 (168 for 384 threads, 128 for 512), and setmaxnreg only moves
// registers within that pool. A split past it passes a check against the
// register file (65536) but hangs: the consumers' increase waits, forever,
// for registers the producer never gave back.
constexpr bool setmaxnreg_split_fits(int threads, int producer, int consumers, int consumer) {
  return producer + consumers * consumer <= (1 + consumers) * (65536 / threads / 8 * 8);
}

}  // namespace attn::flash_sm90
