// flash_sm80's backward tuning table (bwd_config.h, kBwdTuning) pinned to the
// per-head-dim rules it replaced, for both builds of every row of bwd_table.h:
// the kernels are built on these numbers, so a wrong row changes compiled code.
#include <gtest/gtest.h>

#include "backends/flash_sm80/bwd_config.h"
#include "backends/flash_sm80/bwd_table.h"

namespace attn::flash_sm80 {
namespace {

// The rules as the configuration wrote them per head dim before the table.
struct Knobs {
  int block_m;
  bool dropout, dq_first, diagonal_start, mask_bits;
  bool rebuild_q, rebuild_q_sm90, rebuild_do, rebuild_do_sm90;
  bool kv_order_chosen, chunked_grid;
};

constexpr bool dropout_apart(int dqk) { return dqk <= 64 || dqk == 128 || dqk == 256; }

constexpr Knobs rule(int dqk, int dv, bool dropout_build) {
  const bool rebuild_q = (dqk == 64 && !dropout_build) || (dqk == 128 && dropout_build);
  const bool rebuild_do = dqk == 128 && !dropout_build;
  return {dqk <= 64 && !dropout_build ? 128 : 64,
          !dropout_apart(dqk) || dropout_build,
          dqk <= 64 || dqk == 256,
          dqk == 256,
          !((dqk == 96 && dv == 96) || (dqk == 192 && dv == 192)),
          rebuild_q,
          rebuild_q || dqk == 256,
          rebuild_do,
          rebuild_do || dqk == 256,
          dqk <= 64 || dqk == 128,
          dqk == 256};
}

template <class C>
constexpr Knobs knobs() {
  return {C::kBlockM,
          C::kDropout,
          C::kDqFirst,
          C::kDiagonalStart,
          C::kMaskBits,
          C::kRebuildQAddresses,
          C::kRebuildQAddressesSm90,
          C::kRebuildDoAddresses,
          C::kRebuildDoAddressesSm90,
          C::kKvOrderChosen,
          C::kChunkedGrid};
}

constexpr bool same(const Knobs& a, const Knobs& b) {
  return a.block_m == b.block_m && a.dropout == b.dropout && a.dq_first == b.dq_first &&
         a.diagonal_start == b.diagonal_start && a.mask_bits == b.mask_bits && a.rebuild_q == b.rebuild_q &&
         a.rebuild_q_sm90 == b.rebuild_q_sm90 && a.rebuild_do == b.rebuild_do &&
         a.rebuild_do_sm90 == b.rebuild_do_sm90 && a.kv_order_chosen == b.kv_order_chosen &&
         a.chunked_grid == b.chunked_grid;
}

// Caught at compile time: each build of each row, and which rows have a dropout build.
#define ATTN_PIN_ROW(dqk, dv)                                                                               \
  static_assert(same(knobs<BwdConfig<dqk, dv>>(), rule(dqk, dv, false)), "bwd " #dqk "/" #dv);              \
  static_assert(bwd_has_dropout_build(dqk, dv) == dropout_apart(dqk), "bwd " #dqk "/" #dv " dropout build"); \
  static_assert(!dropout_apart(dqk) || same(knobs<BwdConfig<dqk, dv, dropout_apart(dqk)>>(), rule(dqk, dv, true)), \
                "bwd " #dqk "/" #dv " dropout build");
ATTN_FLASH_SM80_BWD_TABLE(ATTN_PIN_ROW)
#undef ATTN_PIN_ROW

void expect_same(const Knobs& got, const Knobs& want) {
  EXPECT_EQ(got.block_m, want.block_m);
  EXPECT_EQ(got.dropout, want.dropout);
  EXPECT_EQ(got.dq_first, want.dq_first);
  EXPECT_EQ(got.diagonal_start, want.diagonal_start);
  EXPECT_EQ(got.mask_bits, want.mask_bits);
  EXPECT_EQ(got.rebuild_q, want.rebuild_q);
  EXPECT_EQ(got.rebuild_q_sm90, want.rebuild_q_sm90);
  EXPECT_EQ(got.rebuild_do, want.rebuild_do);
  EXPECT_EQ(got.rebuild_do_sm90, want.rebuild_do_sm90);
  EXPECT_EQ(got.kv_order_chosen, want.kv_order_chosen);
  EXPECT_EQ(got.chunked_grid, want.chunked_grid);
}

TEST(Sm80BwdTuning, EveryBuildOfEveryRowKeepsItsKnobs) {
  int builds = 0;
#define ATTN_CHECK_ROW(dqk, dv)                                                 \
  {                                                                             \
    SCOPED_TRACE("bwd " #dqk "/" #dv);                                          \
    expect_same(knobs<BwdConfig<dqk, dv>>(), rule(dqk, dv, false));             \
    ++builds;                                                                   \
    EXPECT_EQ(bwd_has_dropout_build(dqk, dv), dropout_apart(dqk));              \
    if constexpr (dropout_apart(dqk)) {                                         \
      SCOPED_TRACE("dropout build");                                            \
      expect_same(knobs<BwdConfig<dqk, dv, true>>(), rule(dqk, dv, true));      \
      ++builds;                                                                 \
    }                                                                           \
  }
  ATTN_FLASH_SM80_BWD_TABLE(ATTN_CHECK_ROW)
#undef ATTN_CHECK_ROW
  EXPECT_EQ(builds, 12);  // 8 rows, 4 of them with a dropout build
}

// A pair outside the table gets the defaults: FlashAttention-2's choices.
TEST(Sm80BwdTuning, RowsNotInTheTableGetTheDefaults) {
  const BwdTuning t = bwd_tuning(224, 224, false);
  EXPECT_EQ(t.d_qk, 224);
  EXPECT_EQ(t.block_m, 64);
  EXPECT_TRUE(t.dropout_path);
  EXPECT_FALSE(t.dq_first || t.diagonal_start || t.kv_order_chosen || t.chunked_grid);
  EXPECT_TRUE(t.mask_bits);
  EXPECT_FALSE(t.rebuild_q_sm80 || t.rebuild_do_sm80 || t.rebuild_q_sm90 || t.rebuild_do_sm90);
  EXPECT_FALSE(bwd_has_dropout_build(224, 224));
}

}  // namespace
}  // namespace attn::flash_sm80
