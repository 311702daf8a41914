// Context parallelism on the CPU: the plan (rule, chunk ownership, causal block
// skipping) and the ring forward of cp in-process ranks against the same
// problem computed whole, in fp64.
#include <gtest/gtest.h>

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

// cp ranks in one process: each ring step hands every buffer to the next rank.
class LocalRing {
 public:
  explicit LocalRing(int size) : size_(size), mail_(size), sync_(size) {}
  class Endpoint : public cp::Transport {
   public:
    Endpoint(LocalRing& ring, int rank) : ring_(ring), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return ring_.size_; }
    void ring_step(const void* send, void* recv, int64_t bytes) override {
      const auto* s = static_cast<const unsigned char*>(send);
      ring_.mail_[(rank_ + 1) % ring_.size_].assign(s, s + bytes);
      ring_.sync_.arrive_and_wait();
      std::copy(ring_.mail_[rank_].begin(), ring_.mail_[rank_].end(), static_cast<unsigned char*>(recv));
      ring_.sync_.arrive_and_wait();
    }

   private:
    LocalRing& ring_;
    int rank_;
  };

 private:
  int size_;
  std::vector<std::vector<unsigned char>> mail_;
  std::barrier<> sync_;
};

// Rows [start, start + n) of the sequence dimension of a contiguous [b, s, h, d] buffer.
std::vector<double> rows(const std::vector<double>& x, int64_t b, int64_t s, int64_t hd, int64_t start, int64_t n) {
  std::vector<double> out;
  for (int64_t bb = 0; bb < b; ++bb)
    for (int64_t i = start; i < start + n; ++i)
      out.insert(out.end(), x.begin() + (bb * s + i) * hd, x.begin() + (bb * s + i + 1) * hd);
  return out;
}

TEST(ContextParallel, RingForwardEqualsTheWholeSequence) {
  Policy ref;
  ref.forced = "reference";
  for (int size : {1, 2, 3})
    for (MaskType mask : {MaskType::no_mask, MaskType::causal}) {
      SCOPED_TRACE("cp=" + std::to_string(size) + " mask=" + mask_name(mask));
      testing::CaseSpec s;
      s.dtype = DType::f64;
      s.mask = mask;
      s.batch = 2;
      const int64_t chunk = 5, len = 2 * size * chunk;
      s.s_q = s.s_kv = len;
      s.h_q = 4;
      s.h_kv = 2;
      s.d_qk = 8;
      s.d_v = 6;
      s.return_lse = true;
      testing::Case whole = testing::make_case(s, Device::cpu(), 21 + size);
      forward(whole.opts, whole.fwd, {}, ref);
      const std::vector<double> q = whole.q.to_doubles(), k = whole.k.to_doubles(), v = whole.v.to_doubles();
      const std::vector<double> out = whole.out.to_doubles(), lse = whole.lse.to_doubles();

      LocalRing ring(size);
      std::vector<testing::TensorBuffer> lq, lk, lv, lo, ll;
      for (int r = 0; r < size; ++r) {
        const cp::Chunks c = cp::chunks_of(r, size);
        auto shard = [&](const std::vector<double>& x, int64_t h, int64_t d) {
          std::vector<double> part = rows(x, s.batch, len, h * d, c.first * chunk, chunk);
          std::vector<double> second = rows(x, s.batch, len, h * d, c.second * chunk, chunk);
          std::vector<double> joined;  // per batch: first chunk then second chunk
          for (int64_t bb = 0; bb < s.batch; ++bb) {
            joined.insert(joined.end(), part.begin() + bb * chunk * h * d, part.begin() + (bb + 1) * chunk * h * d);
            joined.insert(joined.end(), second.begin() + bb * chunk * h * d, second.begin() + (bb + 1) * chunk * h * d);
          }
          testing::TensorBuffer t(DType::f64, {s.batch, 2 * chunk, h, d});
          t.copy_from(joined);
          return t;
        };
        lq.push_back(shard(q, s.h_q, s.d_qk));
        lk.push_back(shard(k, s.h_kv, s.d_qk));
        lv.push_back(shard(v, s.h_kv, s.d_v));
        lo.emplace_back(DType::f64, std::vector<int64_t>{s.batch, 2 * chunk, s.h_q, s.d_v});
        ll.emplace_back(DType::f32, std::vector<int64_t>{s.batch, s.h_q, 2 * chunk});
      }
      std::vector<std::thread> ranks;
      std::vector<std::string> errors(size);
      for (int r = 0; r < size; ++r)
        ranks.emplace_back([&, r] {
          LocalRing::Endpoint ep(ring, r);
          ForwardArgs a;
          a.in.q = lq[r].view(), a.in.k = lk[r].view(), a.in.v = lv[r].view();
          a.out = lo[r].view(), a.lse = ll[r].view();
          Options o = whole.opts;
          try {
            cp::ring_forward(o, a, ep, ref);
          } catch (const Error& e) {
            errors[r] = e.what();
          }
        });
      for (auto& t : ranks) t.join();
      for (int r = 0; r < size; ++r) {
        ASSERT_EQ(errors[r], "") << "rank " << r;
        const cp::Chunks c = cp::chunks_of(r, size);
        const std::vector<double> got = lo[r].to_doubles(), got_lse = ll[r].to_doubles();
        double worst = 0.0, worst_lse = 0.0;
        for (int64_t bb = 0; bb < s.batch; ++bb)
          for (int half = 0; half < 2; ++half)
            for (int64_t i = 0; i < chunk; ++i) {
              const int64_t global = (half ? c.second : c.first) * chunk + i, local = half * chunk + i;
              for (int64_t e = 0; e < s.h_q * s.d_v; ++e)
                worst = std::max(worst, std::fabs(got[(bb * 2 * chunk + local) * s.h_q * s.d_v + e] -
                                                  out[(bb * len + global) * s.h_q * s.d_v + e]));
              for (int64_t h = 0; h < s.h_q; ++h)
                worst_lse = std::max(worst_lse, std::fabs(got_lse[(bb * s.h_q + h) * 2 * chunk + local] -
                                                          lse[(bb * s.h_q + h) * len + global]));
            }
        // Blocks merge by their lse, which attn returns in fp32: weights carry ~1e-7 relative error.
        EXPECT_LT(worst, 1e-6) << "rank " << r << " out";
        EXPECT_LT(worst_lse, 1e-5) << "rank " << r << " lse (fp32)";
      }
    }
}

}  // namespace
}  // namespace attn
