// Device scratch memory for one call: the caller's (RunContext::workspace or
// workspace_allocator), else a pool kept per (device, stream), so calls do not
// cudaMalloc each time. Calls on one stream use its block in turn (stream
// order); calls on different streams never share a block, so two streams
// running attention at once cannot overwrite each other's scratch memory.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <thread>

#include "attn/backend.h"

namespace attn::detail {

// At least `bytes` (> 0) of device memory on `device` for the call's work on
// ctx.stream:
// - ctx.workspace when given (an attn::Error names the bytes when it is too
//   small or not 256-byte aligned);
// - else ctx.workspace_allocator's memory when given;
// - else the pool's block for (device, ctx.stream), valid until the next call
//   for the same device and stream with a larger size, or until calls on 4
//   other streams of the device have come after it: a device keeps at most 4
//   blocks (a block can be as large as the unfused backend's score matrices),
//   and a fifth stream's first call frees the least recently used one once the
//   device is idle. Growing waits for the stream's queued work first. (Host
//   threads that drive more than 4 streams of one device at once could see a
//   block freed between taking it and queuing work on it: not supported.)
//   While ctx.stream is capturing a CUDA graph the pool neither allocates nor
//   waits: a block large enough is used (and kept for good, since the graph
//   may replay at any time), a missing or smaller one is an attn::Error that
//   says how to size it first. Out of device memory is an attn::Error naming
//   the bytes; the pool stays usable.
void* workspace(const RunContext& ctx, int device, int64_t bytes);

// Whether `stream` (a cudaStream_t) is capturing a CUDA graph. A query that
// fails (the legacy stream while another stream captures in global mode)
// counts as capturing: nothing may allocate or wait then either.
bool stream_is_capturing(void* stream);

// The cache behind workspace(), apart from CUDA so that the CPU tests can
// check it with a fake Memory.
class WorkspaceCache {
 public:
  // How blocks are made and given back.
  struct Memory {
    virtual ~Memory() = default;
    virtual void* allocate(int device, int64_t bytes) = 0;
    virtual void release(int device, void* ptr) = 0;
    virtual void wait_stream(int device, void* stream) = 0;  // its queued work is done
    virtual void wait_device(int device) = 0;                // all its queued work is done
  };
  // The per-thread default stream (cudaStreamPerThread) is one handle for
  // every host thread but a different stream in each: its blocks are kept
  // per thread.
  WorkspaceCache(Memory& memory, const void* per_thread_stream, int max_blocks_per_device = 4)
      : memory_(memory), per_thread_stream_(per_thread_stream), max_blocks_(max_blocks_per_device) {}
  WorkspaceCache(const WorkspaceCache&) = delete;
  WorkspaceCache& operator=(const WorkspaceCache&) = delete;

  // See workspace(); `capturing`: the stream is capturing a CUDA graph.
  void* get(int device, void* stream, int64_t bytes, bool capturing = false);
  int blocks() const;       // blocks serving streams
  int kept_blocks() const;  // blocks a graph captured that no stream serves any more

 private:
  struct Block {
    int device;
    void* stream;
    std::thread::id thread;  // for the per-thread default stream only
    void* ptr;
    int64_t bytes;
    bool captured = false;  // a CUDA graph holds its address: never freed
  };
  // Frees a block no stream will use again, or keeps it when a graph holds it.
  void retire(const Block& b);

  Memory& memory_;
  const void* per_thread_stream_;
  int max_blocks_;
  mutable std::mutex mutex_;
  std::list<Block> blocks_;  // most recently used first
  std::list<Block> kept_;    // captured blocks replaced by larger ones
};

// Cuts one workspace block into 256-byte-aligned pieces, in order. With a null
// base it only counts: run the same takes once to size the block, once to use it.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* take(int64_t count) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (count * static_cast<int64_t>(sizeof(T)) + 255) / 256 * 256;
    return p;
  }
  void* take_bytes(int64_t bytes) { return take<char>(bytes); }
  int64_t used() const { return used_; }

 private:
  char* base_;
  int64_t used_ = 0;
};

}  // namespace attn::detail
