// The `flash_decode` backend object: what its kernels run (supports(), with
// the value and the limit in each reason), the split plan and the launch.
#include "backends/flash_decode/flash_decode.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attn/error.h"
#include "backends/common/device_reasons.h"
#include "backends/common/fill.h"
#include "backends/flash/backend_adapter.h"
#include "backends/flash/params_build.h"
#include "backends/flash_decode/decode_config.h"
#include "backends/flash_decode/decode_launch.h"
#include "backends/flash_decode/decode_table.h"
#include "core/cuda_check.h"
#include "core/workspace.h"

namespace attn::flash_decode {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether a CTA may take two 16-row blocks: a KV head's group has more than
// 16 rows and the rows are narrow enough (decode_config.h).
bool two_row_blocks_allowed(const Problem& p) {
  const int64_t rows = p.s_q * (p.h_q / std::max<int64_t>(p.h_kv, 1));
  return rows > 16 && two_row_blocks_fit(static_cast<int>(p.d_qk), static_cast<int>(p.d_v));
}

template <int kDQK, int kDV>
int64_t smem_bytes(bool two_row_blocks) {
  if constexpr (two_row_blocks_fit(kDQK, kDV))
    if (two_row_blocks) return DecodeConfig<kDQK, kDV, 2>::kSmemBytes;
  return DecodeConfig<kDQK, kDV, 1>::kSmemBytes;
}

// Shared memory of the largest build plan() may pick for p.
int64_t smem_bytes_for(const Problem& p) {
  const bool two = two_row_blocks_allowed(p);
#define ATTN_DECODE_SMEM(dqk, dv) \
  if (p.d_qk == (dqk) && p.d_v == (dv)) return smem_bytes<dqk, dv>(two);
  ATTN_FLASH_DECODE_TABLE(ATTN_DECODE_SMEM)
#undef ATTN_DECODE_SMEM
  return 0;
}

int ctas_per_sm(const Problem& p, int row_blocks) {
#define ATTN_DECODE_OCC(dqk, dv) \
  if (p.d_qk == (dqk) && p.d_v == (dv)) return decode_ctas_per_sm<dqk, dv>(p.device.index, row_blocks);
  ATTN_FLASH_DECODE_TABLE(ATTN_DECODE_OCC)
#undef ATTN_DECODE_OCC
  return 1;
}

template <typename T>
bool dispatch(const Problem& p, const DecodeParams& dp, cudaStream_t stream) {
#define ATTN_DECODE_RUN(dqk, dv)                                            \
  if (p.d_qk == (dqk) && p.d_v == (dv)) {                                   \
    launch_decode<T, dqk, dv>(dp, static_cast<int>(p.h_kv), stream);        \
    return true;                                                            \
  }
  ATTN_FLASH_DECODE_TABLE(ATTN_DECODE_RUN)
#undef ATTN_DECODE_RUN
  return false;
}

}  // namespace

// The fewest splits (each at least 2 tiles) whose CTAs fill the device's
// slots in waves at least 95% as whole as the best count's: a last partial
// wave idles most SMs while it runs (FlashAttention-2's rule, with its 85%
// raised: at 85%, batch 64 x 8 KV heads on 132 SMs x 3 slots kept one split
// and 1.3 waves). A count that does not divide the tiles leaves the last
// ranges empty (31 splits of 128 tiles: 26 ranges of 5), so it counts as
// the ranges that get keys. Then the fewest splits with the shortest range
// in as many waves: a wave lasts as long as its longest range (h 64/8, 4
// tokens, b 1 32k, 512 tiles on 264 slots, H200, us from graphs, contiguous
// / paged 16: 31 splits of 17 tiles 45.6 / 46.0, 32 of 16 43.3 / 44.7).
int choose_splits(int64_t units, int64_t tiles, int64_t slots) {
  const int64_t most = std::min<int64_t>(kMaxSplits, std::max<int64_t>(tiles / 2, 1));
  const int64_t some = std::max<int64_t>(tiles, 1);  // no keys: one range
  auto range = [&](int64_t s) { return ceil_div(some, s); };
  auto waves = [&](int64_t s) {
    return static_cast<double>(units * ceil_div(some, range(s))) / static_cast<double>(slots);
  };
  auto fill = [&](int64_t s) { return waves(s) / std::ceil(waves(s)); };  // how whole its last wave is
  double best = 0.0;
  for (int64_t s = 1; s <= most; ++s) best = std::max(best, fill(s));
  int64_t pick = 1;
  while (pick < most && fill(pick) < 0.95 * best) ++pick;
  const double whole_waves = std::ceil(waves(pick));
  for (int64_t s = pick + 1; s <= most; ++s)
    if (range(s) < range(pick) && std::ceil(waves(s)) <= whole_waves) pick = s;
  return static_cast<int>(pick);
}

