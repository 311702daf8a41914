// Owning tensors for tools and tests (see tensor_buffer.h).
#include "testing/tensor_buffer.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "attn/error.h"
#include "core/numeric.h"

namespace attn::testing {
namespace {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    fail(ErrorKind::runtime, std::string(what) + " failed", cudaGetErrorString(err), "cudaSuccess",
         "check that a CUDA device is present and has free memory");
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

TensorBuffer::TensorBuffer(DType dtype, std::vector<int64_t> shape, Device device)
    : shape_(std::move(shape)) {
  int64_t n = 1;
  size_t bytes = 0;
  bool overflow = false;
  for (int64_t s : shape_) overflow = overflow || __builtin_mul_overflow(n, s, &n);
  overflow =
      overflow || __builtin_mul_overflow(static_cast<size_t>(std::max<int64_t>(n, 1)), dtype_size_bytes(dtype), &bytes);
  if (overflow)
    fail(ErrorKind::value, "a tensor's size in bytes exceeds 64 bits", shape_text(shape_) + " of " + dtype_name(dtype),
         "a tensor that fits in memory", "shrink the problem");
  void* ptr = nullptr;
  if (device.is_cuda()) {
    check_cuda(cudaSetDevice(device.index), "cudaSetDevice");
    check_cuda(cudaMalloc(&ptr, bytes), "cudaMalloc");
    storage_ = std::shared_ptr<void>(ptr, [](void* p) { cudaFree(p); });
  } else {
    ptr = std::malloc(bytes);
    // An attn::Error rather than std::bad_alloc, so callers can report the size.
    if (!ptr)
      fail(ErrorKind::runtime, "out of host memory for a tensor",
           std::to_string(bytes) + " bytes for " + shape_text(shape_) + " of " + dtype_name(dtype),
           "an allocation that fits in free memory", "shrink the problem (batch, sequence length, heads or head dim)");
    storage_ = std::shared_ptr<void>(ptr, [](void* p) { std::free(p); });
  }
  view_ = make_view(ptr, dtype, static_cast<int>(shape_.size()), shape_.data(), nullptr, device);
}

void TensorBuffer::copy_from_bytes(const void* src, size_t n) {
  if (view_.device.is_cuda()) {
    check_cuda(cudaMemcpy(data(), src, n, cudaMemcpyHostToDevice), "cudaMemcpy to device");
    // From pageable memory cudaMemcpy may return before its DMA has landed,
    // and work on a non-blocking stream is not ordered after it: a graph
    // replayed right after poison_outputs had its dV overwritten by the NaN
    // fill. The bytes are on the device when this returns.
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize after a copy to the device");
  } else if (n > 0)  // an empty tensor's source may be null, which memcpy may not be given
    std::memcpy(data(), src, n);
}

void TensorBuffer::copy_from(const std::vector<double>& values) {
  std::vector<unsigned char> host(bytes());
  for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < numel(); ++i)
    detail::store_from_double(host.data(), view_.dtype, static_cast<int64_t>(i), values[i]);
  copy_from_bytes(host.data(), host.size());
}

std::vector<unsigned char> TensorBuffer::host_bytes() const {
  std::vector<unsigned char> host(bytes());
  if (view_.device.is_cuda())
    check_cuda(cudaMemcpy(host.data(), data(), host.size(), cudaMemcpyDeviceToHost),
               "cudaMemcpy to host");
  else if (!host.empty())
    std::memcpy(host.data(), data(), host.size());
  return host;
}

std::vector<double> TensorBuffer::to_doubles() const {
  const std::vector<unsigned char> host = host_bytes();
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = detail::load_as_double(host.data(), view_.dtype, i);
  return out;
}

void TensorBuffer::fill_uniform(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> values(static_cast<size_t>(numel()));
  for (double& x : values) x = dist(rng);
  copy_from(values);
}

void TensorBuffer::fill_nan() {
  copy_from(std::vector<double>(static_cast<size_t>(numel()), std::numeric_limits<double>::quiet_NaN()));
}

void TensorBuffer::fill_zero() { copy_from(std::vector<double>(static_cast<size_t>(numel()), 0.0)); }

TensorBuffer TensorBuffer::to(Device device) const {
  TensorBuffer copy(view_.dtype, shape_, device);
  const std::vector<unsigned char> host = host_bytes();
  copy.copy_from_bytes(host.data(), host.size());
  return copy;
}

}  // namespace attn::testing
