// flash::block_index / block_row (cache_params.h): a paged position's block
// and row from a multiply and a shift (flash::fast_div, fast_div.h), equal to
// / and % for every block size a cache may have and every position up to
// 2^31 - 1; and next_block_position, which steps a position by additions
// (flash_sm90's paged producer, tile by tile), equal to the divisions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "backends/flash/cache_params.h"

namespace attn::flash {
namespace {

TEST(CacheBlockIndex, EqualsDivisionForEveryBlockSizeAndPosition) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> any(0, INT32_MAX);
  std::vector<int> sizes;
  for (int s = 1; s <= 1024; ++s) sizes.push_back(s);
  for (int s : {4095, 4096, 65537, 1 << 20, (1 << 30) + 1, INT32_MAX}) sizes.push_back(s);
  for (int size : sizes) {
    CacheParams c;
    set_block_size(c, size);
    std::vector<int> js{0, 1, size - 1, size, INT32_MAX, INT32_MAX - 1, INT32_MAX - size + 1};
    for (int k = 1; k <= 8; ++k) js.push_back(static_cast<int>(std::min<int64_t>(INT32_MAX, int64_t{k} * size - 1)));
    for (int k = 0; k < 64; ++k) js.push_back(any(rng));
    for (int j : js) {
      if (j < 0) continue;
      ASSERT_EQ(block_index(c, j), j / size) << "block size " << size << ", position " << j;
      ASSERT_EQ(block_row(c, j), j % size) << "block size " << size << ", position " << j;
    }
  }
}

// A walk of KV tiles of `step` keys from a lane's first key, as flash_sm90's
// paged producer makes it: every position's column (clamped to the cache's
// last) and row equal the divisions', past the cache's end too.
TEST(CacheBlockIndex, SteppedPositionsEqualTheDivisions) {
  for (int block : {16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 256, 512})
    for (int step : {80, 112, 128})
      for (int capacity : {block, 3 * block, 1000, 4096 + 48}) {
        CacheParams c;
        set_block_size(c, block);
        c.capacity = capacity;
        const BlockStep s = make_block_step(step, block, capacity);
        ASSERT_EQ(s.blocks * block + s.rows, step);
        ASSERT_LT(s.rows, block);
        for (int first : {0, 16, 48, 64, step - 16, 2 * step + 32}) {
          BlockPosition at = block_position(c, s, first);
          for (int n = 0; first + n * step < capacity + 3 * step; ++n) {
            const int j = first + n * step;
            if (n > 0) at = next_block_position(c, s, at);
            ASSERT_EQ(at.column, std::min(j / block, (capacity - 1) / block))
                << "block " << block << ", step " << step << ", capacity " << capacity << ", position " << j;
            ASSERT_EQ(at.row, j % block) << "block " << block << ", step " << step << ", position " << j;
          }
        }
      }
}

}  // namespace
}  // namespace attn::flash
