// Small text helpers of the `attn` command: aligned tables, numbers, JSON strings.
#pragma once

#include <string>
#include <vector>

namespace attn::cli {

// Columns padded to their widest cell, two spaces apart.
struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::string str() const;
};

std::string sci(double x);                  // "1.23e-03"
std::string fixed(double x, int decimals);  // "12.35"
// A JSON string literal: quotes, backslashes and control characters escaped; UTF-8 passes through.
std::string json_string(const std::string& s);
double median(std::vector<double> xs);

}  // namespace attn::cli
