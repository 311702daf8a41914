// The plain parameter struct of flash_sm80's backward kernels, filled on the
// host (flash_sm80_backward.cpp). The forward's fields (q, k, v, out, lse,
// sequences, mask, score changes, dropout) are reused as they are, so the
// backward shares the forward's schedule, mask and dropout code.
#pragma once

#include <cuda_runtime.h>  // float2

#include <cstdint>

#include "backends/flash_sm80/fwd_params.h"

namespace attn::flash_sm80 {

struct BwdParams {
  FwdParams fwd;  // out and lse as the forward wrote them (lse is required)

  const void* dout = nullptr;  // T, like out
  void* dq = nullptr;          // T, like q
  void* dk = nullptr;          // T, like k
  void* dv = nullptr;          // T, like v
  int64_t do_batch_stride = 0, do_row_stride = 0, do_head_stride = 0;
  int64_t dq_batch_stride = 0, dq_row_stride = 0, dq_head_stride = 0;
  int64_t dk_batch_stride = 0, dk_row_stride = 0, dk_head_stride = 0;
  int64_t dv_batch_stride = 0, dv_row_stride = 0, dv_head_stride = 0;

  // Workspace, indexed by query token: token = cu_seqlens_q[b] + i (thd) or
  // b * s_q + i (bshd, sbhd), rows_q tokens in all.
  int64_t rows_q = 0;
  // Per row, written by the pre-pass: {lse in log2 units (+inf for a row that
  // sees no key, so that its P = exp2(s - lse) is 0), D = rowsum(dO * O)}.
  // One 8-byte load per row in the main kernel, in place of two loads through
  // the caller's lse strides and a conversion per query tile.
  float2* row_terms = nullptr;  // [h_q][rows_q]
  float* dq_accum = nullptr;  // [h_q][rows_q][d_qk]: dQ / softmax_scale, fp32
  // Deterministic mode: one counter per (sequence, query head, query tile),
  // the number of KV tiles that have added into that tile's dq_accum rows; a
  // CTA adds its part only when every earlier KV tile has (a fixed order).
  int* dq_semaphore = nullptr;  // [batch][h_q][m_tiles], zeroed; null: unordered atomics
  int m_tiles = 0;
  // Unordered mode on an sm_90 build: dQ goes in by bulk reduce-adds from a
  // shared-memory stage after the kernel's other buffers (bwd_dq.cuh); the
  // launch sets it where the stage fits the device's shared memory.
  int dq_bulk = 0;
  // The grid is (h_kv, batch, KV tiles) instead of (KV tiles, h_kv, batch).
  int kv_tiles_slowest = 0;
  // d 256 (ATTN_SM80_BWD_CHUNKED_GRID): (KV head, sequence) pairs per chunk
  // of its grid (pairs of a chunk, KV tiles, chunks).
  int group_chunk = 1;
};

}  // namespace attn::flash_sm80
