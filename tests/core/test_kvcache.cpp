// forward_with_kvcache on the CPU against a direct float64 computation: the
// new tokens land in the cache (rotated, through the block table or
// cache_batch_idx) and nothing else there changes; q attends to each
// sequence's cache and new tokens, bottom-right aligned, with ragged cache
// lengths including 0, GQA (a group of 16), d_qk != d_v, block sizes 1 to
// 256, rotary both layouts, windows, s_q 1 to 16, softcap, ALiBi and a
// learnable sink; bad lengths, block tables, shapes and dtypes are errors
// before any write. Beside the chosen cases, 200 random calls against
// float64 and 300 random defects (errors that leave the cache and out as
// they were).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attn/attn.h"
#include "support/kvcache_inputs.h"
#include "testing/tensor_buffer.h"

namespace attn {
namespace {

using testing::TensorBuffer;

struct Spec {
  int64_t b = 3, s_q = 1, s_new = 1, h_q = 4, h_kv = 2, d_qk = 16, d_v = 16;
  std::vector<int32_t> lens{0, 5, 17};
  int64_t block_size = 0;      // 0: a contiguous cache
  int64_t s_cache = 24;        // contiguous rows, or max_blocks * block_size when paged
  bool batch_idx = false;      // contiguous: sequences read rows in reverse
  int64_t rotary_dim = 0;      // 0: none
  bool interleaved = true;
  MaskType mask = MaskType::causal_bottom_right;
  Window window{};
  double softcap = 0.0;
  bool alibi = false;  // slopes 2^-(h + 1)
  bool sink = false;   // a learnable sink logit per query head
  bool no_lens = false;  // no cache_seqlens: each cache is full after the append (lens must say capacity - s_new)
};

struct Call {
  Spec s;
  TensorBuffer q, k_cache, v_cache, k, v, lens, batch_idx, table, cos, sin, out, lse, slopes, sink;
  int64_t num_blocks = 0, max_blocks = 0;
  KvCacheArgs args;
  Options opts;
};

Call make_call(const Spec& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Call c;
  c.s = s;
  const DType t = DType::f32;
  c.q = TensorBuffer(t, {s.b, s.s_q, s.h_q, s.d_qk});
  c.q.fill_uniform(rng, -1, 1);
  if (s.block_size) {
    c.max_blocks = s.s_cache / s.block_size;
    c.num_blocks = s.b * c.max_blocks + 2;  // spare blocks the table never names
    c.k_cache = TensorBuffer(t, {c.num_blocks, s.block_size, s.h_kv, s.d_qk});
    c.v_cache = TensorBuffer(t, {c.num_blocks, s.block_size, s.h_kv, s.d_v});
    c.table = testing::shuffled_block_table(rng, s.b, c.max_blocks, c.num_blocks);
  } else {
    c.k_cache = TensorBuffer(t, {s.b, s.s_cache, s.h_kv, s.d_qk});
    c.v_cache = TensorBuffer(t, {s.b, s.s_cache, s.h_kv, s.d_v});
  }
  c.k_cache.fill_uniform(rng, -1, 1);
  c.v_cache.fill_uniform(rng, -1, 1);
  if (s.s_new) {
    c.k = TensorBuffer(t, {s.b, s.s_new, s.h_kv, s.d_qk});
    c.v = TensorBuffer(t, {s.b, s.s_new, s.h_kv, s.d_v});
    c.k.fill_uniform(rng, -1, 1);
    c.v.fill_uniform(rng, -1, 1);
  }
  c.lens = TensorBuffer(DType::i32, {s.b});
  c.lens.copy_from_bytes(s.lens.data(), s.lens.size() * 4);
  if (s.batch_idx) c.batch_idx = testing::reversed_rows(s.b);
  if (s.rotary_dim) std::tie(c.cos, c.sin) = testing::rotary_tables(s.s_cache + s.s_q, s.rotary_dim, t);
  c.out = TensorBuffer(t, {s.b, s.s_q, s.h_q, s.d_v});
  c.out.fill_nan();
  c.lse = TensorBuffer(t, {s.b, s.h_q, s.s_q});
  c.lse.fill_nan();
  KvCacheArgs& a = c.args;
  a.q = c.q.view(), a.k_cache = c.k_cache.view(), a.v_cache = c.v_cache.view(), a.out = c.out.view();
  a.lse = c.lse.view();
  if (!s.no_lens) a.cache_seqlens = c.lens.view();
  if (s.s_new) a.k = c.k.view(), a.v = c.v.view();
  if (s.batch_idx) a.cache_batch_idx = c.batch_idx.view();
  if (s.block_size) a.block_table = c.table.view();
  if (s.rotary_dim) a.rotary_cos = c.cos.view(), a.rotary_sin = c.sin.view();
  a.rotary_interleaved = s.interleaved;
  if (s.alibi) {
    std::vector<double> sl;
    for (int64_t h = 0; h < s.h_q; ++h) sl.push_back(std::ldexp(1.0, -static_cast<int>(h + 1)));
    c.slopes = TensorBuffer(DType::f32, {s.h_q});
    c.slopes.copy_from(sl);
    a.alibi_slopes = c.slopes.view();
  }
  if (s.sink) {
    c.sink = TensorBuffer(DType::f32, {s.h_q});
    c.sink.fill_uniform(rng, -1, 2);
    a.sink = c.sink.view();
    c.opts.softmax_type = SoftmaxType::learnable;
  }
  c.opts.mask = s.mask;
  c.opts.window = s.window;
  c.opts.softcap = s.softcap;
  return c;
}

// Element offset of (sequence i, position p, head h, channel ch) in a cache buffer's values.
int64_t cache_at(const Call& c, const std::vector<int32_t>& table, int64_t i, int64_t p, int64_t h, int64_t ch,
                 int64_t d) {
  const Spec& s = c.s;
  if (s.block_size) {
    const int64_t blk = table[i * c.max_blocks + p / s.block_size];
    return ((blk * s.block_size + p % s.block_size) * s.h_kv + h) * d + ch;
  }
  const int64_t row = s.batch_idx ? s.b - 1 - i : i;
  return ((row * s.s_cache + p) * s.h_kv + h) * d + ch;
}

std::vector<double> rotated(const Spec& s, const std::vector<double>& x, int64_t pos) {
  std::vector<double> y = x;
  const int64_t half = s.rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = pos * std::pow(10000.0, -2.0 * i / s.rotary_dim);
    const double cs = static_cast<float>(std::cos(angle)), sn = static_cast<float>(std::sin(angle));
    const int64_t a = s.interleaved ? 2 * i : i, b = s.interleaved ? 2 * i + 1 : i + half;
    y[a] = x[a] * cs - x[b] * sn;
    y[b] = x[b] * cs + x[a] * sn;
  }
  return y;
}

std::vector<int32_t> table_of(const Call& c) {
  std::vector<int32_t> t;
  if (c.s.block_size) {
    const auto bytes = c.table.host_bytes();
    t.resize(bytes.size() / 4);
    std::memcpy(t.data(), bytes.data(), bytes.size());
  }
  return t;
}

// Runs the call and checks the cache writes and the attention against float64.
void expect_matches(const Spec& s, uint64_t seed) {
  Call c = make_call(s, seed);
  const std::vector<double> kc0 = c.k_cache.to_doubles(), vc0 = c.v_cache.to_doubles();
  const std::vector<double> q = c.q.to_doubles();
  const std::vector<double> kn = s.s_new ? c.k.to_doubles() : std::vector<double>{};
  const std::vector<double> vn = s.s_new ? c.v.to_doubles() : std::vector<double>{};
  const std::vector<int32_t> table = table_of(c);
  const std::vector<double> sinks = s.sink ? c.sink.to_doubles() : std::vector<double>{};
  forward_with_kvcache(c.opts, c.args);
  const std::vector<double> kc = c.k_cache.to_doubles(), vc = c.v_cache.to_doubles(), out = c.out.to_doubles();
  const std::vector<double> lse = c.lse.to_doubles();

  // The cache: the appended positions hold the (rotated) new tokens; every other element is unchanged.
  std::vector<char> written(kc.size(), 0), written_v(vc.size(), 0);
  const bool q_by_row = s.mask == MaskType::causal_bottom_right || s.window.left >= 0 || s.window.right >= 0;
  for (int64_t i = 0; i < s.b; ++i)
    for (int64_t j = 0; j < s.s_new; ++j)
      for (int64_t h = 0; h < s.h_kv; ++h) {
        const int64_t pos = s.lens[i] + j;
        std::vector<double> x(kn.begin() + ((i * s.s_new + j) * s.h_kv + h) * s.d_qk,
                              kn.begin() + ((i * s.s_new + j) * s.h_kv + h + 1) * s.d_qk);
        const std::vector<double> want = s.rotary_dim ? rotated(s, x, pos) : x;
        for (int64_t ch = 0; ch < s.d_qk; ++ch) {
          const int64_t at = cache_at(c, table, i, pos, h, ch, s.d_qk);
          written[at] = 1;
          EXPECT_NEAR(kc[at], want[ch], 1e-5) << "k_cache, sequence " << i << " position " << pos;
        }
        for (int64_t ch = 0; ch < s.d_v; ++ch) {
          const int64_t at = cache_at(c, table, i, pos, h, ch, s.d_v);
          written_v[at] = 1;
          EXPECT_EQ(vc[at], vn[((i * s.s_new + j) * s.h_kv + h) * s.d_v + ch]);
        }
      }
  for (size_t e = 0; e < kc.size(); ++e)
    if (!written[e]) ASSERT_EQ(kc[e], kc0[e]) << "k_cache element " << e << " changed";
  for (size_t e = 0; e < vc.size(); ++e)
    if (!written_v[e]) ASSERT_EQ(vc[e], vc0[e]) << "v_cache element " << e << " changed";

  // The attention, in float64 from the cache as written.
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d_qk));
  const int64_t group = s.h_q / s.h_kv;
  for (int64_t i = 0; i < s.b; ++i) {
    const int64_t total = s.lens[i] + s.s_new;
    for (int64_t j = 0; j < s.s_q; ++j)
      for (int64_t h = 0; h < s.h_q; ++h) {
        const int64_t hk = h / group, qpos = total - s.s_q + j;  // bottom-right: the last s_q positions
        std::vector<double> x(q.begin() + ((i * s.s_q + j) * s.h_q + h) * s.d_qk,
                              q.begin() + ((i * s.s_q + j) * s.h_q + h + 1) * s.d_qk);
        if (s.rotary_dim) x = rotated(s, x, std::max<int64_t>(q_by_row ? qpos : s.lens[i], 0));
        std::vector<double> score;
        std::vector<int64_t> keys;
        for (int64_t p = 0; p < total; ++p) {
          const bool causal = s.mask == MaskType::causal_bottom_right;
          const int64_t right = causal ? (s.window.right >= 0 ? std::min<int64_t>(s.window.right, 0) : 0)
                                       : s.window.right;
          if (right >= 0 && p > qpos + right) continue;
          if (s.window.left >= 0 && p < qpos - s.window.left) continue;
          double dot = 0;
          for (int64_t ch = 0; ch < s.d_qk; ++ch) dot += x[ch] * kc[cache_at(c, table, i, p, hk, ch, s.d_qk)];
          double sc = dot * scale;
          if (s.softcap > 0) sc = s.softcap * std::tanh(sc / s.softcap);
          if (s.alibi) sc -= std::ldexp(1.0, -static_cast<int>(h + 1)) * std::fabs(static_cast<double>(qpos - p));
          score.push_back(sc);
          keys.push_back(p);
        }
        const double t = s.sink ? sinks[h] : -std::numeric_limits<double>::infinity();
        double m = score.empty() ? t : *std::max_element(score.begin(), score.end());
        m = std::max(m, t);
        double sum = s.sink ? std::exp(t - m) : 0;
        for (double& e : score) sum += (e = std::exp(e - m));
        for (int64_t ch = 0; ch < s.d_v; ++ch) {
          double o = 0;
          for (size_t n = 0; n < keys.size(); ++n) o += score[n] / sum * vc[cache_at(c, table, i, keys[n], hk, ch, s.d_v)];
          EXPECT_NEAR(out[((i * s.s_q + j) * s.h_q + h) * s.d_v + ch], o, 2e-5)
              << "out, sequence " << i << " row " << j << " head " << h;
        }
        const double want_lse = keys.empty() ? t : m + std::log(sum);
        const double got_lse = lse[(i * s.h_q + h) * s.s_q + j];
        if (keys.empty() && !s.sink)
          EXPECT_EQ(got_lse, want_lse);
        else
          EXPECT_NEAR(got_lse, want_lse, 1e-5);
      }
  }
}

