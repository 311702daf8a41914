// flash_sm80's forward beyond the shared grid: both builds of the d 256 row
// (fwd_config.h) match the reference. The device's shared memory picks the
// build, so a simulated device makes one GPU run each: sm80 (163 KiB per
// block) the wide 128 x 64 tiles, sm86 (99 KiB) and sm90 (227 KiB) the
// narrow 64 x 64 ones. Lengths off both tile heights, an empty and a
// length-1 sequence, GQA, a window, softcap and dropout.
#include <string>
#include <vector>

#include "attn/attn.h"
#include "backends/flash_sm80/fwd_config.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"

namespace attn {
namespace {

std::vector<testing::CaseSpec> d256_cases() {
  testing::CaseSpec s = testing::thd_edge_lengths(256, 70);
  s.dropout_p = 0.1;
  s.seed = 13;
  s.return_lse = true;  // the comparison covers lse: ask the forward to write it
  testing::CaseSpec t;  // bshd, no mask, query tiles of both heights and a partial one
  t.batch = 2;
  t.s_q = 150;
  t.s_kv = 200;
  t.h_q = t.h_kv = 4;
  t.d_qk = t.d_v = 256;
  t.softcap = 20.0;
  t.return_lse = true;
  return {s, t};
}

TEST(FlashSm80Forward, BothD256BuildsMatchTheReference) {
  ATTN_REQUIRE_GPU();
  const std::vector<testing::CaseSpec> specs = d256_cases();
  for (const char* spec : {"sm80", "sm86", "sm90"}) {
    testing::SimulatedDevice simulate(spec);
    const DeviceInfo dev = query_device(Device::cuda(0));
    const bool narrow = flash_sm80::fwd_uses_narrow<256, 256>(dev.smem_per_block_optin_bytes);
    EXPECT_EQ(narrow, std::string(spec) != "sm80") << spec;
    int index = 0;
    for (const testing::CaseSpec& s : specs) {
      SCOPED_TRACE(std::string(spec) + (narrow ? " (narrow)" : " (wide)") + ", case " + std::to_string(index));
      const Problem p = testing::problem_of(s, Pass::forward, Device::cuda(0));
      EXPECT_TRUE(find_backend("flash_sm80")->supports(p, dev).empty());
      testing::Case gpu = testing::make_case(s, Device::cuda(0), 950 + index++);
      testing::run_forced(gpu, "flash_sm80");
      ATTN_CUDA_OK(cudaDeviceSynchronize());
      testing::expect_matches_reference(gpu);
    }
  }
}

}  // namespace
}  // namespace attn
