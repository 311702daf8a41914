// Which sequence a CTA works on: lengths and token offsets, read from
// cu_seqlens on the device, so the host never waits for them. The tile ranges
// over it (the KV tiles a query tile sees, and the reverse) are in
// tile_ranges.h, plain C++ so the host tests check them.
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"
#include "backends/flash_sm80/fwd_params.h"
#include "backends/flash_sm80/tile_ranges.h"

namespace attn::flash_sm80 {

__device__ __forceinline__ SeqExtent sequence_extent(const FwdParams& p, int b) {
  SeqExtent s;
  s.len_q = p.s_q;
  s.len_kv = p.s_kv;
  if (p.cu_seqlens_q) {
    const int q0 = p.cu_seqlens_q[b * p.cu_q_stride], q1 = p.cu_seqlens_q[(b + 1) * p.cu_q_stride];
    const int k0 = p.cu_seqlens_kv[b * p.cu_kv_stride], k1 = p.cu_seqlens_kv[(b + 1) * p.cu_kv_stride];
    s.len_q = q1 - q0;
    s.len_kv = k1 - k0;
    if (p.packed) {
      s.start_q = q0;
      s.start_kv = k0;
    }
  }
  s.shift = alignment_shift<int>(p.bottom_right, s.len_q, s.len_kv);
  return s;
}

}  // namespace attn::flash_sm80