TEST(KvCache, DecodeAgainstContiguousCachesWithRaggedLengths) {
  expect_matches(Spec{}, 1);  // one token per sequence, lengths 0, 5, 17
  Spec gqa;
  gqa.h_q = 8, gqa.h_kv = 1, gqa.d_v = 8;  // MQA, d_qk != d_v
  expect_matches(gqa, 2);
}

TEST(KvCache, SpeculativeRowsAndChunksWithoutNewTokens) {
  Spec s;
  s.s_q = s.s_new = 4;  // four new tokens, each query row sees up to its own
  expect_matches(s, 3);
  s.s_new = 0;  // the cache alone: the last s_q positions query it
  s.lens = {4, 9, 1};
  expect_matches(s, 4);
  s.mask = MaskType::no_mask;
  expect_matches(s, 5);
}

TEST(KvCache, SoftcapAlibiAndASink) {
  Spec s;
  s.s_q = s.s_new = 2;
  s.softcap = 2.0;
  s.alibi = true;
  s.sink = true;
  s.block_size = 16;
  s.s_cache = 32;
  expect_matches(s, 18);
}

TEST(KvCache, WithoutLengthsEveryCacheIsFullAfterTheAppend) {
  Spec s;
  s.no_lens = true;
  s.s_q = s.s_new = 2;
  s.lens = {22, 22, 22};  // s_cache 24 - 2
  expect_matches(s, 19);
  s.block_size = 8;
  expect_matches(s, 20);
}

