// flash_decode's kernels: attention for a few query tokens per sequence
// against many keys (decoding, speculative tokens), memory-bound, so built
// to keep the KV reads streaming:
// - GQA packing: the query heads of one KV head and the call's query tokens
//   form the rows of one tile (row r: token r / g, head kv_head * g + r % g),
//   so each K/V tile is read once for all of them: 16 rows, or 32 (two mma
//   row blocks, kRowBlocks) where the plan asks for them;
// - split-KV: the keys of a sequence are cut into `splits` ranges, one CTA
//   each, so a single long sequence still fills the GPU; the combine kernel
//   merges the ranges' partial results by their lse (and adds the sink);
// - inside a CTA, each warp takes 16 of a tile's 64 keys with its own
//   running softmax (S = Q.K^T and O += P.V on mma.sync), and the 4 warps'
//   partial results are merged once, at the end, through shared memory, or,
//   where a CTA holds few rows and splits its keys, each warp's go to the
//   combine kernel as parts of their own (DecodeParams::parts);
// - K/V tiles stream through kStages cp.async stages, each row addressed on its
//   own (contiguous caches, a block table of any block size, or thd) by one
//   thread a tile ahead, its offsets left in shared memory for the copies.
// Scores follow DESIGN.md's order (scale, softcap, ALiBi, mask) through the
// flash library's score_mods.cuh and mask_rule.h's visibility rule.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "attn/mask_rule.h"
#include "backends/common/softmax_sink.cuh"
#include "backends/flash/score_mods.cuh"
#include "backends/flash/sequence.cuh"
#include "backends/flash_decode/decode_config.h"
#include "backends/flash_decode/decode_params.h"
#include "kernels/dependent_launch.cuh"
#include "kernels/sm80/cp_async.cuh"
#include "kernels/sm80/mma.cuh"
#include "kernels/sm80/warp_gemm.cuh"

