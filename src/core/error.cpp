// attn::Error: formatting of what / got / expected / fix.
#include "attn/error.h"

namespace attn {

std::string format_error(const ErrorInfo& info) {
  std::string s = "attn: " + info.what;
  if (!info.got.empty()) s += "\n  got:      " + info.got;
  if (!info.expected.empty()) s += "\n  expected: " + info.expected;
  if (!info.fix.empty()) s += "\n  fix:      " + info.fix;
  return s;
}

Error::Error(ErrorInfo info) : std::runtime_error(format_error(info)), info_(std::move(info)) {}

void fail(ErrorKind kind, std::string what, std::string got, std::string expected, std::string fix) {
  throw Error(ErrorInfo{kind, std::move(what), std::move(got), std::move(expected), std::move(fix)});
}

}  // namespace attn
