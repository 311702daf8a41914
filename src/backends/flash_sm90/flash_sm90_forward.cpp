// flash_sm90's forward on the host: flash_sm80's parameter struct (the same
// problem description) plus TMA tensor maps of Q, K, V and out, then the table row
// for (dtype, d_qk, d_v). No host sync: the kernel reads cu_seqlens (or a KV
// cache's lengths and block table) itself.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <numeric>

#include "attn/backend.h"
#include "backends/common/fill.h"
#include "backends/flash/backend_adapter.h"  // fail_missing_table_row
#include "backends/flash/params_build.h"
#include "backends/flash_sm90/flash_sm90.h"
#include "backends/flash_sm90/fwd_config.h"
#include "backends/flash_sm90/fwd_launch.h"
#include "backends/flash_sm90/fwd_table.h"
#include "backends/flash_sm90/fwd_tiles.h"
#include "backends/flash_sm90/tensor_maps.h"
#include "kernels/sm90/tma_map.h"
#include "core/cuda_check.h"
#include "core/workspace.h"

namespace attn::flash_sm90 {
namespace {

// A paged cache's TMA box: a whole KV tile where the block size is a
// multiple of it, else the largest part of a tile that never crosses a block.
int paged_box_rows(int64_t block_size, int block_n) {
  return block_size % block_n == 0 ? block_n : static_cast<int>(std::gcd<int64_t>(block_size, block_n));
}

// A KV cache [rows or blocks, positions, h_kv, d] as a TMA map: (column,
// position, head, row or block), boxes of box_rows keys.
CUtensorMap cache_map(const Problem& p, const TensorView& cache, int64_t cols, int box_rows, const char* name) {
  sm90::TileMapShape s;
  s.base = cache.data;
  s.bf16 = p.dtype == DType::bf16;
  s.cols = cols;
  s.tokens = cache.size(1);
  s.heads = cache.size(2);
  s.sequences = cache.size(0);
  s.token_stride = cache.stride(1);
  s.head_stride = cache.stride(2);
  s.sequence_stride = cache.stride(0);
  s.box_rows = box_rows;
  return sm90::make_tile_map(s, name);
}

// The call's maps and parameters (the maps' checks throw here, before any
// launch), `prologue` (a cache's append), then the kernel (`early`: behind
// launch_fill's kernel, fwd_launch.h).
template <typename T, int kDQK, int kDV>
void run(const Problem& p, const ForwardArgs& a, const flash::CacheParams* cache, int* item_counter,
         const std::function<void()>& prologue, bool early, cudaStream_t stream) {
  using Cfg = FwdConfig<kDQK, kDV>;
  const bool packed = p.qkv_format == QkvFormat::thd;
  Sm90FwdParams args;
  args.p = flash::forward_params(p, a);
  args.q = tile_map(p, a.in.q, packed ? p.total_q : p.s_q, p.h_q, kDQK, Cfg::kBlockM, "q");
  args.kv_box_rows = Cfg::kBlockN;
  args.kv_warps = 1;
  if (cache) {
    args.p.cache = *cache;
    if (cache->block_table) {
      args.kv_box_rows = paged_box_rows(cache->block_size, Cfg::kBlockN);
      const int boxes = Cfg::kBlockN / args.kv_box_rows;  // d 192 / 256, a block not a tile multiple: 7 / 5, one warp
      args.kv_warps = boxes % 4 == 0 ? 4 : boxes % 2 == 0 ? 2 : 1;
      args.kv_step = flash::make_block_step(Cfg::kBlockN, cache->block_size, cache->capacity);
    }
    args.k = cache_map(p, a.in.k, kDQK, args.kv_box_rows, "k_cache");
    args.v = cache_map(p, a.in.v, kDV, args.kv_box_rows, "v_cache");
  } else {
    args.k = tile_map(p, a.in.k, packed ? p.total_kv : p.s_kv, p.h_kv, kDQK, Cfg::kBlockN, "k");
    args.v = tile_map(p, a.in.v, packed ? p.total_kv : p.s_kv, p.h_kv, kDV, Cfg::kBlockN, "v");
  }
  args.kv_warp_rows = Cfg::kBlockN / args.kv_warps;
  args.o = tile_map(p, a.out, packed ? p.total_q : p.s_q, p.h_q, kDV, 64, "out");
  args.item_counter = item_counter;
  args.section_pairs = fwd_section_pairs(args.p.h_per_kv, args.p.window_left, args.p.window_right, args.p.s_kv,
                                         kDQK, kDV, args.p.h_q * args.p.batch);
  const int sm_count = query_device(p.device).sm_count;  // cached per device
  if (prologue) prologue();
  if (args.p.dropout_threshold != 0)
    launch_fwd<T, kDQK, kDV, true>(args, sm_count, early, stream);
  else
    launch_fwd<T, kDQK, kDV, false>(args, sm_count, early, stream);
}

template <typename T>
bool dispatch(const Problem& p, const ForwardArgs& a, const flash::CacheParams* cache, int* item_counter,
              const std::function<void()>& prologue, bool early, cudaStream_t stream) {
#define ATTN_DISPATCH_ROW(dqk, dv)                                        \
  if (p.d_qk == (dqk) && p.d_v == (dv)) {                                 \
    run<T, dqk, dv>(p, a, cache, item_counter, prologue, early, stream);  \
    return true;                                                          \
  }
  ATTN_FLASH_SM90_FWD_TABLE(ATTN_DISPATCH_ROW)
#undef ATTN_DISPATCH_ROW
  return false;
}

// The table row for the call's dtype and head dims (cache: null outside forward_over_cache).
void run_row(const Problem& p, const ForwardArgs& a, const flash::CacheParams* cache, int* item_counter,
             const std::function<void()>& prologue, bool early, cudaStream_t stream) {
  const bool ran = p.dtype == DType::bf16
                       ? dispatch<__nv_bfloat16>(p, a, cache, item_counter, prologue, early, stream)
                       : dispatch<__half>(p, a, cache, item_counter, prologue, early, stream);
  if (!ran)  // supports() refuses these; reaching here is a bug in attn
    flash::fail_missing_table_row(p, "flash_sm90 has no kernel", "fwd_table.h");
}

}  // namespace

int64_t forward_workspace_bytes(const Problem&) { return sizeof(int); }

void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx) {
  ATTN_CUDA(cudaSetDevice(p.device.index));
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  float* max_logit = static_cast<float*>(args.max_logit.data);  // -inf for the rows to max into
  const int64_t max_logit_stride = args.max_logit.defined() ? args.max_logit.stride(0) : 1;
  if (p.batch == 0 || p.h_q == 0 || p.s_q == 0 || p.total_q == 0) {  // nothing to write but max_logit
    if (max_logit) detail::launch_fill(max_logit, p.h_q, max_logit_stride, -INFINITY, stream);
    return;
  }
  // The work-item counter (the call's workspace) zeroed and max_logit
  // filled by one small kernel, under which the attention kernel starts (an
  // early launch: its set-up and first item's loads go in meanwhile). The
  // same two launches with and without max_logit: its cost is the kernel's.
  int* item_counter = static_cast<int*>(detail::workspace(ctx, p.device.index, forward_workspace_bytes(p)));
  detail::launch_fill(max_logit, max_logit ? p.h_q : 0, max_logit_stride, -INFINITY, stream, item_counter);
  run_row(p, args, nullptr, item_counter, {}, /*early=*/true, stream);
}

std::vector<std::string> cache_obstacles(int64_t block_size) {
  if (block_size == 0 || block_size % 16 == 0) return {};
  return {"block size " + std::to_string(block_size) + ": flash_sm90 reads a paged cache in TMA boxes of 16 keys " +
          "or more within a block (a multiple of 16)"};
}

void forward_over_cache(const Problem& p, const ForwardArgs& args, const flash::CacheParams& cache, int* item_counter,
                        const std::function<void()>& prologue, const RunContext& ctx) {
  ATTN_CUDA(cudaSetDevice(p.device.index));
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  if (p.batch == 0 || p.h_q == 0 || p.s_q == 0) {
    if (prologue) prologue();
    return;
  }
  // Not early: the prologue's kernel writes the cache that the first item reads.
  ATTN_CUDA(cudaMemsetAsync(item_counter, 0, sizeof(int), stream));
  run_row(p, args, &cache, item_counter, prologue, /*early=*/false, stream);
}

}  // namespace attn::flash_sm90