namespace attn::flash_decode {

// Query token `token` (the tensor's row: start_q + i in thd) of sequence b,
// head h: where its output row starts, and its lse.
template <typename T>
__device__ __forceinline__ T* out_row(const flash::FwdParams& p, int b, int64_t token, int h) {
  return static_cast<T*>(p.out) + b * p.o_batch_stride + token * p.o_row_stride + h * p.o_head_stride;
}
__device__ __forceinline__ float* lse_at(const flash::FwdParams& p, int b, int64_t token, int h) {
  return p.lse + b * p.lse_batch_stride + token * p.lse_row_stride + h * p.lse_head_stride;
}
// Query token i of sequence b, head h: its row among the partial results'
// rows (DecodeParams::rows: the call's tokens, b * s_q or thd's, times h_q).
__device__ __forceinline__ int64_t partial_row(const flash::FwdParams& p, const flash::SeqExtent& seq, int b, int i,
                                               int h) {
  const int64_t token = p.packed ? static_cast<int64_t>(seq.start_q) + i : static_cast<int64_t>(b) * p.s_q + i;
  return token * p.h_q + h;
}

// Where key j of sequence b (KV head h) starts in K and in V; null past the
// sequence (its rows are zero-filled). A key from `appended_from` on is a
// new token, read where the caller passed it (DecodeParams::k_new). One
// thread per row computes these a tile ahead, and every thread copying the
// row reads them from shared memory. A paged cache's address needs the
// block table's entry: the first tiles' entries are read together
// (key_entry), later ones copied into shared memory by cp.async with the
// tiles' copies, kStages tiles before their addresses are formed
// (key_entry_src), so no thread waits on a table read in the loop.
struct alignas(16) KeyRow {  // one 16-byte shared load reads both
  const void* k;
  const void* v;
};
__device__ __forceinline__ int key_entry(const flash::CacheParams& c, int b, const flash::SeqExtent& seq,
                                         int appended_from, int j) {
  return c.block_table && j < seq.len_kv && j < appended_from ? flash::block_table_entry(c, b, j) : 0;
}
// The entry's address for a copy, null where key_row needs no entry (the
// same bounds: a predicated load above, a zero-filled copy here).
__device__ __forceinline__ const int* key_entry_src(const flash::CacheParams& c, int b, const flash::SeqExtent& seq,
                                                    int appended_from, int j) {
  return j < seq.len_kv && j < appended_from ? flash::block_table_slot(c, b, j) : nullptr;
}
template <typename T>
__device__ __forceinline__ KeyRow key_row(const DecodeParams& dp, int b, int row_of_b, const flash::SeqExtent& seq,
                                          int appended_from, int h, int j, int entry) {
  const flash::FwdParams& p = dp.f;
  if (j >= seq.len_kv) return {nullptr, nullptr};
  if (j >= appended_from) {
    const int64_t t = j - appended_from;  // < s_new: the sequence ends by appended_from + s_new
    return {static_cast<const T*>(dp.k_new) + b * dp.k_new_stride[0] + t * dp.k_new_stride[1] + h * dp.k_new_stride[2],
            static_cast<const T*>(dp.v_new) + b * dp.v_new_stride[0] + t * dp.v_new_stride[1] + h * dp.v_new_stride[2]};
  }
  flash::CacheSlot at = flash::cache_slot_at(p.cache, row_of_b, j, entry);
  at.inner += seq.start_kv;  // thd's first token in a forward call (0 in a cache call)
  return {static_cast<const T*>(p.k) + at.outer * p.k_batch_stride + at.inner * p.k_row_stride + h * p.k_head_stride,
          static_cast<const T*>(p.v) + at.outer * p.v_batch_stride + at.inner * p.v_row_stride + h * p.v_head_stride};
}

// key_row's cache case alone, for a row inside the cache's keys (j <
// len_kv, j < appended_from): no branch, so the loop can form it among a
// tile's products.
template <typename T>
__device__ __forceinline__ KeyRow cache_key_row(const DecodeParams& dp, int row_of_b, const flash::SeqExtent& seq,
                                                int h, int j, int entry) {
  const flash::FwdParams& p = dp.f;
  // cache_slot_at's two cases as selects (a branch would end the block).
  const bool paged = p.cache.block_table != nullptr;
  const int64_t outer = paged ? flash::clamp_index(entry, p.cache.rows) : row_of_b;
  const int64_t inner = (paged ? flash::block_row(p.cache, j) : j) + seq.start_kv;
  return {static_cast<const T*>(p.k) + outer * p.k_batch_stride + inner * p.k_row_stride + h * p.k_head_stride,
          static_cast<const T*>(p.v) + outer * p.v_batch_stride + inner * p.v_row_stride + h * p.v_head_stride};
}

// The copies of one tile of K and V into their stage: 16 bytes per thread
// and copy, rows past the sequence zero-filled. Where a row's chunks divide
// the CTA's threads (and K's rows are as wide as V's), each thread keeps one
// chunk column, its rows kThreads / kChunks apart: it reads its rows'
// addresses first (one shared load per row for both), then issues every
// copy. A general loop over (row, chunk) spent three times the
// instructions, each copy waiting on its own address's load.
template <typename T, class TileK, class TileV, int kThreads>
__device__ __forceinline__ void copy_kv_tile(uint32_t k_stage, uint32_t v_stage, const KeyRow* rows, int tid,
                                             const T* any_k, const T* any_v) {
  constexpr int kChunks = TileK::kChunks, kRows = TileK::kBytes / TileK::kRowBytes;
  if constexpr (kChunks == TileV::kChunks && kThreads % kChunks == 0) {
    constexpr int kStep = kThreads / kChunks, kPer = kRows / kStep;
    const int c = tid % kChunks, r0 = tid / kChunks;
    KeyRow at[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) at[i] = rows[r0 + kStep * i];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const T* src = static_cast<const T*>(at[i].k);
      sm80::cp_async_16(k_stage + TileK::byte_offset(r0 + kStep * i, c), src ? src + 8 * c : any_k, src != nullptr);
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const T* src = static_cast<const T*>(at[i].v);
      sm80::cp_async_16(v_stage + TileV::byte_offset(r0 + kStep * i, c), src ? src + 8 * c : any_v, src != nullptr);
    }
  } else {
    for (int idx = tid; idx < kRows * kChunks; idx += kThreads) {
      const int r = idx / kChunks, ch = idx % kChunks;
      const T* src = static_cast<const T*>(rows[r].k);
      sm80::cp_async_16(k_stage + TileK::byte_offset(r, ch), src ? src + 8 * ch : any_k, src != nullptr);
    }
    for (int idx = tid; idx < kRows * TileV::kChunks; idx += kThreads) {
      const int r = idx / TileV::kChunks, ch = idx % TileV::kChunks;
      const T* src = static_cast<const T*>(rows[r].v);
      sm80::cp_async_16(v_stage + TileV::byte_offset(r, ch), src ? src + 8 * ch : any_v, src != nullptr);
    }
  }
}

