// Validation rejects each kind of bad call before any backend runs, with a
// message that names what is wrong, what came in, what was expected and a fix.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "testing/tensor_buffer.h"

namespace attn {
namespace {

using testing::TensorBuffer;

// A valid host call with contiguous tensors; tests break one thing at a time.
struct Call {
  Options opts;
  ForwardArgs fwd;
  BackwardArgs bwd;
  std::vector<TensorBuffer> owned;

  TensorView alloc(DType t, std::vector<int64_t> shape) {
    owned.emplace_back(t, std::move(shape));
    owned.back().fill_zero();
    return owned.back().view();
  }
};

Call make_call(QkvFormat f, int64_t b, int64_t s_q, int64_t s_kv, int64_t h_q, int64_t h_kv,
               int64_t d_qk, int64_t d_v, DType dt = DType::bf16) {
  Call c;
  c.opts.qkv_format = f;
  auto shape = [&](int64_t s, int64_t h, int64_t d) -> std::vector<int64_t> {
    if (f == QkvFormat::bshd) return {b, s, h, d};
    if (f == QkvFormat::sbhd) return {s, b, h, d};
    return {b * s, h, d};
  };
  Inputs in;
  in.q = c.alloc(dt, shape(s_q, h_q, d_qk));
  in.k = c.alloc(dt, shape(s_kv, h_kv, d_qk));
  in.v = c.alloc(dt, shape(s_kv, h_kv, d_v));
  if (f == QkvFormat::thd) {
    std::vector<int32_t> cq, ck;
    for (int64_t i = 0; i <= b; ++i) {
      cq.push_back(static_cast<int32_t>(i * s_q));
      ck.push_back(static_cast<int32_t>(i * s_kv));
    }
    in.cu_seqlens_q = c.alloc(DType::i32, {b + 1});
    in.cu_seqlens_kv = c.alloc(DType::i32, {b + 1});
    c.owned[c.owned.size() - 2].copy_from_bytes(cq.data(), cq.size() * 4);
    c.owned.back().copy_from_bytes(ck.data(), ck.size() * 4);
  }
  c.fwd.in = in;
  c.fwd.out = c.alloc(dt, shape(s_q, h_q, d_v));
  c.bwd.in = in;
  c.bwd.out = c.fwd.out;
  c.bwd.dout = c.alloc(dt, shape(s_q, h_q, d_v));
  c.bwd.dq = c.alloc(dt, shape(s_q, h_q, d_qk));
  c.bwd.dk = c.alloc(dt, shape(s_kv, h_kv, d_qk));
  c.bwd.dv = c.alloc(dt, shape(s_kv, h_kv, d_v));
  c.bwd.lse = f == QkvFormat::thd ? c.alloc(DType::f32, {h_q, b * s_q}) : c.alloc(DType::f32, {b, h_q, s_q});
  return c;
}

Call bshd_call() { return make_call(QkvFormat::bshd, 2, 8, 8, 4, 2, 16, 16); }

// Runs fn, expects an attn::Error of `kind` whose message contains every needle,
// and whose four parts are all filled in.
void expect_error(const std::function<void()>& fn, ErrorKind kind, const std::vector<std::string>& needles) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
        << "missing \"" << n << "\" in:\n" << e.what();
    EXPECT_FALSE(e.info().what.empty());
    EXPECT_FALSE(e.info().got.empty()) << e.what();
    EXPECT_FALSE(e.info().expected.empty()) << e.what();
    EXPECT_FALSE(e.info().fix.empty()) << e.what();
    return;
  }
  ADD_FAILURE() << "no attn::Error thrown";
}

void expect_forward_error(Call& c, ErrorKind kind, const std::vector<std::string>& needles) {
  expect_error([&] { validate_forward(c.opts, c.fwd); }, kind, needles);
}

