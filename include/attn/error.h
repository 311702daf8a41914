// The one error type of attn: what is wrong, the value received, what was
// expected, and how to fix it. Every failure a caller can see is an attn::Error.
#pragma once

#include <stdexcept>
#include <string>

namespace attn {

enum class ErrorKind {
  value,        // a bad value or shape (Python: ValueError)
  type,         // a bad dtype or device kind (Python: TypeError)
  unsupported,  // valid, but no backend (or not the forced one) can run it
  runtime,      // a CUDA / library failure while running
};

struct ErrorInfo {
  ErrorKind kind = ErrorKind::value;
  std::string what;      // "q has rank 3"
  std::string got;       // "[2, 128, 1024]"
  std::string expected;  // "rank 4 [batch, seq, heads, head_dim] for qkv_format=bshd"
  std::string fix;       // "split the hidden dimension into heads first: q.view(b, s, h, d)"
};

class Error : public std::runtime_error {
 public:
  explicit Error(ErrorInfo info);
  const ErrorInfo& info() const { return info_; }
  ErrorKind kind() const { return info_.kind; }

 private:
  ErrorInfo info_;
};

// Formats "attn: <what>\n  got:      ...\n  expected: ...\n  fix:      ..." (empty parts omitted).
std::string format_error(const ErrorInfo& info);

[[noreturn]] void fail(ErrorKind kind, std::string what, std::string got, std::string expected,
                       std::string fix);

}  // namespace attn
