// The ring passes of cp in-process ranks (threads, one LocalRing transport)
// against the whole sequence computed at once, in fp64 through the reference:
// out, lse, dq, dk, dv for bshd/sbhd/thd, causal or not, GQA and windows; the
// rule and a mismatch between ranks are errors on every rank, not hangs. The
// same passes over LateRing, whose exchanges complete as late as the Transport
// contract allows, check the ring's ordering: what a step reads has arrived,
// and nothing in flight is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "attn/cp.h"
#include "testing/case.h"

namespace attn {
namespace {

// cp ranks in one process: an exchange hands every send buffer to the next rank.
class LocalRing {
 public:
  explicit LocalRing(int size) : size_(size), mail_(size), sync_(size) {}
  class Endpoint : public cp::Transport {
   public:
    Endpoint(LocalRing& ring, int rank) : ring_(ring), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return ring_.size_; }
    void start(const void* send, void* recv, int64_t bytes) override {
      ++exchanges;
      const auto* s = static_cast<const unsigned char*>(send);
      ring_.mail_[(rank_ + 1) % ring_.size_].assign(s, s + bytes);
      ring_.sync_.arrive_and_wait();
      std::copy(ring_.mail_[rank_].begin(), ring_.mail_[rank_].end(), static_cast<unsigned char*>(recv));
      ring_.sync_.arrive_and_wait();
    }
    void all_gather_host(const void* mine, void* all, int64_t bytes) override {
      const auto* m = static_cast<const unsigned char*>(mine);
      ring_.mail_[rank_].assign(m, m + bytes);
      ring_.sync_.arrive_and_wait();
      for (int r = 0; r < ring_.size_; ++r)
        std::copy(ring_.mail_[r].begin(), ring_.mail_[r].end(), static_cast<unsigned char*>(all) + r * bytes);
      ring_.sync_.arrive_and_wait();
    }
    int exchanges = 0;

   private:
    LocalRing& ring_;
    int rank_;
  };