// The append of DecodeParams::k_new / v_new for sequence b, KV head h, by
// one CTA: the cache's positions from its length on, those inside the cache
// (as kvcache_append.cu's kernel writes them, without rotary). No CTA of
// this grid reads them back from the cache.
template <typename T, int kDQK, int kDV>
__device__ __forceinline__ void append_new_rows(const DecodeParams& dp, int b, int row_of_b, int h, int tid,
                                                int threads) {
  const flash::FwdParams& p = dp.f;
  constexpr int kCK = kDQK / 8, kCV = kDV / 8;
  const int len = flash::cache_length(p.cache, b);
  for (int idx = tid; idx < p.cache.s_new * (kCK + kCV); idx += threads) {
    const int t = idx / (kCK + kCV), c = idx % (kCK + kCV), pos = len + t;
    if (pos < 0 || pos >= p.cache.capacity) continue;
    const flash::CacheSlot at = flash::cache_slot(p.cache, b, row_of_b, pos);
    const bool is_k = c < kCK;
    const int64_t* st = is_k ? dp.k_new_stride : dp.v_new_stride;
    const T* src = static_cast<const T*>(is_k ? dp.k_new : dp.v_new) + b * st[0] + t * st[1] + h * st[2] +
                   8 * (is_k ? c : c - kCK);
    T* dst = is_k ? static_cast<T*>(dp.k_cache) + at.outer * p.k_batch_stride + at.inner * p.k_row_stride +
                        h * p.k_head_stride + 8 * c
                  : static_cast<T*>(dp.v_cache) + at.outer * p.v_batch_stride + at.inner * p.v_row_stride +
                        h * p.v_head_stride + 8 * (c - kCK);
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  }
}