TEST(Validate, AcceptsAValidCallAndDerivesTheProblem) {
  Call c = bshd_call();
  const Problem p = validate_forward(c.opts, c.fwd);
  EXPECT_EQ(p.batch, 2);
  EXPECT_EQ(p.s_q, 8);
  EXPECT_EQ(p.h_q, 4);
  EXPECT_EQ(p.h_kv, 2);
  EXPECT_EQ(p.d_qk, 16);
  EXPECT_DOUBLE_EQ(p.softmax_scale, 0.25);  // 1/sqrt(16)
  EXPECT_FALSE(p.return_lse);
}

TEST(Validate, HiddenDimensionNotSplitIntoHeads) {
  Call c = bshd_call();
  c.fwd.in.q = c.alloc(DType::bf16, {2, 8, 64});  // [b, s, h*d]
  expect_forward_error(c, ErrorKind::value, {"q has rank 3", "qkv_format=bshd", "[2, 8, 64]",
                                             "split the hidden dimension into heads first"});
}

TEST(Validate, SbhdRankMismatchAlsoSaysSplitHeads) {
  Call c = make_call(QkvFormat::sbhd, 2, 8, 8, 4, 4, 16, 16);
  c.fwd.in.k = c.alloc(DType::bf16, {8, 2, 64});
  expect_forward_error(c, ErrorKind::value, {"k has rank 3", "[seq_kv, batch, heads_kv, head_dim_qk]",
                                             "split the hidden dimension into heads first"});
}

TEST(Validate, PaddedBatchPassedAsThd) {
  Call c = make_call(QkvFormat::thd, 2, 8, 8, 4, 4, 16, 16);
  c.fwd.in.q = c.alloc(DType::bf16, {2, 8, 4, 16});
  expect_forward_error(c, ErrorKind::value, {"q has rank 4", "qkv_format=thd", "qkv_format=\"bshd\""});
}

TEST(Validate, HeadsNotDivisible) {
  Call c = make_call(QkvFormat::bshd, 1, 4, 4, 6, 4, 16, 16);
  expect_forward_error(c, ErrorKind::value, {"h_q is not a multiple of h_kv", "h_q=6, h_kv=4"});
}

TEST(Validate, KeyHeadDimDiffersFromQuery) {
  Call c = bshd_call();
  c.fwd.in.k = c.alloc(DType::bf16, {2, 8, 2, 32});
  expect_forward_error(c, ErrorKind::value, {"k's head_dim differs from q's", "got:      32", "expected: 16"});
}

TEST(Validate, HeadDimLimits) {
  Call c = make_call(QkvFormat::bshd, 1, 2, 2, 1, 1, 16, kMaxHeadDim + 1);
  expect_forward_error(c, ErrorKind::value, {"head_dim_v is out of range", "513", "1 to 512"});
}

TEST(Validate, DifferentDQkAndDvAreFine) {
  Call c = make_call(QkvFormat::bshd, 1, 4, 4, 2, 1, 192, 128);
  const Problem p = validate_forward(c.opts, c.fwd);
  EXPECT_EQ(p.d_qk, 192);
  EXPECT_EQ(p.d_v, 128);
}

TEST(Validate, DtypeMix) {
  Call c = bshd_call();
  c.fwd.in.v = c.alloc(DType::f16, {2, 8, 2, 16});
  expect_forward_error(c, ErrorKind::type, {"v's dtype differs from q's", "float16", "bfloat16"});
}

TEST(Validate, NullDataWithElementsIsRefusedBeforeAnythingRuns) {
  // Shape-only questions (explain, the CLI's plans) validate views without
  // data; forward() and backward(), which run kernels, refuse them.
  Call c = bshd_call();
  c.fwd.in.q.data = c.fwd.in.k.data = c.fwd.in.v.data = nullptr;
  EXPECT_NO_THROW(validate_forward(c.opts, c.fwd));
  expect_error([&] { forward(c.opts, c.fwd); }, ErrorKind::value, {"q has no data", "a null data pointer for [2, 8, 4, 16]"});
  Call d = bshd_call();
  d.fwd.out.data = nullptr;
  expect_error([&] { forward(d.opts, d.fwd); }, ErrorKind::value, {"out has no data"});
  Call e = make_call(QkvFormat::thd, 2, 8, 8, 4, 2, 16, 16);
  e.fwd.in.cu_seqlens_q.data = nullptr;  // validation would read its values
  expect_error([&] { forward(e.opts, e.fwd); }, ErrorKind::value, {"cu_seqlens_q has no data"});
  Call g = bshd_call();
  g.bwd.dk.data = nullptr;
  expect_error([&] { backward(g.opts, g.bwd); }, ErrorKind::value, {"dk has no data"});
}

