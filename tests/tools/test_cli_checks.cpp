// The `attn` command's flag-value checks (tools/attn/cli_checks.h): attn-style
// messages with readable bounds, and the ranges the library accepts.
#include <gtest/gtest.h>

#include <cmath>

#include "cli_checks.h"

namespace attn::cli {
namespace {

TEST(CliChecks, WholeNumbers) {
  EXPECT_EQ(check_int_at_least("--heads", "8", 1, "8"), "");
  const std::string m = check_int_at_least("--heads", "0", 1, "8");
  EXPECT_NE(m.find("attn: bad value for --heads"), std::string::npos) << m;
  EXPECT_NE(m.find("got:      0"), std::string::npos) << m;
  EXPECT_NE(m.find("a whole number >= 1"), std::string::npos) << m;
  EXPECT_NE(m.find("e.g. --heads 8"), std::string::npos) << m;
  EXPECT_NE(check_int_at_least("--heads", "abc", 1, "8"), "");
  EXPECT_NE(check_int_at_least("--heads", "3.5", 1, "8"), "");
  EXPECT_NE(check_int_at_least("--heads", "99999999999999999999999", 1, "8"), "");
}

TEST(CliChecks, DropoutIsHalfOpen) {
  EXPECT_EQ(check_number_in("--dropout", "0", 0, 1, true, "0.1"), "");
  EXPECT_EQ(check_number_in("--dropout", "0.999", 0, 1, true, "0.1"), "");
  const std::string m = check_number_in("--dropout", "1", 0, 1, true, "0.1");
  EXPECT_NE(m.find("a number in [0, 1)"), std::string::npos) << m;
  EXPECT_NE(check_number_in("--dropout", "-0.1", 0, 1, true, "0.1"), "");
  EXPECT_NE(check_number_in("--dropout", "nan", 0, 1, true, "0.1"), "");
}

TEST(CliChecks, UnboundedRangeHasShortMessage) {
  const std::string m = check_number_in("--softcap", "-1", 0, HUGE_VAL, false, "50");
  EXPECT_NE(m.find("a number >= 0"), std::string::npos) << m;
  EXPECT_LT(m.size(), 200u) << m;  // not CLI11's 309-digit bound
}

}  // namespace
}  // namespace attn::cli
