// The cached device workspace (see workspace.h).
#include "core/workspace.h"

#include <cuda_runtime.h>

#include "core/cuda_check.h"

namespace attn::detail {

void* WorkspaceCache::get(int device, void* stream, int64_t bytes) {
  const std::thread::id thread = stream == per_thread_stream_ ? std::this_thread::get_id() : std::thread::id();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.begin();
  while (it != blocks_.end() && !(it->device == device && it->stream == stream && it->thread == thread)) ++it;
  if (it != blocks_.end()) {
    blocks_.splice(blocks_.begin(), blocks_, it);  // most recently used first
    Block& b = blocks_.front();
    if (b.bytes >= bytes) return b.ptr;
    // Growing: the stream's queued work may still use the old block.
    memory_.wait_stream(device, stream);
    memory_.release(device, b.ptr);
    blocks_.pop_front();
  } else {
    // A new stream: past the cap, the device's least recently used block
    // goes, once the device is idle (its stream may be gone by now).
    int on_device = 0;
    auto oldest = blocks_.end();
    for (auto b = blocks_.begin(); b != blocks_.end(); ++b)
      if (b->device == device) {
        ++on_device;
        oldest = b;
      }
    if (on_device >= max_blocks_) {
      memory_.wait_device(device);
      memory_.release(device, oldest->ptr);
      blocks_.erase(oldest);
    }
  }
  // Headroom, so that slowly growing problems do not reallocate each call.
  const int64_t size = bytes + bytes / 8 + (int64_t{1} << 20);
  void* ptr = memory_.allocate(device, size);
  blocks_.push_front(Block{device, stream, thread, ptr, size});
  return ptr;
}

int WorkspaceCache::blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(blocks_.size());
}

namespace {

struct CudaMemory final : WorkspaceCache::Memory {
  void* allocate(int device, int64_t bytes) override {
    ATTN_CUDA(cudaSetDevice(device));
    void* ptr = nullptr;
    ATTN_CUDA(cudaMalloc(&ptr, static_cast<size_t>(bytes)));
    return ptr;
  }
  void release(int device, void* ptr) override {
    ATTN_CUDA(cudaSetDevice(device));
    ATTN_CUDA(cudaFree(ptr));
  }
  void wait_stream(int device, void* stream) override {
    ATTN_CUDA(cudaSetDevice(device));
    ATTN_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  }
  void wait_device(int device) override {
    ATTN_CUDA(cudaSetDevice(device));
    ATTN_CUDA(cudaDeviceSynchronize());
  }
};

}  // namespace

void* workspace(int device, void* stream, int64_t bytes) {
  static CudaMemory memory;
  static WorkspaceCache cache(memory, static_cast<const void*>(cudaStreamPerThread));
  return cache.get(device, stream, bytes);
}

}  // namespace attn::detail
