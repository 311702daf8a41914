// A NaN in q or k stays visible on every GPU backend: it reaches exactly the
// rows that read it (as the fp64 reference and PyTorch's SDPA give), never a
// clean zero row that reads as "no visible key"; with a learnable softmax
// sink too; lse is NaN in those rows, and the max logit is NaN for exactly
// the heads that read one.
// bshd 2 x 130 x 4 x 64, causal, GQA 2, bf16.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attn/attn.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"

namespace attn {
namespace {

using testing::CaseSpec;

constexpr int64_t kB = 2, kS = 130, kHq = 4, kHkv = 2, kD = 64;

// Element (b, s, h, c) of a contiguous bshd tensor with `heads` heads set to NaN.
void poison(testing::TensorBuffer& t, int64_t heads, int64_t b, int64_t s, int64_t h, int64_t c) {
  testing::set_bf16_nan(t, ((b * kS + s) * heads + h) * kD + c);
}

// Whether out's row (b, s, h) holds a NaN.
bool row_has_nan(const std::vector<double>& out, int64_t b, int64_t s, int64_t h) {
  return testing::row_has_nan(out, (b * kS + s) * kHq + h, kD);
}

class NaNStaysVisible : public ::testing::TestWithParam<std::string> {};

TEST_P(NaNStaysVisible, InExactlyTheRowsThatReadIt) {
  ATTN_REQUIRE_GPU();
  const std::string backend = GetParam();
  int ran = 0;
  // Plain softmax and a learnable sink (whose term must not hide the NaN),
  // each with and without the max logit (NaN for exactly the heads that read it).
  for (const auto& [type, max_logit] : {std::pair{SoftmaxType::vanilla, false}, {SoftmaxType::vanilla, true},
                                        {SoftmaxType::learnable, true}, {SoftmaxType::learnable, false}}) {
    CaseSpec spec;
    spec.batch = kB;
    spec.s_q = spec.s_kv = kS;
    spec.h_q = kHq;
    spec.h_kv = kHkv;
    spec.d_qk = spec.d_v = kD;
    spec.mask = MaskType::causal;
    spec.softmax_type = type;
    spec.return_max_logit = max_logit;
    spec.return_lse = true;
    if (!testing::claims(backend, spec, Pass::forward)) continue;
    SCOPED_TRACE(std::string(softmax_type_name(type)) + (max_logit ? ", max logit" : ""));
    testing::Case c = testing::make_case(spec, Device::cuda(0), 21);
    poison(c.q, kHq, 1, 7, 2, 0);    // query row (1, 7, head 2)
    poison(c.k, kHkv, 0, 50, 1, 3);  // key 50 of sequence 0, KV head 1: query heads 2 and 3, rows 50..129
    testing::run_forced(c, backend);
    ATTN_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<double> out = c.out.to(Device::cpu()).to_doubles();
    int64_t wrong = 0;
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t s = 0; s < kS; ++s)
        for (int64_t h = 0; h < kHq; ++h) {
          const bool reaches = (b == 1 && s == 7 && h == 2) || (b == 0 && h / (kHq / kHkv) == 1 && s >= 50);
          if (row_has_nan(out, b, s, h) != reaches && wrong++ < 5)
            ADD_FAILURE() << backend << ": row (" << b << ", " << s << ", " << h << ") "
                          << (reaches ? "lost its NaN" : "has a NaN it does not read");
        }
    EXPECT_EQ(wrong, 0);
    const std::vector<double> lse = c.lse.to(Device::cpu()).to_doubles();  // [b, h_q, s_q]
    int64_t wrong_lse = 0;
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t h = 0; h < kHq; ++h)
        for (int64_t s = 0; s < kS; ++s) {
          const bool reaches = (b == 1 && s == 7 && h == 2) || (b == 0 && h / (kHq / kHkv) == 1 && s >= 50);
          if (std::isnan(lse[(b * kHq + h) * kS + s]) != reaches && wrong_lse++ < 5)
            ADD_FAILURE() << backend << ": lse of row (" << b << ", " << s << ", " << h << ") = "
                          << lse[(b * kHq + h) * kS + s];
        }
    EXPECT_EQ(wrong_lse, 0);
    if (max_logit) {
      const std::vector<double> m = c.max_logit.to(Device::cpu()).to_doubles();
      for (int64_t h = 0; h < kHq; ++h)
        EXPECT_EQ(std::isnan(m[h]), h >= 2) << backend << ": max_logit[" << h << "] = " << m[h];
    }
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << backend << " does not run the problem";
}

INSTANTIATE_TEST_SUITE_P(Registered, NaNStaysVisible, ::testing::ValuesIn(testing::gpu_backends()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace attn
