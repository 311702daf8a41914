// Validation reads cu_seqlens back from the device (detail::read_int32_pair):
// both arrays with one wait, one copy when they are the same view, strided
// views element by element. Wrong values read from device memory give the same
// errors as from host memory.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/sequences.h"
#include "gpu/gpu_test_util.h"

namespace attn {
namespace {

// A device buffer of int32 values, freed with the test.
struct DeviceInts {
  int32_t* ptr = nullptr;
  explicit DeviceInts(const std::vector<int32_t>& v) {
    EXPECT_EQ(cudaMalloc(&ptr, v.size() * sizeof(int32_t)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceInts() { cudaFree(ptr); }
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;
  // A 1-d view of n elements, every `stride`-th from element `first`.
  TensorView view(int64_t n, int64_t stride = 1, int64_t first = 0) const {
    TensorView t;
    t.data = ptr + first;
    t.dtype = DType::i32;
    t.rank = 1;
    t.shape[0] = n;
    t.strides_elems[0] = stride;
    t.device = Device::cuda(0);
    return t;
  }
};

TEST(ReadSeqlens, TwoArraysOneWait) {
  ATTN_REQUIRE_GPU();
  const DeviceInts q({0, 3, 3, 10}), kv({0, 5, 9, 12});
  const detail::Int32Pair r = detail::read_int32_pair(q.view(4), kv.view(4));
  EXPECT_EQ(r.first, (std::vector<int32_t>{0, 3, 3, 10}));
  EXPECT_EQ(r.second, (std::vector<int32_t>{0, 5, 9, 12}));
}

TEST(ReadSeqlens, SameViewReadOnce) {
  ATTN_REQUIRE_GPU();
  const DeviceInts cu({0, 7, 8, 20});
  const detail::Int32Pair r = detail::read_int32_pair(cu.view(4), cu.view(4));
  EXPECT_EQ(r.first, (std::vector<int32_t>{0, 7, 8, 20}));
  EXPECT_EQ(r.second, r.first);
}

TEST(ReadSeqlens, StridedAndOffsetViews) {
  ATTN_REQUIRE_GPU();
  // One buffer holding two interleaved arrays (a [batch + 1, 2] table's columns).
  const DeviceInts table({0, 0, 4, 6, 9, 6, 15, 11});
  const detail::Int32Pair r = detail::read_int32_pair(table.view(4, 2, 0), table.view(4, 2, 1));
  EXPECT_EQ(r.first, (std::vector<int32_t>{0, 4, 9, 15}));
  EXPECT_EQ(r.second, (std::vector<int32_t>{0, 6, 6, 11}));
  // The same pointer with another stride is another view.
  const detail::Int32Pair s = detail::read_int32_pair(table.view(4, 2, 0), table.view(4, 1, 0));
  EXPECT_EQ(s.second, (std::vector<int32_t>{0, 0, 4, 6}));
}

TEST(ReadSeqlens, LargerThanTheFirstStagingBuffer) {
  ATTN_REQUIRE_GPU();
  std::vector<int32_t> a(3000), b(2500);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>(2 * i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int32_t>(3 * i);
  const DeviceInts da(a), db(b);
  const detail::Int32Pair r = detail::read_int32_pair(da.view(3000), db.view(2500));
  EXPECT_EQ(r.first, a);
  EXPECT_EQ(r.second, b);
  EXPECT_EQ(detail::read_int32(da.view(3, 1000)), (std::vector<int32_t>{0, 2000, 4000}));
}

}  // namespace
}  // namespace attn
