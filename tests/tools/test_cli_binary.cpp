// The built `attn` binary on tiny CPU problems: --version, run/check --json,
// bench's sweep validation, its per-point file and --resume, exact FLOPs,
// sizes past 32 bits, out-of-memory refusals, readable flag errors. Runs everywhere (--device cpu).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "json.h"

namespace attn::cli {
namespace {

struct Result {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/attn_cli_test_" + std::to_string(::getpid()) + "_" + name;
}

// Runs `attn ARGS` (with `env` assignments before it), stdout and stderr apart.
Result attn(const std::string& args, const std::string& env = "") {
  const std::string err_path = temp_path("stderr");
  const std::string cmd = env + " " + ATTN_CLI_PATH + " " + args + " 2>" + err_path;
  Result r;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = slurp(err_path);
  std::remove(err_path.c_str());
  return r;
}

const char* kTiny = "--device cpu --seqlen 16 --heads 2 --head-dim 8 --mask causal";

TEST(CliBinary, VersionNamesTheBuild) {
  const Result r = attn("--version");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* field : {"attn 0.", "commit:", "cuda:     toolkit", "runtime", "cudnn:", "backends:", "reference"})
    EXPECT_NE(r.out.find(field), std::string::npos) << field << " in\n" << r.out;
}

TEST(CliBinary, RunJson) {
  const Result r = attn(std::string("run ") + kTiny + " --backward --iters 1 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const json::Value v = json::parse(r.out);  // stdout is exactly one JSON object
  for (const char* key : {"command", "problem", "device", "backend", "why", "forward", "backward"})
    EXPECT_NE(v.get(key), nullptr) << key;
  EXPECT_EQ(v.get("backend")->text, "reference");
  EXPECT_EQ(v.get("forward")->get("ms")->items.size(), 1u);
  // 2 heads x 16*17/2 causal pairs x 4 x 8: an exact integer.
  EXPECT_EQ(v.get("problem")->get("forward_flops")->text, "8704");
  EXPECT_EQ(v.get("problem")->get("backward_flops")->text, "21760");
}

TEST(CliBinary, CheckJson) {
  const Result r = attn(std::string("check ") + kTiny + " --backward --dtype fp32 --json");
  ASSERT_EQ(r.rc, 0) << r.err << r.out;
  const json::Value v = json::parse(r.out);
  for (const char* key : {"problem", "device", "backends", "comparisons", "checks", "failures", "verdict"})
    EXPECT_NE(v.get(key), nullptr) << key;
  EXPECT_EQ(v.get("verdict")->text, "pass");
  EXPECT_FALSE(v.get("comparisons")->items.empty());
}

TEST(CliBinary, ExplainJsonFlopsExact) {
  const Result r = attn("explain --device cpu --seqlen 4096 --heads 1 --head-dim 1 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).get("forward_flops")->text, "67108864");  // 4 * 1 * 4096^2, not 6.71e+07
}

// Sizes past 32 bits (issue 44): the count is exact, not wrapped to 0.
TEST(CliBinary, ExplainPast32BitsCountsExactly) {
  const Result r = attn("explain --device cpu --seqlen 4294967296 --heads 1 --head-dim 8 --json", "timeout 20");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).get("visible_pairs")->text, "18446744073709551616");  // 2^64 (no_mask: s^2 h b)
  const Result text =
      attn("explain --device cpu --seqlen 4294967296 --heads 3 --head-dim 8 --mask causal", "timeout 20");
  ASSERT_EQ(text.rc, 0) << text.err;
  EXPECT_NE(text.out.find("27670116117006778368 visible pairs"), std::string::npos) << text.out;  // 3 s (s + 1) / 2
  // A tensor of 2^64 elements (the bias [1, 1, s, s]) is refused, not wrapped.
  const Result bias =
      attn("explain --device cpu --seqlen 4294967296 --heads 1 --head-dim 8 --bias post_scale", "timeout 20");
  EXPECT_EQ(bias.rc, 2) << bias.out;
  EXPECT_NE(bias.err.find("more elements than int64"), std::string::npos) << bias.err;
}

// A shape-only question allocates nothing per sequence.
TEST(CliBinary, ExplainHugeBatchIsQuick) {
  const Result r =
      attn("explain --device cpu --batch 2147483647 --seqlen 512 --heads 8 --head-dim 128 --json", "timeout 20");
  ASSERT_EQ(r.rc, 0) << r.err;                                                   // 124: timed out
  EXPECT_EQ(json::parse(r.out).get("visible_pairs")->text, "4503599625273344");  // 2147483647 * 512^2 * 8
}

// Out of host memory: refused up front with the bytes needed, exit 2, no abort.
TEST(CliBinary, RunTooBigFailsFastNamingBytes) {
  const Result r =
      attn("run --device cpu --batch 1000 --seqlen 1000000 --heads 64 --head-dim 128 --quiet", "timeout 20");
  EXPECT_EQ(r.rc, 2) << r.err;  // not 134 (abort) nor 124 (timeout)
  EXPECT_NE(r.err.find("host memory"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" bytes"), std::string::npos) << r.err;
  const Result c =
      attn("check --device cpu --batch 1000 --seqlen 1000000 --heads 64 --head-dim 128 --quiet", "timeout 20");
  EXPECT_EQ(c.rc, 2) << c.err;
  EXPECT_NE(c.err.find(" bytes"), std::string::npos) << c.err;
}

// Four tiny points: seqlens 16,32 x head dim 8 x masks no_mask,causal.
std::string sweep(const std::string& masks = "no_mask,causal", const std::string& seqlens = "16,32", int iters = 1) {
  return "bench --device cpu --sweep-seqlens " + seqlens + " --sweep-head-dims 8 --sweep-masks " + masks +
         " --tokens 32 --hidden 16 --iters " + std::to_string(iters) + " --quiet";
}

TEST(CliBinary, BenchRejectsABadSweepBeforeAnyPoint) {
  const std::string path = temp_path("bad.json");
  std::remove(path.c_str());
  const Result r = attn(sweep("causal,bogus") + " --json " + path);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--sweep-masks"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bogus"), std::string::npos) << r.err;
  EXPECT_FALSE(std::ifstream(path).good()) << "no point may be written";
  const Result s = attn(sweep("causal", "16,x") + " --json " + path);
  EXPECT_EQ(s.rc, 2);
  EXPECT_NE(s.err.find("--sweep-seqlens"), std::string::npos) << s.err;
  EXPECT_FALSE(std::ifstream(path).good());
}

