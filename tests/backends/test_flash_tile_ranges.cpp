// The flash library's tile ranges (tile_ranges.h) against the mask rule row by row:
// the query tiles that kv_tiles() says see a KV tile include every tile that
// does and form one run inside q_tiles()'s superset, and a tile that
// unmasked_q_tiles() exempts from the per-element mask has every valid row
// seeing every key of the KV tile (and agrees with kv_tiles()'s own test
// wherever no row is empty).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "attn/mask_rule.h"
#include "backends/flash/tile_ranges.h"

namespace attn::flash_sm80 {
namespace {

struct Case {
  int len_q, len_kv;
  bool bottom_right;
  int64_t left, right;
  std::string name() const {
    return "len_q " + std::to_string(len_q) + " len_kv " + std::to_string(len_kv) + (bottom_right ? " br" : " tl") +
           " window " + std::to_string(left) + "," + std::to_string(right);
  }
  flash::FwdParams params() const {
    flash::FwdParams p;
    p.window_left = left;
    p.window_right = right;
    p.bottom_right = bottom_right;
    return p;
  }
  flash::SeqExtent extent() const {
    flash::SeqExtent s;
    s.len_q = len_q;
    s.len_kv = len_kv;
    s.shift = alignment_shift<int>(bottom_right, len_q, len_kv);
    return s;
  }
};

template <int kM, int kN>
void check(const Case& c) {
  SCOPED_TRACE(c.name() + " kM " + std::to_string(kM) + " kN " + std::to_string(kN));
  const flash::FwdParams p = c.params();
  const flash::SeqExtent s = c.extent();
  auto keys = [&](int i) { return visible_keys<int64_t>(i, s.len_q, s.len_kv, s.shift, c.left, c.right); };
  const int m_tiles = (c.len_q + kM - 1) / kM, n_tiles = (c.len_kv + kN - 1) / kN;
  for (int n = 0; n < n_tiles; ++n) {
    const int n0 = n * kN, n1 = n0 + kN;
    const flash::QTiles superset = flash::q_tiles<kM, kN>(p, s, n0), unmasked = flash::unmasked_q_tiles<kM, kN>(p, s, n0);
    int first_seen = -1, last_seen = -1;
    for (int m = 0; m < m_tiles; ++m) {
      const int m0 = m * kM, rows_end = std::min(m0 + kM, c.len_q);
      bool sees = false, all_see_all = true, some_row_empty = false;
      for (int i = m0; i < rows_end; ++i) {
        const KeyRange<int64_t> r = keys(i);
        sees = sees || (r.begin < r.end && r.begin < n1 && r.end > n0);
        all_see_all = all_see_all && r.begin <= n0 && r.end >= n1;
        some_row_empty = some_row_empty || r.empty();
      }
      // The backward walks the query tiles kv_tiles() says see n (a superset
      // of those that do: it counts rows past the keys' end as seeing them);
      // they must form one run, or its deterministic counters would stall.
      const flash::KvTiles kt = flash::kv_tiles<kM, kN>(p, s, m0);
      const bool walked = kt.first <= n && n <= kt.last;
      if (sees) ASSERT_TRUE(walked) << "kv_tiles misses query tile " << m << ", KV tile " << n;
      if (!walked) continue;
      ASSERT_TRUE(superset.first <= m && m <= superset.last) << "q_tiles misses query tile " << m << ", KV tile " << n;
      ASSERT_TRUE(first_seen < 0 || last_seen == m - 1) << "a gap before query tile " << m << ", KV tile " << n;
      if (first_seen < 0) first_seen = m;
      last_seen = m;
      const bool exempt = unmasked.first <= m && m <= unmasked.last;
      const bool kv_exempt = n0 >= kt.all_begin && n1 <= kt.all_end;
      if (exempt) ASSERT_TRUE(all_see_all) << "unmasked query tile " << m << " has a row that misses a key, KV tile " << n;
      if (!some_row_empty) ASSERT_EQ(exempt, kv_exempt) << "query tile " << m << ", KV tile " << n;
    }
  }
}

void check_all(const Case& c) {
  check<64, 64>(c);
  check<64, 128>(c);
  check<128, 128>(c);
  check<128, 64>(c);
}

TEST(Sm80TileRanges, MatchTheMaskRuleOnEdges) {
  for (int len_q : {1, 63, 64, 65, 200})
    for (int len_kv : {1, 64, 127, 300})
      for (bool br : {false, true})
        for (int64_t left : {-1, 0, 1, 64, 100})
          for (int64_t right : {-1, 0, 1, 70}) check_all({len_q, len_kv, br, left, right});
}

TEST(Sm80TileRanges, MatchTheMaskRuleOnRandomProblems) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    Case c;
    c.len_q = 1 + static_cast<int>(rng() % 700);
    c.len_kv = 1 + static_cast<int>(rng() % 700);
    c.bottom_right = rng() % 2;
    c.left = rng() % 3 == 0 ? -1 : static_cast<int64_t>(rng() % 800);
    c.right = rng() % 3 == 0 ? -1 : static_cast<int64_t>(rng() % 300);
    check_all(c);
  }
}

