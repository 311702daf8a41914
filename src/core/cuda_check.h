// Turns a failed CUDA runtime / cuBLAS call into attn::Error(runtime) naming
// the call, so no failure passes silently.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "attn/error.h"

namespace attn::detail {

inline void cuda_check(cudaError_t err, const char* call) {
  if (err != cudaSuccess)
    fail(ErrorKind::runtime, std::string(call) + " failed", cudaGetErrorString(err), "cudaSuccess",
         "check the device and the tensors' memory (compute-sanitizer finds bad pointers)");
}

}  // namespace attn::detail

#define ATTN_CUDA(call) ::attn::detail::cuda_check((call), #call)
