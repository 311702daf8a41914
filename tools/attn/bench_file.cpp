// Reading and writing bench's output file (see bench_file.h).
#include "bench_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "attn/error.h"
#include "json.h"

namespace attn::cli {

std::string point_key(int64_t d, int64_t seqlen, const std::string& mask) {
  return "d=" + std::to_string(d) + " seqlen=" + std::to_string(seqlen) + " mask=" + mask;
}

std::map<std::string, std::string> load_points(const std::string& path, const std::string& sweep_json) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  json::Value doc;
  try {
    doc = json::parse(ss.str());
  } catch (const Error& e) {
    fail(ErrorKind::value, "--resume: " + path + " is " + e.info().what, e.info().got, "a file `attn bench --json` wrote",
         "remove it to start the sweep afresh, or pass another --json file");
  }
  const json::Value* sweep = doc.get("sweep");
  const json::Value* results = doc.get("results");
  if (!sweep || !results || results->type != json::Value::Type::array)
    fail(ErrorKind::value, "--resume: " + path + " is not an attn bench document", "no \"sweep\" and \"results\" fields",
         "a file `attn bench --json` wrote", "remove it to start the sweep afresh, or pass another --json file");
  if (json::dump(*sweep) != sweep_json)
    fail(ErrorKind::value, "--resume: " + path + " holds another sweep's points", json::dump(*sweep), sweep_json,
         "pass the same flags as the interrupted run, or another --json file");
  std::map<std::string, std::string> points;
  for (const json::Value& r : results->items) {
    const json::Value *d = r.get("d"), *s = r.get("seqlen"), *m = r.get("mask");
    if (!d || !s || !m) continue;
    points[point_key(static_cast<int64_t>(d->number), static_cast<int64_t>(s->number), m->text)] = json::dump(r);
  }
  return points;
}

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  const bool written = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = f && std::fclose(f) == 0;
  if (!written || !closed || std::rename(tmp.c_str(), path.c_str()) != 0)
    fail(ErrorKind::runtime, "cannot write the bench results", path + ": " + std::strerror(errno),
         "a writable file", "check the directory exists and is writable, or pass another --json path");
}

}  // namespace attn::cli