std::vector<std::string> obstacles(const Problem& p, const DeviceInfo& dev) {
  std::vector<std::string> no = detail::gpu_device_reasons(p, dev);
  if (!p.device.is_cuda()) return no;
  if (p.pass == Pass::backward)
    no.push_back("flash_decode runs the forward only (decoding); the backward goes to the training kernels");
  if (p.s_q > kMaxQueryTokens)
    no.push_back("s_q=" + std::to_string(p.s_q) + " > " + std::to_string(kMaxQueryTokens) +
                 ": flash_decode takes at most 16 query tokens per sequence; longer queries go to the prefill kernels");
  if (p.dropout_p > 0) no.push_back("dropout (flash_decode serves inference)");
  for (std::string& reason : flash::head_dim_reasons(p, dev, "flash_decode", smem_bytes_for(p),
                                                     {ATTN_FLASH_DECODE_TABLE(ATTN_FLASH_HEAD_DIMS)}))
    no.push_back(std::move(reason));
  for (std::string& reason : flash::kernel_reasons(p, "flash_decode")) no.push_back(std::move(reason));
  if (p.h_kv > 65535 || p.batch > 65535)
    no.push_back("more than 65535 KV heads or sequences (the kernel's grid dimensions)");
  return no;
}

// A part per warp pays where a CTA holds few rows over few tiles: its
// merge in shared memory (a store of all 16 rows per warp, a barrier, then
// the rows' sums over the warps) is then a large step of the CTA's short
// critical path, and the warps' rows add little to write. With many rows
// the fourfold partial results cost more than the merge; over many tiles
// the merge is a small share (H200, d 128, us from CUDA graphs, merge ->
// parts, two same-process pairs: h 32/8 one token, b 1 2k (2 tiles a split)
// 10.19 / 10.32 -> 9.85 / 9.84, b 1 8k (8) 15.62 / 15.73 -> 15.28 / 15.28,
// b 8 2k (16) 23.36 / 23.16 -> 23.94 / 23.87; h 64/8 one token b 1 2k
// 10.26 / 10.42 -> 10.12 / 9.82; 16 rows or more, h 32/8 with 4 tokens b 8
// 2k 27.23 -> 28.24, h 64/8 with 4 tokens b 8 8k 81.39 -> 85.89).
int part_count(int splits, int64_t tiles, int64_t rows, int64_t d_v) {
  const bool few_rows = rows <= 8, few_tiles = tiles <= 8 * int64_t{splits};
  return splits > 1 && few_rows && few_tiles && splits * kDecodeWarps <= combine_loads_at_once(static_cast<int>(d_v))
             ? kDecodeWarps
             : 1;
}