TEST(KvCache, PagedCachesAcrossBlockBoundaries) {
  Spec s;
  s.block_size = 16;
  s.s_cache = 48;
  s.s_q = s.s_new = 3;
  s.lens = {14, 0, 31};  // appends crossing blocks 0/1 and 1/2
  expect_matches(s, 6);
  s.block_size = 1;  // a token-level pool
  s.s_cache = 40;
  expect_matches(s, 7);
}

// The shapes beyond the above: blocks of 64 and 256 positions with
// appends across them, a GQA group of 16, and 16 query rows.
TEST(KvCache, LargeBlocksGroupsOf16AndSixteenQueryRows) {
  for (int64_t bs : {64, 256}) {
    Spec s;
    s.block_size = bs;
    s.s_cache = 2 * bs;
    s.s_q = s.s_new = 3;
    s.lens = {0, static_cast<int32_t>(bs - 1), static_cast<int32_t>(2 * bs - 3)};  // one append across a block edge
    expect_matches(s, 30 + bs);
  }
  Spec g;
  g.h_q = 16;
  g.h_kv = 1;  // MQA with a group of 16
  g.s_q = g.s_new = 16;
  g.s_cache = 40;
  g.lens = {0, 3, 24};
  g.window = {10, 0};
  expect_matches(g, 33);
}

