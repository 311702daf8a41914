// Attention against a KV cache (decoding, chunked prefill), with
// FlashAttention's flash_attn_with_kvcache names and meaning (DESIGN.md,
// "Growing without breaking"): new keys and values are written into the
// cache at each sequence's length, rotary embedding is applied to q and the
// new keys in the same call, and q attends to the cache's first
// cache_seqlens[i] + s_new keys.
#pragma once

#include "attn/problem.h"
#include "attn/select.h"
#include "attn/tensor.h"

namespace attn {

struct KvCacheArgs {
  TensorView q;  // [b, s_q, h_q, d_qk]
  // Contiguous [b_cache, s_cache, h_kv, d_qk] (d_v for v_cache), or paged
  // [num_blocks, block_size, h_kv, d_qk] with block_table. Written where the
  // new tokens go; read elsewhere.
  TensorView k_cache;
  TensorView v_cache;
  // Optional new tokens, [b, s_new, h_kv, d_qk] / [b, s_new, h_kv, d_v]: both
  // or neither; written at positions cache_seqlens[i] .. + s_new - 1.
  TensorView k;
  TensorView v;
  // int32 [b]: each sequence's cache length before the append. Absent: the
  // capacity (s_cache; paged: max_blocks * block_size) minus s_new, so every
  // cache is full after the append.
  TensorView cache_seqlens;
  // int32 [b]: the cache row of each sequence (contiguous caches); absent: i.
  TensorView cache_batch_idx;
  // int32 [b, max_blocks]: sequence i's position p lives in block
  // block_table[i][p / block_size], row p % block_size.
  TensorView block_table;
  // Optional [s_ro, r / 2] (float32 or q's dtype): rotary angles' cos and sin.
  // The first r channels of q and the new k are rotated: pairs (2c, 2c + 1)
  // when interleaved (GPT-J), else (c, c + r / 2) (GPT-NeoX). New key j sits
  // at position cache_seqlens[i] + j; q's row j too where the mask is causal
  // or a window bounds it, else every row of q at cache_seqlens[i].
  TensorView rotary_cos;
  TensorView rotary_sin;
  bool rotary_interleaved = true;
  TensorView alibi_slopes;  // fp32 [h_q] or [b, h_q]
  TensorView sink;          // Options::softmax_type == learnable: fp32 [h_q]
  TensorView out;           // [b, s_q, h_q, d_v], q's dtype
  TensorView lse;           // optional fp32 [b, h_q, s_q]
  int num_splits = 0;       // split-KV count; 0 = choose (a hint: the CPU path ignores it)
};

// Validates every argument and each sequence's length against its cache
// (an attn::Error before anything is written), appends k and v, and runs
// the attention. Options: mask no_mask or causal_bottom_right (the query
// rows are the last s_q positions), window, softmax_scale, softcap,
// softmax_type; qkv_format must be bshd. CUDA tensors run on flash_decode in
// place (Options::check_seqlens off: no read-back of lengths, block ids and
// rows; the kernels bound them to the cache, docs/SEMANTICS.md "KV cache").
Selection forward_with_kvcache(const Options& opts, const KvCacheArgs& args, const RunContext& ctx = {});
Selection forward_with_kvcache(const Options& opts, const KvCacheArgs& args, const RunContext& ctx,
                               const Policy& policy);

}  // namespace attn