 private:
  int size_;
  std::vector<std::vector<unsigned char>> mail_;
  std::barrier<> sync_;
};

// cp ranks in one process whose exchanges complete as late as the Transport
// contract allows, as on a GPU where the transfer runs on its own stream: the
// data lands in the receive buffer only when the receiving rank calls wait()
// (its compute is ordered after every exchange started so far); until then the
// buffer holds NaN bytes, so a pass that reads it early computes NaN. Exchanges
// of one rank complete in the order started (one communication stream), so an
// exchange may send what an earlier one is still bringing, and may receive into
// what an earlier one is still sending. A send buffer written, or a receive
// buffer touched, while its exchange is in flight is recorded as a hazard, and
// so is a pass that returns with exchanges in flight (end_pass()).
class LateRing {
 public:
  explicit LateRing(int size) : size_(size), mail_(size), sync_(size) {}
  class Endpoint : public cp::Transport {
   public:
    Endpoint(LateRing& ring, int rank) : ring_(ring), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return ring_.size_; }
    void start(const void* send, void* recv, int64_t bytes) override {
      ++exchanges;
      Pending p;
      p.send = static_cast<const unsigned char*>(send), p.recv = static_cast<unsigned char*>(recv), p.bytes = bytes;
      p.name = "exchange " + std::to_string(exchanges);
      // The bytes sent are the buffer as the communication stream sees it:
      // earlier exchanges still in flight have delivered into it by then.
      p.sent.assign(p.send, p.send + bytes);
      for (const Pending& e : pending_) overlay(e, p.send, p.sent);
      // This exchange writes `recv` after the earlier ones finished reading it:
      // their send buffers must be unchanged up to now.
      for (Pending& e : pending_)
        if (!e.send_checked && overlaps(e.send, e.bytes, p.recv, bytes)) check_send(e);
      ring_.mail_[(rank_ + 1) % ring_.size_] = p.sent;
      ring_.sync_.arrive_and_wait();
      p.data = ring_.mail_[rank_];
      ring_.sync_.arrive_and_wait();
      std::memset(p.recv, 0xFF, static_cast<size_t>(bytes));  // NaN in every float type, until wait()
      pending_.push_back(std::move(p));
    }
    void wait() override {
      // In the order started: each exchange finds the buffers as the earlier ones left them.
      for (size_t i = 0; i < pending_.size(); ++i) {
        Pending& e = pending_[i];
        if (!e.send_checked) check_send(e);
        for (int64_t b = 0; b < e.bytes; ++b) {
          bool refilled = false;  // an earlier exchange of this wait delivered into this byte
          for (size_t j = 0; j < i; ++j) refilled |= inside(pending_[j].recv, pending_[j].bytes, e.recv + b);
          if (!refilled && e.recv[b] != 0xFF) {
            hazards.push_back(e.name + ": its receive buffer was written while the exchange was in flight");
            break;
          }
        }
        std::memcpy(e.recv, e.data.data(), static_cast<size_t>(e.bytes));
      }
      pending_.clear();
    }
    void all_gather_host(const void* mine, void* all, int64_t bytes) override {
      const auto* m = static_cast<const unsigned char*>(mine);
      ring_.mail_[rank_].assign(m, m + bytes);
      ring_.sync_.arrive_and_wait();
      for (int r = 0; r < ring_.size_; ++r)
        std::copy(ring_.mail_[r].begin(), ring_.mail_[r].end(), static_cast<unsigned char*>(all) + r * bytes);
      ring_.sync_.arrive_and_wait();
    }
    // After a pass returns: anything still in flight would land in freed buffers.
    void end_pass(const char* pass) {
      if (!pending_.empty())
        hazards.push_back(std::string(pass) + " returned with " + std::to_string(pending_.size()) +
                          " exchange(s) in flight");
      pending_.clear();
    }
    int exchanges = 0;
    std::vector<std::string> hazards;

   private:
    struct Pending {
      const unsigned char* send;
      unsigned char* recv;
      int64_t bytes;
      std::vector<unsigned char> sent, data;  // what this rank sends, and what it receives
      bool send_checked = false;
      std::string name;
    };
    static bool inside(const unsigned char* p, int64_t n, const unsigned char* x) { return x >= p && x < p + n; }
    static bool overlaps(const unsigned char* a, int64_t na, const unsigned char* b, int64_t nb) {
      return a < b + nb && b < a + na;
    }
    // `out` holds the bytes at `at`: replace those e delivers by its data.
    static void overlay(const Pending& e, const unsigned char* at, std::vector<unsigned char>& out) {
      for (size_t b = 0; b < out.size(); ++b)
        if (inside(e.recv, e.bytes, at + b)) out[b] = e.data[static_cast<size_t>(at + b - e.recv)];
    }
    // The send buffer as the exchange found it, except bytes an earlier exchange
    // still in flight delivers (the buffer holds NaN there until wait()).
    void check_send(Pending& e) {
      e.send_checked = true;
      for (int64_t b = 0; b < e.bytes; ++b) {
        bool delivered_later = false;
        for (const Pending& o : pending_) {
          if (&o == &e) break;
          delivered_later |= inside(o.recv, o.bytes, e.send + b);
        }
        if (!delivered_later && e.send[b] != e.sent[static_cast<size_t>(b)]) {
          hazards.push_back(e.name + ": its send buffer was written while the exchange was in flight");
          return;
        }
      }
    }
    LateRing& ring_;
    int rank_;
    std::vector<Pending> pending_;  // started, not yet waited for, in order
  };

 private:
  int size_;
  std::vector<std::vector<unsigned char>> mail_;
  std::barrier<> sync_;
};

