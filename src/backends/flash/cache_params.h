// A forward that reads its keys and values from a KV cache in place
// (forward_with_kvcache on CUDA tensors): where sequence b's keys are, and
// how long it is, both read from the device as the kernels run. Shared by
// the cache's append (flash_decode/kvcache_append.cu), the decode kernel and
// flash_sm90's forward (chunked prefill). Every value read from the device
// is bounded here, so an unchecked length or index moves no access outside
// the cache (SEMANTICS.md "KV cache").
#pragma once

#include <cstdint>

#include "attn/mask_rule.h"  // ATTN_HOST_DEVICE
#include "backends/flash/fast_div.h"

namespace attn::flash {

struct CacheParams {
  // [b]: each sequence's length before the append; sequence b then holds the
  // first cache_seqlens[b] + s_new positions, clamped to [0, capacity]. Null:
  // not a cache call (or every cache full: the forward's s_kv = capacity).
  const int32_t* seqlens = nullptr;
  int s_new = 0;
  int capacity = 0;  // positions a sequence may fill
  // Contiguous caches: sequence b's keys are cache row batch_idx[b] (null: b).
  const int32_t* batch_idx = nullptr;
  int rows = 0;  // rows (contiguous) or blocks (paged) of the cache: indices are clamped below it
  // Paged caches: position j of sequence b lies in block
  // block_table[b * block_table_stride + j / block_size], row j % block_size.
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  int block_size = 0;  // 0: contiguous
  FastDiv block_div;  // j / block_size by a multiply (fast_div.h), set by set_block_size
};

inline void set_block_size(CacheParams& c, int size) {
  c.block_size = size;
  c.block_div = make_fast_div(size);
}

// j / block_size and j % block_size for a position 0 <= j < 2^31.
ATTN_HOST_DEVICE int block_index(const CacheParams& c, int j) { return fast_div(c.block_div, j); }
ATTN_HOST_DEVICE int block_row(const CacheParams& c, int j) { return j - block_index(c, j) * c.block_size; }

// An index read from the device (a cache row, a block id) clamped into [0, n).
ATTN_HOST_DEVICE int clamp_index(int i, int n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

// Sequence b's cache length before the append.
ATTN_HOST_DEVICE int cache_length(const CacheParams& c, int b) {
  return c.seqlens ? c.seqlens[b] : c.capacity - c.s_new;
}

// Its keys after the append, bounded by the cache.
ATTN_HOST_DEVICE int cache_keys(const CacheParams& c, int b) {
  const int len = cache_length(c, b) + c.s_new;
  return len < 0 ? 0 : len > c.capacity ? c.capacity : len;
}

// Contiguous caches: the cache row sequence b reads and writes.
ATTN_HOST_DEVICE int cache_row(const CacheParams& c, int b) {
  return c.batch_idx ? clamp_index(c.batch_idx[b], c.rows) : b;
}

// Paged caches: a position's block-table column and its row in that block,
// moved `step` positions on by additions, without a division (a producer
// walking a sequence's KV tiles): step = step_blocks * block_size +
// step_rows, 0 <= step_rows < block_size. The column stops at last_column
// (the cache's last position's), the row goes on: positions past the cache
// read the last block's entry.
struct BlockStep {
  int blocks = 0, rows = 0, last_column = 0;
};
inline BlockStep make_block_step(int step, int block_size, int capacity) {
  return {step / block_size, step % block_size, (capacity > 0 ? capacity - 1 : 0) / block_size};
}
struct BlockPosition {
  int column = 0, row = 0;
};
ATTN_HOST_DEVICE BlockPosition block_position(const CacheParams& c, const BlockStep& s, int j) {
  const int column = block_index(c, j);
  return {column < s.last_column ? column : s.last_column, block_row(c, j)};
}
ATTN_HOST_DEVICE BlockPosition next_block_position(const CacheParams& c, const BlockStep& s, BlockPosition at) {
  at.row += s.rows;
  at.column += s.blocks;
  if (at.row >= c.block_size) {
    at.row -= c.block_size;
    ++at.column;
  }
  at.column = at.column < s.last_column ? at.column : s.last_column;
  return at;
}

// Paged caches: where the block table's entry at column `column` of
// sequence b's row lies (a position's column: block_index, or a
// BlockPosition's); for position j (< capacity), block_table_slot (a caller
// may copy it asynchronously), and the entry as read (a caller that clamps
// it later keeps the read's latency off its path).
ATTN_HOST_DEVICE const int32_t* block_table_column(const CacheParams& c, int b, int column) {
  return c.block_table + b * c.block_table_stride + column;
}
ATTN_HOST_DEVICE const int32_t* block_table_slot(const CacheParams& c, int b, int j) {
  return block_table_column(c, b, block_index(c, j));
}
ATTN_HOST_DEVICE int block_table_entry(const CacheParams& c, int b, int j) { return *block_table_slot(c, b, j); }

// Where position j of sequence b lives: its block and the row in it
// (paged), or `row` (cache_row(c, b), read once by the caller) and j.
struct CacheSlot {
  int64_t outer, inner;
};
// From the block table's entry for j, read earlier by the caller
// (block_table_entry; ignored for contiguous caches): several reads are
// then in flight at once, each waited for only where its slot is used.
ATTN_HOST_DEVICE CacheSlot cache_slot_at(const CacheParams& c, int row, int j, int entry) {
  if (c.block_table) return {clamp_index(entry, c.rows), block_row(c, j)};
  return {row, j};
}
// Reading the entry here.
ATTN_HOST_DEVICE CacheSlot cache_slot(const CacheParams& c, int b, int row, int j) {
  return cache_slot_at(c, row, j, c.block_table ? block_table_entry(c, b, j) : 0);
}

}  // namespace attn::flash
