// The `reference` Backend object: its name, its verdicts (host tensors of any
// floating dtype: yes; tensors on a GPU: a reason saying what to do), and that
// running it through the interface or attn::forward/backward gives the same
// results as the functions it wraps.
#include <gtest/gtest.h>

#include <string>

#include "attn/attn.h"
#include "backends/reference/reference.h"
#include "reference/reference_test_util.h"
#include "testing/tensor_buffer.h"

namespace attn::reftest {
namespace {

Problem host_problem(DType t) {
  Problem p;
  p.dtype = t;
  p.batch = 2;
  p.s_q = p.s_kv = 16;
  p.total_q = p.total_kv = 32;
  p.h_q = 4;
  p.h_kv = 2;
  p.d_qk = p.d_v = 8;
  return p;
}

TEST(ReferenceBackend, NameAndSingleton) {
  EXPECT_STREQ(reference::backend().name(), "reference");
  EXPECT_EQ(&reference::backend(), &reference::backend());
}

TEST(ReferenceBackend, SupportsEveryFeatureOnTheHost) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    Problem p = host_problem(t);
    p.qkv_format = QkvFormat::thd;
    p.mask = MaskType::arbitrary;
    p.mask_additive = true;
    p.window_left = 3;
    p.window_right = 0;
    p.softcap = 30;
    p.bias = BiasType::post_scale_bias;
    p.bias_grad = true;
    p.dropout_p = 0.1;
    p.d_qk = 192;
    p.d_v = 128;
    EXPECT_TRUE(reference::backend().supports(p, DeviceInfo{}).empty()) << dtype_name(t);
  }
}

TEST(ReferenceBackend, ExplainsWhyNotForGpuTensors) {
  Problem p = host_problem(DType::bf16);
  p.device = Device::cuda(0);
  DeviceInfo dev;
  dev.device = p.device;
  dev.sm = 90;
  const std::vector<std::string> reasons = reference::backend().supports(p, dev);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("runs on the CPU"), std::string::npos) << reasons[0];
  EXPECT_NE(reasons[0].find("cuda:0"), std::string::npos) << reasons[0];
  EXPECT_NE(reasons[0].find("attn check"), std::string::npos) << reasons[0];
}

TEST(ReferenceBackend, RejectsNonFloatingDtypes) {
  const std::vector<std::string> reasons = reference::backend().supports(host_problem(DType::i32), DeviceInfo{});
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("int32"), std::string::npos) << reasons[0];
}

// lse is optional in the forward: without it, out is the same.
TEST(ReferenceBackend, ForwardWithoutLse) {
  const Dims n{1, 3, 4, 2, 2, 2, 3};
  const Data d = make_data(n, 62);
  Spec spec;
  spec.backward = false;
  const Result expected = run_reference(d, Options{}, spec);
  using testing::TensorBuffer;
  TensorBuffer q(DType::f64, {n.b, n.s_q, n.h_q, n.d_qk}), k(DType::f64, {n.b, n.s_kv, n.h_kv, n.d_qk}),
      v(DType::f64, {n.b, n.s_kv, n.h_kv, n.d_v}), out(DType::f64, {n.b, n.s_q, n.h_q, n.d_v});
  q.copy_from(d.q);
  k.copy_from(d.k);
  v.copy_from(d.v);
  out.fill_nan();
  ForwardArgs fa;
  fa.in.q = q.view();
  fa.in.k = k.view();
  fa.in.v = v.view();
  fa.out = out.view();
  reference::forward(validate_forward(Options{}, fa), fa);
  EXPECT_TRUE(identical(out.to_doubles(), expected.out));
}

