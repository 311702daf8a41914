// Programmatic dependent launch (sm_90): a kernel launched with
// launch_dependent() may start while the kernel before it in the stream
// still runs, so its launch and set-up hide under that kernel's tail. It
// calls wait_for_prior_grid() before it reads what that kernel writes or
// writes what it reads (the wait returns once that grid has finished and
// its writes are visible; at once for an ordinary launch); the kernel
// before calls allow_dependent_launch() where the next may start. Before
// sm_90 both are no-ops. Launches of this kind are captured into CUDA
// graphs as programmatic edges.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/cuda_check.h"

namespace attn::kernels {

__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), early when `early` (the
// device is sm_90 or newer, and the kernel waits where it must).
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool early,
                      Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = early ? 1 : 0;
  ATTN_CUDA(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace attn::kernels
