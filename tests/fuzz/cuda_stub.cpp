// The few CUDA runtime calls the fuzzed host code links against
// (src/core/sequences.cpp reads cu_seqlens from a device), answered as on a
// machine without a GPU: the fuzz build needs neither the runtime nor a GPU,
// and a tensor the fuzzer places on cuda:N gets validation's runtime error.
#include <cuda_runtime_api.h>

extern "C" {

const char* CUDARTAPI cudaGetErrorString(cudaError_t) { return "no CUDA-capable device is detected (fuzz build)"; }
cudaError_t CUDARTAPI cudaSetDevice(int) { return cudaErrorNoDevice; }
cudaError_t CUDARTAPI cudaDeviceSynchronize(void) { return cudaErrorNoDevice; }
cudaError_t CUDARTAPI cudaMallocHost(void**, size_t) { return cudaErrorNoDevice; }
cudaError_t CUDARTAPI cudaFreeHost(void*) { return cudaErrorNoDevice; }
cudaError_t CUDARTAPI cudaMemcpyAsync(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t) {
  return cudaErrorNoDevice;
}
cudaError_t CUDARTAPI cudaMemcpy2DAsync(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind,
                                        cudaStream_t) {
  return cudaErrorNoDevice;
}
cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t) { return cudaErrorNoDevice; }

}  // extern "C"
