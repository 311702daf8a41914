// attn-style messages for bad flag values (see cli_checks.h).
#include "cli_checks.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "attn/error.h"
#include "json.h"

namespace attn::cli {
namespace {

std::string message(const std::string& flag, const std::string& text, const std::string& expected,
                    const std::string& example) {
  return format_error({ErrorKind::value, "bad value for " + flag, text.empty() ? "(empty)" : text, expected,
                       "e.g. " + flag + " " + example});
}

std::string bound(double x) { return json::num(x); }  // 0, 1, 0.5: never 309 digits

}  // namespace

std::string check_int_at_least(const std::string& flag, const std::string& text, long long lo,
                               const std::string& example) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  const std::string expected = "a whole number >= " + std::to_string(lo);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < lo) return message(flag, text, expected, example);
  return "";
}

std::string check_number_in(const std::string& flag, const std::string& text, double lo, double hi, bool hi_open,
                            const std::string& example) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  std::string expected;
  if (std::isinf(hi))
    expected = "a number >= " + bound(lo);
  else
    expected = "a number in [" + bound(lo) + ", " + bound(hi) + (hi_open ? ")" : "]");
  const bool ok = !text.empty() && *end == '\0' && std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi);
  return ok ? "" : message(flag, text, expected, example);
}

}  // namespace attn::cli