// kWarpParts: the build for DecodeParams::parts > 1 (one row block), a
// build of its own so that the merge's build keeps its schedule (with both
// epilogues in one build, h 64/8 with 4 tokens at b 8 2k lost 4%).
template <typename T, int kDQK, int kDV, int kRowBlocks, bool kWarpParts = false>
__global__ void __launch_bounds__(DecodeConfig<kDQK, kDV, kRowBlocks>::kThreads)
    flash_decode_kernel(const __grid_constant__ DecodeParams dp) {
  using Cfg = DecodeConfig<kDQK, kDV, kRowBlocks>;
  static_assert(!kWarpParts || kRowBlocks == 1, "parts per warp take one row block (plan: at most 8 rows)");
  using TileQ = typename Cfg::TileQ;
  using TileK = typename Cfg::TileK;
  using TileV = typename Cfg::TileV;
  // MB row blocks of 16 (decode_config.h); a thread holds rows lane / 4 and
  // lane / 4 + 8 of each: its kHalves "half rows", half h at row
  // 16 (h / 2) + 8 (h % 2) + lane / 4, element e of block ma in half 2 ma + e / 2.
  constexpr int kN = Cfg::kBlockN, kRows = Cfg::kRows, NO = kDV / 8, MB = kRowBlocks, kHalves = 2 * MB;
  const flash::FwdParams& p = dp.f;
  // The combine kernel's CTAs start now and wait for this grid's end. Without a combine the next kernel (the next
  // call's decode kernel, launched early) starts at this grid's end: started now, its CTAs would hold SM slots
  // this grid's later CTAs need.
  if (dp.splits > 1) kernels::allow_dependent_launch();
  // Launched early after whatever kernel ran before (decode_instantiate.cu): unless that was the KV cache's
  // prologue, which writes neither, the lengths and the block table may be its output, so nothing is read first.
  if (!dp.after_prologue) kernels::wait_for_prior_grid();
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int split = flash::fast_div(dp.m_blocks_div, blockIdx.x), m_block = blockIdx.x - split * dp.m_blocks;
  const int kvh = blockIdx.y, b = blockIdx.z;
  const int g = p.h_per_kv;
  auto token_of = [&](int r) { return flash::fast_div(dp.group_div, r); };  // r / g
  auto head_of = [&](int r, int i) { return kvh * g + r - i * g; };           // row r's query head, i = token_of(r)
  const flash::SeqExtent seq = flash::sequence_extent(p, b);
  // Rows a sequence may write: its tokens in thd (the next sequence's
  // follow), every padded row of bshd / sbhd (out = 0 past its length).
  const int token_rows = p.packed ? seq.len_q : p.s_q;
  const int rows = token_rows * g, r0 = m_block * kRows;
  if (r0 >= rows) return;
  const int row_of_b = flash::cache_row(p.cache, b);

  // The CTA's keys: from the first row's first key to the last row's last
  // (mask_rule.h: both ends move right with the token), cut into splits.
  const int i_lo = token_of(r0), i_hi = min(token_of(r0 + kRows - 1), seq.len_q - 1);
  int t_begin = 0, t_end = 0;
  if (i_lo <= i_hi) {
    // 32-bit bounds (tile_ranges.h): begins and ends grow with the row, so
    // [first row's begin, last row's end) covers every row's keys.
    const int lo_begin = flash::row_key_begin(p, seq, i_lo), hi_end = flash::row_key_end(p, seq, i_hi);
    if (hi_end > lo_begin) {
      const int first = lo_begin / kN, last = (hi_end + kN - 1) / kN;
      const int per_split = flash::fast_div(dp.splits_div, last - first + dp.splits - 1);
      t_begin = min(first + split * per_split, last);
      t_end = min(t_begin + per_split, last);
    }
  }

  const uint32_t q_smem = sm80::smem_addr(smem);
  auto k_stage = [&](int s) { return q_smem + TileQ::kBytes + s * Cfg::kStageBytes; };
  auto v_stage = [&](int s) { return k_stage(s) + TileK::kBytes; };
  // Row addresses of kStages tiles (slot = tile index % kStages), after the
  // merge area's end so the merge never overlaps them.
  constexpr int kStages = Cfg::kStages;
  KeyRow* const row_at = reinterpret_cast<KeyRow*>(smem + Cfg::kOffsetsAt);
  const int appended_from = dp.k_new ? flash::cache_length(p.cache, b) : INT_MAX;
  // Row r of tile t: its block-table entry, then its address.
  auto entry_of = [&](int t, int r) { return key_entry(p.cache, b, seq, appended_from, t * kN + r); };
  auto row_of = [&](int t, int r, int entry) {
    return key_row<T>(dp, b, row_of_b, seq, appended_from, kvh, t * kN + r, entry);
  };
  // Paged: tile u's entries (row tid < kN) into entry slot u % kStages, in the
  // commit group of tile u - kStages's copies: the loop's wait for that tile
  // (iteration u - kStages) finds them in, and no entry is waited for alone.
  const bool paged = p.cache.block_table != nullptr;
  int* const entry_at = reinterpret_cast<int*>(smem + Cfg::kEntriesAt);
  auto fetch_entries = [&](int u) {
    if (paged && tid < kN && u < t_end) {
      const int* const src = key_entry_src(p.cache, b, seq, appended_from, u * kN + tid);
      sm80::cp_async_4(sm80::smem_addr(entry_at + (u % kStages) * kN + tid), src ? src : p.cache.block_table,
                       src != nullptr);
    }
  };
  auto load_tile = [&](int t, int s) {
    const KeyRow* const at = row_at + (t % kStages) * kN;
    copy_kv_tile<T, TileK, TileV, Cfg::kThreads>(k_stage(s), v_stage(s), at, tid, static_cast<const T*>(p.k),
                                                 static_cast<const T*>(p.v));
  };

  // Started during the KV cache's prologue (rotary: it rotates the q read
  // here and appends the new keys): the set-up above ran under it; no read
  // of q, K or V and no write before it has finished.
  kernels::wait_for_prior_grid();

  float o[MB][NO][4];
  sm80::zero(o);
  float m[kHalves], l[kHalves];
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
  }
  if (t_begin < t_end) {
    constexpr int kCQ = kDQK / 8;
    for (int idx = tid; idx < kRows * kCQ; idx += Cfg::kThreads) {
      const int row = idx / kCQ, c = idx % kCQ, r = r0 + row, i = token_of(r);
      const bool ok = r < rows && i < seq.len_q;
      const int64_t token = static_cast<int64_t>(seq.start_q) + i;
      const T* src = static_cast<const T*>(p.q) + b * p.q_batch_stride + token * p.q_row_stride +
                     head_of(r, i) * p.q_head_stride + 8 * c;
      sm80::cp_async_16(q_smem + TileQ::byte_offset(row, c), ok ? src : p.q, ok);
    }
    // The first tiles' rows, by every thread (the CTA's halves take tiles 0, 2, .. and 1, 3, ..: warps 2-3
    // otherwise waited at the barrier below while warps 0-1 formed all three), entries read together.
    {
      constexpr int kHalf = Cfg::kThreads / kN, kMine = (kStages + kHalf - 1) / kHalf;
      const int r = tid % kN, first = tid / kN;
      int entry[kMine];
#pragma unroll
      for (int i = 0; i < kMine; ++i) {
        const int t = t_begin + first + kHalf * i;
        entry[i] = first + kHalf * i < kStages && t < t_end ? entry_of(t, r) : 0;
      }
#pragma unroll
      for (int i = 0; i < kMine; ++i) {
        const int t = t_begin + first + kHalf * i;
        if (first + kHalf * i < kStages && t < t_end) row_at[(t % kStages) * kN + r] = row_of(t, r, entry[i]);
      }
    }
    __syncthreads();
    // The first kStages - 1 tiles in flight, one commit group each (empty
    // groups past the end keep the count the loop waits on uniform).
#pragma unroll
    for (int i = 0; i + 1 < kStages; ++i) {
      if (t_begin + i < t_end) load_tile(t_begin + i, i);
      fetch_entries(t_begin + kStages + i);
      sm80::cp_async_commit();
    }
  }
  // The new tokens into the cache (no kernel appended them), by one CTA per
  // (sequence, KV head), while its first tiles load; with splits, the
  // combine kernel's CTAs write them while this grid runs (below).
  if (dp.k_new && dp.splits == 1 && m_block == 0)
    append_new_rows<T, kDQK, kDV>(dp, b, row_of_b, kvh, tid, Cfg::kThreads);
  // This thread's two rows (mma layout: lane / 4 and lane / 4 + 8), formed
  // while the first tiles load: only the loop and the merge need them.
  auto half_row = [&](int h) { return 16 * (h / 2) + 8 * (h % 2) + lane / 4; };  // half h's row in the CTA
  KeyRange<int> keys[kHalves];
  float slope[kHalves];
  int token[kHalves];
  // The keys both rows see (rows past the tile's last, which no one reads,
  // see all): a tile inside them needs no mask.
  KeyRange<int> seen_by_both{INT_MIN, INT_MAX};
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
    const int r = r0 + half_row(h);
    token[h] = token_of(r);
    const bool valid = r < rows && token[h] < seq.len_q;
    // An empty row's end may lie before its begin: it contains no key either way.
    keys[h] = valid ? KeyRange<int>{flash::row_key_begin(p, seq, token[h]), flash::row_key_end(p, seq, token[h])}
                    : KeyRange<int>{0, 0};
    if (r < rows) seen_by_both = {max(seen_by_both.begin, keys[h].begin), min(seen_by_both.end, keys[h].end)};
    const int hq = head_of(r, token[h]);
    slope[h] = p.alibi && valid ? p.alibi[b * p.alibi_batch_stride + hq * p.alibi_head_stride] : 0.f;
  }

  for (int t = t_begin; t < t_end; ++t) {
    const int s = (t - t_begin) % kStages;
    // Tile t + kStages - 1 into the stage tile t - 1 used (free since the
    // last iteration's closing barrier); then tile t is in.
    if (t + kStages - 1 < t_end) load_tile(t + kStages - 1, (t + kStages - 1 - t_begin) % kStages);
    fetch_entries(t + 2 * kStages - 1);
    sm80::cp_async_commit();
    sm80::cp_async_wait<kStages - 1>();
    __syncthreads();
    // Tile t + kStages's rows, for the slot tile t's copies were issued from
    // (free: they were issued kStages - 1 iterations ago); its entries came
    // with tile t's copies (each thread's wait, then the barrier, make them
    // visible to all). Formed here, by every thread and without a branch
    // (cache_key_row), so the entry's load and the address arithmetic after
    // it interleave with this tile's products; only threads < kN store
    // theirs, after them. Formed at the loop's end instead, the chain (a
    // shared load, then dependent multiplies) would run in warps 0-1 alone
    // while the others wait at the barrier.
    const int next_slot = (t % kStages) * kN + tid % kN;
    const bool prefetch = tid < kN && t + kStages < t_end;
    const int next_entry = paged ? entry_at[next_slot] : 0;
    const KeyRow next_row = cache_key_row<T>(dp, row_of_b, seq, kvh, (t + kStages) * kN + tid % kN, next_entry);
    // A tile reaching the new tokens or the sequence's end (the last ones)
    // takes key_row's cases at the store.
    const bool next_at_end = (t + kStages + 1) * kN > min(appended_from, seq.len_kv);

    float sc[MB][2][4];
    sm80::zero(sc);
    sm80::gemm_abt<T, MB, 2, kDQK, TileQ, TileK>(sc, q_smem, k_stage(s) + 16 * warp * TileK::kRowBytes, 0, lane);
    const int n0 = t * kN + 16 * warp;
    const bool unmasked = __all_sync(0xffffffffu, seen_by_both.begin <= n0 && n0 + 16 <= seen_by_both.end);
    if (unmasked && !p.score_mods) {  // most tiles of a decode step: the scale alone
#pragma unroll
      for (int ma = 0; ma < MB; ++ma)
#pragma unroll
        for (int na = 0; na < 2; ++na)
#pragma unroll
          for (int e = 0; e < 4; ++e) sc[ma][na][e] *= p.scale_log2;
    } else {
#pragma unroll
      for (int ma = 0; ma < MB; ++ma)
#pragma unroll
        for (int na = 0; na < 2; ++na)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int h = 2 * ma + (e >> 1), j = n0 + 8 * na + 2 * (lane & 3) + (e & 1);
            float x = sc[ma][na][e];
            if (p.score_mods) {
              float unused;
              x = flash::modified_score(x, p, slope[h], token[h], j, seq.shift, unused);
            } else {
              x *= p.scale_log2;
            }
            sc[ma][na][e] = keys[h].contains(j) ? x : -INFINITY;
          }
    }
    // The running softmax of the warp's keys, per row (log2 units). A NaN
    // score is left out of the max, so exp2 turns it into a NaN sum and
    // output: it stays visible.
    // A row whose max was -inf holds no sum yet (its accumulators are 0, or
    // NaN from a NaN score, either way unchanged by a rescale), so only rows
    // that had a max and moved it need one. Rows past the group's (padding
    // rows of the 16-row mma block) stay at -inf: counted, they forced the
    // rescale on every tile.
    float alpha[kHalves];
    bool moved = false;
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      float(&row)[2][4] = sc[h / 2];
      const int e0 = 2 * (h % 2);
      float mx = fmaxf(fmaxf(row[0][e0], row[0][e0 + 1]), fmaxf(row[1][e0], row[1][e0 + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[h], mx);
      const float base = m_new == -INFINITY ? 0.f : m_new;
      alpha[h] = sm80::fast_exp2(m[h] - base);
      moved = moved || (m[h] != -INFINITY && alpha[h] != 1.f);
      m[h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int na = 0; na < 2; ++na)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pr = sm80::fast_exp2(row[na][e0 + e] - base);
          row[na][e0 + e] = pr;
          sum += pr;
        }
      l[h] = l[h] * alpha[h] + sum;
    }
    // Past the first tiles a row's max rarely moves: skip the identity
    // rescale of the warp's accumulators (exact: x * 1 == x, NaN included).
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int ma = 0; ma < MB; ++ma)
#pragma unroll
        for (int no = 0; no < NO; ++no) {
          o[ma][no][0] *= alpha[2 * ma];
          o[ma][no][1] *= alpha[2 * ma];
          o[ma][no][2] *= alpha[2 * ma + 1];
          o[ma][no][3] *= alpha[2 * ma + 1];
        }
    }
    sm80::gemm_rb<T, MB, 2, NO, TileV>(o, sc, v_stage(s) + 16 * warp * TileV::kRowBytes, lane);
    if (prefetch) row_at[next_slot] = next_at_end ? row_of(t + kStages, tid, next_entry) : next_row;
    __syncthreads();  // tile t's stage is free, tile t + kStages's offsets visible
  }

  // Parts per warp (dp.parts > 1, this build): each warp's rows go out normalized, with
  // their lse, as a part of their own, and the combine kernel merges them
  // with the other splits' (a warp whose keys a row does not see writes lse
  // -inf, which the combine leaves out). No barrier, no shared memory.
  if constexpr (kWarpParts) {
    const int part = split * dp.parts + warp;
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
      const int r = r0 + half_row(h), e0 = 2 * (h % 2);
      if (r >= rows) continue;
      const int i = token[h], hq = head_of(r, i);
      const bool none = m[h] == -INFINITY;  // also the rows past the sequence's tokens (they see no key)
      const float inv = none ? 0.f : 1.f / l[h];
      const int64_t at = static_cast<int64_t>(part) * dp.rows + partial_row(p, seq, b, i, hq);
      float* const dst = dp.o_partial + at * kDV + 2 * (lane & 3);
#pragma unroll
      for (int no = 0; no < NO; ++no)
        *reinterpret_cast<float2*>(dst + 8 * no) = make_float2(o[h / 2][no][e0] * inv, o[h / 2][no][e0 + 1] * inv);
      if ((lane & 3) != 0) continue;
      dp.lse_partial[at] = none ? -INFINITY : (m[h] + __log2f(l[h])) * flash::kLn2;
      if (p.max_logit && !none)
        detail::atomic_max_keeping_nan(p.max_logit + hq * p.max_logit_stride,
                                       l[h] != l[h] ? l[h] : m[h] * flash::kLn2);
    }
    return;
  }

  // Without a combine the next kernel (the next call's decode kernel) may start now where this grid is small: every
  // CTA has reached its merge or ended.
  if (dp.splits == 1 && dp.next_early) kernels::allow_dependent_launch();
  // The warps' partial results into shared memory (over the stages), rows
  // kOStride floats apart (decode_config.h: a warp's store of 8 rows kDV
  // apart hit the same banks 8 times).
  constexpr int kOStride = Cfg::kMergeStride;
  float* const o_merge = reinterpret_cast<float*>(smem + TileQ::kBytes);  // [warp][row][kOStride]
  float* const m_merge = o_merge + Cfg::kWarps * kRows * kOStride;         // [warp][row]
  float* const l_merge = m_merge + Cfg::kWarps * kRows;
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    const int row = half_row(h), e0 = 2 * (h % 2);
    float* const orow = o_merge + (warp * kRows + row) * kOStride + 2 * (lane & 3);