TEST(Validate, IntegerInputs) {
  Call c = make_call(QkvFormat::bshd, 1, 2, 2, 1, 1, 8, 8, DType::i32);
  expect_forward_error(c, ErrorKind::type, {"q has an unsupported dtype", "int32"});
}

TEST(Validate, LastDimensionNotContiguous) {
  Call c = bshd_call();
  TensorBuffer wide(DType::bf16, {2, 8, 2, 32});
  c.owned.push_back(wide);
  // Every other element of the last dimension: shape [2, 8, 2, 16], stride 2.
  c.fwd.in.k = make_view(wide.data(), DType::bf16, {2, 8, 2, 16}, {512, 64, 32, 2});
  expect_forward_error(c, ErrorKind::value, {"k's last dimension is not contiguous", "stride 2"});
}

TEST(Validate, StridedViewsWithContiguousLastDimAreFine) {
  // q, k, v as views into one packed [b, s, 3, h, d] buffer.
  Call c = bshd_call();
  TensorBuffer qkv(DType::bf16, {2, 8, 3, 4, 16});
  c.owned.push_back(qkv);
  const int64_t st[4] = {8 * 3 * 4 * 16, 3 * 4 * 16, 16, 1};
  const int64_t shape[4] = {2, 8, 4, 16};
  auto* base = static_cast<uint16_t*>(qkv.data());
  c.fwd.in.q = make_view(base, DType::bf16, 4, shape, st, Device::cpu());
  c.fwd.in.k = make_view(base + 4 * 16, DType::bf16, 4, shape, st, Device::cpu());
  c.fwd.in.v = make_view(base + 8 * 16, DType::bf16, 4, shape, st, Device::cpu());
  c.fwd.out = c.alloc(DType::bf16, {2, 8, 4, 16});
  EXPECT_NO_THROW(validate_forward(c.opts, c.fwd));
}

TEST(Validate, MismatchedDevices) {
  Call c = bshd_call();
  c.fwd.in.k.device = Device::cuda(0);
  expect_forward_error(c, ErrorKind::value, {"k is on another device than q", "cuda:0", "cpu"});
}

TEST(Validate, ThdNeedsBothCuSeqlens) {
  Call c = make_call(QkvFormat::thd, 2, 4, 4, 2, 2, 16, 16);
  c.fwd.in.cu_seqlens_kv = TensorView{};
  expect_forward_error(c, ErrorKind::value, {"qkv_format=thd needs cu_seqlens_q and cu_seqlens_kv", "cu_seqlens_q only"});
}

TEST(Validate, CuSeqlensDtype) {
  Call c = make_call(QkvFormat::thd, 2, 4, 4, 2, 2, 16, 16);
  c.fwd.in.cu_seqlens_q = c.alloc(DType::i64, {3});
  expect_forward_error(c, ErrorKind::type, {"cu_seqlens_q has the wrong dtype", "int64", "int32"});
}

void set_cu(Call& c, TensorView& slot, std::vector<int32_t> values) {
  slot = c.alloc(DType::i32, {static_cast<int64_t>(values.size())});
  c.owned.back().copy_from_bytes(values.data(), values.size() * 4);
}

TEST(Validate, CuSeqlensLength) {
  Call c = make_call(QkvFormat::thd, 2, 4, 4, 2, 2, 16, 16);
  set_cu(c, c.fwd.in.cu_seqlens_kv, {0, 8});
  expect_forward_error(c, ErrorKind::value, {"cu_seqlens_kv has the wrong length", "got:      2", "3 (batch + 1"});
}

