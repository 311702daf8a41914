// Small text helpers of the `attn` command: aligned tables, numbers (JSON: json.h).
#pragma once

#include <cstdio>
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
double median(std::vector<double> xs);
// Where a subcommand's text goes: stdout, or nowhere when it prints JSON instead.
std::FILE* text_stream(bool json);

}  // namespace attn::cli
