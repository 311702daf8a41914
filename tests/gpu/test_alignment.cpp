// Layouts no backend can run never reach it: q, k, v and out as views that
// start 1, 2, 4 or 8 elements into their storage, or with rows padded by 1 or
// 8 elements (odd strides). Each GPU backend either runs such a view and
// matches the fp64 reference, or refuses it in supports() with the alignment
// reason (and a forced call is an error before any kernel runs); automatic
// selection always finds a backend that gives the right answer.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "attn/attn.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"

namespace attn {
namespace {

using testing::Case;
using testing::CaseSpec;
using testing::TensorBuffer;

struct Layout {
  int64_t offset;  // elements before the view's first element
  int64_t pad;     // elements after each row of d
};

// A contiguous bshd tensor's values in a strided view: rows of `pitch` =
// d + pad elements, starting `offset` elements into fresh storage.
struct PaddedCopy {
  TensorBuffer storage;
  TensorView view;
  int64_t rows = 0, d = 0, pitch = 0;
  char* first = nullptr;

  PaddedCopy(const TensorBuffer& src, Layout l) {
    const std::vector<int64_t>& s = src.shape();  // [b, s, h, d]
    d = s[3];
    pitch = d + l.pad;
    rows = s[0] * s[1] * s[2];
    storage = TensorBuffer(src.view().dtype, {l.offset + rows * pitch}, src.view().device);
    const size_t elem = dtype_size_bytes(src.view().dtype);
    first = static_cast<char*>(storage.data()) + l.offset * elem;
    const int64_t shape[4] = {s[0], s[1], s[2], d};
    const int64_t strides[4] = {s[1] * s[2] * pitch, s[2] * pitch, pitch, 1};
    view = make_view(first, src.view().dtype, 4, shape, strides, src.view().device);
    EXPECT_EQ(cudaMemcpy2D(first, pitch * elem, src.data(), d * elem, d * elem, rows, cudaMemcpyDeviceToDevice),
              cudaSuccess);
  }
  void copy_to(TensorBuffer& dst) const {
    const size_t elem = dtype_size_bytes(view.dtype);
    EXPECT_EQ(cudaMemcpy2D(dst.data(), d * elem, first, pitch * elem, d * elem, rows, cudaMemcpyDeviceToDevice),
              cudaSuccess);
  }
};

std::string describe(Layout l) {
  return "offset " + std::to_string(l.offset) + " elements, rows padded by " + std::to_string(l.pad);
}

class Alignment : public ::testing::TestWithParam<std::string> {};

TEST_P(Alignment, OffsetsAndOddStridesRunCorrectlyOrAreRefused) {
  ATTN_REQUIRE_GPU();
  const std::string backend = GetParam();
  const Backend* be = find_backend(backend);
  const DeviceInfo dev = query_device(Device::cuda(0));
  CaseSpec spec;
  spec.batch = 2;
  spec.s_q = spec.s_kv = 200;
  spec.h_q = 4;
  spec.h_kv = 2;
  spec.mask = MaskType::causal;
  spec.return_lse = true;
  if (!testing::claims(backend, spec, Pass::forward)) GTEST_SKIP() << backend << " does not run the problem";
  int ran = 0, refused = 0;
  for (Layout l : {Layout{1, 0}, Layout{2, 0}, Layout{4, 0}, Layout{8, 0}, Layout{0, 1}, Layout{0, 8}}) {
    SCOPED_TRACE(describe(l));
    for (bool forced : {true, false}) {
      Case c = testing::make_case(spec, Device::cuda(0), 61 + l.offset + 10 * l.pad);
      PaddedCopy q(c.q, l), k(c.k, l), v(c.v, l), out(c.out, l);
      ForwardArgs args = c.fwd;
      args.in.q = q.view, args.in.k = k.view, args.in.v = v.view, args.out = out.view;
      const Policy policy = forced ? testing::forcing(backend) : Policy::from_env();
      if (forced) {
        const std::vector<std::string> no = be->supports(validate_forward(c.opts, args), dev);
        if (!no.empty()) {
          ++refused;
          EXPECT_NE(no.front().find("align"), std::string::npos) << no.front();
          EXPECT_THROW(forward(c.opts, args, RunContext{}, policy), Error);
          continue;
        }
        ++ran;
      }
      const Selection s = forward(c.opts, args, RunContext{}, policy);
      ATTN_CUDA_OK(cudaDeviceSynchronize());
      out.copy_to(c.out);
      SCOPED_TRACE(std::string(forced ? "forced " : "chosen ") + s.backend->name());
      testing::expect_matches_reference(c);
    }
  }
  RecordProperty("ran", ran);
  RecordProperty("refused", refused);
}

INSTANTIATE_TEST_SUITE_P(Registered, Alignment, ::testing::ValuesIn(testing::gpu_backends()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace attn
