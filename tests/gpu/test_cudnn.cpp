// The cudnn backend beyond the shared grid: its dropout statistics (cuDNN draws
// its own pattern), the plan cache, the deterministic backward, errors, and the
// window-boundary agreement of every GPU backend on the same inputs.
#include <cmath>
#include <cstdio>
#include <string>

#include "attn/attn.h"
#include "backends/cudnn/cudnn.h"
#include "backends/cudnn/cudnn_graph.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"
#include "testing/compare.h"

namespace attn {
namespace {

using testing::CaseSpec;

Policy forced(const std::string& name) {
  Policy p;
  p.forced = name;
  return p;
}

// q = k = 0 and v = identity (s_kv = d_v): every visible probability is 1/s_kv,
// so out[i, c] = keep(i, c) / ((1 - p) s_kv) shows cuDNN's keep mask directly.
testing::Case dropout_probe(double p, uint64_t seed) {
  CaseSpec s;
  s.batch = 2;
  s.h_q = s.h_kv = 4;
  s.s_q = 256;
  s.s_kv = s.d_qk = s.d_v = 128;
  s.dropout_p = p;
  s.seed = seed;
  s.offset = 3;
  s.backward = true;
  testing::Case c = testing::make_case(s, Device::cuda(0), 7);
  c.q.fill_zero();
  c.k.fill_zero();
  std::vector<double> v(static_cast<size_t>(c.v.numel()), 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t j = 0; j < s.s_kv; ++j)
      for (int64_t h = 0; h < s.h_kv; ++h) v[((b * s.s_kv + j) * s.h_kv + h) * s.d_v + j] = 1.0;
  c.v.copy_from(v);
  return c;
}

TEST(Cudnn, DropoutKeepsTheRightShareScaledAndRepeatsPerSeed) {
  ATTN_REQUIRE_GPU();
  const double p = 0.2;
  testing::Case a = dropout_probe(p, 42), b = dropout_probe(p, 42), c = dropout_probe(p, 43);
  for (testing::Case* x : {&a, &b, &c}) forward(x->opts, x->fwd, {}, forced("cudnn"));
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<double> oa = a.out.to_doubles(), ob = b.out.to_doubles(), oc = c.out.to_doubles();
  const double kept_value = 1.0 / ((1.0 - p) * 128);
  int64_t kept = 0, other = 0, differ_seed = 0;
  for (size_t i = 0; i < oa.size(); ++i) {
    if (std::fabs(oa[i] - kept_value) < 0.01 * kept_value)
      ++kept;
    else if (oa[i] != 0.0)
      ++other;
    EXPECT_EQ(oa[i], ob[i]) << "same seed and offset must give the same pattern (element " << i << ")";
    if ((oa[i] == 0.0) != (oc[i] == 0.0)) ++differ_seed;
  }
  const double n = static_cast<double>(oa.size());
  const double keep_share = kept / n, sigma = std::sqrt(p * (1 - p) / n);
  std::printf("cudnn dropout p=%.2f: kept %.4f of %.0f (expected %.4f, sigma %.5f); seed change flips %.3f\n", p,
              keep_share, n, 1 - p, sigma, differ_seed / n);
  EXPECT_EQ(other, 0) << "kept values must be exactly 1/((1-p) s_kv), dropped ones 0";
  EXPECT_NEAR(keep_share, 1 - p, 5 * sigma);
  // Independent patterns differ in about 2p(1-p) of the elements.
  EXPECT_NEAR(differ_seed / n, 2 * p * (1 - p), 0.02);

  // The backward regenerates the same pattern: with q = k = 0, dv = P_dropped^T . dout,
  // and P_dropped is exactly the forward's out (v = identity).
  backward(a.opts, a.bwd, {}, forced("cudnn"));
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<double> dout = a.dout.to_doubles(), dv = a.dv.to_doubles();
  double worst = 0.0;
  const int64_t B = 2, H = 4, SQ = 256, SKV = 128, D = 128;
  for (int64_t bb = 0; bb < B; ++bb)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < SKV; ++j)
        for (int64_t c2 = 0; c2 < D; ++c2) {
          double want = 0.0;
          for (int64_t i = 0; i < SQ; ++i)
            want += oa[((bb * SQ + i) * H + h) * D + j] * dout[((bb * SQ + i) * H + h) * D + c2];
          worst = std::max(worst, std::fabs(dv[((bb * SKV + j) * H + h) * D + c2] - want));
        }
  std::printf("cudnn dropout backward: max |dv - P_dropped^T dout| = %.3g\n", worst);
  EXPECT_LT(worst, 0.05);
}

TEST(Cudnn, SteadyStateCallsBuildNothing) {
  ATTN_REQUIRE_GPU();
  CaseSpec s;
  s.mask = MaskType::causal;
  s.s_q = s.s_kv = 257;
  s.backward = true;
  testing::Case c = testing::make_case(s, Device::cuda(0), 11);
  forward(c.opts, c.fwd, {}, forced("cudnn"));
  backward(c.opts, c.bwd, {}, forced("cudnn"));
  const cudnn::CacheStats before = cudnn::cache_stats();
  for (int i = 0; i < 5; ++i) {
    forward(c.opts, c.fwd, {}, forced("cudnn"));
    backward(c.opts, c.bwd, {}, forced("cudnn"));
  }
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  const cudnn::CacheStats after = cudnn::cache_stats();
  EXPECT_EQ(after.builds, before.builds) << "repeated calls of one problem must reuse the cached plans";
  EXPECT_GE(after.hits, before.hits + 10);
  std::printf("cudnn plan cache: %lld builds, %lld hits, %lld entries, last build %.1f ms\n",
              static_cast<long long>(after.builds), static_cast<long long>(after.hits),
              static_cast<long long>(after.entries), after.last_build_ms);
}

TEST(Cudnn, DeterministicBackwardIsBitwiseRepeatable) {
  ATTN_REQUIRE_GPU();
  CaseSpec s;
  s.mask = MaskType::causal;
  s.batch = 2;
  s.s_q = s.s_kv = 1000;
  s.h_q = 8;
  s.h_kv = 2;
  s.backward = true;
  testing::Case c = testing::make_case(s, Device::cuda(0), 5);
  c.opts.deterministic = true;
  const Problem p = testing::problem_of(s, Pass::backward, Device::cuda(0));
  Problem pd = p;
  pd.deterministic = true;
  if (!cudnn::backend().supports(pd, query_device(Device::cuda(0))).empty()) GTEST_SKIP() << "no deterministic plan";
  forward(c.opts, c.fwd, {}, forced("cudnn"));
  backward(c.opts, c.bwd, {}, forced("cudnn"));
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  const auto dq1 = c.dq.host_bytes(), dk1 = c.dk.host_bytes(), dv1 = c.dv.host_bytes();
  backward(c.opts, c.bwd, {}, forced("cudnn"));
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(dq1, c.dq.host_bytes());
  EXPECT_EQ(dk1, c.dk.host_bytes());
  EXPECT_EQ(dv1, c.dv.host_bytes());
}

TEST(Cudnn, UnsupportedProblemsNameCudnnAndTheAlternatives) {
  ATTN_REQUIRE_GPU();
  CaseSpec s;
  s.dtype = DType::f32;
  testing::Case c = testing::make_case(s, Device::cuda(0), 3);
  try {
    forward(c.opts, c.fwd, {}, forced("cudnn"));
    FAIL() << "float32 must be refused by cudnn";
  } catch (const Error& e) {
    const std::string msg = format_error(e.info());
    EXPECT_NE(msg.find("cudnn"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bfloat16 or float16"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unfused"), std::string::npos) << "the fix lists the other backends: " << msg;
  }
}

// DESIGN.md: one window rule for every backend. Every GPU backend runs the same
// inputs at the window boundaries; each is compared with the reference and with
// each other, and the largest difference between two backends is printed.
TEST(Cudnn, EveryBackendAgreesAtWindowBoundaries) {
  ATTN_REQUIRE_GPU();
  const DeviceInfo dev = query_device(Device::cuda(0));
  double worst_between = 0.0;
  int compared = 0;
  std::string names_seen;
  for (auto [l, r] : {std::pair<int64_t, int64_t>{0, 0}, {1, 0}, {63, 0}, {64, 0}, {0, 64}, {1, 64}, {63, 64}, {64, 64}})
    for (MaskType m : {MaskType::no_mask, MaskType::causal_bottom_right, MaskType::causal}) {
      CaseSpec s;
      s.mask = m;
      s.window = {l, r};
      s.batch = 2;
      s.s_q = 300;
      s.s_kv = 700;
      s.h_q = 4;
      s.h_kv = 2;
      s.d_qk = s.d_v = 128;
      s.backward = true;
      testing::Case gpu = testing::make_case(s, Device::cuda(0), 77 + l * 7 + r);
      testing::Case ref = testing::copy_inputs_to(gpu, Device::cpu(), DType::f64);
      testing::run_forced(ref, "reference");
      std::vector<std::vector<double>> outs;  // per backend: out then dq, concatenated
      std::vector<std::string> names;
      for (const Backend* b : registered_backends()) {
        if (std::string(b->name()) == "reference") continue;
        // Forward-only backends (flash_sm80 today) join for out.
        const bool with_backward = b->supports(testing::problem_of(s, Pass::backward, Device::cuda(0)), dev).empty();
        if (!with_backward && !b->supports(testing::problem_of(s, Pass::forward, Device::cuda(0)), dev).empty())
          continue;
        testing::poison_outputs(gpu);
        forward(gpu.opts, gpu.fwd, {}, forced(b->name()));
        if (with_backward) backward(gpu.opts, gpu.bwd, {}, forced(b->name()));
        ATTN_CUDA_OK(cudaDeviceSynchronize());
        std::vector<double> o = gpu.out.to_doubles();
        const auto cmp = testing::compare(o, ref.out.to_doubles(), testing::tolerance_for(s.dtype, false));
        EXPECT_TRUE(cmp.pass) << b->name() << " window (" << l << "," << r << ") " << mask_name(m) << ": max abs "
                              << cmp.max_abs;
        if (with_backward) {
          const auto cmpg = testing::compare(gpu.dq.to_doubles(), ref.dq.to_doubles(), testing::tolerance_for(s.dtype, true));
          EXPECT_TRUE(cmpg.pass) << b->name() << " dq, window (" << l << "," << r << ") " << mask_name(m)
                                 << ": max abs " << cmpg.max_abs;
        }
        outs.push_back(std::move(o));
        names.push_back(b->name());
        if (names_seen.find(b->name()) == std::string::npos) names_seen += (names_seen.empty() ? "" : ", ") + std::string(b->name());
      }
      for (size_t x = 0; x < outs.size(); ++x)
        for (size_t y = x + 1; y < outs.size(); ++y)
          for (size_t i = 0; i < outs[x].size(); ++i)
            worst_between = std::max(worst_between, std::fabs(outs[x][i] - outs[y][i]));
      compared += outs.size() > 1;
    }
  std::printf("window boundaries: %d problems run by 2+ GPU backends (%s); max |out difference| between backends %.4g\n",
              compared, names_seen.c_str(), worst_between);
  EXPECT_GT(compared, 0);
}

}  // namespace
}  // namespace attn