TEST(Validate, CuSeqlensStartsAtZero) {
  Call c = make_call(QkvFormat::thd, 2, 4, 4, 2, 2, 16, 16);
  set_cu(c, c.fwd.in.cu_seqlens_q, {1, 4, 8});
  expect_forward_error(c, ErrorKind::value, {"cu_seqlens_q[0] must be 0", "got:      1"});
}

TEST(Validate, CuSeqlensNonDecreasing) {
  Call c = make_call(QkvFormat::thd, 2, 4, 4, 2, 2, 16, 16);
  set_cu(c, c.fwd.in.cu_seqlens_q, {0, 6, 5, 8});
  c.fwd.in.cu_seqlens_kv = c.fwd.in.cu_seqlens_q;
  expect_forward_error(c, ErrorKind::value, {"cu_seqlens_q decreases at index 2", "6 then 5"});
}

TEST(Validate, CuSeqlensLastEqualsTokens) {
  Call c = make_call(QkvFormat::thd, 2, 4, 4, 2, 2, 16, 16);
  set_cu(c, c.fwd.in.cu_seqlens_kv, {0, 4, 7});
  expect_forward_error(c, ErrorKind::value, {"cu_seqlens_kv's last entry differs from the number of tokens", "got:      7", "expected: 8"});
}

TEST(Validate, CuSeqlensOnAnotherDevice) {
  Call c = make_call(QkvFormat::thd, 2, 4, 4, 2, 2, 16, 16);
  c.fwd.in.cu_seqlens_q.device = Device::cuda(0);
  expect_forward_error(c, ErrorKind::value, {"cu_seqlens_q is on another device than q"});
}

TEST(Validate, MaxSeqlenTooSmall) {
  Call c = make_call(QkvFormat::thd, 2, 4, 4, 2, 2, 16, 16);
  set_cu(c, c.fwd.in.cu_seqlens_q, {0, 1, 8});  // longest is 7
  c.opts.max_seqlen_q = 5;
  expect_forward_error(c, ErrorKind::value, {"max_seqlen_q is smaller than the longest sequence", "got:      5", ">= 7"});
  c.opts.max_seqlen_q = 0;  // derived
  EXPECT_EQ(validate_forward(c.opts, c.fwd).s_q, 7);
  c.opts.max_seqlen_q = 100;  // larger is fine
  EXPECT_EQ(validate_forward(c.opts, c.fwd).s_q, 100);
}

TEST(Validate, ThdAcceptsEmptySequences) {
  Call c = make_call(QkvFormat::thd, 3, 4, 4, 2, 2, 16, 16);
  set_cu(c, c.fwd.in.cu_seqlens_q, {0, 0, 12, 12});
  set_cu(c, c.fwd.in.cu_seqlens_kv, {0, 5, 5, 12});
  const Problem p = validate_forward(c.opts, c.fwd);
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.s_q, 12);
  EXPECT_EQ(p.s_kv, 7);
}

TEST(Validate, PaddedBshdCuSeqlensNeedPaddingMask) {
  Call c = make_call(QkvFormat::bshd, 2, 8, 8, 2, 2, 16, 16);
  set_cu(c, c.fwd.in.cu_seqlens_q, {0, 3, 8});
  set_cu(c, c.fwd.in.cu_seqlens_kv, {0, 3, 8});
  c.opts.mask = MaskType::causal;
  expect_forward_error(c, ErrorKind::value, {"need a padding mask", "mask=causal", "padding_causal"});
  c.opts.mask = MaskType::padding_causal;
  EXPECT_TRUE(validate_forward(c.opts, c.fwd).has_seqlens);
}