TEST(CliBinary, BenchInterruptedThenResumed) {
  const std::string path = temp_path("sweep.json");
  std::remove(path.c_str());
  const Result stopped = attn(sweep() + " --json " + path, "ATTN_BENCH_STOP_AFTER=2");
  EXPECT_NE(stopped.rc, 0);
  const json::Value partial = json::parse(slurp(path));
  ASSERT_EQ(partial.get("results")->items.size(), 2u);
  // fwd_flops exact: batch 2, 2 heads, 16x16 pairs, 4 * 8 per pair.
  EXPECT_EQ(partial.get("results")->items[0].get("fwd_flops")->text, "32768");

  const Result resumed = attn(sweep() + " --json " + path + " --resume");
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("2 of 4 points already"), std::string::npos) << resumed.err;
  const json::Value full = json::parse(slurp(path));
  ASSERT_EQ(full.get("results")->items.size(), 4u);
  for (size_t i = 0; i < 2; ++i)  // the interrupted run's points are kept as they were
    EXPECT_EQ(json::dump(full.get("results")->items[i]), json::dump(partial.get("results")->items[i]));

  const Result other = attn(sweep("no_mask,causal", "16,32", 2) + " --json " + path + " --resume");
  EXPECT_EQ(other.rc, 2) << "another sweep's file is not resumed";
  std::remove(path.c_str());
}

TEST(CliBinary, ReadableRangeErrors) {
  const Result heads = attn("explain --heads 0");
  EXPECT_NE(heads.rc, 0);
  EXPECT_NE(heads.err.find("attn: bad value for --heads"), std::string::npos) << heads.err;
  EXPECT_NE(heads.err.find("a whole number >= 1"), std::string::npos) << heads.err;
  EXPECT_EQ(heads.err.find("179769"), std::string::npos) << heads.err;

  const Result dropout = attn("explain --dropout 1");
  EXPECT_NE(dropout.rc, 0);
  EXPECT_NE(dropout.err.find("[0, 1)"), std::string::npos) << dropout.err;
  EXPECT_NE(attn("explain --help").out.find("[0, 1)"), std::string::npos);

  const Result window = attn("explain --window abc");
  EXPECT_EQ(window.rc, 2);
  EXPECT_NE(window.err.find("e.g. --window 255,0"), std::string::npos) << window.err;
}

}  // namespace
}  // namespace attn::cli
