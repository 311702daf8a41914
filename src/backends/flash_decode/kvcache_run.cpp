// forward_with_kvcache on CUDA tensors (flash_decode.h, run_kvcache): the
// cache's append and q's rotation (kvcache_append.cu), then the attention
// over the cache in place, contiguous or paged: the decode kernel, or for
// longer queries flash_sm90's forward (layout.prefill).
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/flash/params_build.h"
#include "backends/flash_decode/flash_decode.h"
#include "backends/flash_decode/kvcache_append.h"
#include "backends/flash_sm90/flash_sm90.h"
#include "core/cuda_check.h"
#include "core/workspace.h"

namespace attn::flash_decode {
namespace {

// The scratch of one call: q rotated (with rotary), then the splits' partial
// results (decode) or the work-item counter (prefill).
struct Scratch {
  void* q_rot = nullptr;
  float* o_partial = nullptr;
  float* lse_partial = nullptr;
  int* item_counter = nullptr;
};

int64_t carve(const Problem& p, const KvCacheLayout& L, const Plan& pl, char* base, Scratch* s) {
  detail::Carver c(base);
  void* q_rot = L.rotary_half ? c.take_bytes(p.batch * p.s_q * p.h_q * p.d_qk * 2) : nullptr;
  const Partials parts = take_partials(c, p, pl);  // none in prefill (one split)
  int* counter = L.prefill ? c.take<int>(1) : nullptr;
  if (s) *s = {q_rot, parts.o, parts.lse, counter};
  return c.used();
}

const int32_t* i32(const TensorView& t) { return static_cast<const int32_t*>(t.data); }

}  // namespace

void run_kvcache(const Problem& p, const KvCacheArgs& a, const KvCacheLayout& L, const RunContext& ctx) {
  ATTN_CUDA(cudaSetDevice(p.device.index));
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  const Plan pl = L.prefill ? Plan{} : plan(p, a.num_splits);
  Scratch s;
  const int64_t bytes = carve(p, L, pl, nullptr, nullptr);
  carve(p, L, pl, bytes > 0 ? static_cast<char*>(detail::workspace(ctx, p.device.index, bytes)) : nullptr, &s);

  flash::CacheParams cache;
  cache.seqlens = i32(a.cache_seqlens);
  cache.s_new = static_cast<int>(L.s_new);
  cache.capacity = static_cast<int>(L.capacity);
  cache.batch_idx = i32(a.cache_batch_idx);
  cache.rows = static_cast<int>(L.cache_rows);
  cache.block_table = i32(a.block_table);
  cache.block_table_stride = a.block_table.defined() ? a.block_table.stride(0) : 0;
  flash::set_block_size(cache, static_cast<int>(L.block_size));

  AppendParams ap;
  ap.batch = static_cast<int>(p.batch);
  ap.h_kv = static_cast<int>(p.h_kv);
  ap.d_qk = static_cast<int>(p.d_qk);
  ap.d_v = static_cast<int>(p.d_v);
  ap.cache = cache;
  ap.k_cache = a.k_cache.data;
  ap.v_cache = a.v_cache.data;
  for (int d = 0; d < 3; ++d) {
    ap.kc_stride[d] = a.k_cache.stride(d);
    ap.vc_stride[d] = a.v_cache.stride(d);
    ap.q_stride[d] = a.q.stride(d);
    if (L.s_new > 0) {
      ap.k_stride[d] = a.k.stride(d);
      ap.v_stride[d] = a.v.stride(d);
    }
  }
  ap.k = a.k.data;
  ap.v = a.v.data;
  if (L.rotary_half) {
    ap.cos = a.rotary_cos.data;
    ap.sin = a.rotary_sin.data;
    ap.cos_stride = a.rotary_cos.stride(0);
    ap.sin_stride = a.rotary_sin.stride(0);
    ap.trig_f32 = a.rotary_cos.dtype == DType::f32;
    ap.half = static_cast<int>(L.rotary_half);
    ap.s_ro = static_cast<int>(a.rotary_cos.size(0));
    ap.interleaved = a.rotary_interleaved;
    ap.q = a.q.data;
    ap.q_out = s.q_rot;
    ap.s_q = static_cast<int>(p.s_q);
    ap.h_q = static_cast<int>(p.h_q);
    ap.q_by_row = L.q_by_row;
  }
  // The attention over the cache in place: its K/V "sequences" are the
  // cache's rows (contiguous) or blocks (paged).
  ForwardArgs fa;
  fa.in.q = a.q;
  if (s.q_rot) fa.in.q = make_view(s.q_rot, a.q.dtype, {p.batch, p.s_q, p.h_q, p.d_qk}, a.q.device);
  fa.in.k = a.k_cache;
  fa.in.v = a.v_cache;
  fa.in.alibi_slopes = a.alibi_slopes;
  fa.in.sink = a.sink;
  fa.out = a.out;
  fa.lse = a.lse;
  const auto prologue = [&] { launch_kvcache_prologue(ap, p.dtype, stream); };
  if (L.prefill) {
    flash_sm90::forward_over_cache(p, fa, cache, s.item_counter, prologue, ctx);
    return;
  }
  DecodeParams dp;
  // Without rotary the decode kernel reads the new tokens where they are and
  // appends them itself (16 bytes at a time: the problem's row alignment,
  // which supports() requires to be 16, covers k and v): no kernel before it.
  if (L.s_new > 0 && !L.rotary_half) {
    dp.k_new = a.k.data;
    dp.v_new = a.v.data;
    for (int d = 0; d < 3; ++d) {
      dp.k_new_stride[d] = a.k.stride(d);
      dp.v_new_stride[d] = a.v.stride(d);
    }
    dp.k_cache = a.k_cache.data;
    dp.v_cache = a.v_cache.data;
  } else {
    dp.after_prologue = launch_kvcache_prologue(ap, p.dtype, stream);
  }
  dp.f = flash::forward_params(p, fa);
  dp.f.cache = cache;
  dp.o_partial = s.o_partial;
  dp.lse_partial = s.lse_partial;
  run(p, dp, pl, ctx);
}

}  // namespace attn::flash_decode
