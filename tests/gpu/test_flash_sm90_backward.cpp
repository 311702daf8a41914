// flash_sm90's backward beyond the shared grid (whose d 128 cases it claims
// too): head dims 64, 128, 192 (d_v 192 and 128) and 256 on fresh random
// inputs against the fp64 reference, at the edges of its 128-key (64 from
// d 192) and 64-query tiles, with GQA and MQA, every mask and format (packed
// and padded sequences too), windows on both sides, both dtypes, softcap,
// ALiBi and dropout; the forward is flash_sm90's too, so the pair runs as a
// Hopper training step would. Skipped off sm_90.
#include <cstdint>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"

namespace attn {
namespace {

std::vector<testing::CaseSpec> cases(int64_t d, int64_t d_v = 0) {
  std::vector<testing::CaseSpec> out;
  auto add = [&](QkvFormat f, MaskType m, int64_t b, int64_t sq, int64_t skv, int64_t hq, int64_t hkv,
                 Window w = {}, DType t = DType::bf16) {
    testing::CaseSpec s;
    s.format = f;
    s.mask = m;
    s.batch = b;
    s.s_q = sq;
    s.s_kv = skv;
    s.h_q = hq;
    s.h_kv = hkv;
    s.d_qk = d;
    s.d_v = d_v > 0 ? d_v : d;
    s.window = w;
    s.dtype = t;
    s.backward = true;
    out.push_back(s);
  };
  add(QkvFormat::bshd, MaskType::causal, 2, 300, 300, 4, 2);                 // GQA 2, 3 KV tiles, partial last
  add(QkvFormat::bshd, MaskType::no_mask, 1, 77, 333, 2, 2);                 // s_q != s_kv, off every tile
  add(QkvFormat::sbhd, MaskType::causal_bottom_right, 2, 200, 130, 8, 1);    // MQA; rows that see no key
  add(QkvFormat::bshd, MaskType::causal, 1, 130, 200, 2, 2);                 // top-left: keys no row sees
  add(QkvFormat::bshd, MaskType::causal, 1, 500, 500, 2, 1, {64, 0});        // a window inside one KV tile
  add(QkvFormat::bshd, MaskType::no_mask, 1, 260, 400, 2, 2, {100, 50});     // both sides
  add(QkvFormat::bshd, MaskType::no_mask, 1, 257, 257, 2, 2, {0, 0});        // the diagonal alone
  add(QkvFormat::bshd, MaskType::no_mask, 3, 1, 1, 2, 2);                    // length 1
  add(QkvFormat::bshd, MaskType::causal_bottom_right, 1, 1, 300, 4, 2);      // one query, many keys
  add(QkvFormat::bshd, MaskType::no_mask, 1, 300, 1, 4, 2);                  // many queries, one key
  add(QkvFormat::bshd, MaskType::causal, 1, 1024, 1024, 8, 2, {}, DType::f16);  // fp16, GQA 4, many tiles
  add(QkvFormat::bshd, MaskType::no_mask, 2, 512, 640, 4, 4);               // whole tiles, no mask
  // GQA 8 and 16 under a causal shape: two CTAs per KV tile, each with half
  // the query heads, dK / dV summed in fp32 (flash::bwd_head_split).
  add(QkvFormat::bshd, MaskType::causal, 2, 300, 300, 8, 1);
  add(QkvFormat::sbhd, MaskType::causal_bottom_right, 2, 200, 333, 32, 2, {}, DType::f16);
  add(QkvFormat::bshd, MaskType::padding_causal, 3, 300, 300, 16, 2);  // rows past a sequence get zeros
  out.back().seqlens_q = {300, 77, 1};
  out.back().seqlens_kv = {300, 130, 0};
  add(QkvFormat::thd, MaskType::padding_causal_bottom_right, 4, 0, 0, 16, 2);  // packed, an empty sequence
  out.back().seqlens_q = {300, 0, 1, 77};
  out.back().seqlens_kv = {333, 0, 64, 77};
  // cu_seqlens: packed sequences (an empty one, length 1, ends inside both
  // tiles, a sequence whose queries see no key) and padded batches (their
  // padding rows hold random values, which no gradient may take in).
  auto packed = [&](MaskType m, std::vector<int64_t> lq, std::vector<int64_t> lkv, Window w = {}) {
    add(QkvFormat::thd, m, static_cast<int64_t>(lq.size()), 0, 0, 8, 2, w);
    out.back().seqlens_q = lq;
    out.back().seqlens_kv = lkv;
  };
  packed(MaskType::padding_causal, {300, 0, 1, 77, 129}, {300, 0, 1, 77, 129});
  packed(MaskType::padding_causal_bottom_right, {200, 5, 64}, {333, 0, 190}, {100, 0});
  packed(MaskType::padding, {131, 257}, {70, 400});
  add(QkvFormat::bshd, MaskType::padding_causal, 3, 300, 300, 4, 2);
  out.back().seqlens_q = out.back().seqlens_kv = {300, 130, 1};
  add(QkvFormat::sbhd, MaskType::padding, 2, 200, 260, 4, 4);
  out.back().seqlens_q = {200, 65};
  out.back().seqlens_kv = {129, 260};
  // Score changes (the kernel's build with them): softcap, ALiBi (one slope
  // per query head: the GQA group's heads differ), both, with masks,
  // windows, packed sequences and fp16.
  add(QkvFormat::bshd, MaskType::causal, 2, 300, 300, 8, 2);
  out.back().softcap = 5.0;  // small: most scores are in tanh's curved part
  add(QkvFormat::bshd, MaskType::causal, 1, 200, 200, 8, 1);  // with the head split
  out.back().bias = BiasType::alibi;
  add(QkvFormat::sbhd, MaskType::causal_bottom_right, 1, 130, 333, 4, 1, {}, DType::f16);
  out.back().bias = BiasType::alibi;
  add(QkvFormat::bshd, MaskType::no_mask, 1, 257, 400, 4, 2, {100, 50});
  out.back().softcap = 20.0;
  out.back().bias = BiasType::alibi;
  packed(MaskType::padding_causal, {300, 0, 1, 77}, {300, 0, 1, 77}, {63, 0});
  out.back().softcap = 30.0;
  out.back().bias = BiasType::alibi;
  // Dropout (the forward's Philox bits, bit for bit): alone, with GQA (a
  // CTA's walk over 4 query heads, then with the head split: d 64 draws each
  // tile's bits during the tile before it, across query heads), a window,
  // packed sequences and softcap.
  add(QkvFormat::bshd, MaskType::causal, 2, 300, 300, 8, 2);
  out.back().dropout_p = 0.2;
  out.back().seed = 11;
  add(QkvFormat::bshd, MaskType::causal, 1, 200, 200, 8, 1);
  out.back().dropout_p = 0.15;
  out.back().seed = 14;
  add(QkvFormat::sbhd, MaskType::no_mask, 1, 130, 333, 4, 4, {100, 50}, DType::f16);
  out.back().dropout_p = 0.1;
  out.back().seed = 12;
  out.back().offset = 7;
  packed(MaskType::padding_causal_bottom_right, {200, 0, 1, 64}, {333, 5, 0, 190});
  out.back().dropout_p = 0.3;
  out.back().seed = 13;
  out.back().softcap = 20.0;
  return out;
}

bool on_sm90() {
  return testing::have_gpu() && query_device(Device::cuda(0)).sm == 90;
}

void expect_cases_match(const std::vector<testing::CaseSpec>& all, int first_seed) {
  int index = 0;
  for (const testing::CaseSpec& spec : all) {
    SCOPED_TRACE("case " + std::to_string(index) + ": " +
                 describe_problem(testing::problem_of(spec, Pass::backward, Device::cuda(0))));
    ASSERT_TRUE(testing::claims("flash_sm90", spec, Pass::forward));
    ASSERT_TRUE(testing::claims("flash_sm90", spec, Pass::backward));
    testing::Case gpu = testing::make_case(spec, Device::cuda(0), first_seed + index++);
    testing::run_forced(gpu, "flash_sm90");
    ATTN_CUDA_OK(cudaDeviceSynchronize());
    testing::expect_matches_reference(gpu);
  }
}

TEST(FlashSm90Backward, MatchesTheReference) {
  ATTN_REQUIRE_GPU();
  if (!on_sm90()) GTEST_SKIP() << "flash_sm90 runs on sm_90 only";
  std::vector<testing::CaseSpec> all = cases(64);
  for (const testing::CaseSpec& spec : cases(128)) all.push_back(spec);
  expect_cases_match(all, 900);
}

// d 192 (d_v 192 and 128) and 256: the wide tiles (64 keys per CTA, the consumers splitting
// d; at d 192 each takes half of the middle column block, consumer 1's half
// read from 64 bytes into the block's rows; bwd_mainloop_wide.cuh), every
// case above.
TEST(FlashSm90Backward, MatchesTheReferenceWide) {
  ATTN_REQUIRE_GPU();
  if (!on_sm90()) GTEST_SKIP() << "flash_sm90 runs on sm_90 only";
  std::vector<testing::CaseSpec> all = cases(192);
  for (const testing::CaseSpec& spec : cases(192, 128)) all.push_back(spec);
  for (const testing::CaseSpec& spec : cases(256)) all.push_back(spec);
  expect_cases_match(all, 1900);
}

// A NaN in one key stays visible through the score-changing backward
// (softcap and ALiBi) and stays in its (sequence, KV head): the dq rows that
// see the key and that head's dk / dv hold NaN; the other head and the other
// sequence stay finite. Rows before the key whose query tile meets the key's
// KV tile may hold NaN too: their dS there is 0, but dQ += dS K multiplies it
// by the NaN key in the tensor core (0 x NaN), as in FlashAttention.
void expect_nan_stays_visible(int64_t d) {
  testing::CaseSpec s;
  s.mask = MaskType::causal;
  s.batch = 2;
  s.s_q = s.s_kv = 300;
  s.h_q = 4;
  s.h_kv = 2;
  s.d_qk = s.d_v = d;
  s.softcap = 20.0;
  s.bias = BiasType::alibi;
  s.backward = true;
  testing::Case c = testing::make_case(s, Device::cuda(0), 41);
  constexpr int64_t kKey = 100;  // sequence 1, KV head 1
  testing::set_bf16_nan(c.k, ((1 * s.s_kv + kKey) * s.h_kv + 1) * s.d_qk + 5);
  testing::run_forced(c, "flash_sm90");
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<double> dq = c.dq.to(Device::cpu()).to_doubles(), dk = c.dk.to(Device::cpu()).to_doubles(),
                            dv = c.dv.to(Device::cpu()).to_doubles();
  using testing::row_has_nan;
  const int64_t g = s.h_q / s.h_kv;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.s_q; ++i)
      for (int64_t h = 0; h < s.h_q; ++h)  // dq [b, s, h_q, d]
        if (i >= kKey || b != 1 || h / g != 1)
          EXPECT_EQ(row_has_nan(dq, (b * s.s_q + i) * s.h_q + h, s.d_qk), b == 1 && h / g == 1)
              << "dq row (" << b << ", " << i << ", " << h << ")";
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.h_kv; ++h) {  // dk, dv [b, s, h_kv, d]
      bool nan_k = false, nan_v = false;
      for (int64_t j = 0; j < s.s_kv; ++j) {
        nan_k |= row_has_nan(dk, (b * s.s_kv + j) * s.h_kv + h, s.d_qk);
        nan_v |= row_has_nan(dv, (b * s.s_kv + j) * s.h_kv + h, s.d_v);
      }
      EXPECT_EQ(nan_k, b == 1 && h == 1) << "dk of sequence " << b << ", KV head " << h;
      EXPECT_EQ(nan_v, b == 1 && h == 1) << "dv of sequence " << b << ", KV head " << h;
    }
}

