// Value checks of the `attn` command line, worded like attn::Error (what, got,
// expected, fix) instead of CLI11's defaults. Each returns "" when the text is
// acceptable, else the message; main.cpp wraps them as CLI11 validators.
#pragma once

#include <string>

namespace attn::cli {

// An integer >= lo; `example` is a good value for the fix line ("8").
std::string check_int_at_least(const std::string& flag, const std::string& text, long long lo, const std::string& example);
// A number in [lo, hi) (hi_open) or [lo, hi]; hi = inf: no upper bound.
std::string check_number_in(const std::string& flag, const std::string& text, double lo, double hi, bool hi_open,
                            const std::string& example);

}  // namespace attn::cli
