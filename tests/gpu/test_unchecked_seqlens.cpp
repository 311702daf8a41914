// With check_seqlens off nobody reads cu_seqlens on the host, so the GPU
// backends receive whatever values the caller passed. Wrong values may give
// wrong answers but must never make a kernel write outside the caller's
// tensors (the kernels bound every sequence: core/sequence_bounds.h), and the
// host-driven unfused backend reports them. Outputs sit between guard bytes
// that must survive; inputs are exact allocations, so compute-sanitizer's
// memcheck (scripts/device.sh) also sees any read past them.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"

namespace attn {
namespace {

using testing::Case;
using testing::CaseSpec;

// `bytes` of device memory between two guard regions filled with a pattern.
class Guarded {
 public:
  static constexpr size_t kGuard = 256 * 1024;
  static constexpr unsigned char kPattern = 0xA5;

  explicit Guarded(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&base_, bytes + 2 * kGuard), cudaSuccess);
    EXPECT_EQ(cudaMemset(base_, kPattern, bytes + 2 * kGuard), cudaSuccess);
  }
  ~Guarded() { cudaFree(base_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;

  void* data() const { return base_ + kGuard; }
  // Whether both guard regions still hold only the pattern.
  bool intact() const {
    std::vector<unsigned char> host(kGuard);
    for (const unsigned char* region : {base_, base_ + kGuard + bytes_}) {
      if (cudaMemcpy(host.data(), region, kGuard, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
      for (unsigned char c : host)
        if (c != kPattern) return false;
    }
    return true;
  }

 private:
  unsigned char* base_ = nullptr;
  size_t bytes_;
};

// Packed sequences of 1, 0, 77 and 300 tokens (378 in all, max_seqlen 300),
// GQA 8:2, causal, forward and backward.
CaseSpec packed_spec() {
  CaseSpec s = testing::thd_edge_lengths(64, -1);
  s.backward = true;
  return s;
}

struct BadSeqlens {
  const char* what;
  std::vector<int32_t> cu;  // for both q and kv
};

std::vector<BadSeqlens> bad_seqlens() {
  const int32_t big = std::numeric_limits<int32_t>::max(), small = std::numeric_limits<int32_t>::min();
  return {{"past the last token", {0, 1, 1, 78, 600}},
          {"decreasing", {0, 77, 1, 1, 378}},
          {"negative", {-50, 1, 1, 78, 378}},
          {"longer than max_seqlen", {0, 350, 360, 370, 378}},
          {"extreme", {0, big, small, 78, 378}},
          {"start past the end", {500, 510, 520, 530, 540}}};
}

TEST(UncheckedSeqlens, WrongValuesStayInsideTheTensors) {
  ATTN_REQUIRE_GPU();
  const CaseSpec spec = packed_spec();
  int backends = 0;
  for (const std::string& backend : testing::gpu_backends()) {
    const bool fwd = testing::claims(backend, spec, Pass::forward);
    const bool bwd = testing::claims(backend, spec, Pass::backward);
    if (!fwd && !bwd) continue;
    ++backends;
    for (const BadSeqlens& bad : bad_seqlens()) {
      SCOPED_TRACE(backend + ", cu_seqlens " + bad.what);
      Case c = testing::make_case(spec, Device::cuda(0), 4242);
      c.cu_seqlens_q.copy_from_bytes(bad.cu.data(), bad.cu.size() * sizeof(int32_t));
      c.cu_seqlens_kv.copy_from_bytes(bad.cu.data(), bad.cu.size() * sizeof(int32_t));
      c.opts.check_seqlens = false;  // max_seqlen is given (300)
      Guarded out(c.out.bytes()), lse(c.lse.bytes()), dq(c.dq.bytes()), dk(c.dk.bytes()), dv(c.dv.bytes());
      c.fwd.out.data = c.bwd.out.data = out.data();
      c.fwd.lse.data = c.bwd.lse.data = lse.data();
      c.bwd.dq.data = dq.data();
      c.bwd.dk.data = dk.data();
      c.bwd.dv.data = dv.data();
      bool reported = false;
      try {
        if (fwd) forward(c.opts, c.fwd, {}, testing::forcing(backend));
        if (bwd) backward(c.opts, c.bwd, {}, testing::forcing(backend));
      } catch (const Error& e) {
        reported = true;
        EXPECT_EQ(e.kind(), ErrorKind::value) << e.what();
        EXPECT_NE(std::string(e.what()).find("cu_seqlens"), std::string::npos) << e.what();
      }
      ATTN_CUDA_OK(cudaDeviceSynchronize());
      // unfused reads the lengths on the host anyway and refuses them; the
      // kernels that read them on the device run within bounds.
      EXPECT_EQ(reported, backend == "unfused");
      EXPECT_TRUE(out.intact()) << "out written outside its tensor";
      EXPECT_TRUE(lse.intact()) << "lse written outside its tensor";
      EXPECT_TRUE(dq.intact()) << "dq written outside its tensor";
      EXPECT_TRUE(dk.intact()) << "dk written outside its tensor";
      EXPECT_TRUE(dv.intact()) << "dv written outside its tensor";
    }
  }
  EXPECT_GT(backends, 0) << "no GPU backend runs the packed case";
}

// The bounds change nothing for valid values: unchecked, each backend still
// matches the fp64 reference.
TEST(UncheckedSeqlens, ValidValuesGiveTheReferenceAnswer) {
  ATTN_REQUIRE_GPU();
  const CaseSpec spec = packed_spec();
  for (const std::string& backend : testing::gpu_backends()) {
    if (!testing::claims(backend, spec, Pass::forward)) continue;
    SCOPED_TRACE(backend);
    CaseSpec s = spec;
    s.backward = testing::claims(backend, spec, Pass::backward);  // flash_sm90's takes no cu_seqlens yet
    s.return_lse = true;
    Case c = testing::make_case(s, Device::cuda(0), 4343);
    c.opts.check_seqlens = false;
    testing::run_forced(c, backend);
    ATTN_CUDA_OK(cudaDeviceSynchronize());
    testing::expect_matches_reference(c);
  }
}

// cu_seqlens may be strided views (a column of a [batch + 1, 2] table): every
// backend reads entry b at b * stride, checked or not.
TEST(UncheckedSeqlens, StridedViewsGiveTheReferenceAnswer) {
  ATTN_REQUIRE_GPU();
  const CaseSpec spec = packed_spec();
  for (const std::string& backend : testing::gpu_backends()) {
    if (!testing::claims(backend, spec, Pass::forward)) continue;
    for (bool check : {true, false}) {
      SCOPED_TRACE(backend + (check ? ", checked" : ", unchecked"));
      CaseSpec s = spec;
      s.backward = testing::claims(backend, spec, Pass::backward);  // flash_sm90's takes no cu_seqlens yet
      s.return_lse = true;
      Case c = testing::make_case(s, Device::cuda(0), 4444);
      // Interleave the offsets with junk that a unit-stride read would take.
      const std::vector<double> cu = c.cu_seqlens_q.to(Device::cpu()).to_doubles();
      std::vector<int32_t> table;
      for (double x : cu) table.insert(table.end(), {static_cast<int32_t>(x), -777});
      testing::TensorBuffer strided(DType::i32, {static_cast<int64_t>(table.size())}, Device::cuda(0));
      strided.copy_from_bytes(table.data(), table.size() * sizeof(int32_t));
      TensorView view = strided.view();
      view.shape[0] = static_cast<int64_t>(cu.size());
      view.strides_elems[0] = 2;
      c.fwd.in.cu_seqlens_q = c.fwd.in.cu_seqlens_kv = view;
      c.bwd.in.cu_seqlens_q = c.bwd.in.cu_seqlens_kv = view;
      c.opts.check_seqlens = check;
      testing::run_forced(c, backend);
      ATTN_CUDA_OK(cudaDeviceSynchronize());
      testing::expect_matches_reference(c);
    }
  }
}

}  // namespace
}  // namespace attn