TEST(Validate, PaddedLengthLongerThanTensor) {
  Call c = make_call(QkvFormat::bshd, 2, 8, 8, 2, 2, 16, 16);
  set_cu(c, c.fwd.in.cu_seqlens_q, {0, 9, 10});
  set_cu(c, c.fwd.in.cu_seqlens_kv, {0, 3, 8});
  c.opts.mask = MaskType::padding;
  expect_forward_error(c, ErrorKind::value, {"longer than the padded tensor", "got:      9", "at most 8"});
}

TEST(Validate, WindowBelowMinusOne) {
  Call c = bshd_call();
  c.opts.window = {-2, 0};
  expect_forward_error(c, ErrorKind::value, {"window left is below -1", "got:      -2"});
}

TEST(Validate, CausalClipsWindowRightAndSetsAlignment) {
  Call c = make_call(QkvFormat::bshd, 1, 4, 8, 1, 1, 16, 16);
  c.opts.mask = MaskType::causal;
  c.opts.window = {5, 7};
  Problem p = validate_forward(c.opts, c.fwd);
  EXPECT_EQ(p.window_left, 5);
  EXPECT_EQ(p.window_right, 0);
  EXPECT_FALSE(p.bottom_right);
  c.opts.mask = MaskType::causal_bottom_right;
  c.opts.window = {-1, -1};
  p = validate_forward(c.opts, c.fwd);
  EXPECT_EQ(p.window_left, -1);
  EXPECT_EQ(p.window_right, 0);
  EXPECT_TRUE(p.bottom_right);
  c.opts.mask = MaskType::no_mask;  // a window without causal is aligned bottom-right
  c.opts.window = {3, 3};
  p = validate_forward(c.opts, c.fwd);
  EXPECT_EQ(p.window_right, 3);
  EXPECT_TRUE(p.bottom_right);
}

TEST(Validate, BiasNotBroadcastable) {
  Call c = bshd_call();  // scores [2, 4, 8, 8]
  c.fwd.in.bias = c.alloc(DType::bf16, {1, 4, 8, 7});
  expect_forward_error(c, ErrorKind::value, {"bias is not broadcastable to the scores", "[1, 4, 8, 7]", "[2|1, 4|1, 8|1, 8|1]"});
  c.fwd.in.bias = c.alloc(DType::bf16, {4, 8, 8});
  expect_forward_error(c, ErrorKind::value, {"bias must have rank 4"});
  c.fwd.in.bias = c.alloc(DType::f32, {1, 4, 1, 8});  // broadcast over batch and queries
  const Problem p = validate_forward(c.opts, c.fwd);
  EXPECT_EQ(p.bias, BiasType::post_scale_bias);
  EXPECT_EQ(p.bias_shape[2], 1);
}

TEST(Validate, AlibiSlopesShape) {
  Call c = bshd_call();
  c.fwd.in.alibi_slopes = c.alloc(DType::f32, {3});
  expect_forward_error(c, ErrorKind::value, {"alibi_slopes has the wrong shape", "[3]", "[4] (one slope per query head)"});
  c.fwd.in.alibi_slopes = c.alloc(DType::f32, {2, 4});
  EXPECT_TRUE(validate_forward(c.opts, c.fwd).alibi_per_batch);
}

TEST(Validate, DropoutProbabilityOutOfRange) {
  Call c = bshd_call();
  c.opts.dropout_p = 1.0;
  expect_forward_error(c, ErrorKind::value, {"dropout probability outside [0, 1)", "0 <= p < 1"});
  c.opts.dropout_p = -0.1;
  expect_forward_error(c, ErrorKind::value, {"dropout probability outside [0, 1)"});
}

TEST(Validate, DropoutOffsetFitsCounterWord) {
  Call c = bshd_call();
  c.opts.dropout_p = 0.1;
  c.opts.offset = uint64_t{1} << 32;
  expect_forward_error(c, ErrorKind::value, {"dropout offset", "offset < 2^32"});
}

