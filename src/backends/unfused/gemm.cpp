// cuBLAS batched products for the unfused backend (see gemm.h).
#include "backends/unfused/gemm.h"

#include <cublas_v2.h>

#include <map>
#include <string>

#include "attn/error.h"

namespace attn::unfused {
namespace {

void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail(ErrorKind::runtime, std::string("cuBLAS ") + what + " failed", cublasGetStatusString(s),
         "CUBLAS_STATUS_SUCCESS", "report this with `attn check` output; ATTN_DISABLE=unfused avoids this backend");
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

// cuBLAS handles are not thread-safe: one per (thread, device), destroyed
// when the thread ends (a handle holds device memory).
struct ThreadHandles {
  std::map<int, cublasHandle_t> by_device;
  ~ThreadHandles() {
    for (const auto& [device, h] : by_device) cublasDestroy(h);
  }
};

cublasHandle_t handle_for(int device) {
  thread_local ThreadHandles handles;
  auto it = handles.by_device.find(device);
  if (it != handles.by_device.end()) return it->second;
  cublasHandle_t h = nullptr;
  cublas_check(cublasCreate(&h), "cublasCreate");
  handles.by_device[device] = h;
  return h;
}

}  // namespace

void run_gemm(const BatchedGemm& g, int device, void* stream) {
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;
  cublasHandle_t h = handle_for(device);
  cublas_check(cublasSetStream(h, static_cast<cudaStream_t>(stream)), "cublasSetStream");
  cublas_check(cublasGemmBatchedEx(h, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   g.m, g.n, g.k, &g.alpha, g.a, cuda_type(g.a_type), static_cast<int>(g.lda), g.b,
                                   cuda_type(g.b_type), static_cast<int>(g.ldb), &g.beta, g.c, cuda_type(g.c_type),
                                   static_cast<int>(g.ldc), g.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmBatchedEx");  // COMPUTE_32F: fp32 inputs stay fp32 (no TF32)
}

}  // namespace attn::unfused