TEST(KvCache, CacheBatchIdxRotaryBothLayoutsAndWindows) {
  Spec s;
  s.batch_idx = true;
  s.s_q = s.s_new = 2;
  s.rotary_dim = 8;  // half of d: channels 8..15 pass through
  expect_matches(s, 8);
  s.interleaved = false;
  s.block_size = 8;
  s.batch_idx = false;
  expect_matches(s, 9);
  s.mask = MaskType::no_mask;  // q rotated at the cache length
  expect_matches(s, 10);
  s.mask = MaskType::causal_bottom_right;
  s.window = {3, 0};
  expect_matches(s, 11);
}

// What the call throws, with the cache unchanged.
std::string error_leaving_the_cache(Call& c) {
  const std::vector<double> kc0 = c.k_cache.to_doubles(), vc0 = c.v_cache.to_doubles();
  std::string what;
  try {
    forward_with_kvcache(c.opts, c.args);
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_EQ(c.k_cache.to_doubles(), kc0) << "the cache was written before the error";
  EXPECT_EQ(c.v_cache.to_doubles(), vc0);
  return what;
}

TEST(KvCache, BadLengthsTablesAndShapesAreErrorsBeforeAnyWrite) {
  Spec s;
  s.s_new = 2;
  s.lens = {0, 5, 23};  // 23 + 2 > s_cache 24
  Call c = make_call(s, 12);
  EXPECT_NE(error_leaving_the_cache(c).find("cache_seqlens[2]=23 with 2 new tokens"), std::string::npos);

  s.lens = {0, 5, 17};
  s.block_size = 8;
  c = make_call(s, 13);
  const int32_t bad = static_cast<int32_t>(c.num_blocks);
  std::vector<unsigned char> bytes = c.table.host_bytes();
  std::memcpy(bytes.data() + (2 * c.max_blocks + 2) * 4, &bad, 4);  // the block sequence 2's position 17 needs
  c.table.copy_from_bytes(bytes.data(), bytes.size());
  EXPECT_NE(error_leaving_the_cache(c).find("block_table names a block outside the cache"), std::string::npos);

  c = make_call(Spec{}, 14);
  TensorBuffer wrong(DType::f32, {3, 1, 2, 8});
  c.args.k = wrong.view();
  EXPECT_NE(error_leaving_the_cache(c).find("new k / v do not match"), std::string::npos);

  c = make_call(Spec{}, 15);
  c.args.v = TensorView{};
  EXPECT_NE(error_leaving_the_cache(c).find("k and v are appended together"), std::string::npos);

  c = make_call(Spec{}, 16);
  c.opts.mask = MaskType::causal;
  EXPECT_NE(error_leaving_the_cache(c).find("no_mask or causal_bottom_right"), std::string::npos);

  c = make_call(Spec{}, 21);  // the attention's own rules come first too
  c.opts.softmax_type = SoftmaxType::learnable;
  EXPECT_NE(error_leaving_the_cache(c).find("sink"), std::string::npos);
  c = make_call(Spec{}, 22);
  TensorBuffer lse_wrong(DType::f32, {3, 4, 2});
  c.args.lse = lse_wrong.view();
  EXPECT_NE(error_leaving_the_cache(c).find("lse"), std::string::npos);

  s = Spec{};
  s.rotary_dim = 8;
  c = make_call(s, 17);
  TensorBuffer short_cos(DType::f32, {10, 4}), short_sin(DType::f32, {10, 4});
  short_cos.fill_zero();
  short_sin.fill_zero();
  c.args.rotary_cos = short_cos.view(), c.args.rotary_sin = short_sin.view();
  EXPECT_NE(error_leaving_the_cache(c).find("past the rotary table"), std::string::npos);

  // Rotary tables of another dtype than float32 or q's (the GPU's append
  // would read them as one of those), or of two dtypes.
  c = make_call(s, 23);
  TensorBuffer cos64(DType::f64, {c.cos.view().size(0), 4}), sin64(DType::f64, {c.cos.view().size(0), 4});
  cos64.fill_zero();
  sin64.fill_zero();
  c.args.rotary_cos = cos64.view(), c.args.rotary_sin = sin64.view();
  EXPECT_NE(error_leaving_the_cache(c).find("rotary_cos has the wrong dtype"), std::string::npos);
  c = make_call(s, 24);
  TensorBuffer sin16(DType::f16, {c.cos.view().size(0), 4});
  sin16.fill_zero();
  c.args.rotary_sin = sin16.view();
  EXPECT_NE(error_leaving_the_cache(c).find("rotary_sin has the wrong dtype"), std::string::npos);
}

// A random call's description: 1-4 sequences, GQA groups 1-8, head dims
// 8-24 (d_qk != d_v), 0-4 new tokens, 1-8 query rows (more than a short
// sequence's keys), a contiguous cache (rows in reverse or not) or blocks of
// 1, 3, 8 or 16 positions, ragged lengths with empty and full caches, and
// each of rotary (both layouts), a window, softcap, ALiBi and a sink at
// random.
Spec random_spec(std::mt19937_64& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Spec s;
  s.b = pick(1, 4);
  s.h_kv = pick(1, 3);
  s.h_q = s.h_kv << pick(0, 3);
  s.d_qk = 8 * pick(1, 3);
  s.d_v = 8 * pick(1, 3);
  s.s_new = pick(0, 4);
  s.s_q = pick(1, 8);
  s.block_size = std::vector<int64_t>{0, 0, 1, 3, 8, 16}[pick(0, 5)];
  s.batch_idx = !s.block_size && pick(0, 1);
  s.no_lens = pick(0, 5) == 0;
  testing::RandomCache cache = testing::random_cache(rng, s.b, s.s_new, s.block_size, 40, s.no_lens);
  s.s_cache = cache.capacity;
  s.lens = std::move(cache.lens);
  if (pick(0, 2) == 0) s.rotary_dim = 2 * pick(1, s.d_qk / 2);
  s.interleaved = pick(0, 1);
  s.mask = pick(0, 3) ? MaskType::causal_bottom_right : MaskType::no_mask;
  if (pick(0, 2) == 0) s.window = {static_cast<int>(pick(-1, 10)), static_cast<int>(pick(-1, 3))};
  if (pick(0, 3) == 0) s.softcap = pick(0, 1) ? 2.0 : 5.0;
  s.alibi = pick(0, 3) == 0;
  s.sink = pick(0, 3) == 0;
  return s;
}

// Every buffer holds exactly its view's elements, so the ASan build
// (scripts/check_sanitizers.sh) also sees any access outside a caller's
// tensor.
TEST(KvCache, RandomCallsMatchFloat64) {
  std::mt19937_64 rng(2026);
  for (int n = 0; n < 200; ++n) {
    const Spec s = random_spec(rng);
    SCOPED_TRACE("random call " + std::to_string(n) + ": b " + std::to_string(s.b) + ", block " +
                 std::to_string(s.block_size) + ", s_cache " + std::to_string(s.s_cache) + ", s_new " +
                 std::to_string(s.s_new) + ", s_q " + std::to_string(s.s_q));
    expect_matches(s, 1000 + n);
    if (::testing::Test::HasFailure()) return;
  }
}

// One defect in an otherwise valid random call: a length out of range, a
// block id or cache row outside the cache, a tensor of the wrong shape or
// dtype, a mask or dropout the call does not take. Each is an error that
// leaves the cache and out as they were.
TEST(KvCache, RandomDefectsAreErrorsBeforeAnyWrite) {
  std::mt19937_64 rng(48);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int errors = 0;
  for (int n = 0; n < 300; ++n) {
    Spec s = random_spec(rng);
    s.no_lens = false;
    const int64_t i = pick(0, s.b - 1), room = s.s_cache - s.s_new;
    const int64_t defect = pick(0, 10);
    if (defect == 0) s.lens[i] = static_cast<int32_t>(-pick(1, 5));
    if (defect == 1) s.lens[i] = static_cast<int32_t>(room + pick(1, 5));
    Call c = make_call(s, 5000 + n);
    TensorBuffer wrong;
    std::string defect_name = defect < 2 ? "cache_seqlens" : "";
    if (defect == 2 && s.block_size && s.lens[i] + s.s_new > 0) {  // a block the sequence uses
      std::vector<unsigned char> bytes = c.table.host_bytes();
      const int64_t used = (s.lens[i] + s.s_new + s.block_size - 1) / s.block_size;
      const int32_t bad = static_cast<int32_t>(pick(0, 1) ? -1 - pick(0, 3) : c.num_blocks + pick(0, 3));
      std::memcpy(bytes.data() + (i * c.max_blocks + pick(0, used - 1)) * 4, &bad, 4);
      c.table.copy_from_bytes(bytes.data(), bytes.size());
      defect_name = "block_table";
    } else if (defect == 3 && s.batch_idx) {
      std::vector<unsigned char> bytes = c.batch_idx.host_bytes();
      const int32_t bad = static_cast<int32_t>(pick(0, 1) ? -1 : s.b + pick(0, 3));
      std::memcpy(bytes.data() + i * 4, &bad, 4);
      c.batch_idx.copy_from_bytes(bytes.data(), bytes.size());
      defect_name = "cache_batch_idx";
    } else if (defect == 4 && s.s_new) {
      wrong = TensorBuffer(DType::f32, {s.b, s.s_new, s.h_kv + 1, s.d_qk});
      c.args.k = wrong.view();
      defect_name = "k";
    } else if (defect == 5) {
      wrong = TensorBuffer(DType::f32, {s.b, s.s_q, s.h_q, s.d_v + 8});
      c.args.out = wrong.view();
      defect_name = "out";
    } else if (defect == 6) {
      wrong = TensorBuffer(DType::f16, {s.b, s.s_q, s.h_q, s.d_qk});
      c.args.q = wrong.view();
      defect_name = "q's dtype";
    } else if (defect == 7) {
      wrong = TensorBuffer(DType::i32, {s.b + 1});
      c.args.cache_seqlens = wrong.view();
      defect_name = "cache_seqlens' shape";
    } else if (defect == 8 && s.block_size) {
      wrong = TensorBuffer(DType::i64, {s.b, c.max_blocks});
      c.args.block_table = wrong.view();
      defect_name = "block_table's dtype";
    } else if (defect == 9) {
      c.opts.mask = MaskType::causal;
      defect_name = "mask";
    } else if (defect == 10) {
      c.opts.dropout_p = 0.1;
      defect_name = "dropout";
    }
    if (defect_name.empty()) continue;  // the defect needs what this call lacks
    if (wrong.numel()) wrong.fill_zero();
    const std::vector<unsigned char> out0 = c.out.host_bytes();
    SCOPED_TRACE("random defect " + std::to_string(n) + ": " + defect_name);
    EXPECT_FALSE(error_leaving_the_cache(c).empty()) << "no error";
    EXPECT_EQ(c.out.host_bytes(), out0) << "out was written before the error";
    ++errors;
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(errors, 150);  // most draws carry a defect
}

}  // namespace
}  // namespace attn
