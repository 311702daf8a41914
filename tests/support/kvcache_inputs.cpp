// See kvcache_inputs.h.
#include "support/kvcache_inputs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace attn::testing {

TensorBuffer shuffled_block_table(std::mt19937_64& rng, int64_t b, int64_t max_blocks, int64_t num_blocks) {
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(static_cast<size_t>(b * max_blocks));
  TensorBuffer table(DType::i32, {b, max_blocks});
  table.copy_from_bytes(ids.data(), ids.size() * 4);
  return table;
}

TensorBuffer reversed_rows(int64_t b) {
  std::vector<int32_t> idx(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) idx[i] = static_cast<int32_t>(b - 1 - i);
  TensorBuffer rows(DType::i32, {b});
  rows.copy_from_bytes(idx.data(), idx.size() * 4);
  return rows;
}

std::pair<TensorBuffer, TensorBuffer> rotary_tables(int64_t rows, int64_t rotary_dim, DType t) {
  const int64_t half = rotary_dim / 2;
  std::vector<double> cs, sn;
  for (int64_t p = 0; p < rows; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / rotary_dim);
      cs.push_back(std::cos(angle));
      sn.push_back(std::sin(angle));
    }
  TensorBuffer cos(t, {rows, half}), sin(t, {rows, half});
  cos.copy_from(cs);
  sin.copy_from(sn);
  return {std::move(cos), std::move(sin)};
}

RandomCache random_cache(std::mt19937_64& rng, int64_t b, int64_t s_new, int64_t block_size, int64_t most,
                         bool all_full) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  RandomCache c;
  const int64_t positions = pick(std::max<int64_t>(s_new, 1), most);
  c.capacity = block_size ? (positions + block_size - 1) / block_size * block_size : positions;
  const int64_t room = c.capacity - s_new;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t kind = all_full ? 0 : pick(0, 3);  // full, empty, anything
    c.lens.push_back(static_cast<int32_t>(kind == 0 ? room : kind == 1 ? 0 : pick(0, room)));
  }
  return c;
}

}  // namespace attn::testing