// With check_seqlens off validation does not read cu_seqlens; the reference
// (which reads them anyway) refuses lengths that would take it outside the tensors.
TEST(ReferenceBackend, RefusesCuSeqlensThatDoNotFit) {
  using testing::TensorBuffer;
  for (QkvFormat f : {QkvFormat::bshd, QkvFormat::thd}) {
    const std::vector<int64_t> shape = f == QkvFormat::thd ? std::vector<int64_t>{4, 1, 2} : std::vector<int64_t>{1, 4, 1, 2};
    TensorBuffer q(DType::f32, shape), k(DType::f32, shape), v(DType::f32, shape), out(DType::f32, shape),
        cu(DType::i32, {2});
    q.fill_zero();
    k.fill_zero();
    v.fill_zero();
    const int32_t too_long[2] = {0, 6};  // 6 > 4 tokens / padded length 4
    cu.copy_from_bytes(too_long, sizeof too_long);
    Options o;
    o.qkv_format = f;
    o.mask = MaskType::padding;
    o.check_seqlens = false;
    o.max_seqlen_q = o.max_seqlen_kv = 4;
    ForwardArgs fa;
    fa.in.q = q.view();
    fa.in.k = k.view();
    fa.in.v = v.view();
    fa.in.cu_seqlens_q = cu.view();
    fa.in.cu_seqlens_kv = cu.view();
    fa.out = out.view();
    const Problem p = validate_forward(o, fa);
    try {
      reference::forward(p, fa);
      ADD_FAILURE() << format_name(f) << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cu_seqlens_q"), std::string::npos) << e.what();
    }
  }
}

// The same call through Backend::forward/backward, through attn::forward /
// attn::backward (selection picks the reference for host tensors) and through
// the test helper all agree bit for bit.
TEST(ReferenceBackend, InterfaceAndPublicApiRunTheReference) {
  const Dims n{2, 3, 4, 2, 1, 2, 2};
  const Data d = make_data(n, 61);
  Options o;
  o.mask = MaskType::causal;
  const Result expected = run_reference(d, o, {});

  using testing::TensorBuffer;
  auto buffer = [](std::vector<int64_t> shape, const std::vector<double>& values) {
    TensorBuffer t(DType::f64, std::move(shape));
    if (values.empty()) t.fill_nan();
    else t.copy_from(values);
    return t;
  };
  const TensorBuffer q = buffer({n.b, n.s_q, n.h_q, n.d_qk}, d.q), k = buffer({n.b, n.s_kv, n.h_kv, n.d_qk}, d.k),
                     v = buffer({n.b, n.s_kv, n.h_kv, n.d_v}, d.v), dout = buffer({n.b, n.s_q, n.h_q, n.d_v}, d.dout);
  for (bool public_api : {false, true}) {
    const TensorBuffer out = buffer({n.b, n.s_q, n.h_q, n.d_v}, {}), lse(DType::f32, {n.b, n.h_q, n.s_q});
    const TensorBuffer dq = buffer({n.b, n.s_q, n.h_q, n.d_qk}, {}), dk = buffer({n.b, n.s_kv, n.h_kv, n.d_qk}, {}),
                       dv = buffer({n.b, n.s_kv, n.h_kv, n.d_v}, {});
    ForwardArgs fa;
    fa.in.q = q.view();
    fa.in.k = k.view();
    fa.in.v = v.view();
    fa.out = out.view();
    fa.lse = lse.view();
    BackwardArgs ba;
    ba.in = fa.in;
    ba.out = out.view();
    ba.lse = lse.view();
    ba.dout = dout.view();
    ba.dq = dq.view();
    ba.dk = dk.view();
    ba.dv = dv.view();
    if (public_api) {
      Policy policy;  // the default: no overrides from the environment
      EXPECT_STREQ(attn::forward(o, fa, {}, policy).backend->name(), "reference");
      EXPECT_STREQ(attn::backward(o, ba, {}, policy).backend->name(), "reference");
    } else {
      reference::backend().forward(validate_forward(o, fa), fa, {});
      reference::backend().backward(validate_backward(o, ba), ba, {});
    }
    const std::string what = public_api ? "attn::forward/backward" : "Backend interface";
    EXPECT_TRUE(identical(out.to_doubles(), expected.out)) << what;
    EXPECT_TRUE(identical(lse.to_doubles(), expected.lse)) << what;
    EXPECT_TRUE(identical(dq.to_doubles(), expected.dq)) << what;
    EXPECT_TRUE(identical(dk.to_doubles(), expected.dk)) << what;
    EXPECT_TRUE(identical(dv.to_doubles(), expected.dv)) << what;
  }
}

}  // namespace
}  // namespace attn::reftest
