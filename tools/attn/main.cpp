// The `attn` command: parses the command line with CLI11 into the plain
// structs of commands.h and runs one subcommand. The only file that includes
// CLI11 (header-only and slow to compile).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <exception>
#include <new>

#include "attn/error.h"
#include "cli_checks.h"
#include "commands.h"

namespace {

using namespace attn::cli;

// An optional flag: unset unless given on the command line.
template <typename T>
CLI::Option* add(CLI::App* app, const std::string& name, std::optional<T>& target, const std::string& help) {
  return app->add_option_function<T>(name, [&target](const T& v) { target = v; }, help);
}

// Range checks with attn's messages (cli_checks.h), not CLI11's defaults.
CLI::Validator at_least(const std::string& flag, long long lo, const std::string& example) {
  return CLI::Validator([=](std::string& v) { return check_int_at_least(flag, v, lo, example); }, "");
}

CLI::Validator number_in(const std::string& flag, double lo, double hi, bool hi_open, const std::string& example) {
  return CLI::Validator([=](std::string& v) { return check_number_in(flag, v, lo, hi, hi_open, example); }, "");
}

constexpr double kNoBound = HUGE_VAL;

// CLI11 prefixes a validator's message with the flag ("--heads: attn: ...");
// attn's messages name the flag themselves.
std::string failure_message(const CLI::App*, const CLI::Error& e) {
  std::string what = e.what();
  if (const size_t at = what.find(": attn: "); at != std::string::npos) what = what.substr(at + 2);
  return what + "\nRun with --help for more information.\n";
}

std::string preset_help() {
  std::string s = "a named problem (other flags override its values):";
  for (const auto& [name, about] : presets()) s += "\n  " + name + ": " + about;
  return s;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.first);
  return names;
}

void add_problem_flags(CLI::App* app, ProblemFlags& f, const std::string& device_help) {
  add(app, "--preset", f.preset, preset_help())->check(CLI::IsMember(preset_names()));
  add(app, "--format", f.format, "qkv format: bshd, sbhd or thd (packed, with per-sequence lengths) [bshd]")
      ->check(CLI::IsMember({"bshd", "sbhd", "thd"}));
  add(app, "--batch", f.batch, "sequences in the batch [1]")->check(at_least("--batch", 0, "4"));
  add(app, "--seqlen", f.seqlen, "sequence length of q and kv (bshd/sbhd: the padded length) [512]")
      ->check(at_least("--seqlen", 0, "4096"));
  add(app, "--seqlen-kv", f.seqlen_kv, "sequence length of k and v, when it differs from q's")
      ->check(at_least("--seqlen-kv", 0, "4096"));
  add(app, "--seqlens", f.seqlens,
      "per-sequence lengths, e.g. 300,800,948: thd's packed sequences, or the true lengths of a padded "
      "bshd/sbhd batch (needs a padding mask); sets the batch");
  add(app, "--seqlens-kv", f.seqlens_kv, "per-sequence lengths of k and v [as --seqlens]");
  add(app, "--heads", f.heads, "query heads h_q [8]")->check(at_least("--heads", 1, "8"));
  add(app, "--kv-heads", f.kv_heads, "key/value heads h_kv, dividing h_q (GQA, MQA) [h_q]")
      ->check(at_least("--kv-heads", 1, "2"));
  add(app, "--head-dim", f.head_dim, "head dimension of q, k and v [128]")->check(at_least("--head-dim", 1, "128"));
  add(app, "--head-dim-qk", f.head_dim_qk, "head dimension of q and k (overrides --head-dim)")
      ->check(at_least("--head-dim-qk", 1, "192"));
  add(app, "--head-dim-v", f.head_dim_v, "head dimension of v and out (overrides --head-dim)")
      ->check(at_least("--head-dim-v", 1, "128"));
  add(app, "--mask", f.mask, "mask type [no_mask]")
      ->check(CLI::IsMember({"no_mask", "causal", "causal_bottom_right", "padding", "padding_causal",
                             "padding_causal_bottom_right", "arbitrary"}));
  add(app, "--window", f.window, "sliding window L,R, inclusive, -1 = unbounded (e.g. 255,0)");
  add(app, "--softcap", f.softcap, "softcap c >= 0: scores become c*tanh(s/c) [0: off]")
      ->check(number_in("--softcap", 0, kNoBound, false, "50"));
  add(app, "--bias", f.bias, "bias: none, post_scale (a random [1, h_q, s_q, s_kv] tensor) or alibi [none]")
      ->check(CLI::IsMember({"none", "post_scale", "post_scale_bias", "alibi"}));
  add(app, "--dropout", f.dropout, "dropout probability, in [0, 1) [0]")
      ->check(number_in("--dropout", 0, 1, true, "0.1"));
  add(app, "--softmax-type", f.softmax_type,
      "vanilla, off-by-one (a sink logit 0) or learnable (random sink logits per query head) [vanilla]")
      ->check(CLI::IsMember({"vanilla", "off-by-one", "off_by_one", "learnable"}));
  app->add_flag("--max-logit", f.max_logit, "the forward also returns the max logit per query head");
  add(app, "--seed", f.seed, "seed of the random inputs and of dropout [0]");
  add(app, "--offset", f.offset, "dropout's Philox offset [0]");
  add(app, "--dtype", f.dtype, "bf16, fp16, fp32 (fp64: CPU reference only) [bf16]")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32", "fp64"}));
  add(app, "--scale", f.scale, "softmax scale [1/sqrt(head_dim_qk)]");
  app->add_flag("--backward", f.backward, "the backward pass too");
  add(app, "--backend", f.backend, "force this backend, like ATTN_BACKEND");
  add(app, "--device", f.device, device_help);
}

