// The decode kernel's parameters: the flash library's forward parameters
// (q, k, v, out, lse, strides, sequences, window, score changes, sinks, max
// logit, and a KV cache's layout) plus what split-KV adds. Filled on the
// host by flash_decode_backend.cpp (a forward call) or kvcache_run.cpp (a
// KV-cache call).
#pragma once

#include <cstdint>

#include "backends/flash/fast_div.h"
#include "backends/flash/params.h"

namespace attn::flash_decode {

struct DecodeParams {
  flash::FwdParams f;  // KV-cache calls: f.cache; paged, f.k_batch_stride / f.v_batch_stride step one block

  // The grid: x = split * m_blocks + m_block (16 row_blocks packed query
  // rows: the query tokens of one KV head's group of query heads), y = KV
  // head, z = sequence. With splits > 1 each CTA writes its rows' partial
  // output (normalized) and lse here, and the combine kernel merges them.
  int m_blocks = 1;
  int row_blocks = 1;  // the kernel's build: 16 or 32 rows per CTA (host only)
  int splits = 1;
  // blockIdx.x / m_blocks, / splits and a packed row / h_per_kv by a multiply (set by run()).
  flash::FastDiv m_blocks_div, splits_div, group_div;
  float* o_partial = nullptr;    // [splits * parts][rows][d_v]
  float* lse_partial = nullptr;  // [splits * parts][rows]
  int64_t rows = 0;              // query tokens (b * s_q, or thd's total) times h_q

  // New keys and values read in place (forward_with_kvcache without rotary):
  // [b, s_new, h_kv, d], rows 16-byte aligned (as every tensor of the call),
  // strides (sequence, token, head) in elements. Keys from each sequence's cache length on are read
  // from here, and one CTA per (sequence, KV head) writes them into the
  // cache (the decode kernel's with one split, else the combine kernel's),
  // so no kernel appends first. Null: the prologue appended them.
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  int64_t k_new_stride[3] = {}, v_new_stride[3] = {};
  void* k_cache = nullptr;  // f.k and f.v, writable: where the new rows go
  void* v_cache = nullptr;

  // Launch overlap on sm_90 (kernels/dependent_launch.cuh): the decode kernel
  // starts early after any kernel, and waits for it at its top, or, after
  // the KV cache's prologue (the append, q's rotation), once its set-up is
  // done; the combine kernel starts during the decode kernel, and the next
  // kernel (the next call's decode kernel) during the combine (next_early).
  bool overlap = false;          // the device starts dependent kernels early (host only)
  bool after_prologue = false;  // the kernel before the decode kernel is the prologue
  // Partial results per split (Plan::parts): split s's warp w writes part s
  // * parts + w. Last, so the fields before keep their places (and the
  // kernels' constant loads their widths).
  int parts = 1;
  // The call's last kernel lets the next kernel start early. With splits,
  // where the combine's grid holds at most one CTA per SM: right after the
  // combine's wait (every SM has room for the next once the decode grid has
  // ended), else once the combine has read the partial results (H200, h
  // 32/8, one token, us from graphs: b 1 2k 9.12 -> 8.60, b 1 8k 14.58 ->
  // 14.10; b 8 unchanged). Without, where the decode grid fills at most half
  // the SMs: before the warps' merge (b 1 64 keys 5.54 -> 4.96; at b 8 with
  // a grid of 128 CTAs it lost, 35.6 -> 37.7).
  bool next_early = false;
};

}  // namespace attn::flash_decode
