// flash_sm90's deterministic dQ order (bwd_dq_order.h), walked on the CPU
// as the backward's CTAs walk their query tiles (bwd_kv_block.cuh): for
// every query tile, the KV tiles that add into it take turns 0, 1, ... once
// each (else its counter stalls); the turns wait only on CTAs launched
// earlier (no deadlock, however few SMs the call gets); and in the
// descending order they follow the order in which the walks reach the tile,
// so the CTAs do not wait on each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "attn/mask_rule.h"
#include "backends/flash/tile_ranges.h"
#include "backends/flash_sm90/bwd_dq_order.h"

namespace attn::flash_sm90 {
namespace {

constexpr int kM = 64;  // the backward's query tiles; KV tiles of kN = 128 keys (64 at d 256)

struct Walk {
  int n;
  flash::QTiles mt;
  int step_of(int m) const { return m - mt.first; }  // where the walk reaches query tile m
};

template <int kN>
void check(int len_q, int len_kv, bool bottom_right, int64_t left, int64_t right, int order) {
  SCOPED_TRACE("kN " + std::to_string(kN) + " len_q " + std::to_string(len_q) + " len_kv " + std::to_string(len_kv) + " window " +
               std::to_string(left) + "," + std::to_string(right) + (bottom_right ? " br" : " tl") + " order " +
               std::to_string(order));
  flash::FwdParams p;
  p.window_left = left;
  p.window_right = right;
  p.bottom_right = bottom_right;
  flash::SeqExtent s;
  s.len_q = len_q;
  s.len_kv = len_kv;
  s.shift = alignment_shift<int>(bottom_right, len_q, len_kv);
  const int n_tiles = (len_kv + kN - 1) / kN, m_tiles = (len_q + kM - 1) / kM;
  std::vector<Walk> walks;
  for (int n = 0; n < n_tiles; ++n) {  // bwd_kv_block's trim
    Walk w{n, flash::q_tiles<kM, kN>(p, s, n * kN)};
    auto sees = [&](int m) {
      const flash::KvTiles kt = flash::kv_tiles<kM, kN>(p, s, m * kM);
      return kt.first <= n && n <= kt.last;
    };
    while (w.mt.first <= w.mt.last && !sees(w.mt.first)) ++w.mt.first;
    while (w.mt.first <= w.mt.last && !sees(w.mt.last)) --w.mt.last;
    if (w.mt.first > w.mt.last) continue;
    walks.push_back(w);
  }
  for (int m = 0; m < m_tiles; ++m) {
    const flash::KvTiles kt = flash::kv_tiles<kM, kN>(p, s, m * kM);
    const int last = last_adding_kv_tile(kt.last, len_kv, kN);
    std::vector<const Walk*> by_turn(std::max(0, last - kt.first + 1), nullptr);
    for (const Walk& w : walks) {
      if (m < w.mt.first || m > w.mt.last) continue;
      const int turn = dq_turn(order, kt.first, last, w.n);
      ASSERT_TRUE(turn >= 0 && turn < static_cast<int>(by_turn.size())) << "query tile " << m << ", KV tile " << w.n;
      ASSERT_EQ(by_turn[turn], nullptr) << "two KV tiles with turn " << turn << " at query tile " << m;
      by_turn[turn] = &w;
    }
    for (size_t t = 0; t < by_turn.size(); ++t) {
      ASSERT_NE(by_turn[t], nullptr) << "no KV tile takes turn " << t << " at query tile " << m;
      if (t == 0) continue;
      const Walk &before = *by_turn[t - 1], &after = *by_turn[t];
      if (order == kDqAscending) EXPECT_LT(before.n, after.n);  // launched first
      if (order == kDqDescending) EXPECT_GT(before.n, after.n);  // the grid runs in reverse
      if (order == kDqDescending) EXPECT_LE(before.step_of(m), after.step_of(m)) << "query tile " << m;
    }
  }
}

template <int kN>
void check_orders() {
  for (int len_q : {1, 64, 65, 200, 1000})
    for (int len_kv : {1, 64, 128, 129, 700, 1000})
      for (bool br : {false, true}) {
        check<kN>(len_q, len_kv, br, -1, -1, kDqAscending);
        for (int64_t left : {-1, 0, 100, 300}) check<kN>(len_q, len_kv, br, left, 0, kDqDescending);
        check<kN>(len_q, len_kv, br, 200, 50, kDqDescending);
        check<kN>(len_q, len_kv, br, 100, -1, kDqAscending);
      }
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int len_q = 1 + static_cast<int>(rng() % 3000), len_kv = 1 + static_cast<int>(rng() % 3000);
    const bool br = rng() % 2;
    check<kN>(len_q, len_kv, br, -1, -1, kDqAscending);
    check<kN>(len_q, len_kv, br, rng() % 2 ? -1 : static_cast<int64_t>(rng() % 1000),
              static_cast<int64_t>(rng() % 200), kDqDescending);
  }
}

TEST(Sm90DqOrder, TurnsArePermutationsInArrivalOrder) {
  check_orders<128>();
  check_orders<64>();  // d 256's KV tiles
}

TEST(Sm90DqOrder, PlanPicksTheOrderByMask) {
  EXPECT_EQ(dq_order(0), kDqDescending);    // causal
  EXPECT_EQ(dq_order(256), kDqDescending);  // a window with a right edge
  EXPECT_EQ(dq_order(-1), kDqAscending);    // every key, or a left edge only
}

}  // namespace
}  // namespace attn::flash_sm90