Plan plan(const Problem& p, int requested) {
  Plan pl;
  const int64_t rows = p.s_q * (p.h_q / std::max<int64_t>(p.h_kv, 1));
  auto cut = [&](int row_blocks) {
    pl.row_blocks = row_blocks;
    pl.m_blocks = static_cast<int>(std::max<int64_t>(ceil_div(rows, 16 * row_blocks), 1));
  };
  cut(1);
  const int64_t tiles = ceil_div(p.s_kv, DecodeConfig<64, 64>::kBlockN);
  auto with_parts = [&] {  // once the splits are set
    pl.parts = pl.row_blocks == 1 ? part_count(pl.splits, tiles, rows, p.d_v) : 1;
    return pl;
  };
  if (requested > 0) {  // a fixed split count: each group's keys read once where the rows allow
    if (two_row_blocks_allowed(p)) cut(2);
    const int64_t most = std::min<int64_t>(kMaxSplits, std::max<int64_t>(tiles, 1));
    pl.splits = static_cast<int>(std::clamp<int64_t>(requested, 1, most));
    return with_parts();
  }
  const DeviceInfo dev = query_device(p.device);
  // A simulated device (another architecture's limits) has no occupancy to ask this GPU for.
  auto slots = [&](int row_blocks) {
    const int64_t per_sm = dev.simulated ? 1 : std::max(ctas_per_sm(p, row_blocks), 1);
    return static_cast<int64_t>(std::max(dev.sm_count, 1)) * per_sm;
  };
  // Two row blocks read a group's keys once rather than once per 16 rows.
  // That pays where one-block CTAs fill the GPU without splitting the keys;
  // below, the second read comes from L2 and the lighter CTAs end a short
  // wave sooner (H100, h 64/8, 4 tokens, d 128, TB/s one block / two: b 64
  // 8k 2.88 / 3.00, paged 16 2.48 / 2.97; b 1 8k 1.49 / 1.31). It pays too
  // from 128 tiles (8k keys) where the one-block CTAs fill half the SMs:
  // over long ranges the CTAs that share keys drift apart, and the second
  // read comes from HBM (ncu, H200, b 8 32k, one block: 1.13 GB read for
  // 1.07 GB of keys contiguous, 1.22-1.30 GB paged). H200, d 128, us from
  // graphs, contiguous / paged 16, one block at its count against two at
  // the slots': h 64/8, 4 tokens, b 8 8k 86.0 / 92.3 -> 82.1 / 83.0, b 8 32k
  // 293.9 / 327.0 -> 260.8 / 263.9, b 16 32k 598.4 / 624.5 -> 506.8 /
  // 511.6; h 32/8, 16 tokens, b 8 32k, one block at the old plan's three
  // splits 589.8 / 639.5, two blocks 407.0 / 441.0. At 2k keys one block
  // stays ahead (b 8 32.8 us against 35.7). From 512 tiles (32k keys) two
  // blocks pay at any batch, the splits filling the SMs either way (H200,
  // d 128, us from graphs, contiguous / paged 16, one block against two:
  // h 64/8 with 4 tokens, b 1 128k 147.6 / 159.9 -> 135.3 / 136.4, b 2 32k
  // 80.2 / 86.3 -> 75.4 / 75.6, b 1 32k 45.9 / 48.5 -> 46.5 / 46.7; h 32/8
  // with 16 tokens, b 1 32k 78.9 / 85.3 -> 62.4 / 66.4, b 1 128k 279.5 /
  // 310.2 -> 205.3 / 223.7; at 8k, b 1 h 64/8: 20.5 one block, 21.7 two).
  const int64_t units1 = pl.m_blocks * p.h_kv * p.batch;
  const bool long_keys = (tiles >= 128 && 2 * units1 >= dev.sm_count) || tiles >= 512;
  if (two_row_blocks_allowed(p) && (units1 >= slots(1) || long_keys)) cut(2);
  // Splits fill the SMs one CTA each where the units are fewer than the
  // SMs: a second CTA per SM adds loads in flight that one CTA's stages
  // already keep, and doubles the ranges' prologues and the combine's
  // reads (H100, d 128, h 32/8, CUDA graphs, us: b 1 8k 21.2 at 16 splits
  // against 22.0 at 32 and 23.0 at the slots' 31; b 1 2k 11.0 at 16
  // against 11.6 at 8; b 8 8k 97.7 at 2 against 99.2 at 4).
  const int64_t units = pl.m_blocks * p.h_kv * p.batch;
  pl.splits = split_count(units, tiles, dev.sm_count, slots(pl.row_blocks), rows > 16);
  return with_parts();
}

