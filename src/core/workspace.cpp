// The cached device workspace (see workspace.h).
#include "core/workspace.h"

#include <map>
#include <mutex>

#include "core/cuda_check.h"

namespace attn::detail {

void* workspace(int device, int64_t bytes) {
  struct Block {
    void* ptr = nullptr;
    int64_t bytes = 0;
  };
  static std::mutex mutex;
  static std::map<int, Block> blocks;
  std::lock_guard<std::mutex> lock(mutex);
  Block& b = blocks[device];
  if (b.bytes >= bytes) return b.ptr;
  // Growing: wait for work that may still use the old block, then replace it
  // with some headroom so slowly growing problems do not reallocate each call.
  ATTN_CUDA(cudaDeviceSynchronize());
  if (b.ptr) ATTN_CUDA(cudaFree(b.ptr));
  b.ptr = nullptr;
  b.bytes = 0;
  const int64_t size = bytes + bytes / 8 + (int64_t{1} << 20);
  ATTN_CUDA(cudaMalloc(&b.ptr, static_cast<size_t>(size)));
  b.bytes = size;
  return b.ptr;
}

}  // namespace attn::detail
