// Inputs of forward_with_kvcache calls the CPU and GPU tests share: a
// shuffled block table, cache rows in reverse, rotary tables.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "testing/tensor_buffer.h"

namespace attn::testing {

// int32 [b, max_blocks]: b * max_blocks distinct ids of num_blocks, shuffled.
TensorBuffer shuffled_block_table(std::mt19937_64& rng, int64_t b, int64_t max_blocks, int64_t num_blocks);

// int32 [b]: cache_batch_idx naming the rows in reverse (sequence i reads row b - 1 - i).
TensorBuffer reversed_rows(int64_t b);

// cos and sin [rows, rotary_dim / 2] in dtype t of the angles
// p * 10000^(-2i / rotary_dim) (position p, pair i).
std::pair<TensorBuffer, TensorBuffer> rotary_tables(int64_t rows, int64_t rotary_dim, DType t);

// A random cache for b sequences with s_new new tokens each: its capacity,
// between max(s_new, 1) and `most` positions rounded up to a multiple of
// block_size (0: contiguous), and each sequence's length before the append:
// full (capacity - s_new), empty or anything between; every one full with
// all_full.
struct RandomCache {
  int64_t capacity = 0;
  std::vector<int32_t> lens;
};
RandomCache random_cache(std::mt19937_64& rng, int64_t b, int64_t s_new, int64_t block_size, int64_t most,
                         bool all_full);

}  // namespace attn::testing
