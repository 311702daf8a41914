// Dropout's seed and offset from a tensor (Inputs::rng_state, read when the
// kernels run, so CUDA graph replays can advance): on the CPU reference the
// same (seed, offset) in the tensor drops exactly the elements Options'
// values drop, forward and backward; a tensor of the wrong dtype, shape or
// device is refused with what/got/expected/fix.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "attn/attn.h"
#include "testing/case.h"

namespace attn {
namespace {

testing::CaseSpec dropout_spec() {
  testing::CaseSpec s;
  s.batch = 2, s.s_q = 9, s.s_kv = 13, s.h_q = 4, s.h_kv = 2, s.d_qk = s.d_v = 8;
  s.mask = MaskType::causal_bottom_right;
  s.dtype = DType::f32;
  s.dropout_p = 0.3, s.seed = 0x123456789ull, s.offset = 7;
  s.backward = true;
  return s;
}

void run(testing::Case& c) {
  forward(c.opts, c.fwd);
  backward(c.opts, c.bwd);
}

TEST(RngState, TensorValuesDropWhatOptionsValuesDrop) {
  testing::Case by_options = testing::make_case(dropout_spec(), Device::cpu(), 3);
  run(by_options);
  testing::Case by_tensor = testing::make_case(dropout_spec(), Device::cpu(), 3);
  by_tensor.opts.seed = 1, by_tensor.opts.offset = 2;  // ignored: the tensor's values count
  testing::TensorBuffer state(DType::i64, {2});
  const int64_t values[2] = {static_cast<int64_t>(dropout_spec().seed), static_cast<int64_t>(dropout_spec().offset)};
  state.copy_from_bytes(values, sizeof values);
  by_tensor.fwd.in.rng_state = by_tensor.bwd.in.rng_state = state.view();
  run(by_tensor);
  for (auto [a, b] : {std::pair{&by_options.out, &by_tensor.out}, {&by_options.dq, &by_tensor.dq},
                      {&by_options.dk, &by_tensor.dk}, {&by_options.dv, &by_tensor.dv}})
    EXPECT_EQ(a->host_bytes(), b->host_bytes());
  // Another seed in the tensor drops other elements.
  const int64_t other[2] = {values[0] + 1, values[1]};
  state.copy_from_bytes(other, sizeof other);
  run(by_tensor);
  EXPECT_NE(by_options.out.host_bytes(), by_tensor.out.host_bytes());
}

TEST(RngState, WrongDtypeShapeOrDeviceIsRefused) {
  testing::Case c = testing::make_case(dropout_spec(), Device::cpu(), 3);
  testing::TensorBuffer i32(DType::i32, {2}), three(DType::i64, {3});
  int64_t host[2] = {1, 2};
  for (const TensorView& bad : {i32.view(), three.view(),
                                make_view(host, DType::i64, {2}, Device::cuda(0))}) {
    c.fwd.in.rng_state = bad;
    try {
      validate_forward(c.opts, c.fwd);
      ADD_FAILURE() << "accepted rng_state " << bad.shape_str();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rng_state"), std::string::npos) << e.what();
      EXPECT_FALSE(e.info().fix.empty());
    }
  }
}

}  // namespace
}  // namespace attn
