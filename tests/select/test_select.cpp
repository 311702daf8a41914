// Backend selection: verdicts as data, preference orders, overrides
// (ATTN_BACKEND / ATTN_DISABLE / ATTN_LOG) and the error when nothing can run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>

#include "attn/attn.h"
#include "backends/flash/heuristics.h"  // bwd_head_split
#include "backends/flash_sm80/bwd_config.h"
#include "backends/flash_sm80/fwd_config.h"

namespace attn {
namespace {

Problem cpu_problem() {
  Problem p;
  p.dtype = DType::bf16;
  p.batch = 2;
  p.s_q = p.s_kv = 128;
  p.total_q = p.total_kv = 256;
  p.h_q = 16;
  p.h_kv = 4;
  p.d_qk = p.d_v = 128;
  check_problem(p);
  return p;
}

Problem gpu_problem(int64_t d_qk, int64_t d_v) {
  Problem p = cpu_problem();
  p.device = Device::cuda(0);
  p.d_qk = d_qk;
  p.d_v = d_v;
  return p;
}

// A causal backward at d 128 with h_q query heads on h_kv KV heads.
Problem causal_backward(int64_t h_q, int64_t h_kv) {
  Problem p = gpu_problem(128, 128);
  p.pass = Pass::backward;
  p.h_q = h_q;
  p.h_kv = h_kv;
  p.mask = MaskType::causal;
  p.window_right = 0;
  return p;
}

// Expects one of `b`'s reasons for refusing q on dev to contain `words`.
void expect_reason(const Backend& b, const Problem& q, const DeviceInfo& dev, const std::string& words,
                   const std::string& context = "") {
  const std::vector<std::string> no = b.supports(q, dev);
  const bool found =
      std::any_of(no.begin(), no.end(), [&](const std::string& r) { return r.find(words) != std::string::npos; });
  EXPECT_TRUE(found) << context << ": expected a reason with \"" << words << "\"";
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const Verdict& verdict_of(const std::vector<Verdict>& vs, const std::string& name) {
  auto it = std::find_if(vs.begin(), vs.end(), [&](const Verdict& v) { return v.backend == name; });
  EXPECT_NE(it, vs.end()) << name;
  return *it;
}

TEST(Select, HostTensorsRunOnTheReference) {
  const Selection s = select_backend(cpu_problem(), DeviceInfo{}, Policy{});
  ASSERT_NE(s.backend, nullptr);
  EXPECT_STREQ(s.backend->name(), "reference");
  EXPECT_NE(s.why.find("host memory"), std::string::npos) << s.why;
  // Verdicts stop at the chosen backend, first in the CPU's order.
  ASSERT_EQ(s.verdicts.size(), 1u);
  EXPECT_TRUE(verdict_of(s.verdicts, "reference").ok());
}

TEST(Select, PreferenceOrderPerArchitecture) {
  const auto sm90 = preference_order(simulated_device("sm90"));
  const auto sm90_bwd = preference_order(simulated_device("sm90"), Pass::backward);
  const auto sm80 = preference_order(simulated_device("sm80"));
  const auto sm80_bwd = preference_order(simulated_device("sm80"), Pass::backward);
  const auto cpu = preference_order(DeviceInfo{});
  // flash_decode leads every forward order: it takes only calls with at most
  // 16 query tokens per sequence (decoding), which it reads at the memory's
  // speed. Then flash_sm90 leads Hopper's forward since it beats cuDNN's
  // (docs/PERF.md, v18). cudnn heads the backward's base order; flash_sm90 moves
  // ahead of it where leads_backward measured it faster (below).
  ASSERT_GE(sm90.size(), 4u);
  EXPECT_EQ(sm90[0], "flash_decode");
  EXPECT_EQ(sm90[1], "flash_sm90");
  EXPECT_EQ(sm90[2], "cudnn");
  EXPECT_EQ(sm90[3], "flash_sm80");
  ASSERT_GE(sm90_bwd.size(), 3u);
  EXPECT_EQ(sm90_bwd[0], "cudnn");
  EXPECT_EQ(sm90_bwd[1], "flash_sm90");
  EXPECT_EQ(sm90_bwd[2], "flash_sm80");
  EXPECT_EQ(sm80[0], "flash_decode");
  EXPECT_EQ(sm80[1], "flash_sm80");
  EXPECT_EQ(sm80_bwd.front(), "flash_sm80");
  EXPECT_EQ(cpu.front(), "reference");
  for (const auto* order : {&sm90, &sm90_bwd, &sm80, &sm80_bwd, &cpu}) EXPECT_EQ(order->size(), 6u);
}

// Hopper's backward order moves flash_sm90 first where it measured faster
// than cuDNN's (d 64 and 128, MHA and GQA; d_qk 192 and 256; 192 / 128
// without a right edge) and says so; with dropout and for causal 192 / 128
// cudnn stays first.
TEST(Select, HopperBackwardPutsFlashSm90FirstWhereItLeads) {
  const DeviceInfo dev = simulated_device("sm90");
  const Problem p = causal_backward(16, 4);
  std::string rule;
  EXPECT_EQ(preference_order_for(dev, p, &rule).front(), "flash_sm90");
  EXPECT_NE(rule.find("flash_sm90 first for the backward at d_qk 128, d_v 128"), std::string::npos) << rule;
  const Selection s = select_backend(p, dev, Policy{});
  ASSERT_NE(s.backend, nullptr);
  EXPECT_STREQ(s.backend->name(), "flash_sm90");
  EXPECT_NE(s.why.find("flash_sm90 first for the backward"), std::string::npos) << s.why;
  auto first = [&](Problem q) { return preference_order_for(dev, q).front(); };
  Problem q = p;
  for (int64_t h_q : {4, 8, 16, 32, 64}) {  // MHA, GQA 2, 4, 8 and 16
    q.h_q = h_q;
    EXPECT_EQ(first(q), "flash_sm90") << h_q;
  }
  q = p;
  q.mask = MaskType::no_mask;
  q.window_right = -1;
  EXPECT_EQ(first(q), "flash_sm90");
  q = p;
  q.window_left = 256;  // a sliding window
  EXPECT_EQ(first(q), "flash_sm90");
  q = p;
  q.d_qk = q.d_v = 64;
  EXPECT_EQ(first(q), "flash_sm90");
  q = p;
  q.dropout_p = 0.1;  // cuDNN's dropout backward is faster
  EXPECT_EQ(first(q), "cudnn");
  q.d_qk = q.d_v = 64;
  EXPECT_EQ(first(q), "cudnn");
  q = p;
  q.d_qk = q.d_v = 256;  // d 256: first for every mask and group, MHA too
  q.h_q = q.h_kv = 16;
  q.mask = MaskType::no_mask;
  q.window_right = -1;
  std::string rule256;
  EXPECT_EQ(preference_order_for(dev, q, &rule256).front(), "flash_sm90");
  EXPECT_NE(rule256.find("at d_qk 256"), std::string::npos) << rule256;
  q.d_qk = q.d_v = 192;
  EXPECT_EQ(first(q), "flash_sm90");
  q.d_v = 128;  // 192 / 128: without a right edge only
  EXPECT_EQ(first(q), "flash_sm90");
  q.mask = MaskType::causal;
  q.window_right = 0;
  EXPECT_EQ(first(q), "cudnn");
  q.mask = MaskType::no_mask;
  q.window_right = -1;
  q.d_qk = q.d_v = 256;
  q.dropout_p = 0.1;
  EXPECT_EQ(first(q), "cudnn");
  q = p;
  q.pass = Pass::forward;
  EXPECT_EQ(preference_order_for(dev, q)[1], "flash_sm90");  // after flash_decode, which takes decoding calls only
  EXPECT_EQ(preference_order_for(simulated_device("sm80"), p).front(), "flash_sm80");
}

// The deterministic mode's own measured rule: flash_sm90's deterministic
// backward leads cuDNN's at d 64 and 128 (MHA and GQA) and at the wide tiles
// (MHA, or without a right edge), cuDNN's for causal GQA at d 256.
TEST(Select, HopperDeterministicBackwardFollowsItsOwnMeasurements) {
  const DeviceInfo dev = simulated_device("sm90");
  Problem q = causal_backward(16, 16);  // MHA, causal
  q.deterministic = true;
  std::string rule;
  auto first = [&](const Problem& x) {
    rule.clear();
    return preference_order_for(dev, x, &rule).front();
  };
  EXPECT_EQ(first(q), "flash_sm90");  // d 128
  EXPECT_NE(rule.find("deterministic backward at d_qk 128"), std::string::npos) << rule;
  q.h_q = 64;  // GQA 4 at d 128 too
  EXPECT_EQ(first(q), "flash_sm90");
  q.h_q = 16;
  q.d_qk = q.d_v = 64;
  EXPECT_EQ(first(q), "flash_sm90");
  EXPECT_NE(rule.find("deterministic backward at d_qk 64"), std::string::npos) << rule;
  q.h_q = 128;  // GQA 8 at d 64 too
  EXPECT_EQ(first(q), "flash_sm90");
  q.dropout_p = 0.1;  // not with dropout
  EXPECT_EQ(first(q), "cudnn");
  q.dropout_p = 0;
  q.d_qk = q.d_v = 256;  // GQA 8 with a right edge at d 256: cuDNN's
  EXPECT_EQ(first(q), "cudnn");
  q.mask = MaskType::no_mask;
  q.window_right = -1;
  EXPECT_EQ(first(q), "flash_sm90");
  q.h_q = 16;  // MHA, causal
  q.mask = MaskType::causal;
  q.window_right = 0;
  EXPECT_EQ(first(q), "flash_sm90");
  q.d_qk = q.d_v = 192;
  EXPECT_EQ(first(q), "flash_sm90");
  q.d_v = 128;  // 192 / 128 causal: cuDNN's, as in the default mode
  EXPECT_EQ(first(q), "cudnn");
}

// flash_sm90's backward: head dims 64, 128, 192 and 256, every format, softcap, ALiBi,
// dropout and the deterministic mode; each refusal names what it lacks and
// where it runs instead.
TEST(Select, FlashSm90BackwardSaysWhatItRuns) {
  const DeviceInfo dev = simulated_device("sm90");
  const Backend* b = find_backend("flash_sm90");
  ASSERT_NE(b, nullptr);
  const Problem p = causal_backward(8, 2);
  EXPECT_TRUE(b->supports(p, dev).empty()) << format_verdicts(explain(p, dev, Policy{}));
  auto refused = [&](const Problem& q, const std::string& words) { expect_reason(*b, q, dev, words); };
  Problem q = p;
  q.d_qk = q.d_v = 96;
  refused(q, "flash_sm90's backward has 64, 128");
  for (int64_t d : {192, 256}) {
    q.d_qk = q.d_v = d;
    EXPECT_TRUE(b->supports(q, dev).empty()) << d;
  }
  q.d_v = 128;
  q.d_qk = 192;
  EXPECT_TRUE(b->supports(q, dev).empty()) << "192 / 128";
  q.s_kv = 65535LL * 64 + 1;  // d 256's grid: KV tiles of 64 keys
  refused(q, "at most 65535 KV tiles of 64 keys");
  q = p;
  q.has_seqlens = true;  // thd and padded batches run
  q.qkv_format = QkvFormat::thd;
  q.mask = MaskType::padding_causal;
  EXPECT_TRUE(b->supports(q, dev).empty());
  q = p;
  q.softcap = 30.0;
  EXPECT_TRUE(b->supports(q, dev).empty());
  q.bias = BiasType::alibi;
  EXPECT_TRUE(b->supports(q, dev).empty());
  q = p;
  q.dropout_p = 0.1;
  EXPECT_TRUE(b->supports(q, dev).empty());
  q = p;
  q.deterministic = true;
  EXPECT_TRUE(b->supports(q, dev).empty());
  // The forward of the same problem has its own table (d 192 runs there).
  q = p;
  q.pass = Pass::forward;
  q.d_qk = q.d_v = 192;
  EXPECT_TRUE(b->supports(q, dev).empty());
}

// flash_decode takes forward calls with at most 16 query tokens per sequence
// and says why it refuses the rest; selection sends decoding calls there.
TEST(Select, FlashDecodeTakesFewQueryTokensAndSaysWhyNot) {
  const Backend* b = find_backend("flash_decode");
  ASSERT_NE(b, nullptr);
  for (const char* spec : {"sm80", "sm90"}) {
    const DeviceInfo dev = simulated_device(spec);
    Problem p = gpu_problem(128, 128);
    p.s_q = 1;
    p.s_kv = 4096;
    p.h_q = 32;
    p.h_kv = 8;
    p.mask = MaskType::causal_bottom_right;
    p.window_right = 0;
    p.bottom_right = true;
    EXPECT_TRUE(b->supports(p, dev).empty()) << spec;
    EXPECT_STREQ(select_backend(p, dev, Policy{}).backend->name(), "flash_decode") << spec;
    for (int64_t d : {64, 256}) {
      Problem q = p;
      q.d_qk = q.d_v = d;
      EXPECT_TRUE(b->supports(q, dev).empty()) << spec << " d " << d;
    }
    auto refused = [&](const Problem& q, const std::string& words) { expect_reason(*b, q, dev, words, spec); };
    Problem q = p;
    q.s_q = 17;
    refused(q, "at most 16 query tokens");
    EXPECT_STRNE(select_backend(q, dev, Policy{}).backend->name(), "flash_decode");
    q = p;
    q.pass = Pass::backward;
    refused(q, "forward only");
    q = p;
    q.d_qk = q.d_v = 96;
    refused(q, "head_dim 96/96 has no forward kernel");
    q = p;
    q.dropout_p = 0.1;
    refused(q, "dropout");
    q = p;
    q.dtype = DType::f32;
    refused(q, "runs bfloat16 and float16");
    q = p;
    q.bias = BiasType::post_scale_bias;
    refused(q, "post_scale_bias");
  }
}

TEST(Select, ExplainOnSimulatedSm80ListsEveryBackendWithReasons) {
  const DeviceInfo dev = simulated_device("sm80");
  EXPECT_TRUE(dev.simulated);
  EXPECT_EQ(dev.sm, 80);
  const auto vs = explain(gpu_problem(192, 192), dev, Policy{});
  ASSERT_EQ(vs.size(), 6u);
  EXPECT_EQ(vs.front().backend, "flash_decode");  // first in the order, refusing (s_q 128, d 192)
  EXPECT_FALSE(vs.front().reasons.empty());
  EXPECT_EQ(vs[1].backend, "flash_sm80");
  for (const Verdict& v : vs)
    if (!v.in_build) EXPECT_EQ(v.reasons.at(0), "not part of this build") << v.backend;
  const Verdict& ref = verdict_of(vs, "reference");
  EXPECT_TRUE(ref.in_build);
  ASSERT_FALSE(ref.reasons.empty());
  EXPECT_NE(ref.reasons[0].find("cuda:0"), std::string::npos) << ref.reasons[0];
  const std::string table = format_verdicts(vs);
  for (const char* name : {"flash_decode", "flash_sm90", "flash_sm80", "cudnn", "unfused", "reference"})
    EXPECT_NE(table.find(name), std::string::npos) << table;
}

TEST(Select, NoBackendErrorListsEveryBackendAndWhatToChange) {
  Policy gpu_backends_off;  // stays true as GPU backends join the build
  gpu_backends_off.disabled = {"flash_decode", "flash_sm90", "flash_sm80", "cudnn", "unfused"};
  const std::string msg =
      error_of([&] { select_backend(gpu_problem(192, 128), simulated_device("sm80"), gpu_backends_off); });
  ASSERT_FALSE(msg.empty());
  EXPECT_NE(msg.find("no attention backend can run this call"), std::string::npos) << msg;
  EXPECT_NE(msg.find("d=192/128"), std::string::npos) << msg;
  for (const char* name : {"flash_sm90", "flash_sm80", "cudnn", "unfused", "reference"})
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("fix:"), std::string::npos) << msg;
}

TEST(Select, ForcedBackend) {
  Policy force;
  force.forced = "reference";
  const Selection s = select_backend(cpu_problem(), DeviceInfo{}, force);
  EXPECT_STREQ(s.backend->name(), "reference");
  EXPECT_NE(s.why.find("forced"), std::string::npos);

  force.forced = "cudnn";  // known; built only where cuDNN was found
  std::string msg = error_of([&] { select_backend(cpu_problem(), DeviceInfo{}, force); });
  EXPECT_NE(msg.find("the forced backend cudnn cannot run this call"), std::string::npos) << msg;
  if (find_backend("cudnn"))
    EXPECT_NE(msg.find("runs on CUDA tensors"), std::string::npos) << msg;
  else
    EXPECT_NE(msg.find("not part of this build"), std::string::npos) << msg;

  force.forced = "flash";  // a typo
  msg = error_of([&] { select_backend(cpu_problem(), DeviceInfo{}, force); });
  EXPECT_NE(msg.find("names an unknown backend"), std::string::npos) << msg;
  EXPECT_NE(msg.find("flash_sm90, "), std::string::npos) << msg;
}

TEST(Select, DisabledBackendIsSkippedWithItsReason) {
  Policy off;
  off.disabled = {"reference"};
  const std::string msg = error_of([&] { select_backend(cpu_problem(), DeviceInfo{}, off); });
  EXPECT_NE(msg.find("disabled by ATTN_DISABLE"), std::string::npos) << msg;
  off.disabled = {"refrence"};
  EXPECT_NE(error_of([&] { explain(cpu_problem(), DeviceInfo{}, off); }).find("ATTN_DISABLE names an unknown backend"),
            std::string::npos);
}

TEST(Select, PolicyFromEnvironment) {
  setenv("ATTN_BACKEND", "reference", 1);
  setenv("ATTN_DISABLE", "cudnn,unfused", 1);
  setenv("ATTN_LOG", "2", 1);
  const Policy p = Policy::from_env();
  unsetenv("ATTN_BACKEND");
  unsetenv("ATTN_DISABLE");
  unsetenv("ATTN_LOG");
  EXPECT_EQ(p.forced, "reference");
  ASSERT_EQ(p.disabled.size(), 2u);
  EXPECT_EQ(p.disabled[1], "unfused");
  EXPECT_EQ(p.log_level, 2);
  EXPECT_TRUE(Policy::from_env().forced.empty());
}

TEST(Select, LogLevelsPrintTheChoiceAndVerdicts) {
  Policy loud;
  loud.log_level = 2;
  ::testing::internal::CaptureStderr();
  select_backend(cpu_problem(), DeviceInfo{}, loud);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("-> reference"), std::string::npos) << err;
  EXPECT_NE(err.find("cudnn"), std::string::npos) << err;  // level 2: every verdict
}

TEST(Select, VerdictsStopAtTheChosenBackendUnlessAllAreAsked) {
  // A GPU problem on a simulated sm80 with the first backends disabled: the
  // skipped ones and the chosen one are judged, nothing after it.
  Policy p;
  p.disabled = {"flash_sm80"};
  const DeviceInfo dev = simulated_device("sm80");
  const Problem prob = gpu_problem(128, 128);
  const std::vector<std::string> order = preference_order(dev);
  const Selection s = select_backend(prob, dev, p);
  ASSERT_NE(s.backend, nullptr);
  const auto chosen = std::find(order.begin(), order.end(), std::string(s.backend->name()));
  ASSERT_NE(chosen, order.end());
  EXPECT_EQ(s.verdicts.size(), static_cast<size_t>(chosen - order.begin()) + 1);
  EXPECT_EQ(s.verdicts.back().backend, s.backend->name());
  EXPECT_FALSE(s.verdicts.front().ok());  // the disabled one, with its reason in `why`
  EXPECT_NE(s.why.find("disabled by ATTN_DISABLE"), std::string::npos) << s.why;

  p.log_level = 2;
  ::testing::internal::CaptureStderr();
  const Selection loud = select_backend(prob, dev, p);
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(loud.verdicts.size(), order.size());
  EXPECT_STREQ(loud.backend->name(), s.backend->name());
}

TEST(Select, Sm80BackwardRunsCompactTilesWhereSharedMemoryIsSmall) {
  // sm86/sm89 allow 99 KiB per block: flash_sm80's d 32 and d 64 backward
  // run their dropout build's 64-row tiles there (64 / 96 KiB; the 128-row tiles need
  // 112 / 160 KiB), d 96 and up are refused with the numbers; sm80 (163 KiB)
  // takes the 128-row tiles.
  auto smem_reasons = [](const char* spec, int d) {
    Problem p = gpu_problem(d, d);
    p.pass = Pass::backward;
    const std::vector<Verdict> verdicts = explain(p, simulated_device(spec), Policy{});
    std::string out;
    for (const std::string& r : verdict_of(verdicts, "flash_sm80").reasons)
      if (r.find("shared memory") != std::string::npos) out += r;
    return out;
  };
  for (const char* spec : {"sm86", "sm89"}) {
    EXPECT_EQ(smem_reasons(spec, 32), "") << spec;
    EXPECT_EQ(smem_reasons(spec, 64), "") << spec;
    const std::string d96 = smem_reasons(spec, 96);
    EXPECT_NE(d96.find("head_dim 96/96 needs 128 KiB of shared memory per block in the backward"),
              std::string::npos) << d96;
    EXPECT_NE(d96.find("allows 99 KiB"), std::string::npos) << d96;
  }
  EXPECT_EQ(smem_reasons("sm80", 64), "");
  EXPECT_EQ(smem_reasons("sm80", 128), "");
}

TEST(Select, Sm80ForwardD256BuildBySharedMemory) {
  // The d 256 forward's wide build (128 x 64, 128 KiB) runs where it fits and
  // two narrow CTAs (64 x 64, 96 KiB) would not share an SM (the A100); the
  // narrow one elsewhere: sm86/sm89 (99 KiB: the wide one does not fit, so
  // they run d 256 now) and Hopper (227 KiB: two narrow CTAs per SM).
  EXPECT_FALSE((flash_sm80::fwd_uses_narrow<256, 256>(163 * 1024)));
  EXPECT_TRUE((flash_sm80::fwd_uses_narrow<256, 256>(99 * 1024)));
  EXPECT_TRUE((flash_sm80::fwd_uses_narrow<256, 256>(227 * 1024)));
  EXPECT_FALSE((flash_sm80::fwd_uses_narrow<256, 256>(0)));  // not known: the wide build
  EXPECT_FALSE((flash_sm80::fwd_uses_narrow<128, 128>(227 * 1024)));  // only d 256 has a narrow build
  EXPECT_EQ((flash_sm80::fwd_smem_bytes<256, 256>(99 * 1024, false)), 96 * 1024);
  EXPECT_EQ((flash_sm80::fwd_smem_bytes<256, 256>(163 * 1024, false)), 128 * 1024);
  EXPECT_EQ((flash_sm80::fwd_smem_bytes<256, 256>(163 * 1024, true)), 128 * 1024);  // d 256 has no dropout build
  for (const char* spec : {"sm80", "sm86", "sm89", "sm90"}) {
    const std::vector<Verdict> verdicts = explain(gpu_problem(256, 256), simulated_device(spec), Policy{});
    for (const std::string& r : verdict_of(verdicts, "flash_sm80").reasons)
      EXPECT_EQ(r.find("shared memory"), std::string::npos) << spec << ": " << r;
  }
}

TEST(Select, Sm80DropoutRunsOnTheBuildsWithItsPath) {
  using flash_sm80::FwdBuild;
  // Forward: d 64 and d 128 (S and O fill 192 registers) run dropout on their
  // dropout build (128 x 64, 128 x 32), everything else on the wide build.
  for (long long optin : {0LL, 99 * 1024LL, 163 * 1024LL, 227 * 1024LL}) {
    EXPECT_EQ((flash_sm80::fwd_build<64, 64>(optin, true)), FwdBuild::dropout) << optin;
    EXPECT_EQ((flash_sm80::fwd_build<128, 128>(optin, true)), FwdBuild::dropout) << optin;
    EXPECT_EQ((flash_sm80::fwd_build<64, 64>(optin, false)), FwdBuild::wide) << optin;
    EXPECT_EQ((flash_sm80::fwd_build<128, 128>(optin, false)), FwdBuild::wide) << optin;
    EXPECT_EQ((flash_sm80::fwd_build<96, 96>(optin, true)), FwdBuild::wide) << optin;
    EXPECT_EQ((flash_sm80::fwd_build<32, 32>(optin, true)), FwdBuild::wide) << optin;
  }
  EXPECT_EQ((flash_sm80::fwd_build<256, 256>(227 * 1024, true)), FwdBuild::narrow);  // by shared memory only
  EXPECT_FALSE((flash_sm80::FwdConfig<64, 64>::kDropout));
  EXPECT_TRUE((flash_sm80::FwdConfig<64, 64, FwdBuild::dropout>::kDropout));
  EXPECT_EQ((flash_sm80::FwdConfig<64, 64, FwdBuild::dropout>::kBlockN), 64);
  EXPECT_EQ((flash_sm80::FwdConfig<128, 128, FwdBuild::dropout>::kBlockN), 32);
  EXPECT_TRUE((flash_sm80::FwdConfig<96, 96>::kDropout));
  EXPECT_EQ((flash_sm80::fwd_smem_bytes<128, 128>(227 * 1024, true)), (128 + 32 + 32) * 128 * 2);
  // Backward: the main builds of d <= 64, d 128 and d 256 have no dropout
  // path; dropout runs on their dropout builds on every device. Other rows
  // have one build, with the path.
  EXPECT_TRUE((flash_sm80::bwd_uses_dropout_build<64, 64>(227 * 1024, true)));
  EXPECT_TRUE((flash_sm80::bwd_uses_dropout_build<32, 32>(0, true)));
  EXPECT_TRUE((flash_sm80::bwd_uses_dropout_build<128, 128>(227 * 1024, true)));
  EXPECT_TRUE((flash_sm80::bwd_uses_dropout_build<256, 256>(227 * 1024, true)));
  EXPECT_FALSE((flash_sm80::bwd_uses_dropout_build<64, 64>(227 * 1024, false)));
  EXPECT_FALSE((flash_sm80::bwd_uses_dropout_build<128, 128>(227 * 1024, false)));
  EXPECT_FALSE((flash_sm80::bwd_uses_dropout_build<256, 256>(227 * 1024, false)));
  EXPECT_FALSE((flash_sm80::bwd_uses_dropout_build<96, 96>(227 * 1024, true)));   // one build
  EXPECT_FALSE((flash_sm80::bwd_uses_dropout_build<192, 128>(227 * 1024, true)));  // one build
  EXPECT_FALSE((flash_sm80::BwdConfig<64, 64>::kDropout));
  EXPECT_TRUE((flash_sm80::BwdConfig<64, 64, true>::kDropout));
  EXPECT_FALSE((flash_sm80::BwdConfig<128, 128>::kDropout));
  EXPECT_TRUE((flash_sm80::BwdConfig<128, 128, true>::kDropout));
  EXPECT_FALSE((flash_sm80::BwdConfig<256, 256>::kDropout));
  EXPECT_TRUE((flash_sm80::BwdConfig<256, 256, true>::kDropout));
  EXPECT_TRUE((flash_sm80::BwdConfig<96, 96>::kDropout));
  EXPECT_TRUE((flash_sm80::BwdConfig<192, 192>::kDropout));
  // Same tiles in both builds of d 128 and d 256.
  EXPECT_EQ((flash_sm80::BwdConfig<128, 128, true>::kSmemBytes), (flash_sm80::BwdConfig<128, 128>::kSmemBytes));
  EXPECT_EQ((flash_sm80::BwdConfig<256, 256, true>::kSmemBytes), (flash_sm80::BwdConfig<256, 256>::kSmemBytes));
  EXPECT_EQ((flash_sm80::bwd_smem_bytes<64, 64>(227 * 1024, true)), (flash_sm80::BwdConfig<64, 64, true>::kSmemBytes));
}

TEST(Select, FlashSm80BackwardGridOrder) {
  // KV tiles slowest: causal (no left window) GQA at d <= 64 and d 128 only.
  using flash_sm80::bwd_kv_tiles_slowest;
  EXPECT_TRUE(bwd_kv_tiles_slowest(128, 128, 4, -1, 0));     // causal, GQA 4
  EXPECT_TRUE(bwd_kv_tiles_slowest(64, 64, 2, -1, 0));       // causal, GQA 2
  EXPECT_TRUE(bwd_kv_tiles_slowest(128, 128, 8, -1, 5));     // a right window still grows with the row
  EXPECT_FALSE(bwd_kv_tiles_slowest(128, 128, 1, -1, 0));    // MHA
  EXPECT_FALSE(bwd_kv_tiles_slowest(256, 256, 4, -1, 0));    // d 256
  EXPECT_FALSE(bwd_kv_tiles_slowest(96, 96, 4, -1, 0));      // not measured: one order
  EXPECT_FALSE(bwd_kv_tiles_slowest(128, 128, 4, -1, -1));   // no mask: even work
  EXPECT_FALSE(bwd_kv_tiles_slowest(128, 128, 4, 1023, 0));  // sliding window: even work
}

TEST(Select, FlashSm80BackwardGroupChunkAtD256) {
  // d 256's chunks of (KV head, sequence) pairs: about 32 MiB of Q and dO
  // rows per chunk under a causal mask with GQA, else one pair per chunk.
  using flash_sm80::bwd_group_chunk;
  EXPECT_EQ(bwd_group_chunk(4, -1, 0, 1024, 256, 256, 32), 8);   // 4 MiB per pair
  EXPECT_EQ(bwd_group_chunk(4, -1, 0, 4096, 256, 256, 8), 2);    // 16 MiB per pair
  EXPECT_EQ(bwd_group_chunk(4, -1, 0, 16384, 256, 256, 2), 1);   // 64 MiB: one pair
  EXPECT_EQ(bwd_group_chunk(4, -1, 0, 128, 256, 256, 4), 4);     // at most every pair
  EXPECT_EQ(bwd_group_chunk(1, -1, 0, 1024, 256, 256, 32), 1);   // MHA
  EXPECT_EQ(bwd_group_chunk(4, -1, -1, 1024, 256, 256, 32), 1);  // no mask: even work
  EXPECT_EQ(bwd_group_chunk(4, 1023, 0, 1024, 256, 256, 32), 1); // sliding window: even work
  EXPECT_EQ(bwd_group_chunk(1, -1, -1, 1024, 256, 256, 200000), 4);  // grid z: at most 65535 chunks
}

TEST(Select, FlashSm90BackwardChunksCausalMha) {
  // The default mode's chunks: MHA under a causal shape in chunks of about
  // 8 MiB of Q and dO rows; GQA and the other masks as bwd_group_chunk.
  using flash::sm90_bwd_group_chunk;
  EXPECT_EQ(sm90_bwd_group_chunk(1, -1, 0, 1024, 256, 256, 256), 8);    // 1 MiB per pair
  EXPECT_EQ(sm90_bwd_group_chunk(1, -1, 0, 4096, 128, 128, 64), 4);     // 2 MiB per pair
  EXPECT_EQ(sm90_bwd_group_chunk(1, -1, 0, 16384, 256, 256, 16), 1);    // 16 MiB: one pair
  EXPECT_EQ(sm90_bwd_group_chunk(1, -1, 0, 1024, 64, 64, 8), 8);        // at most every pair
  EXPECT_EQ(sm90_bwd_group_chunk(1, -1, 5, 1024, 128, 128, 256), 16);   // a right window grows with the row too
  EXPECT_EQ(sm90_bwd_group_chunk(1, -1, -1, 1024, 128, 128, 256), 1);   // no mask: even work
  EXPECT_EQ(sm90_bwd_group_chunk(1, 1023, 0, 4096, 128, 128, 256), 1);  // sliding window: even work
  EXPECT_EQ(sm90_bwd_group_chunk(4, -1, 0, 1024, 256, 256, 32), 8);     // GQA: bwd_group_chunk's 32 MiB
  EXPECT_EQ(sm90_bwd_group_chunk(1, -1, 0, 0, 128, 128, 32), 1);        // no query rows
}

TEST(Select, FlashSm90DeterministicAscendingChunks) {
  // About 32 MiB of Q, dO (bf16) and dQ's fp32 rows per chunk: at d 128 1 KiB
  // per query row and head.
  using flash::bwd_ascending_dq_chunk;
  EXPECT_EQ(bwd_ascending_dq_chunk(1, 1024, 128, 128, 256), 32);    // 1 MiB per pair
  EXPECT_EQ(bwd_ascending_dq_chunk(16, 1024, 128, 128, 256), 2);    // 16 MiB per pair
  EXPECT_EQ(bwd_ascending_dq_chunk(16, 2048, 128, 128, 4), 1);      // 32 MiB: one pair
  EXPECT_EQ(bwd_ascending_dq_chunk(16, 16384, 128, 128, 8), 1);     // past the budget: still one
  EXPECT_EQ(bwd_ascending_dq_chunk(1, 1024, 128, 128, 4), 4);       // at most every pair
  EXPECT_EQ(bwd_ascending_dq_chunk(8, 1024, 256, 256, 64), 2);      // 2 KiB per row and head
  EXPECT_EQ(bwd_ascending_dq_chunk(16, 16384, 128, 128, 200000), 4);  // grid z: at most 65535 chunks
}

TEST(Select, FlashSm90BackwardSplitsLargeGqaGroupsUnderACausalShape) {
  // Two CTAs per KV tile from 8 query heads per KV head where the first KV
  // tiles carry the most work.
  using flash::bwd_head_split;
  EXPECT_EQ(bwd_head_split(8, -1, 0), 2);    // causal GQA 8
  EXPECT_EQ(bwd_head_split(16, -1, 0), 2);   // GQA 16
  EXPECT_EQ(bwd_head_split(4, -1, 0), 1);    // GQA 4: one CTA walks all four heads
  EXPECT_EQ(bwd_head_split(8, -1, -1), 1);   // no mask: even work
  EXPECT_EQ(bwd_head_split(8, 1023, 0), 1);  // sliding window: even work
  EXPECT_EQ(bwd_head_split(9, -1, 0), 1);    // an odd group does not halve
}

TEST(Select, FlashSm80D256BackwardSaysWhereItsGridEnds) {
  // d 256's backward grid holds the KV tiles (64 keys) in its y dimension:
  // past 65535 of them supports() says so with the numbers, before any kernel.
  auto grid_reasons = [](int64_t s_kv, Pass pass) {
    Problem p = gpu_problem(256, 256);
    p.pass = pass;
    p.s_kv = s_kv;
    const std::vector<Verdict> verdicts = explain(p, simulated_device("sm90"), Policy{});
    std::string out;
    for (const std::string& r : verdict_of(verdicts, "flash_sm80").reasons)
      if (r.find("keys per sequence") != std::string::npos) out += r;
    return out;
  };
  EXPECT_EQ(grid_reasons(65535LL * 64, Pass::backward), "");
  const std::string over = grid_reasons(65535LL * 64 + 1, Pass::backward);
  EXPECT_NE(over.find("the d 256 backward takes at most 4194240 keys per sequence"), std::string::npos) << over;
  EXPECT_NE(over.find("got 4194241"), std::string::npos) << over;
  EXPECT_EQ(grid_reasons(65535LL * 64 + 1, Pass::forward), "");
}

TEST(Select, SimulatedDeviceFromEnvironmentAndUnknownSpec) {
  setenv("ATTN_SIMULATE_DEVICE", "sm90", 1);
  const DeviceInfo d = query_device(Device::cuda(0));
  unsetenv("ATTN_SIMULATE_DEVICE");
  EXPECT_EQ(d.sm, 90);
  EXPECT_TRUE(d.simulated);
  EXPECT_NE(error_of([] { simulated_device("sm99"); }).find("unknown simulated device"), std::string::npos);
}

}  // namespace
}  // namespace attn
