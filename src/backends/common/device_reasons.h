// The verdict parts every GPU backend shares: the tensors must be on a CUDA
// device, and the device one this build has kernels for (sm_8x via sm_80 code,
// sm_90 via sm_90a code).
#pragma once

#include <string>
#include <vector>

#include "attn/backend.h"

namespace attn::detail {

// Empty when p's tensors are on CUDA and dev is sm_8x or sm_90; otherwise the
// reasons (a host device stops there: no further reason would mean anything).
std::vector<std::string> gpu_device_reasons(const Problem& p, const DeviceInfo& dev);

}  // namespace attn::detail
