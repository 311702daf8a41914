// The visibility rule at its boundaries, brute force over every (i, j): with
// all scores equal and v the identity, out[i][j] is p_ij, which must be
// nonzero exactly when i + shift - left <= j <= i + shift + right (inclusive),
// j < len_kv and i < len_q; shift 0 for top-left (causal, padding_causal),
// len_kv - len_q otherwise; a causal mask clips right to 0.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "reference/reference_test_util.h"

namespace attn::reftest {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_causal(MaskType m) {
  return m == MaskType::causal || m == MaskType::causal_bottom_right || m == MaskType::padding_causal ||
         m == MaskType::padding_causal_bottom_right;
}
bool is_padding(MaskType m) {
  return m == MaskType::padding || m == MaskType::padding_causal || m == MaskType::padding_causal_bottom_right;
}
bool top_left(MaskType m) { return m == MaskType::causal || m == MaskType::padding_causal; }

// Checks p against the rule for every (b, h, i, j); returns the number of
// visible pairs seen, so callers can tell the case is not vacuous.
int64_t check_rule(const Data& d, const Result& r, MaskType mask, Window w, const std::string& what) {
  const Dims& n = d.dims;
  const int64_t left = w.left, right = is_causal(mask) ? 0 : w.right;
  int64_t visible_pairs = 0;
  for (int64_t b = 0; b < n.b; ++b) {
    const int64_t lq = d.lq(b), lkv = d.lkv(b), shift = top_left(mask) ? 0 : lkv - lq;
    for (int64_t h = 0; h < n.h_q; ++h)
      for (int64_t i = 0; i < n.s_q; ++i) {
        int64_t count = 0;
        for (int64_t j = 0; j < n.s_kv; ++j) {
          const bool visible = i < lq && j < lkv && (left < 0 || i + shift - left <= j) &&
                               (right < 0 || j <= i + shift + right);
          const double p = r.out[d.io(b, i, h, j)];
          EXPECT_EQ(p > 0.0, visible) << what << " b=" << b << " i=" << i << " j=" << j << " p=" << p;
          count += visible;
        }
        visible_pairs += count;
        for (int64_t j = 0; j < n.s_kv; ++j) {
          if (r.out[d.io(b, i, h, j)] > 0.0) {
            EXPECT_NEAR(r.out[d.io(b, i, h, j)], 1.0 / count, 1e-15) << what;
          }
        }
        if (count == 0) {
          EXPECT_EQ(r.lse[d.il(b, h, i)], -kInf) << what << " b=" << b << " i=" << i;
        } else {
          EXPECT_NEAR(r.lse[d.il(b, h, i)], std::log(double(count)), 1e-6) << what << " b=" << b << " i=" << i;
        }
      }
  }
  return visible_pairs;
}

TEST(ReferenceWindow, BruteForceEveryPairAtTheBoundaries) {
  const MaskType masks[] = {MaskType::no_mask, MaskType::causal, MaskType::causal_bottom_right,
                            MaskType::padding, MaskType::padding_causal, MaskType::padding_causal_bottom_right,
                            MaskType::arbitrary};
  const int64_t sides[] = {-1, 0, 1, 3};
  int64_t total_visible = 0, cases = 0;
  for (auto [s_q, s_kv] : {std::pair<int64_t, int64_t>{4, 7}, {7, 4}, {5, 5}}) {
    for (MaskType mask : masks) {
      for (QkvFormat f : {QkvFormat::bshd, QkvFormat::thd}) {
        Data d = probe_data({2, s_q, s_kv, 2, 1, 1, 1}, 31);
        if (is_padding(mask) || f == QkvFormat::thd) {  // unequal true lengths
          d.len_q = {s_q, s_q - 1};
          d.len_kv = {s_kv - 2, s_kv};
        }
        if (mask == MaskType::arbitrary) {  // an all-true mask: only the window acts
          d.mask.shape = {1, 1, 1, 1};
          d.mask.values = {1.0};
          d.mask.follow_q = false;
          d.mask.dtype = DType::boolean;
        }
        for (int64_t left : sides)
          for (int64_t right : sides) {
            Options o;
            o.mask = mask;
            o.window = {left, right};
            Spec spec;
            spec.format = f;
            spec.backward = false;
            const Result r = run_reference(d, o, spec);
            total_visible += check_rule(d, r, mask, o.window,
                                        std::string(mask_name(mask)) + " " + format_name(f) + " s_q=" +
                                            std::to_string(s_q) + " s_kv=" + std::to_string(s_kv) + " window=(" +
                                            std::to_string(left) + "," + std::to_string(right) + ")");
            ++cases;
          }
      }
    }
  }
  EXPECT_GT(total_visible, cases);  // most cases see something
}

// Top-left vs bottom-right alignment when s_q != s_kv, read from the lse
// (log of the number of visible keys).
TEST(ReferenceWindow, CausalAlignment) {
  auto counts = [](int64_t s_q, int64_t s_kv, MaskType mask) {
    const Data d = probe_data({1, s_q, s_kv, 1, 1, 1, 1}, 31);
    Options o;
    o.mask = mask;
    Spec spec;
    spec.backward = false;
    const Result r = run_reference(d, o, spec);
    std::vector<double> n;
    for (double lse : r.lse) n.push_back(lse == -kInf ? 0.0 : std::round(std::exp(lse)));
    return n;
  };
  EXPECT_EQ(counts(3, 5, MaskType::causal), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(counts(3, 5, MaskType::causal_bottom_right), (std::vector<double>{3, 4, 5}));
  EXPECT_EQ(counts(5, 3, MaskType::causal), (std::vector<double>{1, 2, 3, 3, 3}));
  EXPECT_EQ(counts(5, 3, MaskType::causal_bottom_right), (std::vector<double>{0, 0, 1, 2, 3}));
}

// A causal mask with a window keeps the window's left and clips its right to
// 0: with s_q == s_kv (both alignments agree) causal + (2, 3) is the window (2, 0).
TEST(ReferenceWindow, CausalWithWindowClipsRightToZero) {
  const Data d = probe_data({1, 6, 6, 1, 1, 1, 1}, 31);
  Spec spec;
  spec.backward = false;
  Options causal;
  causal.mask = MaskType::causal;
  causal.window = {2, 3};
  Options window;
  window.window = {2, 0};
  const Result a = run_reference(d, causal, spec), b = run_reference(d, window, spec);
  EXPECT_TRUE(identical(a.out, b.out));
  EXPECT_TRUE(identical(a.lse, b.lse));
  // And it is not the unclipped window: row 0 would see keys 0..3.
  Options wide;
  wide.window = {2, 3};
  EXPECT_FALSE(identical(a.out, run_reference(d, wide, spec).out));
}

}  // namespace
}  // namespace attn::reftest