// For every row of the sequence: row_key_end() (the end-only masks' 32-bit
// end) decides every key at or past the row's first key as the rule does, and
// with row_key_begin() (the backward's bit masks) every key, an empty row's
// included.
void check_row_key_bounds(const Case& c) {
  SCOPED_TRACE(c.name());
  const flash::FwdParams p = c.params();
  const flash::SeqExtent s = c.extent();
  for (int i = 0; i < c.len_q; ++i) {
    const KeyRange<int> keys = flash::row_keys(p, s, i);
    const int begin = flash::row_key_begin(p, s, i), end = flash::row_key_end(p, s, i);
    for (int j = -2; j <= c.len_kv + 2; ++j) {
      if (j >= keys.begin) ASSERT_EQ(j < end, keys.contains(j)) << "row " << i << ", key " << j << ", end " << end;
      ASSERT_EQ(begin <= j && j < end, keys.contains(j)) << "row " << i << ", key " << j << ", bounds " << begin
                                                          << ".." << end;
    }
  }
}

TEST(Sm80TileRanges, RowKeyBoundsMatchTheRule) {
  const int64_t huge = int64_t{1} << 40;
  for (int len_q : {1, 63, 200})
    for (int len_kv : {1, 64, 300})
      for (bool br : {false, true})
        for (int64_t left : {int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{64}, int64_t{450}, huge})
          for (int64_t right : {int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{70}, huge})
            check_row_key_bounds({len_q, len_kv, br, left, right});
  std::mt19937 rng(13);
  for (int trial = 0; trial < 200; ++trial) {
    const int len_q = 1 + static_cast<int>(rng() % 500), len_kv = 1 + static_cast<int>(rng() % 500);
    const int64_t left = rng() % 3 == 0 ? -1 : static_cast<int64_t>(rng() % 1200);
    const int64_t right = rng() % 3 == 0 ? -1 : static_cast<int64_t>(rng() % 1200);
    check_row_key_bounds({len_q, len_kv, rng() % 2 == 1, left, right});
  }
}

// Element k of a thread's accumulator row is column 8 (k / 2) + k % 2 past
// the thread's first one (mma.cuh): accumulator_prefix(end) counts those
// before `end`, and they are the first ones.
TEST(Sm80TileRanges, AccumulatorPrefixCountsTheVisibleElements) {
  for (int end = -40; end <= 200; ++end) {
    const int count = flash::accumulator_prefix(end);
    for (int k = 0; k < 48; ++k) {
      const int column = 8 * (k / 2) + k % 2;
      ASSERT_EQ(column < end, k < count) << "end " << end << ", element " << k;
    }
  }
}

}  // namespace
}  // namespace attn::flash_sm80
