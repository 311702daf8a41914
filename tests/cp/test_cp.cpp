// Context parallelism on the CPU: the plan (rule, the fallback's layout, chunk
// ownership, causal block skipping, windows); the ring passes are in test_ring.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <thread>
#include <vector>

#include "attn/cp.h"
#include "testing/case.h"

namespace attn {
namespace {

TEST(ContextParallel, LengthsMustDivideBy2Cp) {
  EXPECT_NO_THROW(cp::check_lengths({8, 16, 0}, 2));
  try {
    cp::check_lengths({8, 1}, 2);
    FAIL() << "length 1 must be refused over 2 ranks";
  } catch (const Error& e) {
    EXPECT_NE(e.info().what.find("sequence 1"), std::string::npos) << e.info().what;
    EXPECT_NE(e.info().got.find("length 1"), std::string::npos);
    EXPECT_NE(e.info().expected.find("divisible by 2*cp = 4"), std::string::npos);
    EXPECT_NE(e.info().fix.find("pad the sequence to a multiple of 4"), std::string::npos);
  }
}

TEST(ContextParallel, FirstRuleBreakerNamesTheFirstSequence) {
  EXPECT_EQ(cp::first_rule_breaker({8, 16, 0}, 2), -1);
  EXPECT_EQ(cp::first_rule_breaker({8, 1, 3}, 2), 1);
  EXPECT_EQ(cp::first_rule_breaker({7, 8}, 2), 0);
  EXPECT_EQ(cp::first_rule_breaker({2, 1}, 1), 1);  // cp 1 still cuts into 2 chunks
  EXPECT_EQ(cp::first_rule_breaker({}, 3), -1);
  EXPECT_THROW(cp::first_rule_breaker({8}, 0), Error);
}

TEST(ContextParallel, TheRuleErrorTakesTheCallersFallbackSpelling) {
  try {
    cp::check_lengths({12, 7}, 3, "pass cp_fallback=True");
    FAIL() << "length 7 must be refused over 3 ranks";
  } catch (const Error& e) {
    EXPECT_EQ(e.info().what, "sequence 1 cannot be split for context parallelism over 3 ranks");
    EXPECT_EQ(e.info().got, "length 7");
    EXPECT_NE(e.info().expected.find("divisible by 2*cp = 6"), std::string::npos) << e.info().expected;
    EXPECT_EQ(e.info().fix, "pad the sequence to a multiple of 6, or pass cp_fallback=True");
  }
}

TEST(ContextParallel, TheFallbackIsAllOrNothing) {
  EXPECT_FALSE(cp::uses_fallback({8, 16}, 2, false));
  EXPECT_FALSE(cp::uses_fallback({8, 16}, 2, true));  // every sequence keeps the rule: the ring's chunks
  EXPECT_TRUE(cp::uses_fallback({8, 1, 16}, 2, true));  // one breaker sends the whole batch
  EXPECT_THROW(cp::uses_fallback({8, 1}, 2, false), Error);
  try {
    cp::uses_fallback({9}, 2, false, "say so");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.info().fix, "pad the sequence to a multiple of 4, or say so");
  }
}

TEST(ContextParallel, FallbackPiecesTileEachSequence) {
  // Brute force: the pieces of ranks 0..cp-1 are contiguous, in rank order,
  // cover [0, n) once, and differ in size by at most one row (empty for n < cp).
  for (int cp : {1, 2, 3, 4, 5})
    for (int64_t n = 0; n <= 13; ++n) {
      SCOPED_TRACE("cp=" + std::to_string(cp) + " n=" + std::to_string(n));
      int64_t next = 0, smallest = n, largest = 0;
      for (int r = 0; r < cp; ++r) {
        const cp::Piece p = cp::fallback_piece(n, r, cp);
        EXPECT_EQ(p.begin, next);
        EXPECT_LE(p.begin, p.end);
        next = p.end;
        smallest = std::min(smallest, p.end - p.begin);
        largest = std::max(largest, p.end - p.begin);
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(largest - smallest, 1);
    }
  EXPECT_EQ(cp::fallback_piece(1, 0, 2).end, 0);  // length 1 over 2 ranks: rank 0 holds nothing
  EXPECT_EQ(cp::fallback_piece(1, 1, 2).begin, 0);
  EXPECT_THROW(cp::fallback_piece(8, 2, 2), Error);
  EXPECT_THROW(cp::fallback_piece(-1, 0, 2), Error);
}

TEST(ContextParallel, RankPositionsAreChunksOrPieces) {
  // The ring's layout: chunk r then chunk 2cp-1-r of each packed sequence.
  EXPECT_EQ(cp::rank_positions({8}, 0, 2, false), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(cp::rank_positions({8}, 1, 2, false), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(cp::rank_positions({4, 8}, 1, 2, false), (std::vector<int64_t>{1, 2, 6, 7, 8, 9}));
  EXPECT_THROW(cp::rank_positions({4, 7}, 0, 2, false), Error);  // the ring's layout needs the rule
  // The fallback's layout: each sequence's piece.
  EXPECT_EQ(cp::rank_positions({7, 1}, 0, 2, true), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(cp::rank_positions({7, 1}, 1, 2, true), (std::vector<int64_t>{3, 4, 5, 6, 7}));
  // Either way, every position of the batch is held by exactly one rank, and
  // fallback_rows counts what each rank holds.
  for (int cp : {1, 2, 3})
    for (bool fallback : {false, true}) {
      const std::vector<int64_t> lengths =
          fallback ? std::vector<int64_t>{5, 0, 1, 12} : std::vector<int64_t>{2 * cp, 0, 6 * cp};
      int64_t total = 0;
      for (int64_t n : lengths) total += n;
      std::vector<int> held(static_cast<size_t>(total), 0);
      const std::vector<int64_t> rows = cp::fallback_rows(lengths, cp);
      for (int r = 0; r < cp; ++r) {
        const std::vector<int64_t> pos = cp::rank_positions(lengths, r, cp, fallback);
        for (int64_t p : pos) ++held[static_cast<size_t>(p)];
        if (fallback) EXPECT_EQ(static_cast<int64_t>(pos.size()), rows[static_cast<size_t>(r)]);
      }
      for (int h : held) EXPECT_EQ(h, 1) << "cp=" << cp << " fallback=" << fallback;
    }
}

TEST(ContextParallel, EachRankHoldsAChunkFromEitherEnd) {
  EXPECT_EQ(cp::chunks_of(0, 4).first, 0);
  EXPECT_EQ(cp::chunks_of(0, 4).second, 7);
  EXPECT_EQ(cp::chunks_of(3, 4).first, 3);
  EXPECT_EQ(cp::chunks_of(3, 4).second, 4);
  // Every chunk is held exactly once.
  for (int size : {1, 2, 3, 5}) {
    std::vector<int> held(2 * size, 0);
    for (int r = 0; r < size; ++r) {
      ++held[cp::chunks_of(r, size).first];
      ++held[cp::chunks_of(r, size).second];
    }
    for (int h : held) EXPECT_EQ(h, 1);
  }
}

TEST(ContextParallel, CausalBlocksAreSkippedAboveTheDiagonal) {
  EXPECT_EQ(cp::block_kind(3, 1, true), cp::Block::full);
  EXPECT_EQ(cp::block_kind(2, 2, true), cp::Block::diagonal);
  EXPECT_EQ(cp::block_kind(1, 3, true), cp::Block::skip);
  EXPECT_EQ(cp::block_kind(1, 3, false), cp::Block::full);
  // Balanced: over the ring, every rank computes the same number of blocks.
  for (int size : {2, 3, 4}) {
    std::vector<int> work(size, 0);
    for (int r = 0; r < size; ++r)
      for (int s = 0; s < size; ++s)
        for (int64_t qc : {cp::chunks_of(r, size).first, cp::chunks_of(r, size).second})
          for (int64_t kc : {cp::chunks_of(s, size).first, cp::chunks_of(s, size).second})
            work[r] += cp::block_kind(qc, kc, true) == cp::Block::full ? 2 : cp::block_kind(qc, kc, true) == cp::Block::diagonal ? 1 : 0;
    for (int w : work) EXPECT_EQ(w, work[0]) << "cp=" << size;
  }
}

TEST(ContextParallel, PlanCoversEveryVisiblePairOnce) {
  // Brute force: for every rank and step, the calls' (query, key) pairs, mapped
  // to global positions, must be exactly the pairs the whole mask allows.
  struct Mask {
    bool causal;
    Window window;
  };
  for (int cp : {1, 2, 3, 4})
    for (int64_t c : {1, 3, 5})
      for (Mask m : {Mask{false, {}}, Mask{true, {}}, Mask{true, {4, -1}}, Mask{false, {3, 2}}, Mask{false, {0, 7}},
                     Mask{true, {1, -1}}, Mask{false, {-1, 2}}})
        for (bool per_chunk : {false, true}) {
          const bool windowed = m.window.left >= 0 || m.window.right >= 0;
          if (!per_chunk && windowed) continue;  // windows always plan per chunk
          SCOPED_TRACE("cp=" + std::to_string(cp) + " c=" + std::to_string(c) + " causal=" + std::to_string(m.causal) +
                       " window=(" + std::to_string(m.window.left) + "," + std::to_string(m.window.right) + ")");
          const int64_t len = 2 * cp * c;
          std::vector<int> seen(static_cast<size_t>(len * len), 0);
          for (int r = 0; r < cp; ++r)
            for (int t = 0; t < cp; ++t) {
              const int source = (r - t + cp) % cp;
              auto global = [&](int rank, int64_t local) {
                const cp::Chunks ch = cp::chunks_of(rank, cp);
                return local < c ? ch.first * c + local : ch.second * c + local - c;
              };
              for (const cp::BlockCall& call : cp::plan_step(r, t, cp, c, m.causal, m.window, per_chunk)) {
                const int64_t nq = call.q_end - call.q_begin, nk = call.kv_end - call.kv_begin;
                ASSERT_GT(nq, 0);
                ASSERT_GT(nk, 0);
                // The block's own rule (SEMANTICS.md, bottom-right windows; causal = right 0).
                const int64_t shift = call.mask == MaskType::causal ? 0 : nk - nq, left = call.window.left;
                const int64_t right = call.mask == MaskType::causal ? 0 : call.window.right;
                for (int64_t i = 0; i < nq; ++i)
                  for (int64_t j = 0; j < nk; ++j) {
                    const bool vis = (left < 0 || j >= i + shift - left) && (right < 0 || j <= i + shift + right);
                    if (vis) ++seen[global(r, call.q_begin + i) * len + global(source, call.kv_begin + j)];
                  }
              }
            }
          const int64_t left = m.window.left, right = m.causal ? 0 : m.window.right;
          for (int64_t i = 0; i < len; ++i)
            for (int64_t j = 0; j < len; ++j) {
              const int want = (left < 0 || j >= i - left) && (right < 0 || j <= i + right);
              ASSERT_EQ(seen[i * len + j], want) << "pair " << i << "," << j;
            }
        }
}

TEST(ContextParallel, CausalStepsAreOneCallEach) {
  // The coalesced plan: one call per step; a window far from a block skips it.
  for (int cp : {2, 3})
    for (int r = 0; r < cp; ++r)
      for (int t = 0; t < cp; ++t) EXPECT_EQ(cp::plan_step(r, t, cp, 8, true, {}, false).size(), 1u);
  // cp 4, chunk 8, causal window 4: rank 0's chunks 0 and 7 see only themselves
  // and their left neighbour, so at most two steps do work.
  int busy = 0;
  for (int t = 0; t < 4; ++t) busy += !cp::plan_step(0, t, 4, 8, true, {4, -1}, true).empty();
  EXPECT_EQ(busy, 2);
  Options o;
  o.mask = MaskType::causal;
  o.window = {4, -1};
  const std::string plan = cp::describe_plan(o, 4, 8);
  EXPECT_NE(plan.find("rank 0: chunks 0 and 7"), std::string::npos) << plan;
  EXPECT_NE(plan.find("2 steps skipped"), std::string::npos) << plan;
}

}  // namespace
}  // namespace attn