// Runs f(rank, endpoint) on cp threads; returns each rank's error text ("" = none).
template <typename Ring = LocalRing, typename F>
std::vector<std::string> run_ranks(int cp, F f) {
  Ring ring(cp);
  std::vector<std::string> errors(cp);
  std::vector<std::thread> threads;
  for (int r = 0; r < cp; ++r)
    threads.emplace_back([&, r] {
      typename Ring::Endpoint ep(ring, r);
      try {
        f(r, ep);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// Global positions along the sequence dimension of rank r's local rows, in
// local order (per sequence: chunk r, then chunk 2cp-1-r). thd: token indices.
std::vector<int64_t> local_positions(const std::vector<int64_t>& lengths, bool thd, int r, int cp) {
  std::vector<int64_t> pos;
  int64_t start = 0;
  for (int64_t len : thd ? lengths : std::vector<int64_t>{lengths[0]}) {
    const int64_t c = len / (2 * cp);
    const cp::Chunks ch = cp::chunks_of(r, cp);
    for (int64_t i = 0; i < 2 * c; ++i) pos.push_back(start + (i < c ? ch.first * c + i : ch.second * c + i - c));
    start += len;
  }
  return pos;
}

// x (contiguous, `shape`) restricted to positions `pos` along `dim`.
std::vector<double> take(const std::vector<double>& x, const std::vector<int64_t>& shape, int dim,
                         const std::vector<int64_t>& pos, std::vector<int64_t>& out_shape) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t p : pos) out.insert(out.end(), x.begin() + (o * shape[dim] + p) * inner, x.begin() + (o * shape[dim] + p + 1) * inner);
  out_shape = shape;
  out_shape[dim] = static_cast<int64_t>(pos.size());
  return out;
}

testing::TensorBuffer shard_of(const testing::TensorBuffer& whole, int dim, const std::vector<int64_t>& pos) {
  std::vector<int64_t> shape;
  const std::vector<double> part = take(whole.to_doubles(), whole.shape(), dim, pos, shape);
  testing::TensorBuffer t(whole.view().dtype, shape);
  t.copy_from(part);
  return t;
}

double max_diff(const testing::TensorBuffer& got, const testing::TensorBuffer& whole, int dim,
                const std::vector<int64_t>& pos) {
  std::vector<int64_t> shape;
  const std::vector<double> want = take(whole.to_doubles(), whole.shape(), dim, pos, shape), g = got.to_doubles();
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::isinf(want[i]) && want[i] == g[i] ? 0.0 : std::fabs(g[i] - want[i]);
    worst = std::max(worst, std::isnan(d) ? 1e30 : d);
  }
  return worst;
}

struct RingCase {
  QkvFormat format;
  MaskType mask;
  Window window;
  SoftmaxType softmax = SoftmaxType::vanilla;  // learnable: dsink checked too
  bool max_logit = false;
};

// The ring's passes on cp ranks against the whole sequence; Ring: LocalRing
// (exchanges complete at once) or LateRing (as late as allowed, hazards checked).
template <typename Ring = LocalRing>
void check_ring(const RingCase& rc, int cp, uint64_t seed) {
  Policy ref;
  ref.forced = "reference";
  std::mt19937_64 rng(seed);
  testing::CaseSpec s;
  s.format = rc.format;
  s.dtype = DType::f64;
  s.mask = rc.mask;
  s.window = rc.window;
  s.h_q = 4;
  s.h_kv = 2;
  s.d_qk = 8;
  s.d_v = 6;
  s.backward = true;
  s.softmax_type = rc.softmax;
  s.return_max_logit = rc.max_logit;
  const bool thd = rc.format == QkvFormat::thd;
  std::vector<int64_t> lengths;
  if (thd) {
    s.batch = 3;
    for (int b = 0; b < 3; ++b) lengths.push_back(2 * cp * (1 + static_cast<int64_t>(rng() % 4)));
    s.seqlens_q = lengths;
  } else {
    s.batch = 2;
    s.s_q = s.s_kv = 2 * cp * (2 + static_cast<int64_t>(rng() % 3));
    lengths = {s.s_q, s.s_q};
  }
  SCOPED_TRACE(std::string(format_name(rc.format)) + " " + mask_name(rc.mask) + " " + softmax_type_name(rc.softmax) +
               (rc.max_logit ? " max_logit" : "") + " window=(" +
               std::to_string(rc.window.left) + "," + std::to_string(rc.window.right) + ") cp=" + std::to_string(cp));
  testing::Case whole = testing::make_case(s, Device::cpu(), rng());
  forward(whole.opts, whole.fwd, {}, ref);
  backward(whole.opts, whole.bwd, {}, ref);

  const int seq = rc.format == QkvFormat::bshd ? 1 : 0, lse_dim = thd ? 1 : 2;
  std::vector<std::vector<int64_t>> pos;
  struct Local {
    testing::TensorBuffer q, k, v, dout, out, lse, dq, dk, dv, max_logit, dsink;
  };
  std::vector<Local> local(cp);
  for (int r = 0; r < cp; ++r) {
    pos.push_back(local_positions(lengths, thd, r, cp));
    Local& l = local[r];
    l.q = shard_of(whole.q, seq, pos[r]), l.k = shard_of(whole.k, seq, pos[r]), l.v = shard_of(whole.v, seq, pos[r]);
    l.dout = shard_of(whole.dout, seq, pos[r]);
    l.out = shard_of(whole.out, seq, pos[r]), l.lse = shard_of(whole.lse, lse_dim, pos[r]);
    l.dq = shard_of(whole.dq, seq, pos[r]), l.dk = shard_of(whole.dk, seq, pos[r]), l.dv = shard_of(whole.dv, seq, pos[r]);
    for (auto* t : {&l.out, &l.lse, &l.dq, &l.dk, &l.dv}) t->fill_nan();
    if (rc.max_logit) {
      l.max_logit = testing::TensorBuffer(DType::f32, {s.h_q});
      l.max_logit.fill_nan();
    }
    if (rc.softmax == SoftmaxType::learnable) {
      l.dsink = testing::TensorBuffer(DType::f32, {s.h_q});
      l.dsink.fill_nan();
    }
  }
  std::vector<int> exchanges(cp);
  std::vector<std::vector<std::string>> hazards(cp);
  const std::vector<std::string> errors = run_ranks<Ring>(cp, [&](int r, typename Ring::Endpoint& ep) {
    Local& l = local[r];
    ForwardArgs f;
    f.in.q = l.q.view(), f.in.k = l.k.view(), f.in.v = l.v.view();
    if (thd) f.in.cu_seqlens_q = f.in.cu_seqlens_kv = whole.cu_seqlens_q.view();  // global cu_seqlens
    f.out = l.out.view(), f.lse = l.lse.view();
    f.in.sink = whole.sink.view();  // every rank holds all heads' sink logits
    f.max_logit = l.max_logit.view();
    cp::ring_forward(whole.opts, f, ep, ref);
    if constexpr (std::is_same_v<Ring, LateRing>) ep.end_pass("the forward");
    BackwardArgs b;
    b.in = f.in, b.out = f.out, b.lse = f.lse, b.dout = l.dout.view();
    b.dq = l.dq.view(), b.dk = l.dk.view(), b.dv = l.dv.view();
    b.dsink = l.dsink.view();
    cp::ring_backward(whole.opts, b, ep, ref);
    if constexpr (std::is_same_v<Ring, LateRing>) {
      ep.end_pass("the backward");
      hazards[r] = ep.hazards;
    }
    exchanges[r] = ep.exchanges;
  });
  for (int r = 0; r < cp; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    for (const std::string& h : hazards[r]) ADD_FAILURE() << "rank " << r << ": " << h;
    // fp64 blocks, fp32 merge / accumulators and fp32 lse.
    EXPECT_LT(max_diff(local[r].out, whole.out, seq, pos[r]), 1e-5) << "rank " << r << " out";
    EXPECT_LT(max_diff(local[r].lse, whole.lse, lse_dim, pos[r]), 1e-5) << "rank " << r << " lse";
    EXPECT_LT(max_diff(local[r].dq, whole.dq, seq, pos[r]), 2e-5) << "rank " << r << " dq";
    EXPECT_LT(max_diff(local[r].dk, whole.dk, seq, pos[r]), 2e-5) << "rank " << r << " dk";
    EXPECT_LT(max_diff(local[r].dv, whole.dv, seq, pos[r]), 2e-5) << "rank " << r << " dv";
    auto close = [](const testing::TensorBuffer& a, const testing::TensorBuffer& b, double tol) {
      const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
      bool ok = x.size() == y.size();
      for (size_t i = 0; ok && i < x.size(); ++i) ok = x[i] == y[i] || std::fabs(x[i] - y[i]) <= tol * (1 + std::fabs(y[i]));
      return ok;
    };
    if (rc.max_logit) EXPECT_TRUE(close(local[r].max_logit, whole.max_logit, 1e-6)) << "rank " << r << " max_logit";
    if (rc.softmax == SoftmaxType::learnable) EXPECT_TRUE(close(local[r].dsink, whole.dsink, 1e-5)) << "rank " << r << " dsink";
    // forward: cp-1 K/V moves; backward: cp-1 K/V moves + cp dK/dV moves (the last one home).
    EXPECT_EQ(exchanges[r], cp == 1 ? 0 : 3 * cp - 2) << "rank " << r;
  }
}

TEST(ContextParallelRing, ForwardAndBackwardEqualTheWholeSequence) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int cp : {1, 2, 3})
    for (QkvFormat f : {QkvFormat::bshd, QkvFormat::sbhd, QkvFormat::thd})
      for (MaskType m : {MaskType::no_mask, MaskType::causal}) check_ring({f, m, {}}, cp, seed + cp);
}

