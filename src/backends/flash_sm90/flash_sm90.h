// The `flash_sm90` backend: attn's own Hopper attention kernels (TMA, wgmma,
// warp specialization), forward and backward, sm_90a only. docs/FLASH_SM90.md describes the design.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attn/backend.h"
#include "backends/flash/cache_params.h"

namespace attn::flash_sm90 {

// Reasons this build's kernels cannot run p on dev (empty: they can).
std::vector<std::string> obstacles(const Problem& p, const DeviceInfo& dev);

void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx);
void backward(const Problem& p, const BackwardArgs& args, const RunContext& ctx);
// Device workspace of each pass: the forward's work-item counter; the
// backward's D, fp32 dQ accumulator and counters.
int64_t forward_workspace_bytes(const Problem& p);
int64_t backward_workspace_bytes(const Problem& p);

// Whether Hopper's backward order should put flash_sm90 first for p, where
// it measured faster than cuDNN: head dim 128 under a causal shape with 4 to
// 7 query heads per KV head, without dropout or the deterministic mode. `rule` (if given) gets the sentence selection
// reports.
bool leads_backward(const Problem& p, std::string* rule);

const Backend& backend();

// forward_with_kvcache's longer queries (chunked prefill): the forward over a
// KV cache in place, args.in.k / .v being the caches, K/V read through the
// cache's rows or, paged, its block table (TMA boxes within a block). The
// tensor maps are made first (their errors come before anything runs), then
// `prologue` (the cache's append) and the kernel go on ctx's stream.
// item_counter: 4 bytes of device workspace.
void forward_over_cache(const Problem& p, const ForwardArgs& args, const flash::CacheParams& cache, int* item_counter,
                        const std::function<void()>& prologue, const RunContext& ctx);
// Reasons a cache's layout keeps it from forward_over_cache (beyond
// obstacles()): a paged block size not a multiple of 16.
std::vector<std::string> cache_obstacles(int64_t block_size);

}  // namespace attn::flash_sm90