TEST(Validate, ArbitraryMaskNeedsTensorAndViceVersa) {
  Call c = bshd_call();
  c.opts.mask = MaskType::arbitrary;
  expect_forward_error(c, ErrorKind::value, {"attn_mask is missing"});
  c.fwd.in.attn_mask = c.alloc(DType::boolean, {1, 1, 8, 8});
  EXPECT_NO_THROW(validate_forward(c.opts, c.fwd));
  c.opts.mask = MaskType::causal;
  expect_forward_error(c, ErrorKind::value, {"attn_mask is given but the mask type ignores it"});
}

TEST(Validate, OutputShapeAndLse) {
  Call c = bshd_call();
  c.fwd.out = c.alloc(DType::bf16, {2, 8, 4, 8});
  expect_forward_error(c, ErrorKind::value, {"out has the wrong shape", "[2, 8, 4, 8]", "[2, 8, 4, 16]"});
  c = bshd_call();
  c.fwd.lse = c.alloc(DType::bf16, {2, 4, 8});
  expect_forward_error(c, ErrorKind::type, {"lse has the wrong dtype", "float32"});
  c.fwd.lse = c.alloc(DType::f32, {2, 8, 4});
  expect_forward_error(c, ErrorKind::value, {"lse has the wrong shape", "[batch, heads_q, seq_q]"});
  c.fwd.lse = c.alloc(DType::f32, {2, 4, 8});
  EXPECT_TRUE(validate_forward(c.opts, c.fwd).return_lse);
}

TEST(Validate, BackwardNeedsLseAndBiasForDbias) {
  Call c = bshd_call();
  EXPECT_NO_THROW(validate_backward(c.opts, c.bwd));
  c.bwd.lse = TensorView{};
  expect_error([&] { validate_backward(c.opts, c.bwd); }, ErrorKind::value, {"lse is missing"});
  c = bshd_call();
  c.bwd.dbias = c.alloc(DType::f32, {1, 4, 8, 8});
  expect_error([&] { validate_backward(c.opts, c.bwd); }, ErrorKind::value, {"dbias is given but there is no bias"});
  c.bwd.in.bias = c.alloc(DType::f32, {1, 4, 8, 8});
  EXPECT_TRUE(validate_backward(c.opts, c.bwd).bias_grad);
  c.bwd.dk = c.alloc(DType::bf16, {2, 8, 4, 16});  // h_q heads instead of h_kv
  expect_error([&] { validate_backward(c.opts, c.bwd); }, ErrorKind::value, {"dk has the wrong shape", "[2, 8, 2, 16]"});
}

TEST(Validate, LengthOneIsValidEverywhere) {
  for (QkvFormat f : {QkvFormat::bshd, QkvFormat::sbhd, QkvFormat::thd})
    for (auto [sq, skv] : {std::pair<int64_t, int64_t>{1, 1}, {1, 9}, {9, 1}})
      for (MaskType m : {MaskType::no_mask, MaskType::causal, MaskType::causal_bottom_right,
                         MaskType::padding, MaskType::padding_causal, MaskType::padding_causal_bottom_right}) {
        Call c = make_call(f, 2, sq, skv, 2, 1, 16, 8);
        c.opts.mask = m;
        c.opts.window = {0, 0};
        EXPECT_NO_THROW(validate_forward(c.opts, c.fwd)) << format_name(f) << " " << mask_name(m);
        EXPECT_NO_THROW(validate_backward(c.opts, c.bwd)) << format_name(f) << " " << mask_name(m);
      }
}

TEST(Validate, CheckProblemCatchesNumbersWithoutTensors) {
  Problem p;
  p.h_q = 6;
  p.h_kv = 4;
  expect_error([&] { check_problem(p); }, ErrorKind::value, {"h_q is not a multiple of h_kv"});
  p.h_kv = 3;
  p.softcap = -1;
  expect_error([&] { check_problem(p); }, ErrorKind::value, {"softcap must be a finite number >= 0"});
}

}  // namespace
}  // namespace attn

