// The `attn` subcommands. main.cpp parses the command line (CLI11) into these
// plain structs; each subcommand lives in its own file and never sees CLI11.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "attn/select.h"
#include "testing/case.h"

namespace attn::cli {

// The flags that describe a problem, shared by every subcommand. Unset flags
// keep the preset's value (or the default problem's).
struct ProblemFlags {
  std::optional<std::string> preset;
  std::optional<std::string> format, mask, bias, dtype, softmax_type;
  std::optional<std::string> window;                // "L,R"
  std::optional<std::string> seqlens, seqlens_kv;   // "300,800,948"
  std::optional<int64_t> batch, seqlen, seqlen_kv, heads, kv_heads, head_dim, head_dim_qk, head_dim_v;
  std::optional<double> softcap, dropout, scale;
  std::optional<uint64_t> seed, offset;
  bool backward = false;
  bool max_logit = false;              // the forward writes max_logit too
  std::optional<std::string> backend;  // force one, like ATTN_BACKEND
  std::optional<std::string> device;   // run/check: cpu | cuda[:N]; explain: also sm80 ...
};

struct RunFlags {
  ProblemFlags problem;
  bool json = false;   // one JSON object on stdout instead of the text
  bool quiet = false;  // no progress on stderr
  std::optional<int> warmup, iters;  // unset: 3 / 20 on a GPU, 0 / 3 on the CPU
};

struct ExplainFlags {
  ProblemFlags problem;
  bool json = false;
  std::optional<int> cp;  // also the context-parallel plan over this many ranks
};

struct CheckFlags {
  ProblemFlags problem;
  bool json = false;
  bool quiet = false;
  std::optional<int> fd_samples;  // finite-difference samples per gradient tensor
};

struct BenchFlags {
  ProblemFlags problem;  // the base problem; the sweep overrides mask, seqlen, batch, heads, head_dim
  std::string seqlens = "1024,4096,16384";
  std::string head_dims = "64,128,256";
  std::string masks = "no_mask,causal";
  int64_t tokens = 16384;  // batch = tokens / seqlen
  int64_t hidden = 2048;   // heads = hidden / head_dim
  int64_t gqa_ratio = 1;   // kv_heads = heads / gqa_ratio
  std::optional<int> warmup, iters;
  std::string json_path;  // empty or "-": JSON to stdout
  bool resume = false;    // skip the points json_path already holds
  bool quiet = false;
};

// Presets: name, one-line description.
const std::vector<std::pair<std::string, std::string>>& presets();

// The problem the flags describe; throws attn::Error for bad values.
testing::CaseSpec spec_from_flags(const ProblemFlags& f);
// The seed of the random inputs (--seed, default 0).
uint64_t data_seed(const ProblemFlags& f);
// run/check: where the tensors live; cuda when a GPU exists unless --device says.
Device tensor_device(const ProblemFlags& f);
// Prints a note (to `out`) when the CPU reference will take long on this problem.
void note_if_slow_on_cpu(const testing::CaseSpec& spec, std::FILE* out = stdout);
// The problem as JSON fields (run, check and bench share them).
std::string problem_json(const testing::CaseSpec& spec);
// Selection policy: ATTN_BACKEND / ATTN_DISABLE / ATTN_LOG, with --backend on top.
Policy policy_from(const ProblemFlags& f);

// Each returns the process exit code: 0 ok, 1 a failed check; attn::Error
// propagates to main, which prints it and exits with 2.
int run_command(const RunFlags& f);
int explain_command(const ExplainFlags& f);
int check_command(const CheckFlags& f);
int bench_command(const BenchFlags& f);
// `attn --version`: version, commit, CUDA and cuDNN versions, the backends built.
int version_command();

}  // namespace attn::cli
