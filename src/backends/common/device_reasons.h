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

// What the flash kernels' parameter struct (flash_sm80's FwdParams, which
// flash_sm90 shares) cannot describe: dtypes other than bf16/fp16, mask
// tensors, bias tensors, rows not 16-byte aligned, lengths beyond int32.
// `backend` names the caller in the reasons.
std::vector<std::string> flash_kernel_reasons(const Problem& p, const char* backend);

// A flash kernel table has no row for p's head dims (d_qk/d_v), which
// supports() should have refused: a bug in attn, reported as one. `what`
// names the kernel ("flash_sm90 has no backward kernel"), `table` the table.
[[noreturn]] void fail_missing_table_row(const Problem& p, const char* what, const char* table);

}  // namespace attn::detail