// Softmax sinks join each row once, after the blocks' merge; dsink and the
// max logit sum / max over the ranks.
TEST(ContextParallelRing, SinksAndMaxLogitEqualTheWholeSequence) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int cp : {1, 2, 3})
    for (QkvFormat f : {QkvFormat::bshd, QkvFormat::thd})
      for (SoftmaxType t : {SoftmaxType::off_by_one, SoftmaxType::learnable})
        check_ring({f, MaskType::causal, {}, t, true}, cp, seed + cp);
  check_ring<LateRing>({QkvFormat::sbhd, MaskType::causal, {3, 0}, SoftmaxType::learnable, true}, 4, seed);
}

// Exchanges that complete only when the compute waits for them (a GPU whose
// transfers run late on their own stream): every step must wait for the K/V
// and the dK/dV it reads before reading them, and write no buffer in flight.
// The backward's second step once read the K/V of the first exchange before
// any wait covered it (issue 44: gradients wrong at random on 4 GPUs).
TEST(ContextParallelRing, ExchangesThatCompleteAsLateAsAllowed) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int cp : {2, 3, 4}) {
    for (QkvFormat f : {QkvFormat::bshd, QkvFormat::sbhd, QkvFormat::thd})
      for (MaskType m : {MaskType::no_mask, MaskType::causal}) check_ring<LateRing>({f, m, {}}, cp, seed + cp);
    check_ring<LateRing>({QkvFormat::bshd, MaskType::causal, {3, -1}}, cp, seed + 5 * cp);
    check_ring<LateRing>({QkvFormat::thd, MaskType::causal, {3, -1}}, cp, seed + 11 * cp);
    check_ring<LateRing>({QkvFormat::thd, MaskType::no_mask, {2, 5}}, cp, seed + 13 * cp);
  }
}

