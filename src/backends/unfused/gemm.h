// Batched matrix products through cuBLAS (column-major, pointer arrays so any
// head mapping and stride works), with one cached handle per device and thread.
#pragma once

#include "attn/tensor.h"

namespace attn::unfused {

struct BatchedGemm {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  float alpha = 1.f, beta = 0.f;
  DType a_type = DType::bf16, b_type = DType::bf16, c_type = DType::f32;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int batch = 0;
  const void* const* a = nullptr;  // device arrays of `batch` pointers
  const void* const* b = nullptr;
  void* const* c = nullptr;
};

void run_gemm(const BatchedGemm& g, int device, void* stream);

}  // namespace attn::unfused
