// See device_reasons.h.
#include "backends/common/device_reasons.h"

#include <cstdint>
#include <string>

#include "attn/error.h"

namespace attn::detail {

std::vector<std::string> gpu_device_reasons(const Problem& p, const DeviceInfo& dev) {
  std::vector<std::string> no;
  if (!p.device.is_cuda()) {
    no.push_back("runs on CUDA tensors; the tensors are on " + device_name(p.device));
    return no;
  }
  if (!(dev.sm / 10 == 8 || dev.sm == 90))
    no.push_back("this build has kernels for sm_80 (runs on sm_8x) and sm_90a; the device is sm" +
                 std::to_string(dev.sm));
  return no;
}

std::string row_alignment_reason(const Problem& p, const char* backend) {
  if (p.row_alignment_bytes >= 16) return {};
  return "q/k/v/out rows are aligned to " + std::to_string(p.row_alignment_bytes) + " bytes; " + backend +
         " needs 16 (base addresses and strides multiples of 8 elements; unfused runs any layout)";
}

}  // namespace attn::detail
