// `attn bench`'s output file: rewritten whole after every point (a temporary
// file renamed over it, so it is always one valid JSON document), and read
// back by --resume to skip the points it already holds.
#pragma once

#include <map>
#include <string>

namespace attn::cli {

// A point's identity within a sweep: "d=128 seqlen=4096 mask=causal".
std::string point_key(int64_t d, int64_t seqlen, const std::string& mask);

// The results `path` holds for this sweep, by point_key, each as one line of
// JSON. Empty when the file does not exist; attn::Error when it is not a bench
// document or its "sweep" differs from `sweep_json` (another sweep's points).
std::map<std::string, std::string> load_points(const std::string& path, const std::string& sweep_json);

// Writes `text` to path + ".tmp", then renames it over `path`.
void write_atomically(const std::string& path, const std::string& text);

}  // namespace attn::cli
