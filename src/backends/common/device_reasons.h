// The verdict parts GPU backends share: the tensors must be on a CUDA device,
// and the device one this build has kernels for (sm_8x via sm_80 code, sm_90
// via sm_90a code); rows aligned for 16-byte moves.
#pragma once

#include <string>
#include <vector>

#include "attn/backend.h"

namespace attn::detail {

// Empty when p's tensors are on CUDA and dev is sm_8x or sm_90; otherwise the
// reasons (a host device stops there: no further reason would mean anything).
std::vector<std::string> gpu_device_reasons(const Problem& p, const DeviceInfo& dev);

// Backends that move rows in 16-byte pieces (TMA, cp.async, cuDNN's pointer
// checks) need Problem::row_alignment_bytes == 16: the reason naming
// `backend` where the rows are aligned to less, else empty.
std::string row_alignment_reason(const Problem& p, const char* backend);

}  // namespace attn::detail
