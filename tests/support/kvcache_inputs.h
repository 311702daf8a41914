// Inputs of forward_with_kvcache calls the CPU and GPU tests share: a
// shuffled block table, cache rows in reverse, rotary tables.
#pragma once

#include <cstdint>
#include <random>
#include <utility>

#include "testing/tensor_buffer.h"

namespace attn::testing {

// int32 [b, max_blocks]: b * max_blocks distinct ids of num_blocks, shuffled.
TensorBuffer shuffled_block_table(std::mt19937_64& rng, int64_t b, int64_t max_blocks, int64_t num_blocks);

// int32 [b]: cache_batch_idx naming the rows in reverse (sequence i reads row b - 1 - i).
TensorBuffer reversed_rows(int64_t b);

// cos and sin [rows, rotary_dim / 2] in dtype t of the angles
// p * 10000^(-2i / rotary_dim) (position p, pair i).
std::pair<TensorBuffer, TensorBuffer> rotary_tables(int64_t rows, int64_t rotary_dim, DType t);

}  // namespace attn::testing