TEST(FlashSm90Backward, NaNStaysVisibleWithScoreChanges) {
  ATTN_REQUIRE_GPU();
  if (!on_sm90()) GTEST_SKIP() << "flash_sm90 runs on sm_90 only";
  for (int64_t d : {64, 256}) {  // d 256: the wide tiles (64-key KV tiles, d split over the consumers)
    SCOPED_TRACE("d " + std::to_string(d));
    expect_nan_stays_visible(d);
  }
}

// The deterministic mode (KV tiles add dQ in a fixed order behind per-tile
// counters, bwd_dq_order.h): three more runs give the same bytes, and the
// answer is the reference's. Each order: ascending (no mask, GQA; more
// query tiles than KV tiles), descending (a causal window; causal GQA 8 with
// the head split; packed sequences with an empty one; more KV tiles than
// SMs).
TEST(FlashSm90Backward, DeterministicModeIsBitwiseRepeatable) {
  ATTN_REQUIRE_GPU();
  if (!on_sm90()) GTEST_SKIP() << "flash_sm90 runs on sm_90 only";
  std::vector<testing::CaseSpec> specs;
  testing::CaseSpec s;
  s.mask = MaskType::no_mask;
  s.batch = 2;
  s.s_q = 700;
  s.s_kv = 900;
  s.h_q = 8;
  s.h_kv = 2;
  s.d_qk = s.d_v = 128;
  s.backward = true;
  specs.push_back(s);
  s.mask = MaskType::causal;
  s.s_q = s.s_kv = 1000;
  s.d_qk = s.d_v = 64;
  s.window = {300, 0};
  specs.push_back(s);
  testing::CaseSpec split = s;
  split.window = {};
  split.h_kv = 1;
  specs.push_back(split);  // GQA 8, causal: two CTAs per KV tile, dK / dV summed in fp32
  testing::CaseSpec t = s;
  t.format = QkvFormat::thd;
  t.mask = MaskType::padding_causal_bottom_right;
  t.seqlens_q = {700, 0, 333};
  t.seqlens_kv = {900, 4, 333};
  t.batch = 3;
  t.window = {};
  specs.push_back(t);  // descending (bwd_dq_order.h), the chunk fits
  testing::CaseSpec r = s;
  r.mask = MaskType::no_mask;
  r.window = {};
  r.s_q = 1000;
  r.s_kv = 400;
  specs.push_back(r);  // ascending: 16 query tiles over 4 KV tiles
  r.mask = MaskType::causal_bottom_right;
  r.s_q = 300;
  r.s_kv = 17000;
  r.batch = 1;
  specs.push_back(r);  // descending over 133 KV tiles, more than an H100 runs at once
  testing::CaseSpec w = s;
  w.d_qk = w.d_v = 256;
  w.window = {};
  specs.push_back(w);  // the wide tiles, descending
  w.mask = MaskType::no_mask;
  w.s_q = 700;
  specs.push_back(w);  // ascending
  w.d_qk = w.d_v = 192;
  specs.push_back(w);
  w.d_v = 128;
  specs.push_back(w);
  int index = 0;
  for (const testing::CaseSpec& spec : specs) {
    SCOPED_TRACE("case " + std::to_string(index));
    testing::expect_bitwise_repeatable_backward(spec, "flash_sm90", 700 + index++);
  }
}

// The ascending order in chunks (flash::bwd_ascending_dq_chunk: about 32 MiB
// of Q, dO and dQ's fp32 rows each): 16 query heads per KV head over 2048
// rows at d 128 fill a chunk with one (KV head, sequence) pair, so this call
// runs four chunks, the KV tiles of each launched after the previous
// chunk's. It repeats bitwise and equals the default mode (the fp64
// reference at this size would take the CPU most of a minute; the default
// mode is checked against it above).
TEST(FlashSm90Backward, DeterministicModeRepeatsOverAscendingChunks) {
  ATTN_REQUIRE_GPU();
  if (!on_sm90()) GTEST_SKIP() << "flash_sm90 runs on sm_90 only";
  testing::CaseSpec s;
  s.mask = MaskType::no_mask;
  s.batch = 2;
  s.s_q = 2048;
  s.s_kv = 300;  // three KV tiles, the last partial: each chunk's tiles wait their turns
  s.h_q = 32;
  s.h_kv = 2;
  s.d_qk = s.d_v = 128;
  s.backward = true;
  testing::expect_bitwise_repeatable_backward(s, "flash_sm90", 790, testing::AnswerCheck::default_mode);
}

}  // namespace
}  // namespace attn
