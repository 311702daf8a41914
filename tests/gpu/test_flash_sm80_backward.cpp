// flash_sm80's backward beyond the shared grid: the deterministic mode gives
// bitwise identical dq, dk, dv across runs (ordered dQ accumulation) and still
// matches the reference; the default mode matches it on the same inputs. The
// wide rows' dropout builds (64-row tiles, also for GPUs with 99 KiB of
// shared memory per block) run here under ATTN_SIMULATE_DEVICE=sm86 and match
// the reference.
#include <string>
#include <vector>

#include "attn/attn.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"

namespace attn {
namespace {

// Many KV tiles add into each query tile's dQ (s 1000, 8 query heads per KV
// head), so unordered fp32 adds would differ between runs.
std::vector<testing::CaseSpec> cases() {
  testing::CaseSpec s;
  s.batch = 2;
  s.s_q = s.s_kv = 1000;
  s.h_q = 8;
  s.h_kv = 1;
  s.d_qk = s.d_v = 64;
  s.mask = MaskType::causal;
  s.backward = true;
  testing::CaseSpec t = s;  // thd, a window, dropout, d 128
  t.format = QkvFormat::thd;
  t.mask = MaskType::padding_causal_bottom_right;
  t.seqlens_q = {700, 0, 333};
  t.seqlens_kv = {900, 4, 333};
  t.batch = 3;
  t.h_q = 4;
  t.h_kv = 2;
  t.d_qk = t.d_v = 128;
  t.window = {400, 0};
  t.dropout_p = 0.1;
  t.seed = 7;
  return {s, t};
}

TEST(FlashSm80Backward, DeterministicModeIsBitwiseRepeatable) {
  ATTN_REQUIRE_GPU();
  int index = 0;
  for (const testing::CaseSpec& spec : cases()) {
    SCOPED_TRACE("case " + std::to_string(index));
    testing::expect_bitwise_repeatable_backward(spec, "flash_sm80", 500 + index++);
  }
}

// The dropout builds of the d 32 and d 64 rows: chosen where the 128-row
// tiles do not fit the device's shared memory (bwd_config.h), so a simulated
// sm86 (99 KiB) makes any GPU run them. Lengths off the tile, an empty
// sequence, GQA, a window, dropout, the deterministic mode.
TEST(FlashSm80Backward, CompactBuildsForSmallSharedMemoryMatchTheReference) {
  ATTN_REQUIRE_GPU();
  std::vector<testing::CaseSpec> specs;
  for (int d : {32, 64}) {
    testing::CaseSpec s = testing::thd_edge_lengths(d, 31);
    s.dropout_p = d == 64 ? 0.1 : 0.0;
    s.seed = 11;
    s.backward = true;
    specs.push_back(s);
    testing::CaseSpec t;  // bshd, no mask, two query tiles of 64 and a partial one
    t.batch = 2;
    t.s_q = 150;
    t.s_kv = 200;
    t.h_q = t.h_kv = 4;
    t.d_qk = t.d_v = d;
    t.backward = true;
    specs.push_back(t);
  }
  testing::SimulatedDevice simulate("sm86");
  int index = 0;
  for (const testing::CaseSpec& spec : specs) {
    for (bool deterministic : {false, true}) {
      SCOPED_TRACE("case " + std::to_string(index) + (deterministic ? ", deterministic" : ""));
      Problem p = testing::problem_of(spec, Pass::backward, Device::cuda(0));
      p.deterministic = deterministic;
      const DeviceInfo sm86 = query_device(Device::cuda(0));
      ASSERT_EQ(sm86.smem_per_block_optin_bytes, 99 * 1024);
      EXPECT_TRUE(find_backend("flash_sm80")->supports(p, sm86).empty());
      testing::Case gpu = testing::make_case(spec, Device::cuda(0), 900 + index);
      gpu.opts.deterministic = deterministic;
      testing::run_forced(gpu, "flash_sm80");
      ATTN_CUDA_OK(cudaDeviceSynchronize());
      testing::expect_matches_reference(gpu);
    }
    ++index;
  }
}

}  // namespace
}  // namespace attn
