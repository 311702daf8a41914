// Owning tensors for tools and tests: storage on the host or a CUDA device plus
// a contiguous TensorView over it, random fills, poison, and host copies.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "attn/tensor.h"

namespace attn::testing {

class TensorBuffer {
 public:
  TensorBuffer() = default;
  // Contiguous, uninitialized storage of `shape` on `device`.
  TensorBuffer(DType dtype, std::vector<int64_t> shape, Device device = Device::cpu());

  const TensorView& view() const { return view_; }
  void* data() const { return view_.data; }
  int64_t numel() const { return view_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size_bytes(view_.dtype); }
  const std::vector<int64_t>& shape() const { return shape_; }

  // Fills with values uniform in [lo, hi) rounded to the dtype (floating types).
  void fill_uniform(std::mt19937_64& rng, double lo, double hi);
  // Fills every element with NaN (floating) so unwritten outputs are detected.
  void fill_nan();
  void fill_zero();
  // Copies host values into the buffer (same numel; dtype conversion from double).
  void copy_from(const std::vector<double>& values);
  // The buffer's values as doubles, read back from wherever the buffer lives.
  std::vector<double> to_doubles() const;
  // Raw bytes from a host vector of the buffer's dtype (e.g. int32 cu_seqlens).
  void copy_from_bytes(const void* src, size_t bytes);
  // The raw bytes, copied to the host.
  std::vector<unsigned char> host_bytes() const;
  // A copy of this buffer on another device.
  TensorBuffer to(Device device) const;

 private:
  std::vector<int64_t> shape_;
  std::shared_ptr<void> storage_;
  TensorView view_{};
};

}  // namespace attn::testing