namespace attn {
namespace {

TEST(Validate, EmptyTensorsMayHaveAnyStride) {
  // NumPy exports size-0 arrays over DLPack with stride 0: nothing to read, nothing to reject.
  Call c = make_call(QkvFormat::bshd, 0, 8, 8, 2, 2, 16, 16);
  c.fwd.in.q.strides_elems = {0, 0, 0, 0, 0, 0};
  const Problem p = validate_forward(c.opts, c.fwd);
  EXPECT_EQ(p.batch, 0);
}

}  // namespace
}  // namespace attn

// Calls the fuzzer found (tests/fuzz, docs/RELIABILITY.md): each overflowed
// int64 or int32 (undefined behaviour), or read a null pointer, before its
// fix; the sanitizer build (scripts/check_sanitizers.sh) checks they stay clean.
namespace attn {
namespace {

constexpr int64_t k2p62 = int64_t{1} << 62;

TEST(ValidateFuzzed, EmptyViewWithHugeDimensions) {
  // make_view bounds the product (0); counting in another order passed int64.
  const TensorView t = make_view(nullptr, DType::bf16, {k2p62, (int64_t{1} << 31) - 1, 0, 64});
  EXPECT_EQ(t.numel(), 0);
  Call c = bshd_call();
  c.fwd.in.q = t;
  expect_forward_error(c, ErrorKind::value, {"q has more tokens than int64 can count", "batch * seq below 2^63"});
}

TEST(ValidateFuzzed, WindowsPast2To62AreRefused) {
  // i + shift + right + 1 passed int64 in the mask rule: a window of 2^63 - 2
  // keys hid every key.
  Call c = bshd_call();
  c.opts.window = {-1, std::numeric_limits<int64_t>::max() - 1};
  expect_forward_error(c, ErrorKind::value, {"window values must be at most 2^62", "use -1"});
  c.opts.window = {k2p62, k2p62};  // the largest accepted: every key of any real problem
  EXPECT_NO_THROW(validate_forward(c.opts, c.fwd));
}

TEST(ValidateFuzzed, CuSeqlensLengthAgainstTheLargestBatch) {
  const int64_t batch = std::numeric_limits<int64_t>::max();
  Call c = bshd_call();
  c.opts.mask = MaskType::padding;
  c.fwd.in.q = make_view(nullptr, DType::bf16, {batch, 1, 0, 16});
  c.fwd.in.k = c.fwd.in.v = c.fwd.in.q;
  c.fwd.in.cu_seqlens_q = c.fwd.in.cu_seqlens_kv = c.alloc(DType::i32, {3});
  expect_forward_error(c, ErrorKind::value, {"cu_seqlens_q has the wrong length", "9223372036854775808 (batch + 1"});
}

TEST(ValidateFuzzed, CuSeqlensWithoutDataInAShapeOnlyQuestion) {
  Call c = make_call(QkvFormat::thd, 2, 8, 8, 4, 2, 16, 16);
  c.fwd.in.cu_seqlens_kv.data = nullptr;
  expect_forward_error(c, ErrorKind::value, {"cu_seqlens_kv has no data to check", "check_seqlens off"});
  c.opts.check_seqlens = false;  // nothing to read: max_seqlen stands for the lengths
  c.opts.max_seqlen_q = c.opts.max_seqlen_kv = 8;
  EXPECT_NO_THROW(validate_forward(c.opts, c.fwd));
}

TEST(ValidateFuzzed, StrideNear2To63Elements) {
  // stride * element size passed int64 in the row alignment; modulo 2^64 it
  // keeps its divisibility: (2^63 - 1) * 4 bytes is a multiple of 4, not 8.
  Call c = make_call(QkvFormat::bshd, 1, 2, 2, 1, 1, 64, 64, DType::f32);
  c.fwd.in.q = make_view(nullptr, DType::f32, {1, 2, 1, 64}, {128, std::numeric_limits<int64_t>::max(), 64, 1});
  EXPECT_EQ(validate_forward(c.opts, c.fwd).row_alignment_bytes, 4);
}

TEST(ValidateFuzzed, UncheckedOffsetsOfAnyInt32) {
  // check_seqlens off: offsets are not read by validation; the reference
  // bounds each sequence by the tensors (its length in 64 bits, not int).
  Call c = make_call(QkvFormat::thd, 2, 4, 4, 2, 1, 8, 8, DType::f32);
  const int32_t offsets[3] = {0, std::numeric_limits<int32_t>::min(), 8};
  for (TensorBuffer& b : c.owned)
    if (b.data() == c.fwd.in.cu_seqlens_q.data) b.copy_from_bytes(offsets, sizeof offsets);
  c.opts.check_seqlens = false;
  c.opts.max_seqlen_q = c.opts.max_seqlen_kv = 4;
  expect_error([&] { forward(c.opts, c.fwd); }, ErrorKind::value,
               {"cu_seqlens_q does not fit the tensors", "sequence 0 of length -2147483648"});
}

}  // namespace
// ---- softmax sinks and the max logit -------------------------------------------

TEST(Validate, LearnableSoftmaxNeedsTheSink) {
  Call c = bshd_call();
  c.opts.softmax_type = SoftmaxType::learnable;
  expect_forward_error(c, ErrorKind::value, {"sink is missing", "softmax_type=learnable", "float32 [heads_q]"});
  c.fwd.in.sink = c.alloc(DType::f32, {4});
  const Problem p = validate_forward(c.opts, c.fwd);
  EXPECT_EQ(p.softmax_type, SoftmaxType::learnable);
  EXPECT_TRUE(p.has_sink());
  EXPECT_NE(describe_problem(p).find("softmax=learnable"), std::string::npos) << describe_problem(p);
}

TEST(Validate, SinkOfTheWrongShapeDtypeOrMeaning) {
  Call c = bshd_call();
  c.opts.softmax_type = SoftmaxType::learnable;
  c.fwd.in.sink = c.alloc(DType::f32, {2});  // h_kv, not h_q
  expect_forward_error(c, ErrorKind::value, {"sink has the wrong shape", "[2]", "[4]"});
  c.fwd.in.sink = c.alloc(DType::bf16, {4});
  expect_forward_error(c, ErrorKind::type, {"sink has the wrong dtype", "bfloat16", "float32"});
  c.fwd.in.sink = c.alloc(DType::f32, {4});
  c.opts.softmax_type = SoftmaxType::off_by_one;
  expect_forward_error(c, ErrorKind::value, {"sink is given but the softmax type ignores it", "off-by-one"});
}

TEST(Validate, MaxLogitAndDsinkShapes) {
  Call c = bshd_call();
  c.fwd.max_logit = c.alloc(DType::f32, {4, 1});
  expect_forward_error(c, ErrorKind::value, {"max_logit has the wrong shape", "[heads_q]"});
  c.fwd.max_logit = c.alloc(DType::f32, {4});
  EXPECT_TRUE(validate_forward(c.opts, c.fwd).return_max_logit);

  c.bwd.dsink = c.alloc(DType::f32, {4});
  expect_error([&] { validate_backward(c.opts, c.bwd); }, ErrorKind::value,
               {"dsink is given but the sink is not learnable", "softmax_type=vanilla"});
  c.opts.softmax_type = SoftmaxType::learnable;
  c.bwd.in.sink = c.alloc(DType::f32, {4});
  EXPECT_TRUE(validate_backward(c.opts, c.bwd).sink_grad);
  c.bwd.dsink = c.alloc(DType::f64, {4});
  expect_error([&] { validate_backward(c.opts, c.bwd); }, ErrorKind::type, {"dsink has the wrong dtype"});
}

TEST(Validate, SoftmaxTypeNames) {
  for (SoftmaxType t : {SoftmaxType::vanilla, SoftmaxType::off_by_one, SoftmaxType::learnable})
    EXPECT_EQ(parse_softmax_type(softmax_type_name(t)), t);
  EXPECT_EQ(parse_softmax_type("off_by_one"), SoftmaxType::off_by_one);
  EXPECT_FALSE(parse_softmax_type("sink").has_value());
}

}  // namespace attn
