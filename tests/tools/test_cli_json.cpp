// The `attn` command's JSON writer and reader (tools/attn/json.h): exact
// numbers, valid syntax, and the reader's refusals.
#include <gtest/gtest.h>

#include <cstdlib>

#include "attn/error.h"
#include "json.h"

namespace attn::cli::json {
namespace {

TEST(CliJson, CountsAreExactIntegers) {
  EXPECT_EQ(count(33554432.0), "33554432");
  EXPECT_EQ(count(56623104.0), "56623104");
  EXPECT_EQ(count(6.6e12), "6600000000000");
  EXPECT_EQ(count(2.5), "2.5");
  EXPECT_EQ(integer(-7), "-7");
}

TEST(CliJson, DoublesRoundTrip) {
  for (double x : {0.1, 1.0 / 3.0, 612.34567891234, 1e-300, 1.7976931348623157e308, -2.5e-7}) {
    const std::string s = num(x);
    EXPECT_EQ(std::strtod(s.c_str(), nullptr), x) << s;
  }
  EXPECT_EQ(num(0.1), "0.1");
  EXPECT_EQ(num(1.0 / 0.0), "null");
}

TEST(CliJson, WritesWhatItReads) {
  Object o;
  o.str("name", "a \"quoted\"\n\ttab\x01").integer("n", 3).num("x", 0.25).boolean("ok", true);
  o.raw("list", array({Object().integer("a", 1).dump(), Object().integer("a", 2).dump()}));
  for (const std::string& text : {o.dump(), o.pretty()}) {
    const Value v = parse(text);
    ASSERT_EQ(v.type, Value::Type::object);
    EXPECT_EQ(v.get("name")->text, "a \"quoted\"\n\ttab\x01");
    EXPECT_EQ(v.get("n")->text, "3");
    EXPECT_EQ(v.get("x")->number, 0.25);
    EXPECT_TRUE(v.get("ok")->b);
    ASSERT_EQ(v.get("list")->items.size(), 2u);
    EXPECT_EQ(v.get("list")->items[1].get("a")->number, 2.0);
    EXPECT_EQ(dump(v), o.dump());
  }
}

TEST(CliJson, RejectsBadSyntax) {
  for (const char* bad : {"", "{", "{\"a\": }", "[1, 2,]", "{\"a\" 1}", "01", "1.", "\"abc", "nul", "{} x",
                          "{\"a\": 3.35544e+07,}", "[\"\t\"]"})
    EXPECT_THROW(parse(bad), Error) << bad;
  EXPECT_NO_THROW(parse(" {\"a\": [1, -2.5e+3, true, false, null, \"\\u0041\"]} \n"));
}

}  // namespace
}  // namespace attn::cli::json