void add_quiet_flag(CLI::App* app, bool& quiet) {
  app->add_flag("--quiet,--no-progress", quiet, "no progress lines on stderr (they appear only when stderr is a terminal)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attn: scaled-dot-product attention, forward and backward, on the backend that fits.\n"
               "Without a GPU, run and check use the exact CPU reference backend and say so."};
  app.require_subcommand(0, 1);
  app.failure_message(failure_message);
  bool show_version = false;
  app.add_flag("--version", show_version, "print the version, commit, CUDA and cuDNN versions and the backends built");
  app.footer("ATTN_BACKEND, ATTN_DISABLE, ATTN_LOG and ATTN_SIMULATE_DEVICE act as for the library. See docs/CLI.md.");

  RunFlags run;
  CLI::App* run_cmd = app.add_subcommand("run", "run one problem on random inputs: time, TFLOP/s, the backend and why");
  add_problem_flags(run_cmd, run.problem, "where the tensors live: cpu, cuda or cuda:N [cuda if a GPU exists, else cpu]");
  run_cmd->add_flag("--json", run.json, "print one JSON object on stdout (problem, backend and why, timings) instead of text");
  add_quiet_flag(run_cmd, run.quiet);
  add(run_cmd, "--warmup", run.warmup, "untimed runs first [3 on a GPU, 0 on the CPU]")->check(at_least("--warmup", 0, "3"));
  add(run_cmd, "--iters", run.iters, "timed runs; the median is reported [20 on a GPU, 3 on the CPU]")
      ->check(at_least("--iters", 1, "20"));

  ExplainFlags explain;
  CLI::App* explain_cmd = app.add_subcommand("explain", "every backend's verdict on a problem (no tensors, no GPU needed)");
  add_problem_flags(explain_cmd, explain.problem,
                    "the device to judge for: sm80, sm86, sm89, sm90 (simulated), cpu, cuda or cuda:N "
                    "[this machine's GPU, ATTN_SIMULATE_DEVICE, else cpu]");
  explain_cmd->add_flag("--json", explain.json, "print the verdicts as JSON");
  add(explain_cmd, "--cp", explain.cp,
      "also the context-parallel plan over this many ranks (chunks per rank, steps skipped) or the rule it breaks")
      ->check(at_least("--cp", 1, "4"));

  CheckFlags check;
  CLI::App* check_cmd = app.add_subcommand(
      "check", "run every supporting backend on the same inputs and compare it with the fp64 reference; exit 1 on a failure");
  add_problem_flags(check_cmd, check.problem,
                    "where the backends under test run: cpu or cuda[:N] [cuda if a GPU exists, else cpu]");
  check_cmd->add_flag("--json", check.json,
                      "print one JSON object on stdout (problem, backends, every comparison and check, verdict)");
  add_quiet_flag(check_cmd, check.quiet);
  add(check_cmd, "--fd-samples", check.fd_samples,
      "finite-difference samples per gradient tensor [up to 6 when only the reference runs, else 0]")
      ->check(at_least("--fd-samples", 0, "6"));

  BenchFlags bench;
  CLI::App* bench_cmd = app.add_subcommand(
      "bench", "time a sweep (seqlens x head dims x masks; batch = tokens/seqlen, heads = hidden/head_dim); JSON out");
  add_problem_flags(bench_cmd, bench.problem, "where the tensors live: cpu, cuda or cuda:N [cuda if a GPU exists, else cpu]");
  bench_cmd->add_option("--sweep-seqlens", bench.seqlens, "sequence lengths, comma-separated")->capture_default_str();
  bench_cmd->add_option("--sweep-head-dims", bench.head_dims, "head dims, comma-separated")->capture_default_str();
  bench_cmd->add_option("--sweep-masks", bench.masks, "mask types, comma-separated")->capture_default_str();
  bench_cmd->add_option("--tokens", bench.tokens, "tokens per problem: batch = tokens / seqlen")
      ->capture_default_str()
      ->check(at_least("--tokens", 1, "16384"));
  bench_cmd->add_option("--hidden", bench.hidden, "query hidden size: heads = hidden / head_dim")
      ->capture_default_str()
      ->check(at_least("--hidden", 1, "2048"));
  bench_cmd->add_option("--gqa-ratio", bench.gqa_ratio, "query heads per KV head")
      ->capture_default_str()
      ->check(at_least("--gqa-ratio", 1, "4"));
  add(bench_cmd, "--warmup", bench.warmup, "untimed runs first [3 on a GPU, 0 on the CPU]")->check(at_least("--warmup", 0, "3"));
  add(bench_cmd, "--iters", bench.iters, "timed runs per pass [20 on a GPU, 2 on the CPU]")
      ->check(at_least("--iters", 1, "20"));
  bench_cmd->add_option("--json", bench.json_path,
                        "write JSON here, rewritten after every point, and print a table (default: JSON to stdout)");
  bench_cmd->add_flag("--resume", bench.resume, "skip the points the --json file already holds (after an interrupted sweep)");
  add_quiet_flag(bench_cmd, bench.quiet);

  CLI11_PARSE(app, argc, argv);
  try {
    if (show_version) return version_command();
    if (app.get_subcommands().empty()) {
      std::fprintf(stderr, "attn: a subcommand is required (run, explain, check or bench)\nRun attn --help for more information.\n");
      return 106;  // CLI11's RequiredError code, as before --version existed
    }
    if (*run_cmd) return run_command(run);
    if (*explain_cmd) return explain_command(explain);
    if (*check_cmd) return check_command(check);
    if (*bench_cmd) return bench_command(bench);
  } catch (const attn::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    // run and check refuse problems that cannot fit before allocating; this is
    // the allocation their estimate missed. An exit code, not abort()'s core dump.
    std::fprintf(
        stderr, "%s\n",
        attn::format_error({attn::ErrorKind::runtime, "out of host memory", "std::bad_alloc (a host allocation failed)",
                            "the problem's buffers to fit in free memory",
                            "shrink the problem (--batch, --seqlen, --heads, --head-dim)"})
            .c_str());
    return 2;
  } catch (const std::exception& e) {  // e.g. std::length_error from a vector too large to describe
    std::fprintf(stderr, "%s\n",
                 attn::format_error({attn::ErrorKind::runtime, "the command failed", e.what(), "no exception",
                                     "report this with the command line"})
                     .c_str());
    return 2;
  }
  return 0;
}
