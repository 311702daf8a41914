// The decode kernel's parameters: the flash library's forward parameters
// (q, k, v, out, lse, strides, sequences, window, score changes, sinks, max
// logit, and a KV cache's layout) plus what split-KV adds. Filled on the
// host by flash_decode_backend.cpp (a forward call) or kvcache_run.cpp (a
// KV-cache call).
#pragma once

#include <cstdint>

#include "backends/flash/params.h"

namespace attn::flash_decode {

struct DecodeParams {
  flash::FwdParams f;  // KV-cache calls: f.cache; paged, f.k_batch_stride / f.v_batch_stride step one block

  // The grid: x = split * m_blocks + m_block (16 packed query rows: the
  // query tokens of one KV head's group of query heads), y = KV head, z =
  // sequence. With splits > 1 each CTA writes its rows' partial output
  // (normalized) and lse here, and the combine kernel merges them.
  int m_blocks = 1;
  int splits = 1;
  float* o_partial = nullptr;    // [splits][rows][d_v]
  float* lse_partial = nullptr;  // [splits][rows]
  int64_t rows = 0;              // query tokens (b * s_q, or thd's total) times h_q
};

}  // namespace attn::flash_decode
