// flash_sm80's A/B overrides (ab_overrides.h): which values force a choice,
// and that anything else leaves the rule in charge.
#include <gtest/gtest.h>

#include <initializer_list>

#include "backends/flash_sm80/ab_overrides.h"

namespace attn::flash_sm80 {
namespace {

TEST(Sm80AbOverrides, UnsetOrOtherValuesLeaveTheRules) {
  for (const BwdOverrides& o : {parse_bwd_overrides(nullptr, nullptr, nullptr),
                                parse_bwd_overrides("bulk", "heads_fastest", nullptr)}) {
    EXPECT_FALSE(o.dq_red_only);
    EXPECT_EQ(o.order, BwdOrder::rule);
    EXPECT_EQ(o.group_chunk, 0);
  }
}

TEST(Sm80AbOverrides, NamedValuesForceTheirChoice) {
  EXPECT_TRUE(parse_bwd_overrides("red", nullptr, nullptr).dq_red_only);
  EXPECT_EQ(parse_bwd_overrides(nullptr, "kv_fastest", nullptr).order, BwdOrder::kv_fastest);
  EXPECT_EQ(parse_bwd_overrides(nullptr, "kv_slowest", nullptr).order, BwdOrder::kv_slowest);
  EXPECT_EQ(parse_bwd_overrides(nullptr, nullptr, "3").group_chunk, 3);
  // Set, a chunk is at least one pair (bwd_clamp_group_chunk() reads 0 and below so too).
  EXPECT_EQ(parse_bwd_overrides(nullptr, nullptr, "0").group_chunk, 1);
  EXPECT_EQ(parse_bwd_overrides(nullptr, nullptr, "-2").group_chunk, 1);
}

}  // namespace
}  // namespace attn::flash_sm80