#pragma unroll
    for (int no = 0; no < NO; ++no)
      *reinterpret_cast<float2*>(orow + 8 * no) = make_float2(o[h / 2][no][e0], o[h / 2][no][e0 + 1]);
    if ((lane & 3) == 0) {
      m_merge[warp * kRows + row] = m[h];
      l_merge[warp * kRows + row] = l[h];
    }
  }
  __syncthreads();

  // The CTA's rows that exist, each by tpr threads, 2 columns at a time: 8
  // threads a row where all 16 (32) are the group's, up to a float2 each
  // where few are (GQA 4 with one token: 4 rows of 16), so a small group's
  // rows are not finished by one warp while three wait.
  const int live = min(kRows, rows - r0);
  int tpr = 8;
  while (tpr < kDV / 2 && 2 * tpr * live <= Cfg::kThreads) tpr *= 2;
  const int sub = tid % tpr;
  auto finish_row = [&](int row) {
    const int r = r0 + row;
    if (r >= rows) return;
    const int i = token_of(r), hq = head_of(r, i);
    float mw[Cfg::kWarps], big = -INFINITY;
#pragma unroll
    for (int w = 0; w < Cfg::kWarps; ++w) {
      mw[w] = i < seq.len_q ? m_merge[w * kRows + row] : -INFINITY;
      big = fmaxf(big, mw[w]);
    }
    const float base = big == -INFINITY ? 0.f : big;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < Cfg::kWarps; ++w) {
      mw[w] = mw[w] == -INFINITY ? 0.f : exp2f(mw[w] - base);  // the warp's weight
      sum += mw[w] * l_merge[w * kRows + row];
    }
    // lse of the CTA's keys, natural units, without the sink.
    const float lse_keys = big == -INFINITY ? -INFINITY : (big + __log2f(sum)) * flash::kLn2;
    if (p.max_logit && big != -INFINITY && sub == 0)
      detail::atomic_max_keeping_nan(p.max_logit + hq * p.max_logit_stride, sum != sum ? sum : big * flash::kLn2);

    // Columns c, c + 1 of the row over the four warps' keys (relative to exp2(big)).
    auto merged = [&](int c) {
      float2 acc = make_float2(0.f, 0.f);
#pragma unroll
      for (int w = 0; w < Cfg::kWarps; ++w) {
        const float2 x = *reinterpret_cast<const float2*>(o_merge + (w * kRows + row) * kOStride + c);
        acc.x += mw[w] * x.x;
        acc.y += mw[w] * x.y;
      }
      return acc;
    };
    const int64_t token_index = p.packed ? static_cast<int64_t>(seq.start_q) + i : static_cast<int64_t>(b) * p.s_q + i;
    if (dp.splits > 1) {  // the combine kernel adds the sink and normalizes across splits
      const int64_t row_id = token_index * p.h_q + hq;
      const float inv = big == -INFINITY ? 0.f : 1.f / sum;
      float* const dst = dp.o_partial + (static_cast<int64_t>(split) * dp.rows + row_id) * kDV;
#pragma unroll
      for (int c = 2 * sub; c < kDV; c += 2 * tpr) {
        const float2 acc = merged(c);
        *reinterpret_cast<float2*>(dst + c) = make_float2(acc.x * inv, acc.y * inv);
      }
      if (sub == 0) dp.lse_partial[static_cast<int64_t>(split) * dp.rows + row_id] = lse_keys;
      return;
    }
    // One split: the sink joins here, and the rows are final.
    const float sink = detail::sink_logit(p.sink, hq);
    const float hi = fmaxf(lse_keys, sink);
    const float lse = hi == -INFINITY ? -INFINITY : hi + __logf(__expf(lse_keys - hi) + __expf(sink - hi));
    // A row that sees no key writes exact zeros (its P is 0, but 0 times a
    // non-finite value of a key it does not see would not be).
    const bool none = lse == -INFINITY || big == -INFINITY;
    const float scale = none ? 0.f : __expf(big * flash::kLn2 - lse);
    T* const out = out_row<T>(p, b, static_cast<int64_t>(seq.start_q) + i, hq);
