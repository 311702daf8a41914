// Where each sequence of a call lives: its true lengths and, for thd, its token
// offset; and the element offset of one (sequence, position, head) row in a
// q/k/v/out-like tensor of any format. Host-side; shared by the reference,
// the tools and the tests.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/problem.h"

namespace attn::detail {

// Copies an int32 tensor (host or device memory) into a host vector.
std::vector<int32_t> read_int32(const TensorView& t);

// Copies two int32 tensors (cu_seqlens_q and cu_seqlens_kv) into host vectors
// with one wait for the device, and one copy when both are the same view (as
// in self-attention). The GPU idles from that wait until the call's kernel is
// launched, so each copy it saves counts in the call's time.
struct Int32Pair {
  std::vector<int32_t> first, second;
};
Int32Pair read_int32_pair(const TensorView& a, const TensorView& b);

struct Sequences {
  std::vector<int64_t> len_q, len_kv;      // true lengths per sequence
  std::vector<int64_t> start_q, start_kv;  // thd: first token; bshd/sbhd: 0
  int64_t batch() const { return static_cast<int64_t>(len_q.size()); }
};

// Lengths from cu_seqlens where given (thd, padded bshd/sbhd), else s_q / s_kv.
Sequences sequences_of(const Problem& p, const Inputs& in);

// sequences_of, checked against the tensors' extents: validation reads
// cu_seqlens only when check_seqlens is on, and the host-driven backends (the
// reference, unfused) must not touch memory outside the caller's tensors when
// it was off. Throws attn::Error.
Sequences checked_sequences(const Problem& p, const Inputs& in);

// Element offset of row (b, pos, head) of a [.., heads, dim] tensor in format f;
// add the index along the last (contiguous) dimension to reach one element.
inline int64_t row_offset(const TensorView& t, QkvFormat f, int64_t start, int64_t b, int64_t pos,
                          int64_t head) {
  switch (f) {
    case QkvFormat::bshd: return b * t.strides_elems[0] + pos * t.strides_elems[1] + head * t.strides_elems[2];
    case QkvFormat::sbhd: return pos * t.strides_elems[0] + b * t.strides_elems[1] + head * t.strides_elems[2];
    case QkvFormat::thd: return (start + pos) * t.strides_elems[0] + head * t.strides_elems[1];
  }
  return 0;
}

// Element offset of lse(b, head, pos): [b, h, s] for bshd/sbhd, [h, t] for thd.
inline int64_t lse_offset(const TensorView& lse, QkvFormat f, int64_t start, int64_t b, int64_t pos,
                          int64_t head) {
  if (f == QkvFormat::thd) return head * lse.strides_elems[0] + (start + pos) * lse.strides_elems[1];
  return b * lse.strides_elems[0] + head * lse.strides_elems[1] + pos * lse.strides_elems[2];
}

// Offset of element (b, h, i, j) of a tensor broadcastable to [b, h, s_q, s_kv]
// (bias, attn_mask): broadcast dimensions (size 1) do not advance.
inline int64_t broadcast_offset(const TensorView& t, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t idx[4] = {b, h, i, j};
  int64_t off = 0;
  for (int d = 0; d < 4; ++d) off += (t.shape[d] == 1 ? 0 : idx[d]) * t.strides_elems[d];
  return off;
}

}  // namespace attn::detail
