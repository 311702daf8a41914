// Device scratch memory for a call: the caller's, or the cached pool (see workspace.h).
#include "core/workspace.h"

#include <cuda_runtime.h>

#include <string>

#include "attn/error.h"
#include "core/cuda_check.h"

namespace attn::detail {
namespace {

std::string bytes_text(int64_t bytes) { return std::to_string(bytes) + " bytes"; }

[[noreturn]] void no_block_under_capture(int64_t bytes, int64_t have) {
  fail(ErrorKind::value,
       "attn's workspace pool has no block of " + bytes_text(bytes) +
           " for this stream, and the stream is capturing a CUDA graph (allocating now would break the capture)",
       have > 0 ? "the stream's block holds " + bytes_text(have) : "no block for this stream yet",
       "a block sized before capture, or the caller's workspace",
       "run the same call once on this stream before capturing (the pool keeps its block), or pass "
       "RunContext::workspace with attn::forward_workspace_size() / backward_workspace_size() bytes; from "
       "Python, PyTorch tensors take their workspace from PyTorch's allocator, which knows about capture");
}

}  // namespace

void WorkspaceCache::retire(const Block& b) {
  if (b.captured)
    kept_.push_back(b);
  else
    memory_.release(b.device, b.ptr);
}

void* WorkspaceCache::get(int device, void* stream, int64_t bytes, bool capturing) {
  const std::thread::id thread = stream == per_thread_stream_ ? std::this_thread::get_id() : std::thread::id();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.begin();
  while (it != blocks_.end() && !(it->device == device && it->stream == stream && it->thread == thread)) ++it;
  if (it != blocks_.end()) {
    blocks_.splice(blocks_.begin(), blocks_, it);  // most recently used first
    Block& b = blocks_.front();
    if (b.bytes >= bytes) {
      b.captured = b.captured || capturing;
      return b.ptr;
    }
    if (capturing) no_block_under_capture(bytes, b.bytes);
    // Growing: the stream's queued work may still use the old block.
    memory_.wait_stream(device, stream);
    retire(b);
    blocks_.pop_front();
  } else {
    if (capturing) no_block_under_capture(bytes, 0);
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
      retire(*oldest);
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

int WorkspaceCache::kept_blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(kept_.size());
}

namespace {

struct CudaMemory final : WorkspaceCache::Memory {
  void* allocate(int device, int64_t bytes) override {
    ATTN_CUDA(cudaSetDevice(device));
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, static_cast<size_t>(bytes));
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: later calls must not see it
      size_t free_bytes = 0, total_bytes = 0;
      (void)cudaMemGetInfo(&free_bytes, &total_bytes);
      fail(ErrorKind::runtime, "out of device memory: attn's workspace needs " + bytes_text(bytes) + " on cuda:" +
                                   std::to_string(device),
           bytes_text(static_cast<int64_t>(free_bytes)) + " free of " + bytes_text(static_cast<int64_t>(total_bytes)),
           "at least " + bytes_text(bytes) + " free",
           "free device memory (smaller batches or other tensors), or pass RunContext::workspace from memory "
           "you own; the next call with enough memory works");
    }
    ATTN_CUDA(err);
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

void* callers_workspace(const RunContext& ctx, int64_t bytes) {
  if (ctx.workspace_bytes < bytes)
    fail(ErrorKind::value, "the workspace passed in RunContext is too small",
         bytes_text(ctx.workspace_bytes), "at least " + bytes_text(bytes),
         "size it with attn::forward_workspace_size() / backward_workspace_size() for the same call");
  if (reinterpret_cast<uintptr_t>(ctx.workspace) % 256 != 0)
    fail(ErrorKind::value, "the workspace passed in RunContext is not 256-byte aligned",
         "address " + std::to_string(reinterpret_cast<uintptr_t>(ctx.workspace)), "a multiple of 256",
         "pass the start of an allocation (cudaMalloc and framework allocators align to 256 or more)");
  return ctx.workspace;
}

void* allocated_workspace(const RunContext& ctx, int64_t bytes) {
  void* ptr = ctx.workspace_allocator(bytes);
  if (!ptr)
    fail(ErrorKind::runtime, "the workspace allocator in RunContext returned no memory",
         "null for " + bytes_text(bytes), "device memory of " + bytes_text(bytes),
         "free device memory, or pass RunContext::workspace");
  if (reinterpret_cast<uintptr_t>(ptr) % 256 != 0)
    fail(ErrorKind::value, "the workspace allocator in RunContext returned memory that is not 256-byte aligned",
         "address " + std::to_string(reinterpret_cast<uintptr_t>(ptr)), "a multiple of 256",
         "return the start of an allocation");
  return ptr;
}

}  // namespace

bool stream_is_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

void* workspace(const RunContext& ctx, int device, int64_t bytes) {
  if (bytes <= 0) return nullptr;
  if (ctx.workspace) return callers_workspace(ctx, bytes);
  if (ctx.workspace_allocator) return allocated_workspace(ctx, bytes);
  static CudaMemory memory;
  static WorkspaceCache cache(memory, static_cast<const void*>(cudaStreamPerThread));
  return cache.get(device, ctx.stream, bytes, stream_is_capturing(ctx.stream));
}

}  // namespace attn::detail
