// DLPack arrays (NumPy, PyTorch, JAX, CuPy via nanobind's ndarray) to
// attn::TensorView, without copies: pointer, dtype, shape, strides in elements
// and device are read from the DLPack header as they are.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <string>
#include <vector>

#include "attn/tensor.h"

namespace attn::python {

// Read-only inputs (JAX arrays and broadcast NumPy views are read-only) and
// writable outputs. Any dtype, rank and device: attn's validation judges them.
using InArray = nanobind::ndarray<nanobind::ro>;
using OutArray = nanobind::ndarray<>;

// `name` appears in errors ("q has an unsupported dtype ...").
TensorView to_view(const InArray& a, const char* name);
TensorView to_view(const OutArray& a, const char* name);
TensorView to_view(const std::optional<InArray>& a, const char* name);
TensorView to_view(const std::optional<OutArray>& a, const char* name);

// A tensor given only by its shape and dtype name ("bfloat16", "float32", ...):
// what `explain` needs when there are no tensors. The view has no data.
TensorView spec_view(const std::vector<int64_t>& shape, const std::string& dtype, Device device);

// "bfloat16" -> DType::bf16; throws attn::Error(type) for an unknown name.
DType parse_dtype(const std::string& name);

}  // namespace attn::python
