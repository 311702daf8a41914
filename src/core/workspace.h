// Device workspace from a cache that grows and is kept per device, so calls do
// not cudaMalloc each time. Stream-ordered use: one buffer serves calls in turn.
#pragma once

#include <cstdint>

namespace attn::detail {

// At least `bytes` of device memory on `device`, valid until the next call for
// this device with a larger size. Synchronizes the device when it must grow.
void* workspace(int device, int64_t bytes);

}  // namespace attn::detail
