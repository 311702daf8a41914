// Dropout in the reference: with all scores equal and v the identity, out[i][j]
// is p_ij z_ij, so every kept/dropped element can be checked against the
// Philox rule of include/attn/philox.h (positions inside each sequence,
// bh = b * h_q + h); the keep rate, the 1/(1-p) scale, lse taken before
// dropout, and bitwise agreement across formats and thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "attn/philox.h"
#include "reference/reference_test_util.h"

namespace attn::reftest {
namespace {

Options with_dropout(double p, uint64_t seed, uint64_t offset) {
  Options o;
  o.dropout_p = p;
  o.seed = seed;
  o.offset = offset;
  return o;
}

// Every element kept or dropped as dropout_keep says, kept ones scaled by 1/(1-p).
// Returns the fraction kept.
double check_elements(const Data& d, const Options& o, const Result& r, const std::string& what) {
  const Dims& n = d.dims;
  const uint32_t threshold = dropout_threshold(o.dropout_p);
  int64_t kept = 0, total = 0;
  for (int64_t b = 0; b < n.b; ++b)
    for (int64_t h = 0; h < n.h_q; ++h)
      for (int64_t i = 0; i < d.lq(b); ++i)
        for (int64_t j = 0; j < d.lkv(b); ++j) {  // no mask: every key of the sequence is visible
          const bool keep = dropout_keep(o.seed, static_cast<uint32_t>(o.offset), static_cast<uint32_t>(b * n.h_q + h),
                                         static_cast<uint32_t>(i), static_cast<uint32_t>(j), threshold);
          const double expected = keep ? (1.0 / double(d.lkv(b))) / (1.0 - o.dropout_p) : 0.0;
          EXPECT_NEAR(r.out[d.io(b, i, h, j)], expected, 1e-15) << what << " b=" << b << " h=" << h << " i=" << i
                                                                 << " j=" << j;
          kept += keep;
          ++total;
        }
  return double(kept) / double(total);
}

TEST(ReferenceDropout, EveryElementFollowsPhilox) {
  Data d = probe_data({3, 5, 6, 2, 1, 1, 1}, 41);
  d.len_q = {5, 2, 4};
  d.len_kv = {6, 3, 1};
  const Options o = with_dropout(0.4, 0x0123456789abcdefull, 12345);
  Options padded = o;
  padded.mask = MaskType::padding;
  for (QkvFormat f : {QkvFormat::bshd, QkvFormat::sbhd, QkvFormat::thd}) {
    Spec spec;
    spec.format = f;
    spec.backward = false;
    const Result r = run_reference(d, f == QkvFormat::thd ? o : padded, spec);
    check_elements(d, o, r, format_name(f));
  }
}

TEST(ReferenceDropout, KeepRateAndScale) {
  const Data d = probe_data({2, 64, 64, 2, 2, 1, 1}, 42);
  Spec spec;
  spec.backward = false;
  for (double p : {0.1, 0.5}) {
    const Options o = with_dropout(p, 2024, 0);
    const double rate = check_elements(d, o, run_reference(d, o, spec), "p=" + std::to_string(p));
    const double sigma = std::sqrt(p * (1 - p) / (2.0 * 2 * 64 * 64));
    EXPECT_NEAR(rate, 1.0 - p, 6 * sigma) << "p=" << p;
  }
}

// lse is the statistic before dropout; p = 0 is no dropout; seed and offset matter.
TEST(ReferenceDropout, LseBeforeDropoutAndTheKeyMatters) {
  const Data d = make_data({2, 4, 5, 2, 2, 3, 3}, 43);
  Spec spec;
  const Result none = run_reference(d, Options{}, spec);
  const Result zero = run_reference(d, with_dropout(0.0, 7, 7), spec);
  const Result some = run_reference(d, with_dropout(0.5, 7, 7), spec);
  EXPECT_TRUE(identical(none.out, zero.out));
  EXPECT_TRUE(identical(none.dq, zero.dq));
  EXPECT_TRUE(identical(none.lse, some.lse));
  EXPECT_FALSE(identical(none.out, some.out));
  EXPECT_FALSE(identical(some.out, run_reference(d, with_dropout(0.5, 8, 7), spec).out));
  EXPECT_FALSE(identical(some.out, run_reference(d, with_dropout(0.5, 7, 8), spec).out));
  EXPECT_FALSE(identical(some.out, run_reference(d, with_dropout(0.5, 7 | (1ull << 33), 7), spec).out));
}

TEST(ReferenceDropout, SameAcrossFormatsAndThreadCounts) {
  Data d = make_data({3, 4, 6, 4, 2, 3, 2}, 44);
  d.len_q = {4, 1, 3};
  d.len_kv = {6, 2, 5};
  Options o = with_dropout(0.35, 999, 4);
  o.mask = MaskType::padding_causal_bottom_right;
  Result first;
  bool have_first = false;
  for (const char* threads : {"1", "4"})
    for (QkvFormat f : {QkvFormat::bshd, QkvFormat::sbhd, QkvFormat::thd}) {
      ScopedEnv env("ATTN_NUM_THREADS", threads);
      Spec spec;
      spec.format = f;
      const Result r = run_reference(d, o, spec);
      if (!have_first) {
        first = r;
        have_first = true;
        continue;
      }
      const std::string what = std::string(format_name(f)) + " threads=" + threads;
      EXPECT_TRUE(identical(first.out, r.out)) << what;
      EXPECT_TRUE(identical(first.dq, r.dq)) << what;
      EXPECT_TRUE(identical(first.dk, r.dk)) << what;
      EXPECT_TRUE(identical(first.dv, r.dv)) << what;
    }
}

}  // namespace
}  // namespace attn::reftest
