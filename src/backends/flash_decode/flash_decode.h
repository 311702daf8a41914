// The `flash_decode` backend: attn's split-KV decode kernels (mma.sync,
// sm_80 and later) for calls with a few query tokens per sequence against
// many keys, GQA heads packed into one tile (decode_kernel.cuh). Forward
// only; forward_with_kvcache runs its contiguous and paged caches here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/backend.h"
#include "attn/kvcache.h"
#include "backends/flash_decode/decode_config.h"
#include "backends/flash_decode/decode_params.h"
#include "core/workspace.h"

namespace attn::flash_decode {

// The most query tokens per sequence it takes (speculative tokens, small
// chunks); longer queries go to the prefill kernels.
inline constexpr int64_t kMaxQueryTokens = 16;
inline constexpr int kMaxSplits = 128;

std::vector<std::string> obstacles(const Problem& p, const DeviceInfo& dev);
void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx);
int64_t forward_workspace_bytes(const Problem& p);
const Backend& backend();

// How a call is cut: query-row blocks per KV head and KV splits. `requested`
// > 0 fixes the split count (clamped to [1, kMaxSplits] and the key tiles);
// 0 chooses from the work units (row blocks x KV heads x sequences), the
// longest sequence's key tiles and the device's SMs, so that the CTAs fill
// the GPU in nearly whole waves (sizes only: a graph replays the same plan).
struct Plan {
  int m_blocks = 1;
  // 16-row blocks per CTA: 2 where a group has more than 16 rows, d_qk + d_v
  // <= 256, and one-block CTAs would fill the GPU (or the splits are fixed).
  int row_blocks = 1;
  int splits = 1;
  // Partial results per split: 1 (the CTA's, its warps merged in shared
  // memory) or kDecodeWarps (each warp's keys a part of their own, merged
  // by the combine kernel: no merge in the decode kernel; part_count).
  int parts = 1;
  int64_t partial_results() const { return int64_t{splits} * parts; }
};
Plan plan(const Problem& p, int requested_splits = 0);
// plan()'s partial results per split: kDecodeWarps for `splits` > 1 where
// the query rows per KV head (`rows`: s_q x the group) are at most 8, the
// longest sequence's `tiles` at most 8 a split, and the parts fit the
// combine's loads at once (combine_loads_at_once), else 1.
int part_count(int splits, int64_t tiles, int64_t rows, int64_t d_v);
// The rule behind plan(): for `units` CTAs of one split over `slots` CTA
// slots and the longest sequence's `tiles` of 64 keys, the fewest splits
// (each at least 2 tiles, at most kMaxSplits) whose waves are at least 95%
// as full as the best count's, a split count counted by the splits that
// get keys (tiles cut in ceil(tiles / splits)-tile ranges).
int choose_splits(int64_t units, int64_t tiles, int64_t slots);
// plan()'s count for `units` one-split CTAs on `sms` SMs of `slots` CTA
// slots: below a wave of units, the SMs' count (one CTA each), except that
// more than 16 rows per KV head (`many_rows`: CTAs sharing keys, or two row
// blocks) keep the slots' count where the SMs' rule splits, and from 128
// tiles on. Paged and contiguous caches alike.
int split_count(int64_t units, int64_t tiles, int64_t sms, int64_t slots, bool many_rows);
// Device scratch of a plan: the splits' partial outputs and lse (0 for one split).
int64_t workspace_bytes(const Problem& p, const Plan& plan);
// Those partial outputs and lse ([partial_results][rows][d_v], [partial_results][rows]) taken from c, where
// the plan splits (nulls, nothing taken, for one split); workspace_bytes() counts the same takes.
struct Partials {
  float* o = nullptr;
  float* lse = nullptr;
};
Partials take_partials(detail::Carver& c, const Problem& p, const Plan& plan);

// Runs a call whose parameters the caller filled (dp.f from the Problem and
// views, plus the KV-cache fields): the max logit's -inf fill, the decode
// kernel and, with splits, the combine, on ctx's stream.
void run(const Problem& p, DecodeParams dp, const Plan& plan, const RunContext& ctx);

// A KV-cache call as core/kvcache.cpp checked it: p describes the attention
// (bshd, len_kv = the cache's length after the append, s_kv = capacity,
// bottom-right aligned; has_seqlens false: lengths come from cache_seqlens).
struct KvCacheLayout {
  int64_t s_new = 0;
  int64_t capacity = 0;    // positions a sequence may fill
  int64_t cache_rows = 0;  // rows (contiguous) or blocks (paged)
  int64_t block_size = 0;  // paged: positions per block; 0: contiguous
  int64_t rotary_half = 0;
  bool q_by_row = false;   // q's row j at position len + s_new - s_q + j (else len)
  // The attention on flash_sm90's forward (flash_sm90::forward_over_cache)
  // rather than the decode kernel: longer queries (chunked prefill).
  bool prefill = false;
};
// The append (rotated), q's rotation into scratch, and the attention, on
// ctx's stream; the decode kernel takes any s_q, at the cost of a re-read of
// the keys per 16 (narrow rows: 32) query rows.
void run_kvcache(const Problem& p, const KvCacheArgs& a, const KvCacheLayout& layout, const RunContext& ctx);

}  // namespace attn::flash_decode
