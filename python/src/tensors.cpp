// DLPack -> TensorView. The only place that reads DLPack's dtype and device codes.
#include "tensors.h"

#include <string>

#include "attn/error.h"

namespace nb = nanobind;

namespace attn::python {
namespace {

namespace dl = nb::dlpack;

std::string dtype_label(dl::dtype t) {
  std::string kind;
  switch (static_cast<dl::dtype_code>(t.code)) {
    case dl::dtype_code::Int: kind = "int"; break;
    case dl::dtype_code::UInt: kind = "uint"; break;
    case dl::dtype_code::Float: kind = "float"; break;
    case dl::dtype_code::Bfloat: kind = "bfloat"; break;
    case dl::dtype_code::Complex: kind = "complex"; break;
    case dl::dtype_code::Bool: kind = "bool"; break;
    default: kind = "dlpack-code-" + std::to_string(t.code) + "-bits-"; break;
  }
  std::string s = kind + std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

DType to_dtype(dl::dtype t, const char* name) {
  if (t.lanes == 1) {
    switch (static_cast<dl::dtype_code>(t.code)) {
      case dl::dtype_code::Float:
        if (t.bits == 16) return DType::f16;
        if (t.bits == 32) return DType::f32;
        if (t.bits == 64) return DType::f64;
        break;
      case dl::dtype_code::Bfloat:
        if (t.bits == 16) return DType::bf16;
        break;
      case dl::dtype_code::Int:
        if (t.bits == 32) return DType::i32;
        if (t.bits == 64) return DType::i64;
        break;
      case dl::dtype_code::UInt:
        if (t.bits == 8) return DType::u8;
        break;
      case dl::dtype_code::Bool:
        if (t.bits == 8) return DType::boolean;
        break;
      default: break;
    }
  }
  fail(ErrorKind::type, std::string(name) + " has a dtype attn does not take", dtype_label(t),
       "bfloat16, float16, float32 or float64 for q/k/v and their outputs; int32 for cu_seqlens; "
       "bool/uint8 or floating for attn_mask",
       std::string("convert ") + name + " to one of those dtypes");
}

Device to_device(int type, int id, const char* name) {
  switch (type) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value:  // pinned host memory: host-addressable
      return Device::cpu();
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value:
      return Device::cuda(id);
    default: break;
  }
  fail(ErrorKind::type, std::string(name) + " lives on a device attn does not run on",
       "DLPack device type " + std::to_string(type) + " (id " + std::to_string(id) + ")",
       "host memory (CPU) or a CUDA device",
       std::string("move ") + name + " to the CPU or to a CUDA GPU");
}

template <typename Array>
TensorView view_of(const Array& a, const char* name) {
  const int rank = static_cast<int>(a.ndim());
  if (rank < 1 || rank > kMaxRank)
    fail(ErrorKind::value, std::string(name) + " has an unsupported rank", std::to_string(rank),
         "1 to " + std::to_string(kMaxRank) + " dimensions",
         std::string("reshape ") + name + " (q, k, v are [batch, seq, heads, head_dim] or [tokens, heads, head_dim])");
  const DType dtype = to_dtype(a.dtype(), name);
  const Device device = to_device(a.device_type(), a.device_id(), name);
  // nanobind reports strides in elements (DLPack's unit), as TensorView wants.
  // An empty array's strides are arbitrary (NumPy exports 0s); nothing is read
  // through them, so call it contiguous rather than fail the last-dim check.
  bool empty = false;
  for (int i = 0; i < rank; ++i) empty = empty || a.shape_ptr()[i] == 0;
  return make_view(const_cast<void*>(static_cast<const void*>(a.data())), dtype, rank, a.shape_ptr(),
                   empty ? nullptr : a.stride_ptr(), device);
}

}  // namespace

TensorView to_view(const InArray& a, const char* name) { return view_of(a, name); }
TensorView to_view(const OutArray& a, const char* name) { return view_of(a, name); }
TensorView to_view(const std::optional<InArray>& a, const char* name) {
  return a ? view_of(*a, name) : TensorView{};
}
TensorView to_view(const std::optional<OutArray>& a, const char* name) {
  return a ? view_of(*a, name) : TensorView{};
}

DType parse_dtype(const std::string& s) {
  struct Alias {
    const char* name;
    DType dtype;
  };
  static const Alias kAliases[] = {
      {"bfloat16", DType::bf16}, {"bf16", DType::bf16},     {"float16", DType::f16},
      {"fp16", DType::f16},      {"half", DType::f16},      {"float32", DType::f32},
      {"fp32", DType::f32},      {"float", DType::f32},     {"float64", DType::f64},
      {"fp64", DType::f64},      {"double", DType::f64},    {"int32", DType::i32},
      {"int64", DType::i64},     {"uint8", DType::u8},      {"bool", DType::boolean},
  };
  for (const Alias& a : kAliases)
    if (s == a.name) return a.dtype;
  fail(ErrorKind::type, "unknown dtype name", s, "bfloat16, float16, float32, float64 (or bf16, fp16, fp32, fp64)",
       "name one of those dtypes");
}

TensorView spec_view(const std::vector<int64_t>& shape, const std::string& dtype, Device device) {
  // make_view checks the rank; a spec has no data (validation never reads q/k/v).
  return make_view(nullptr, parse_dtype(dtype), static_cast<int>(shape.size()), shape.data(), nullptr,
                   device);
}

}  // namespace attn::python
