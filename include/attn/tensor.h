// Strided tensor views: the only way tensors enter attn. A view owns nothing;
// it names a caller's memory by pointer, dtype, shape and strides (in elements).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace attn {

enum class DType : uint8_t { f32, f16, bf16, f64, i32, i64, u8, boolean };

const char* dtype_name(DType t);
size_t dtype_size_bytes(DType t);
bool is_floating(DType t);

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device cpu() { return {DeviceKind::cpu, 0}; }
  static Device cuda(int index) { return {DeviceKind::cuda, index}; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  friend bool operator==(const Device&, const Device&) = default;
};

std::string device_name(const Device& d);  // "cpu", "cuda:0"

inline constexpr int kMaxRank = 6;

// A view of an n-dimensional array. An absent optional tensor has data == nullptr
// and rank == 0; `defined()` tells the two apart from a real 0-d tensor, which
// attn never takes.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides_elems{};
  Device device{};

  bool defined() const { return rank > 0; }
  int64_t numel() const;
  int64_t size(int dim) const { return shape[dim < 0 ? dim + rank : dim]; }
  int64_t stride(int dim) const { return strides_elems[dim < 0 ? dim + rank : dim]; }
  bool is_contiguous() const;
  std::string shape_str() const;  // "[2, 128, 16, 64]"

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Builds a view; strides default to row-major contiguous.
TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                     Device device = Device::cpu());
TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                     std::initializer_list<int64_t> strides_elems, Device device = Device::cpu());
TensorView make_view(void* data, DType dtype, int rank, const int64_t* shape,
                     const int64_t* strides_elems /* nullable: contiguous */, Device device);

}  // namespace attn