// A full 8-GPU node's ring (issue 48) on in-process ranks: every format and
// mask, a window, sinks with the max logit, exchanges as late as allowed.
TEST(ContextParallelRing, EightRanksAsOnAFullNode) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int cp = 8;
  for (QkvFormat f : {QkvFormat::bshd, QkvFormat::sbhd, QkvFormat::thd})
    for (MaskType m : {MaskType::no_mask, MaskType::causal}) check_ring<LateRing>({f, m, {}}, cp, seed + int(f) * 3 + int(m));
  check_ring<LateRing>({QkvFormat::thd, MaskType::causal, {5, -1}}, cp, seed + 101);
  check_ring<LateRing>({QkvFormat::bshd, MaskType::causal, {}, SoftmaxType::learnable, true}, cp, seed + 103);
}

TEST(ContextParallelRing, SlidingWindowsSkipWhatTheyHide) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int cp : {2, 3}) {
    check_ring({QkvFormat::bshd, MaskType::causal, {3, -1}}, cp, seed + cp);
    check_ring({QkvFormat::sbhd, MaskType::no_mask, {2, 5}}, cp, seed + 7 * cp);
    // thd: each sequence has its own chunk length, so its blocks run per sequence.
    check_ring({QkvFormat::thd, MaskType::causal, {3, -1}}, cp, seed + 11 * cp);
    check_ring({QkvFormat::thd, MaskType::no_mask, {2, 5}}, cp, seed + 13 * cp);
    check_ring({QkvFormat::thd, MaskType::causal, {0, -1}}, cp, seed + 17 * cp);
  }
}

