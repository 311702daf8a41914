// flash_sm90's forward parameters: flash_sm80's FwdParams (the same problem
// description: strides, lengths, masks, score modifications, dropout; filled
// by the same host code) plus TMA tensor maps of Q, K, V and the output,
// which the kernel reads from its __grid_constant__ parameter space.
#pragma once

#include <cuda.h>

#include "backends/flash/cache_params.h"
#include "backends/flash/params.h"

namespace attn::flash_sm90 {

using flash::FwdParams;

struct Sm90FwdParams {
  CUtensorMap q, k, v;  // 4-D (column, token, head, sequence), 128B-swizzled boxes of 64 columns
  CUtensorMap o;        // the same, in boxes of 64 rows (one consumer warpgroup's)
  FwdParams p;
  int* item_counter;  // zeroed before the launch (workspace)
  int section_pairs;  // the walk's order (fwd_tiles.h: work_item, fwd_section_pairs)
  // A paged KV cache (p.cache.block_table): k and v map the blocks, (column,
  // row in the block, head, block), in boxes of kv_box_rows keys, which
  // divides both the block size and kBlockN; a tile is kBlockN / kv_box_rows
  // boxes per 64 columns, issued by kv_warps producer warps (1, 2 or 4,
  // dividing the boxes), kv_warp_rows keys each, so that a small block's
  // many boxes go out in parallel.
  int kv_box_rows;
  int kv_warps, kv_warp_rows;
  // A box one tile further: kBlockN positions on (fwd_producer.cuh:
  // paged_box_next, additions, no division per tile).
  flash::BlockStep kv_step;
};

}  // namespace attn::flash_sm90