#pragma unroll
    for (int c = 2 * sub; c < kDV; c += 2 * tpr) {
      const float2 acc = merged(c);
      *reinterpret_cast<uint32_t*>(out + c) = sm80::pack2<T>(none ? 0.f : acc.x * scale, none ? 0.f : acc.y * scale);
    }
    if (p.lse && sub == 0) *lse_at(p, b, static_cast<int64_t>(seq.start_q) + i, hq) = lse;
  };
  for (int row = tid / tpr; row < live; row += Cfg::kThreads / tpr) finish_row(row);
}

// Merges the partial results of one row (a split's each, or each warp's of a
// split with DecodeParams::parts): lse = log(sum over parts s of exp(lse_s) +
// exp(sink)), out = sum of exp(lse_s - lse) * o_s. Each group merges its
// parts relative to its own max, then group 0 merges the groups.
// It also appends the call's new tokens (DecodeParams::k_new): CTA x < h_kv
// of sequence b writes KV head x's before it waits for the decode kernel,
// so on sm_90 the writes run beside that grid, on SMs its single wave
// leaves free (in one of its CTAs they held that CTA's loop for their
// loads' latency, and the grid ended with its slowest CTA).
template <typename T, int kDQK, int kDV>
__global__ void __launch_bounds__(CombineConfig<kDV>::kThreads)
    flash_decode_combine_kernel(const __grid_constant__ DecodeParams dp) {
  using Cfg = CombineConfig<kDV>;
  const flash::FwdParams& p = dp.f;
  const int group = threadIdx.x / Cfg::kChunks, chunk = threadIdx.x % Cfg::kChunks;
  const int i = static_cast<int>(blockIdx.x / p.h_q), hq = static_cast<int>(blockIdx.x % p.h_q);
  const int b = blockIdx.y;
  if (dp.k_new && static_cast<int>(blockIdx.x) < p.h_q / p.h_per_kv)
    append_new_rows<T, kDQK, kDV>(dp, b, flash::cache_row(p.cache, b), blockIdx.x, threadIdx.x, Cfg::kThreads);
  const flash::SeqExtent seq = flash::sequence_extent(p, b);
  if (i >= (p.packed ? seq.len_q : p.s_q)) return;
  const int64_t row_id = partial_row(p, seq, b, i, hq);
  kernels::wait_for_prior_grid();  // started during the decode kernel: its partial results
  if (dp.next_early) kernels::allow_dependent_launch();

  // This group's parts: max, sum of weights and weighted rows relative to
  // the max, in batches of kAhead parts whose loads go out together. A
  // part without keys (lse_s = -inf) adds nothing, even where its partial
  // output is not finite; a NaN lse makes the row NaN.
  float m = -INFINITY, w = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  bool nan = false;
  const int parts = dp.splits * dp.parts;
  for (int s0 = group; s0 < parts; s0 += Cfg::kGroups * Cfg::kAhead) {
    float x[Cfg::kAhead];
    float4 v[Cfg::kAhead];
#pragma unroll
    for (int u = 0; u < Cfg::kAhead; ++u) {
      const int s = s0 + u * Cfg::kGroups;
      const bool in = s < parts;
      const int64_t at = static_cast<int64_t>(in ? s : 0) * dp.rows + row_id;
      x[u] = in ? dp.lse_partial[at] : -INFINITY;
      v[u] = in ? reinterpret_cast<const float4*>(dp.o_partial + at * kDV)[chunk] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float big = m;
#pragma unroll
    for (int u = 0; u < Cfg::kAhead; ++u) {
      nan |= x[u] != x[u];
      big = fmaxf(big, x[u]);
    }
    if (big == -INFINITY) continue;
    const float rescale = __expf(m - big);  // 0 while m is -inf
    w *= rescale;
    acc = make_float4(acc.x * rescale, acc.y * rescale, acc.z * rescale, acc.w * rescale);
#pragma unroll
    for (int u = 0; u < Cfg::kAhead; ++u) {
      if (x[u] == -INFINITY) continue;
      const float e = __expf(x[u] - big);
      w += e;
      acc.x += e * v[u].x;
      acc.y += e * v[u].y;
      acc.z += e * v[u].z;
      acc.w += e * v[u].w;
    }
    m = big;
  }

  __shared__ float4 acc_of[Cfg::kGroups][Cfg::kChunks];
  __shared__ float m_of[Cfg::kGroups], w_of[Cfg::kGroups];
  __shared__ int nan_any;
  if (threadIdx.x == 0) nan_any = 0;
  __syncthreads();
  acc_of[group][chunk] = acc;
  if (chunk == 0) {
    m_of[group] = m;
    w_of[group] = w;
  }
  if (nan) nan_any = 1;
  __syncthreads();
  // The partial results are read: the next kernel may start (its CTAs take SM slots as this grid's leave).
  if (!dp.next_early) kernels::allow_dependent_launch();
  if (group != 0) return;

  const float sink = detail::sink_logit(p.sink, hq);
  float big = sink;
#pragma unroll
  for (int g = 0; g < Cfg::kGroups; ++g) big = fmaxf(big, m_of[g]);
  float sum = 0.f;
  float4 out4 = make_float4(0.f, 0.f, 0.f, 0.f);
  if (big != -INFINITY) {
    sum = __expf(sink - big);
#pragma unroll
    for (int g = 0; g < Cfg::kGroups; ++g) {
      if (m_of[g] == -INFINITY) continue;
      const float e = __expf(m_of[g] - big);
      const float4 a = acc_of[g][chunk];
      sum += e * w_of[g];
      out4.x += e * a.x;
      out4.y += e * a.y;
      out4.z += e * a.z;
      out4.w += e * a.w;
    }
  }
  // No key and no sink: zeros and lse -inf, as with one split.
  const bool none = big == -INFINITY;
  const float inv = none ? 0.f : 1.f / sum;
  const float lse = nan_any ? NAN : none ? -INFINITY : big + __logf(sum);
  const float4 o = nan_any ? make_float4(NAN, NAN, NAN, NAN)
                           : make_float4(out4.x * inv, out4.y * inv, out4.z * inv, out4.w * inv);
  T* const out = out_row<T>(p, b, static_cast<int64_t>(seq.start_q) + i, hq) + 4 * chunk;
  *reinterpret_cast<uint2*>(out) = make_uint2(sm80::pack2<T>(o.x, o.y), sm80::pack2<T>(o.z, o.w));
  if (p.lse && chunk == 0) *lse_at(p, b, static_cast<int64_t>(seq.start_q) + i, hq) = lse;
}

}  // namespace attn::flash_decode
