// Device workspace from a cache that grows and is kept per device, so calls do
// not cudaMalloc each time. Stream-ordered use: one buffer serves calls in turn.
#pragma once

#include <cstdint>

namespace attn::detail {

// At least `bytes` of device memory on `device`, valid until the next call for
// this device with a larger size. Synchronizes the device when it must grow.
void* workspace(int device, int64_t bytes);

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
