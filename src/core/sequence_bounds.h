// A sequence's tokens from its two cu_seqlens values as a kernel reads them on
// the device. With check_seqlens off nobody has checked those values, so each
// kernel keeps what it derives from them inside the tensors: wrong values give
// wrong answers, never reads or writes past the caller's memory. Valid values
// pass unchanged. Plain C++ (host and device), so host tests check it.
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE

namespace attn {

struct SequenceBounds {
  int start = 0;  // first token (packed); 0 for a padded batch
  int len = 0;
};

ATTN_HOST_DEVICE int64_t clamped(int64_t x, int64_t low, int64_t high) { return x < low ? low : (x > high ? high : x); }

// Sequence [lo, hi) of cu_seqlens, bounded:
// - packed (thd): start in [0, tokens], length in [0, min(max_len, tokens - start)];
//   max_len is max_seqlen, which sizes grids and per-sequence workspaces.
// - padded (bshd/sbhd with cu_seqlens): start 0, length hi - lo in [0, max_len],
//   max_len being the padded sequence dimension (tokens is not used).
// Token counts fit int (the backends' supports() say so); the differences are
// taken in 64 bits, so no int32 values overflow.
ATTN_HOST_DEVICE SequenceBounds bounded_sequence(int lo, int hi, bool packed, int tokens, int max_len) {
  SequenceBounds s;
  s.start = packed ? static_cast<int>(clamped(lo, 0, tokens)) : 0;
  // Room for the length: max_len (0 if negative), and in a packed batch also
  // the tokens after start. This inlines into every flash_sm80 kernel, whose
  // spills move with its exact form: clamping the padded case to INT32_MAX
  // instead spills in sm_90a's d 192 backward, and two branches (in 64 and in
  // 32 bits) in sm_90a's d 128 forward.
  const int64_t room = packed ? clamped(max_len, 0, int64_t{tokens} - s.start) : clamped(max_len, 0, max_len);
  s.len = static_cast<int>(clamped(int64_t{hi} - (packed ? s.start : lo), 0, room));
  return s;
}

// The sequence of a packed batch (thd) that holds token t: the last start
// cu[b * stride] <= t whose sequence ends after t, found by bisection over
// the n + 1 non-decreasing values (empty sequences hold no token); -1 for a
// token before the first sequence or past the last.
ATTN_HOST_DEVICE int64_t sequence_holding(const int32_t* cu, int64_t stride, int64_t n, int64_t t) {
  if (n <= 0 || t >= cu[n * stride] || t < cu[0]) return -1;
  int64_t lo = 0, hi = n;  // cu[lo] <= t < cu[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (cu[mid * stride] <= t) lo = mid;
    else hi = mid;
  }
  return lo;
}

}  // namespace attn
