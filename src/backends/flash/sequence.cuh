// Which sequence a CTA works on: lengths and token offsets, read from
// cu_seqlens (or a KV cache's lengths) on the device, so the host never
// waits for them. The tile ranges over it (the KV tiles a query tile sees,
// and the reverse) are in tile_ranges.h, plain C++ so the host tests check
// them.
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"
#include "backends/flash/params.h"
#include "backends/flash/tile_ranges.h"
#include "core/sequence_bounds.h"

namespace attn::flash {

__device__ __forceinline__ SeqExtent sequence_extent(const FwdParams& p, int b) {
  SeqExtent s;
  s.len_q = p.s_q;
  s.len_kv = p.s_kv;
  if (p.cache.seqlens) {  // a KV cache: its length after the append
    s.len_kv = cache_keys(p.cache, b);
  } else if (p.cu_seqlens_q) {  // bounded: unchecked values never move a tile past the tensors
    const SequenceBounds q = bounded_sequence(p.cu_seqlens_q[b * p.cu_q_stride],
                                              p.cu_seqlens_q[(b + 1) * p.cu_q_stride], p.packed, p.tokens_q, p.s_q);
    const SequenceBounds k = bounded_sequence(p.cu_seqlens_kv[b * p.cu_kv_stride],
                                              p.cu_seqlens_kv[(b + 1) * p.cu_kv_stride], p.packed, p.tokens_kv,
                                              p.s_kv);
    s.start_q = q.start;
    s.start_kv = k.start;
    s.len_q = q.len;
    s.len_kv = k.len;
  }
  s.shift = alignment_shift<int>(p.bottom_right, s.len_q, s.len_kv);
  return s;
}

}  // namespace attn::flash
