// The decode kernel's parameters: the flash library's forward parameters
// (q, k, v, out, lse, strides, sequences, window, score changes, sinks, max
// logit) plus what a KV cache and split-KV add. Filled on the host by
// flash_decode_backend.cpp (a forward call) or core/kvcache_gpu.cpp (a
// KV-cache call).
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE
#include "backends/flash/params.h"

namespace attn::flash_decode {

struct DecodeParams {
  flash::FwdParams f;

  // KV-cache calls: sequence b's keys are the first cache_seqlens[b] + s_new
  // positions of its cache, clamped to [0, capacity] so that no value read
  // from the device moves a load outside the cache (null: f's lengths).
  const int32_t* cache_seqlens = nullptr;
  int s_new = 0;
  int capacity = 0;
  // Contiguous caches: sequence b reads cache row cache_batch_idx[b] (null: b).
  const int32_t* cache_batch_idx = nullptr;
  int cache_rows = 0;  // rows (contiguous) or blocks (paged) of the cache: indices are clamped below it
  // Paged caches: key j of sequence b lies in block
  // block_table[b * block_table_stride + j / block_size], row j % block_size;
  // f.k_batch_stride / f.v_batch_stride then step one block.
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  int block_size = 0;

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

// An index read from the device (a cache row, a block id) clamped into [0, n):
// an unchecked value moves no access outside the cache.
ATTN_HOST_DEVICE int clamp_index(int i, int n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

}  // namespace attn::flash_decode
