// flash_decode against the fp64 reference: forward calls with 1 to 16 query
// tokens (every format, mask and window, GQA 1 to 16 and MQA, head dims 64,
// 128, 192/128 and 256, lengths off the 64-key tile, empty sequences,
// softcap, ALiBi, sinks, the max logit, one split and many); and
// forward_with_kvcache on CUDA tensors against the same call on CPU copies
// (contiguous and paged caches of block sizes 1, 16, 64 and 256, ragged
// lengths with 0, appends across blocks, rotary both layouts, num_splits;
// then 40 random calls),
// its errors before any write, CUDA-graph replay on new lengths and cache
// contents, lengths and block tables written by the kernel just before the
// call, and NaN inputs staying visible.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attn/attn.h"
#include "gpu/gpu_test_util.h"
#include "support/kvcache_inputs.h"
#include "testing/case.h"
#include "testing/compare.h"
#include "testing/tensor_buffer.h"

namespace attn {
namespace {

using testing::CaseSpec;
using testing::TensorBuffer;

std::vector<CaseSpec> decode_grid() {
  std::vector<CaseSpec> v;
  auto add = [&](CaseSpec s) {
    s.return_lse = true;
    v.push_back(s);
  };
  // GQA group x head dims x query tokens, bottom-right causal, lengths off the tile.
  for (const auto& [hq, hkv] : {std::pair<int64_t, int64_t>{8, 8}, {8, 2}, {16, 1}, {32, 2}})
    for (const auto& [dqk, dv] : {std::pair<int64_t, int64_t>{64, 64}, {128, 128}, {192, 128}, {256, 256}})
      for (int64_t sq : {1, 5, 16}) {
        CaseSpec s;
        s.batch = 2;
        s.s_q = sq;
        s.s_kv = 333;
        s.h_q = hq;
        s.h_kv = hkv;
        s.d_qk = dqk;
        s.d_v = dv;
        s.mask = MaskType::causal_bottom_right;
        add(s);
      }
  CaseSpec base;
  base.batch = 3;
  base.s_q = 4;
  base.s_kv = 200;
  base.h_q = 8;
  base.h_kv = 2;
  base.d_qk = base.d_v = 128;
  for (MaskType m : {MaskType::no_mask, MaskType::causal, MaskType::causal_bottom_right}) {
    CaseSpec s = base;
    s.mask = m;
    add(s);
    s.window = {37, 0};  // a left window
    add(s);
    s.window = {64, 2};
    if (m == MaskType::no_mask) add(s);
  }
  {
    CaseSpec s = base;  // padded bshd: ragged q and kv, an empty sequence, a row with no key
    s.mask = MaskType::padding_causal_bottom_right;
    s.seqlens_q = {4, 0, 1};
    s.seqlens_kv = {200, 7, 0};
    add(s);
    s.mask = MaskType::padding;
    add(s);
  }
  {
    CaseSpec s = base;  // packed decode batch with an empty and a one-key sequence
    s.batch = 4;
    s.format = QkvFormat::thd;
    s.mask = MaskType::padding_causal_bottom_right;
    s.seqlens_q = {3, 1, 0, 16};
    s.seqlens_kv = {500, 1, 9, 64};
    s.window = {100, 0};
    add(s);
    s.format = QkvFormat::sbhd;
    s.s_q = 16;
    s.s_kv = 500;
    s.window = {};
    add(s);
  }
  {
    CaseSpec s = base;  // score changes, sinks, the max logit, fp16
    s.mask = MaskType::causal_bottom_right;
    s.softcap = 15.0;
    s.bias = BiasType::alibi;
    add(s);
    s.softcap = 0.0;
    s.bias = BiasType::none;
    s.softmax_type = SoftmaxType::learnable;
    s.return_max_logit = true;
    add(s);
    s.softmax_type = SoftmaxType::off_by_one;
    s.dtype = DType::f16;
    s.d_qk = s.d_v = 64;
    add(s);
    s.softmax_type = SoftmaxType::vanilla;
    s.s_kv = 0;  // no keys at all
    add(s);
  }
  {
    CaseSpec s;  // one long sequence: many splits
    s.batch = 1;
    s.s_q = 1;
    s.s_kv = 20000;
    s.h_q = 8;
    s.h_kv = 1;
    s.d_qk = s.d_v = 128;
    s.mask = MaskType::causal_bottom_right;
    s.return_max_logit = true;
    add(s);
    s.batch = 300;  // more work units than the GPU's CTA slots: one split
    s.s_kv = 70;
    s.h_q = s.h_kv = 8;
    add(s);
  }
  return v;
}

TEST(FlashDecode, MatchesTheReferenceOverTheDecodeGrid) {
  ATTN_REQUIRE_GPU();
  int index = 0;
  for (const CaseSpec& s : decode_grid()) {
    SCOPED_TRACE("decode case " + std::to_string(index) + ": " +
                 describe_problem(testing::problem_of(s, Pass::forward, Device::cuda(0))));
    ASSERT_TRUE(testing::claims("flash_decode", s, Pass::forward)) << "flash_decode refused the case";
    testing::Case gpu = testing::make_case(s, Device::cuda(0), 4300 + index++);
    testing::run_forced(gpu, "flash_decode");
    ATTN_CUDA_OK(cudaDeviceSynchronize());
    testing::expect_matches_reference(gpu);
  }
  std::printf("flash_decode: %d decode cases compared with the reference\n", index);
}

TEST(FlashDecode, SelectionSendsFewQueryTokensThere) {
  ATTN_REQUIRE_GPU();
  CaseSpec s;
  s.s_q = 1;
  s.s_kv = 4096;
  s.h_q = 32;
  s.h_kv = 8;
  s.d_qk = s.d_v = 128;
  s.mask = MaskType::causal_bottom_right;
  testing::Case c = testing::make_case(s, Device::cuda(0), 17);
  EXPECT_STREQ(forward(c.opts, c.fwd).backend->name(), "flash_decode");
  s.s_q = 17;
  c = testing::make_case(s, Device::cuda(0), 18);
  EXPECT_STRNE(forward(c.opts, c.fwd).backend->name(), "flash_decode");
  ATTN_CUDA_OK(cudaDeviceSynchronize());
}

// ---- forward_with_kvcache on CUDA tensors -----------------------------------------

struct KvSpec {
  int64_t b = 3, s_q = 1, s_new = 1, h_q = 8, h_kv = 2, d = 128;
  std::vector<int32_t> lens{0, 77, 300};
  int64_t block_size = 0;  // 0: contiguous
  int64_t capacity = 320;  // s_cache, or max_blocks * block_size
  bool batch_idx = false;
  int64_t rotary_dim = 0;
  bool interleaved = true;
  MaskType mask = MaskType::causal_bottom_right;
  Window window{};
  double softcap = 0.0;
  bool alibi = false, sink = false;
  int num_splits = 0;
};

// One call's tensors on one device; cpu() copies them.
struct KvCall {
  KvSpec s;
  Device dev{};
  TensorBuffer q, k_cache, v_cache, k, v, lens, batch_idx, table, cos, sin, slopes, sink, out, lse;
  Options opts;
  KvCacheArgs args() const {
    KvCacheArgs a;
    a.q = q.view(), a.k_cache = k_cache.view(), a.v_cache = v_cache.view(), a.out = out.view(), a.lse = lse.view();
    a.cache_seqlens = lens.view();
    if (s.s_new) a.k = k.view(), a.v = v.view();
    if (s.batch_idx) a.cache_batch_idx = batch_idx.view();
    if (s.block_size) a.block_table = table.view();
    if (s.rotary_dim) a.rotary_cos = cos.view(), a.rotary_sin = sin.view();
    a.rotary_interleaved = s.interleaved;
    if (s.alibi) a.alibi_slopes = slopes.view();
    if (s.sink) a.sink = sink.view();
    a.num_splits = s.num_splits;
    return a;
  }
  KvCall to(Device d) const {
    KvCall c = *this;
    c.dev = d;
    for (TensorBuffer* t : {&c.q, &c.k_cache, &c.v_cache, &c.k, &c.v, &c.lens, &c.batch_idx, &c.table, &c.cos, &c.sin,
                            &c.slopes, &c.sink, &c.out, &c.lse})
      if (t->numel() > 0) *t = t->to(d);
    return c;
  }
};

KvCall make_kv_call(const KvSpec& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  KvCall c;
  c.s = s;
  const DType t = DType::bf16;
  c.q = TensorBuffer(t, {s.b, s.s_q, s.h_q, s.d});
  c.q.fill_uniform(rng, -1, 1);
  int64_t rows = s.b;
  if (s.block_size) {
    const int64_t max_blocks = s.capacity / s.block_size;
    rows = s.b * max_blocks + 3;  // spare blocks the table never names
    c.table = testing::shuffled_block_table(rng, s.b, max_blocks, rows);
  }
  const int64_t inner = s.block_size ? s.block_size : s.capacity;
  c.k_cache = TensorBuffer(t, {rows, inner, s.h_kv, s.d});
  c.v_cache = TensorBuffer(t, {rows, inner, s.h_kv, s.d});
  c.k_cache.fill_uniform(rng, -1, 1);
  c.v_cache.fill_uniform(rng, -1, 1);
  if (s.s_new) {
    c.k = TensorBuffer(t, {s.b, s.s_new, s.h_kv, s.d});
    c.v = TensorBuffer(t, {s.b, s.s_new, s.h_kv, s.d});
    c.k.fill_uniform(rng, -1, 1);
    c.v.fill_uniform(rng, -1, 1);
  }
  c.lens = TensorBuffer(DType::i32, {s.b});
  c.lens.copy_from_bytes(s.lens.data(), s.lens.size() * 4);
  if (s.batch_idx) c.batch_idx = testing::reversed_rows(s.b);
  if (s.rotary_dim) std::tie(c.cos, c.sin) = testing::rotary_tables(s.capacity + s.s_q, s.rotary_dim, DType::f32);
  if (s.alibi) {
    std::vector<double> sl;
    for (int64_t h = 0; h < s.h_q; ++h) sl.push_back(std::ldexp(1.0, -static_cast<int>(h % 8 + 1)));
    c.slopes = TensorBuffer(DType::f32, {s.h_q});
    c.slopes.copy_from(sl);
  }
  if (s.sink) {
    c.sink = TensorBuffer(DType::f32, {s.h_q});
    c.sink.fill_uniform(rng, -1, 2);
    c.opts.softmax_type = SoftmaxType::learnable;
  }
  c.out = TensorBuffer(t, {s.b, s.s_q, s.h_q, s.d});
  c.out.fill_nan();
  c.lse = TensorBuffer(DType::f32, {s.b, s.h_q, s.s_q});
  c.lse.fill_nan();
  c.opts.mask = s.mask;
  c.opts.window = s.window;
  c.opts.softcap = s.softcap;
  return c;
}

// The kernel a GPU call over a cache should run: flash_decode up to 16
// query tokens, flash_sm90's forward beyond on a Hopper GPU where it reads
// the cache (blocks of a multiple of 16 keys), else flash_decode again.
const char* expected_runner(const KvSpec& s) {
  const bool sm90 = query_device(Device::cuda(0)).sm == 90;
  return s.s_q > 16 && sm90 && s.block_size % 16 == 0 ? "flash_sm90" : "flash_decode";
}

// The GPU call against the same call on CPU copies (the CPU path is checked
// against float64 in tests/core/test_kvcache.cpp): out, lse and both caches.
void expect_gpu_matches_cpu(const KvSpec& s, uint64_t seed) {
  const KvCall host = make_kv_call(s, seed);
  KvCall gpu = host.to(Device::cuda(0));
  KvCall cpu = host.to(Device::cpu());
  const Selection sel = forward_with_kvcache(gpu.opts, gpu.args());
  EXPECT_STREQ(sel.backend->name(), expected_runner(s)) << sel.why;
  forward_with_kvcache(cpu.opts, cpu.args());
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  const testing::Tolerance tol = testing::tolerance_for(DType::bf16, false);
  const auto check = [&](const TensorBuffer& g, const TensorBuffer& c, const char* what, testing::Tolerance t) {
    const testing::Comparison r = testing::compare(g.to(Device::cpu()).to_doubles(), c.to_doubles(), t);
    EXPECT_TRUE(r.pass) << what << ": max |d| " << r.max_abs << ", rel fro " << r.rel_frobenius << ", bad " << r.bad
                        << ", NaN " << r.nan << " of " << r.count;
  };
  check(gpu.out, cpu.out, "out", tol);
  check(gpu.lse, cpu.lse, "lse", tol);
  // The caches: the same bytes but where rotation rounds (float here, double there).
  check(gpu.k_cache, cpu.k_cache, "k_cache", {1e-2, 1e-2, 1e-3});
  check(gpu.v_cache, cpu.v_cache, "v_cache", {0, 0, 0});
}

TEST(FlashDecode, KvCacheMatchesTheCpuPath) {
  ATTN_REQUIRE_GPU();
  std::vector<KvSpec> specs;
  KvSpec s;
  specs.push_back(s);  // contiguous, decode step, GQA 4
  s.batch_idx = true;
  s.s_new = 3;
  s.s_q = 3;
  specs.push_back(s);
  for (int64_t bs : {16, 64, 256, 1}) {  // paged, appends across block boundaries
    KvSpec p;
    p.block_size = bs;
    p.capacity = bs == 256 ? 512 : 320;
    p.lens = {0, 62, static_cast<int32_t>(p.capacity - 5)};
    p.s_new = 4;
    p.s_q = 4;
    specs.push_back(p);
  }
  for (int64_t bs : {16, 48, 1}) {  // paged, one split: many tiles per CTA, their block ids copied ahead
    KvSpec p;
    p.block_size = bs;
    p.capacity = 1104;  // 18 tiles of 64 keys, 69 blocks of 16, 23 of 48
    p.lens = {0, 700, 1103};
    p.num_splits = bs == 48 ? 2 : 1;
    specs.push_back(p);
    if (bs == 16) {  // d 256: two stages, so the block ids come two tiles ahead
      p.d = 256;
      specs.push_back(p);
    }
  }
  for (bool inter : {true, false}) {  // rotary, both layouts, on a partial rotary dim
    KvSpec r;
    r.block_size = 16;
    r.rotary_dim = 64;
    r.interleaved = inter;
    r.s_new = 2;
    r.s_q = 2;
    specs.push_back(r);
  }
  for (const auto& [hq, hkv] : {std::pair<int64_t, int64_t>{16, 16}, {16, 1}, {32, 2}, {64, 8}}) {  // GQA 1/16/16/8
    KvSpec g;
    g.h_q = hq;
    g.h_kv = hkv;
    g.s_q = g.s_new = 1;
    specs.push_back(g);
  }
  {
    KvSpec g;  // GQA 8 with 4 speculative tokens, paged: 32 rows per KV head,
    g.h_q = 64;  // two CTAs of 16 (a small batch), then one of 32 (fixed splits)
    g.h_kv = 8;
    g.s_q = g.s_new = 4;
    g.block_size = 16;
    specs.push_back(g);
    g.num_splits = 2;
    specs.push_back(g);
  }
  {
    KvSpec w;  // a window, softcap, ALiBi, a sink, s_q 16, fixed splits
    w.s_q = w.s_new = 16;
    w.window = {50, 0};
    w.softcap = 20.0;
    w.alibi = true;
    w.sink = true;
    w.num_splits = 3;
    specs.push_back(w);
    w.num_splits = 1;
    w.mask = MaskType::no_mask;
    w.window = {};
    specs.push_back(w);
    w.d = 64;
    w.s_q = 40;  // chunked prefill, on flash_decode where flash_sm90 cannot read the blocks
    w.s_new = 40;
    w.lens = {0, 100, 200};
    w.num_splits = 0;
    w.block_size = 8;
    specs.push_back(w);
  }
  int i = 0;
  for (const KvSpec& k : specs) {
    SCOPED_TRACE("kv case " + std::to_string(i));
    expect_gpu_matches_cpu(k, 7100 + i++);
  }
}

// Chunked prefill: more than 16 query tokens per sequence, the earlier
// chunks in the cache, on flash_sm90's forward over the cache in place
// (contiguous rows, or TMA boxes within blocks of 16 to 256 keys, block
// sizes that do and do not divide its 128-, 112- and 80-key tiles),
// against the CPU path. Capacities that are not tile multiples, lengths
// with 0, appends across blocks, rotary, GQA, every head dim of both
// tables, windows, softcap, ALiBi and a sink.
TEST(FlashDecode, KvCachePrefillMatchesTheCpuPath) {
  ATTN_REQUIRE_GPU();
  std::vector<KvSpec> specs;
  // Paged at d 128: four producer warps with two boxes each (16, 48), four
  // with one (32), two (64), one (128, 256); below, block 64 at d 64 (two
  // warps) and d 256 (one warp, five boxes of 16 keys).
  for (int64_t bs : {0, 16, 32, 48, 64, 128, 256}) {
    KvSpec p;
    p.block_size = bs;
    p.capacity = bs == 256 ? 512 : bs == 128 ? 384 : bs == 48 ? 336 : 320;
    p.s_q = p.s_new = 70;
    p.lens = {0, 33, static_cast<int32_t>(p.capacity - 70)};
    p.batch_idx = bs == 0;
    specs.push_back(p);
  }
  for (int64_t d : {64, 256}) {
    KvSpec p;
    p.d = d;
    p.block_size = 64;
    p.s_q = p.s_new = 130;
    p.lens = {7, 0, 150};
    p.h_q = 16;
    p.h_kv = d == 64 ? 16 : 1;  // MHA, MQA
    specs.push_back(p);
  }
  {
    KvSpec r;  // rotary (GPT-NeoX), a window, softcap, ALiBi, a sink
    r.block_size = 16;
    r.rotary_dim = 128;
    r.interleaved = false;
    r.s_q = r.s_new = 48;
    r.lens = {100, 0, 200};
    r.window = {60, 0};
    r.softcap = 30.0;
    r.alibi = true;
    r.sink = true;
    specs.push_back(r);
    r.mask = MaskType::no_mask;  // and no mask: every row at the chunk's first position
    r.window = {};
    r.rotary_dim = 0;
    specs.push_back(r);
  }
  {
    KvSpec q;  // a prompt with no cache yet (s_q = s_new), and queries past new keys
    q.s_q = 64;
    q.s_new = 64;
    q.lens = {0, 0, 0};
    q.block_size = 128;
    q.capacity = 384;
    q.h_q = 32;
    q.h_kv = 8;
    specs.push_back(q);
    q.s_new = 0;
    q.s_q = 33;
    q.lens = {1, 64, 257};
    specs.push_back(q);
  }
  int i = 0;
  for (const KvSpec& k : specs) {
    SCOPED_TRACE("prefill case " + std::to_string(i) + ", block size " + std::to_string(k.block_size));
    expect_gpu_matches_cpu(k, 7300 + i++);
  }
}

// Random calls beside the chosen ones above: 1-4 sequences, GQA groups 1-8,
// d 64 or 128, 0-4 new tokens, 1-16 query rows (a fifth of the calls 17-40,
// chunked prefill), contiguous caches (rows in reverse or not) or blocks of
// 1, 16, 32, 48, 64 or 128 positions, capacities off the 64-key tile, ragged
// lengths with empty and full caches, fixed or chosen splits, and each of
// rotary (both layouts), a window, softcap, ALiBi and a sink at random.
TEST(FlashDecode, KvCacheRandomCallsMatchTheCpuPath) {
  ATTN_REQUIRE_GPU();
  std::mt19937_64 rng(4343);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int n = 0; n < 40; ++n) {
    KvSpec s;
    s.b = pick(1, 4);
    s.h_kv = pick(1, 4);
    s.h_q = s.h_kv << pick(0, 3);
    s.d = pick(0, 1) ? 128 : 64;
    s.s_new = pick(0, 4);
    s.s_q = pick(0, 4) ? pick(1, 16) : pick(17, 40);
    s.block_size = std::array<int64_t, 8>{0, 0, 1, 16, 32, 48, 64, 128}[pick(0, 7)];
    s.batch_idx = !s.block_size && pick(0, 1);
    testing::RandomCache cache = testing::random_cache(rng, s.b, s.s_new, s.block_size, 400, false);
    s.capacity = cache.capacity;
    s.lens = std::move(cache.lens);
    if (pick(0, 2) == 0) s.rotary_dim = 2 * pick(1, s.d / 2);
    s.interleaved = pick(0, 1);
    s.mask = pick(0, 3) ? MaskType::causal_bottom_right : MaskType::no_mask;
    if (pick(0, 2) == 0) s.window = {static_cast<int>(pick(-1, 100)), static_cast<int>(pick(-1, 8))};
    if (pick(0, 3) == 0) s.softcap = pick(0, 1) ? 5.0 : 30.0;
    s.alibi = pick(0, 3) == 0;
    s.sink = pick(0, 3) == 0;
    s.num_splits = std::array<int, 5>{0, 0, 1, 2, 5}[pick(0, 4)];
    SCOPED_TRACE("random kv call " + std::to_string(n) + ": b " + std::to_string(s.b) + ", h " +
                 std::to_string(s.h_q) + "/" + std::to_string(s.h_kv) + ", d " + std::to_string(s.d) + ", block " +
                 std::to_string(s.block_size) + ", capacity " + std::to_string(s.capacity) + ", s_new " +
                 std::to_string(s.s_new) + ", s_q " + std::to_string(s.s_q));
    expect_gpu_matches_cpu(s, 7500 + n);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(FlashDecode, KvCacheErrorsComeBeforeAnyWrite) {
  ATTN_REQUIRE_GPU();
  KvSpec s;
  s.block_size = 16;
  s.s_new = 2;
  for (int what = 0; what < 3; ++what) {
    KvCall c = make_kv_call(s, 99 + what).to(Device::cuda(0));
    std::vector<int32_t> lens = s.lens;
    if (what == 0) lens[1] = static_cast<int32_t>(s.capacity - 1);  // the append runs past the capacity
    if (what == 1) lens[2] = -3;
    c.lens = TensorBuffer(DType::i32, {s.b}).to(Device::cuda(0));
    ATTN_CUDA_OK(cudaMemcpy(c.lens.data(), lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
    if (what == 2) {  // a block id outside the cache
      const int32_t bad = 100000;
      ATTN_CUDA_OK(cudaMemcpy(c.table.data(), &bad, 4, cudaMemcpyHostToDevice));
    }
    const std::vector<double> kc0 = c.k_cache.to(Device::cpu()).to_doubles();
    EXPECT_THROW(forward_with_kvcache(c.opts, c.args()), Error) << "case " << what;
    ATTN_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(c.k_cache.to(Device::cpu()).to_doubles(), kc0) << "case " << what << " wrote the cache";
  }
}

// What the GPU path cannot run is an attn::Error naming why, before any write:
// a head dim without a kernel, a forced other backend, flash_decode disabled,
// strided lengths, and the checks' read-back inside a graph capture.
TEST(FlashDecode, KvCacheRefusesWhatItCannotRun) {
  ATTN_REQUIRE_GPU();
  auto message = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  KvSpec s;
  s.d = 96;
  KvCall c = make_kv_call(s, 300).to(Device::cuda(0));
  const std::vector<double> kc0 = c.k_cache.to(Device::cpu()).to_doubles();
  std::string m = message([&] { forward_with_kvcache(c.opts, c.args()); });
  EXPECT_NE(m.find("head_dim 96/96"), std::string::npos) << m;
  EXPECT_EQ(c.k_cache.to(Device::cpu()).to_doubles(), kc0);

  s.d = 128;
  c = make_kv_call(s, 301).to(Device::cuda(0));
  Policy forced;
  forced.forced = "unfused";
  m = message([&] { forward_with_kvcache(c.opts, c.args(), {}, forced); });
  EXPECT_NE(m.find("flash_decode or flash_sm90"), std::string::npos) << m;
  if (query_device(Device::cuda(0)).sm == 90) {  // flash_sm90 forced on blocks it cannot box
    KvSpec odd = s;
    odd.block_size = 8;
    KvCall o = make_kv_call(odd, 302).to(Device::cuda(0));
    forced.forced = "flash_sm90";
    m = message([&] { forward_with_kvcache(o.opts, o.args(), {}, forced); });
    EXPECT_NE(m.find("block size 8"), std::string::npos) << m;
  }
  Policy off;
  off.disabled = {"flash_decode"};
  m = message([&] { forward_with_kvcache(c.opts, c.args(), {}, off); });
  EXPECT_NE(m.find("flash_decode is disabled"), std::string::npos) << m;

  TensorBuffer wide = TensorBuffer(DType::i32, {2 * s.b}).to(Device::cuda(0));
  ATTN_CUDA_OK(cudaMemset(wide.data(), 0, wide.bytes()));
  KvCacheArgs strided = c.args();
  strided.cache_seqlens = make_view(wide.data(), DType::i32, {s.b}, {2}, Device::cuda(0));
  m = message([&] { forward_with_kvcache(c.opts, strided); });
  EXPECT_NE(m.find("cache_seqlens is not contiguous"), std::string::npos) << m;

  cudaStream_t stream;
  ATTN_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  RunContext ctx;
  ctx.stream = stream;
  ATTN_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  m = message([&] { forward_with_kvcache(c.opts, c.args(), ctx); });  // check_seqlens is on
  cudaGraph_t graph;
  ATTN_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  EXPECT_NE(m.find("check_seqlens=false"), std::string::npos) << m;
}

// Captured once with check_seqlens off, replayed on new cache contents and
// lengths: equal to the same calls run eagerly. A decode step, and a
// prefill chunk (flash_sm90 on a Hopper GPU).
void expect_graph_replays(const KvSpec& s) {
  KvCall c = make_kv_call(s, 5).to(Device::cuda(0));
  c.opts.check_seqlens = false;
  cudaStream_t stream;
  ATTN_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  RunContext ctx;
  ctx.stream = stream;
  forward_with_kvcache(c.opts, c.args(), ctx);  // sizes the workspace pool's block before capture
  ATTN_CUDA_OK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  ATTN_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  forward_with_kvcache(c.opts, c.args(), ctx);
  ATTN_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  ATTN_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 2; ++round) {
    KvSpec next = s;
    next.lens = round == 0 ? std::vector<int32_t>{0, 2047, 63} : std::vector<int32_t>{4000 - 64, 16, 1};
    const KvCall fresh = make_kv_call(next, 50 + round);
    KvCall eager = fresh.to(Device::cuda(0));
    // New inputs into the captured call's buffers.
    for (auto [dst, src] : {std::pair{&c.q, &fresh.q}, {&c.k_cache, &fresh.k_cache}, {&c.v_cache, &fresh.v_cache},
                            {&c.k, &fresh.k}, {&c.v, &fresh.v}, {&c.lens, &fresh.lens}, {&c.table, &fresh.table},
                            {&c.sink, &fresh.sink}})
      dst->copy_from_bytes(src->data(), src->bytes());  // on the device when it returns
    ATTN_CUDA_OK(cudaGraphLaunch(exec, stream));
    ATTN_CUDA_OK(cudaStreamSynchronize(stream));
    forward_with_kvcache(eager.opts, eager.args());
    ATTN_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(c.out.to(Device::cpu()).to_doubles(), eager.out.to(Device::cpu()).to_doubles()) << "round " << round;
    EXPECT_EQ(c.k_cache.to(Device::cpu()).to_doubles(), eager.k_cache.to(Device::cpu()).to_doubles())
        << "round " << round;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(FlashDecode, KvCacheGraphReplaysOnNewLengthsAndContents) {
  ATTN_REQUIRE_GPU();
  KvSpec s;
  s.block_size = 16;
  s.s_new = 1;
  s.rotary_dim = 128;
  s.sink = true;
  s.capacity = 4096;
  s.lens = {5, 1000, 4000};
  SCOPED_TRACE("decode");
  expect_graph_replays(s);  // the append and q's rotation, then the decode kernel started during them
  s.rotary_dim = 0;
  SCOPED_TRACE("decode without rotary");
  expect_graph_replays(s);  // the decode kernel appends: one kernel and the combine
  {
    KvSpec w = s;  // 32 rows per KV head (GQA 8, 4 tokens), fixed splits: the two-row-block build
    w.h_q = 64;
    w.h_kv = 8;
    w.s_q = w.s_new = 4;
    w.num_splits = 3;
    SCOPED_TRACE("decode, 32 rows per CTA");
    expect_graph_replays(w);
  }
  s.rotary_dim = 128;
  s.s_q = s.s_new = 64;
  s.lens = {5, 1000, 4000 - 64};
  SCOPED_TRACE("prefill");
  expect_graph_replays(s);
}

// On sm_90 the decode kernel starts before the kernel ahead of it on the
// stream has ended (programmatic dependent launch), so it must wait for that
// kernel before it reads the lengths or the block table. Here a kernel that
// spends 20 us and then writes both runs just before each call (until then
// every length and block id is 0), eagerly and inside a captured graph; each
// answer equals the same call made again after a synchronize.
TEST(FlashDecode, LengthsAndTableWrittenByTheKernelJustBeforeAreRead) {
  ATTN_REQUIRE_GPU();
  for (const int num_splits : {0, 3})
    for (const int64_t s_q : {int64_t{1}, int64_t{4}}) {
      SCOPED_TRACE("num_splits " + std::to_string(num_splits) + ", s_q " + std::to_string(s_q));
      KvSpec s;
      s.block_size = 16;
      s.s_q = s.s_new = s_q;
      s.num_splits = num_splits;
      s.capacity = 4096;
      s.lens = {5, 1000, 4000};
      KvCall c = make_kv_call(s, 9).to(Device::cuda(0));
      c.opts.check_seqlens = false;
      const TensorBuffer lens = c.lens.to(Device::cuda(0)), table = c.table.to(Device::cuda(0));
      cudaStream_t stream;
      ATTN_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      RunContext ctx;
      ctx.stream = stream;
      auto late_inputs_then_call = [&] {
        testing::launch_delayed_copies(
            {{c.lens.data(), lens.data(), lens.bytes()}, {c.table.data(), table.data(), table.bytes()}}, 20, stream);
        forward_with_kvcache(c.opts, c.args(), ctx);
      };
      auto expect_same_as_after_a_sync = [&](const char* what) {
        ATTN_CUDA_OK(cudaStreamSynchronize(stream));
        const std::vector<double> first = c.out.to(Device::cpu()).to_doubles();
        forward_with_kvcache(c.opts, c.args(), ctx);  // its inputs in place; the append writes the same rows again
        ATTN_CUDA_OK(cudaStreamSynchronize(stream));
        EXPECT_EQ(first, c.out.to(Device::cpu()).to_doubles()) << what;
      };
      forward_with_kvcache(c.opts, c.args(), ctx);  // sizes the workspace pool's block before capture
      ATTN_CUDA_OK(cudaStreamSynchronize(stream));
      c.lens.fill_zero();
      c.table.fill_zero();
      late_inputs_then_call();
      expect_same_as_after_a_sync("eager");
      cudaGraph_t graph;
      ATTN_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      late_inputs_then_call();
      ATTN_CUDA_OK(cudaStreamEndCapture(stream, &graph));
      cudaGraphExec_t exec;
      ATTN_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      c.lens.fill_zero();
      c.table.fill_zero();
      ATTN_CUDA_OK(cudaGraphLaunch(exec, stream));
      expect_same_as_after_a_sync("graph");
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
    }
}

// A NaN in a cached key reaches exactly the query heads of its KV head in
// that sequence (and their lse and max logit); the other rows stay finite.
// Also with 32 rows per KV head over enough sequences that the plan takes
// two row blocks per CTA on an H100 (2 x 8 x 24 one-block CTAs fill its
// 132 x 2 slots).
TEST(FlashDecode, NaNStaysVisible) {
  ATTN_REQUIRE_GPU();
  for (const auto& [batch, s_q, h_q, h_kv] :
       {std::array<int64_t, 4>{2, 2, 8, 2}, std::array<int64_t, 4>{24, 4, 64, 8},
        std::array<int64_t, 4>{2, 1, 32, 8}}) {  // the last: 4 rows a CTA, a partial result per warp
    SCOPED_TRACE("h_q " + std::to_string(h_q) + " h_kv " + std::to_string(h_kv) + " s_q " + std::to_string(s_q));
    CaseSpec s;
    s.batch = batch;
    s.s_q = s_q;
    s.s_kv = 3000;
    s.h_q = h_q;
    s.h_kv = h_kv;
    s.d_qk = s.d_v = 128;
    s.mask = MaskType::causal_bottom_right;
    s.return_lse = true;
    s.return_max_logit = true;
    testing::Case c = testing::make_case(s, Device::cuda(0), 31);
    testing::set_bf16_nan(c.k, ((1 * s.s_kv + 1234) * s.h_kv + 1) * s.d_qk + 5);  // sequence 1, key 1234, KV head 1
    testing::run_forced(c, "flash_decode");
    ATTN_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<double> out = c.out.to(Device::cpu()).to_doubles(), lse = c.lse.to(Device::cpu()).to_doubles();
    const std::vector<double> m = c.max_logit.to(Device::cpu()).to_doubles();
    const int64_t g = s.h_q / s.h_kv;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t i = 0; i < s.s_q; ++i)
        for (int64_t h = 0; h < s.h_q; ++h) {
          const bool reaches = b == 1 && h / g == 1;
          EXPECT_EQ(testing::row_has_nan(out, (b * s.s_q + i) * s.h_q + h, s.d_v), reaches)
              << "out row (" << b << ", " << i << ", " << h << ")";
          EXPECT_EQ(std::isnan(lse[(b * s.h_q + h) * s.s_q + i]), reaches)
              << "lse (" << b << ", " << i << ", " << h << ")";
        }
    for (int64_t h = 0; h < s.h_q; ++h) EXPECT_EQ(std::isnan(m[h]), h / g == 1) << "max_logit[" << h << "]";
  }
}

}  // namespace
}  // namespace attn