// A thd batch whose second sequence has length 1: every rank gets the rule's
// error, naming the sequence, before any exchange.
TEST(ContextParallelRing, LengthOneIsTheRulesErrorOnEveryRank) {
  const int cp = 2;
  testing::TensorBuffer q(DType::f64, {3, 2, 4}), cu(DType::i32, {3}), o(DType::f64, {3, 2, 4});
  const int32_t cu_host[3] = {0, 4, 5};  // lengths 4 and 1 (global)
  cu.copy_from_bytes(cu_host, sizeof cu_host);
  std::vector<int> exchanges(cp);
  const std::vector<std::string> errors = run_ranks(cp, [&](int r, LocalRing::Endpoint& ep) {
    Options opts;
    opts.qkv_format = QkvFormat::thd;
    ForwardArgs a;
    a.in.q = a.in.k = a.in.v = q.view();
    a.in.cu_seqlens_q = a.in.cu_seqlens_kv = cu.view();
    a.out = o.view();
    try {
      cp::ring_forward(opts, a, ep);
    } catch (...) {
      exchanges[r] = ep.exchanges;
      throw;
    }
  });
  for (int r = 0; r < cp; ++r) {
    EXPECT_NE(errors[r].find("sequence 1 cannot be split"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("length 1"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("pad the sequence to a multiple of 4"), std::string::npos) << errors[r];
    EXPECT_EQ(exchanges[r], 0);
  }
}

// Rank 1 passes a different number of heads: both ranks report the field.
TEST(ContextParallelRing, RanksThatDisagreeAreReportedNotHung) {
  const int cp = 2;
  testing::TensorBuffer q0(DType::f64, {1, 4, 2, 8}), q1(DType::f64, {1, 4, 3, 8});
  testing::TensorBuffer o0(DType::f64, {1, 4, 2, 8}), o1(DType::f64, {1, 4, 3, 8});
  const std::vector<std::string> errors = run_ranks(cp, [&](int r, LocalRing::Endpoint& ep) {
    ForwardArgs a;
    a.in.q = a.in.k = a.in.v = (r == 0 ? q0 : q1).view();
    a.out = (r == 0 ? o0 : o1).view();
    cp::ring_forward(Options{}, a, ep);
  });
  for (int r = 0; r < cp; ++r) {
    EXPECT_NE(errors[r].find("the ranks disagree on h_q"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("rank 1 has 3, rank 0 has 2"), std::string::npos) << errors[r];
  }
}

}  // namespace
}  // namespace attn
