// The plain parameter structs of the flash kernels (flash_sm80 and
// flash_sm90, forward and backward), filled on the host from a validated
// Problem and the caller's views (params_build.cpp). Strides in elements;
// lengths fit int (supports() checks). The backward reuses the forward's
// fields (q, k, v, out, lse, sequences, mask, score changes, dropout), so both
// passes share the schedule, mask and dropout code.
#pragma once

#include <cuda_runtime.h>  // float2

#include <cstdint>

#include "backends/common/sink_logits.h"
#include "backends/flash/cache_params.h"

namespace attn::flash {

struct FwdParams {
  const void* q = nullptr;  // T: q [.., h_q, d_qk], k [.., h_kv, d_qk], v [.., h_kv, d_v]
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;  // T [.., h_q, d_v]
  float* lse = nullptr;  // optional

  // Element strides per (sequence b, token, head); batch strides are 0 for thd,
  // whose sequences start at token cu_seqlens[b] instead.
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int64_t lse_batch_stride = 0, lse_row_stride = 0, lse_head_stride = 0;

  // Per-sequence lengths from cu_seqlens (int32 [batch + 1], on the device)
  // when given; otherwise every sequence is s_q / s_kv long. packed (thd):
  // sequence b also starts at token cu_seqlens[b]. The kernels bound both by
  // the tensors (core/sequence_bounds.h): tokens_q / tokens_kv in thd.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_kv = nullptr;
  int64_t cu_q_stride = 1, cu_kv_stride = 1;
  bool packed = false;
  int tokens_q = 0, tokens_kv = 0;

  int batch = 0, h_q = 0, h_per_kv = 1;  // h_per_kv = h_q / h_kv (GQA group)
  int s_q = 0, s_kv = 0;                 // longest sequence (grid size), or the uniform length

  // Visibility (include/attn/mask_rule.h): -1 = unbounded.
  int64_t window_left = -1, window_right = -1;
  bool bottom_right = false;

  float scale = 1.f;       // softmax_scale
  float scale_log2 = 1.f;  // softmax_scale * log2(e): the fast path's one FFMA per score
  // Score modifications that stop the max of q.k from being the max of the
  // scores (softcap, ALiBi, a scale <= 0): scores are then transformed first.
  bool score_mods = false;
  float softcap = 0.f;                 // > 0: c * tanh(s / c)
  float softcap_inv = 0.f;             // 1 / softcap
  const float* alibi = nullptr;        // slopes, slope(b, h) = alibi[b * batch_stride + h * head_stride]
  int64_t alibi_batch_stride = 0, alibi_head_stride = 1;

  uint32_t dropout_threshold = 0;  // 0: no dropout (include/attn/philox.h)
  float dropout_scale = 1.f;       // 1 / (1 - p)
  uint64_t seed = 0;
  uint32_t offset = 0;
  const int64_t* rng_state = nullptr;  // when set: (seed, offset) read here as the kernel runs

  // Softmax sinks (SEMANTICS.md): head h's sink logit joins each row's
  // denominator; a row that sees no key (padding rows too) gets lse = it.
  detail::SinkLogits sink;
  // [h_q] (stride max_logit_stride), -inf before the kernel: each row's
  // largest score is max-ed in (a NaN wins). Null: not wanted.
  float* max_logit = nullptr;
  int64_t max_logit_stride = 1;

  // A forward over a KV cache in place (cache_params.h); cache.seqlens null:
  // the lengths above.
  CacheParams cache;
};

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
  // Dropout's 1 / (1 - p) stays out of the main kernels' tile loops: they
  // form dS = P (keep dP - (1 - p) D) and dV's P keep alone, take D times
  // this factor (1 - p; 1 without dropout) from the row terms, and scale
  // dK and dV by fwd.dropout_scale when they store them; dQ's conversion
  // applies it to dq_accum. Two multiplies per element fewer.
  float delta_scale = 1.f;
  float* dq_accum = nullptr;  // [h_q][rows_q][d_qk]: dQ / softmax_scale, fp32
  // Deterministic mode: one counter per (sequence, query head, query tile),
  // the number of KV tiles that have added into that tile's dq_accum rows; a
  // CTA adds its part only when every earlier KV tile has (a fixed order).
  int* dq_semaphore = nullptr;  // [batch][h_q][m_tiles], zeroed; null: unordered atomics
  int m_tiles = 0;
  // flash_sm90's order of those adds (bwd_dq_order.h); flash_sm80 adds in
  // ascending KV tile order.
  int dq_order = 0;
  // Unordered mode on an sm_90 build: dQ goes in by bulk reduce-adds from a
  // shared-memory stage after the kernel's other buffers (bwd_dq.cuh); the
  // launch sets it where the stage fits the device's shared memory.
  int dq_bulk = 0;
  // The grid is (h_kv, batch, KV tiles) instead of (KV tiles, h_kv, batch).
  int kv_tiles_slowest = 0;
  // The chunked grid (pairs of a chunk, KV tiles, chunks; flash_sm80's d 256,
  // flash_sm90's backward): (KV head, sequence) pairs per chunk.
  int group_chunk = 1;
  // Learnable sinks: dsink[h] = -sum over rows of exp(sink - lse) D, from the
  // row terms (launch_bwd_dsink). Null: not wanted.
  float* dsink = nullptr;
  int64_t dsink_stride = 1;
};

}  // namespace attn::flash