// More than 16 rows per KV head (several CTAs reading the same keys, or
// one with two row blocks) do more per tile than their copies, so they gain
// from a second CTA per SM (h 64/8 with 4 tokens, H100, TB/s contiguous /
// paged 16 at one CTA per SM against the slots' count: b 1 8k 1.44 / 1.47
// -> 1.51 / 1.50, b 8 8k 2.40 / 2.01 -> 2.51 / 2.49, b 8 32k 2.51 / 2.23 ->
// 2.78 / 2.86). They take the slots' count where the SMs' rule splits
// anyway. Where one CTA per unit fills the SMs, a split adds the combine,
// which costs more than it saves on short keys (h 64/8 b 8 2k, 4 tokens,
// TB/s 1.94 -> 1.66), so many rows split there from 8k keys (128 tiles)
// on (two row blocks, h 64/8 with 4 tokens, H200, contiguous us: b 16 32k
// 572.8 unsplit, 522.0 at 2; b 8 32k 296.3 at 2, 260.8 at the slots' 4).
// A paged cache takes the contiguous cache's count: its rows' addresses
// are formed among the products, so a second CTA per SM has nothing to
// hide and costs what it costs contiguous caches (H200, h 32/8, one token,
// us from graphs, paged 16 at the slots' count / at the SMs', contiguous
// at its own: b 1 32k 40.9 / 38.9, 37.5; b 1 8k 16.7 / 16.0, 15.7; b 8 2k
// 25.6 / 24.4, 23.6; b 8 8k 69.9 / 68.4, 66.8).
int split_count(int64_t units, int64_t tiles, int64_t sms, int64_t slots, bool many_rows) {
  sms = std::max<int64_t>(sms, 1);
  if (units >= sms) return choose_splits(units, tiles, slots);
  const int by_sms = choose_splits(units, tiles, sms);
  if (many_rows && (by_sms > 1 || tiles >= 128)) return choose_splits(units, tiles, slots);
  return by_sms;
}

Partials take_partials(detail::Carver& c, const Problem& p, const Plan& pl) {
  if (pl.splits <= 1) return {};
  float* const o = c.take<float>(pl.partial_results() * p.total_q * p.h_q * p.d_v);
  return {o, c.take<float>(pl.partial_results() * p.total_q * p.h_q)};
}

int64_t workspace_bytes(const Problem& p, const Plan& pl) {
  detail::Carver c(nullptr);
  take_partials(c, p, pl);
  return c.used();
}

int64_t forward_workspace_bytes(const Problem& p) { return workspace_bytes(p, plan(p)); }

void run(const Problem& p, DecodeParams dp, const Plan& pl, const RunContext& ctx) {
  ATTN_CUDA(cudaSetDevice(p.device.index));
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  if (dp.f.max_logit) detail::launch_fill(dp.f.max_logit, p.h_q, dp.f.max_logit_stride, -INFINITY, stream);
  if (p.batch == 0 || p.h_q == 0 || p.s_q == 0 || p.total_q == 0) return;
  dp.m_blocks = pl.m_blocks;
  dp.row_blocks = pl.row_blocks;
  dp.splits = pl.splits;
  dp.parts = pl.parts;
  dp.m_blocks_div = flash::make_fast_div(pl.m_blocks);
  dp.splits_div = flash::make_fast_div(pl.splits);
  dp.group_div = flash::make_fast_div(dp.f.h_per_kv);
  dp.rows = p.total_q * p.h_q;
  const DeviceInfo dev = query_device(p.device);
  dp.overlap = dev.sm >= 90 && !dev.simulated;
  dp.next_early = pl.splits > 1 ? int64_t{p.s_q} * p.h_q * p.batch <= dev.sm_count
                                : 2 * int64_t{pl.m_blocks} * p.h_kv * p.batch <= dev.sm_count;
  if (pl.splits > 1 && !dp.o_partial) {  // run_kvcache carves them beside its own scratch
    detail::Carver c(static_cast<char*>(detail::workspace(ctx, p.device.index, workspace_bytes(p, pl))));
    const Partials parts = take_partials(c, p, pl);
    dp.o_partial = parts.o;
    dp.lse_partial = parts.lse;
  }
  const bool ran = p.dtype == DType::bf16 ? dispatch<__nv_bfloat16>(p, dp, stream) : dispatch<__half>(p, dp, stream);
  if (!ran) flash::fail_missing_table_row(p, "flash_decode has no kernel", "decode_table.h");
}

void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx) {
  DecodeParams dp;
  dp.f = flash::forward_params(p, args);
  run(p, dp, plan(p), ctx);
}

namespace {
void no_backward(const Problem& p, const BackwardArgs&, const RunContext&) {
  fail(ErrorKind::runtime, "flash_decode was asked for a backward", describe_problem(p), "a forward call",
       "report this: supports() refuses the backward");
}
int64_t no_backward_workspace(const Problem&) { return 0; }
}  // namespace

const Backend& backend() {
  static const flash::FlashBackend instance(
      {"flash_decode", obstacles, forward, no_backward, forward_workspace_bytes, no_backward_workspace});
  return instance;
}

}  // namespace attn::flash_decode
