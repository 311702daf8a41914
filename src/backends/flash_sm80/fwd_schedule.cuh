// Which work a CTA owns: its sequence (lengths and token offsets, read from
// cu_seqlens on the device, so the host never waits for them), its 128-row
// query tile, and the range of KV tiles any of its rows can see. Tiles outside
// the range are never loaded: a window costs in proportion to its width.
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"
#include "backends/flash_sm80/fwd_params.h"

namespace attn::flash_sm80 {

struct SeqExtent {
  int64_t start_q = 0, start_kv = 0;  // first token (thd); 0 otherwise
  int len_q = 0, len_kv = 0;
  int shift = 0;  // alignment of queries to keys (bottom-right: len_kv - len_q)
};

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

// Keys [begin, end) visible to query row i, clamped to [0, len_kv].
__device__ __forceinline__ KeyRange<int> row_keys(const FwdParams& p, const SeqExtent& s, int i) {
  const KeyRange<int64_t> r =
      visible_keys<int64_t>(i, s.len_q, s.len_kv, s.shift, p.window_left, p.window_right);
  return {static_cast<int>(r.begin), static_cast<int>(r.end)};
}

// The KV tiles of query rows [m0, m0 + kBlockM): tiles first..last (none when
// last < first), and the keys [all_begin, all_end) that every valid row sees,
// so a tile inside them needs no per-element mask. Both ends of a row's range
// grow with the row (mask_rule.h), so the first and last valid rows bound them
// (rows before 0, in flash_sm90's first tile of a sequence, are not valid).
struct KvTiles {
  int first = 0, last = -1;
  int all_begin = 0, all_end = 0;
};

template <int kBlockM, int kBlockN>
__device__ __forceinline__ KvTiles kv_tiles(const FwdParams& p, const SeqExtent& s, int m0) {
  KvTiles t;
  const int last_row = min(m0 + kBlockM, s.len_q) - 1;
  const KeyRange<int> top = row_keys(p, s, max(m0, 0)), bottom = row_keys(p, s, last_row);
  if (bottom.end <= top.begin) return t;
  t.first = top.begin / kBlockN;
  t.last = (bottom.end - 1) / kBlockN;
  t.all_begin = bottom.begin;
  t.all_end = top.end;
  return t;
}

}  // namespace attn::flash_sm80
