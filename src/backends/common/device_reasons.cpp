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

void fail_missing_table_row(const Problem& p, const char* what, const char* table) {
  fail(ErrorKind::runtime, std::string(what) + " for this head dim", std::to_string(p.d_qk) + "/" + std::to_string(p.d_v),
       std::string("a row of ") + table, "report this: supports() should have refused the call");
}

std::vector<std::string> flash_kernel_reasons(const Problem& p, const char* backend) {
  std::vector<std::string> no;
  if (p.dtype != DType::bf16 && p.dtype != DType::f16)
    no.push_back(std::string("dtype ") + dtype_name(p.dtype) + ": " + backend + " runs bfloat16 and float16");
  if (p.mask == MaskType::arbitrary) no.push_back("mask=arbitrary (a mask tensor) is not supported; unfused runs it");
  if (p.bias == BiasType::post_scale_bias)
    no.push_back("post_scale_bias (a bias tensor) is not supported; ALiBi slopes are");
  if (p.row_alignment_bytes < 16)
    no.push_back("q/k/v/out rows are aligned to " + std::to_string(p.row_alignment_bytes) + " bytes; " + backend +
                 " needs 16 (base addresses and strides multiples of 8 elements)");
  if (p.s_q > INT32_MAX || p.s_kv > INT32_MAX || p.total_q > INT32_MAX || p.total_kv > INT32_MAX)
    no.push_back("sequence lengths beyond 2^31 tokens");
  return no;
}

}  // namespace attn::detail
