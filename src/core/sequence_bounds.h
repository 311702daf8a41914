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
  int64_t start = 0;  // first token (packed); 0 for a padded batch
  int64_t len = 0;
};

// Sequence [lo, hi) of cu_seqlens, bounded:
// - packed (thd): start in [0, tokens], length in [0, min(max_len, tokens - start)];
//   max_len is max_seqlen, which sizes grids and per-sequence workspaces.
// - padded (bshd/sbhd with cu_seqlens): start 0, length hi - lo in [0, max_len],
//   max_len being the padded sequence dimension (tokens is not used).
ATTN_HOST_DEVICE SequenceBounds bounded_sequence(int64_t lo, int64_t hi, bool packed, int64_t tokens,
                                                 int64_t max_len) {
  auto clamp = [](int64_t x, int64_t low, int64_t high) { return x < low ? low : (x > high ? high : x); };
  SequenceBounds s;
  if (packed) {
    s.start = clamp(lo, 0, tokens);
    s.len = clamp(hi - s.start, 0, clamp(max_len, 0, tokens - s.start));
  } else {
    s.len = clamp(hi - lo, 0, max_len);
  }
  return s;
}

}  // namespace attn
