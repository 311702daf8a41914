// See backend_adapter.h.
#include "backends/flash/backend_adapter.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "attn/error.h"
#include "backends/common/device_reasons.h"
#include "backends/common/fill.h"

namespace attn::flash {

std::vector<std::string> kernel_reasons(const Problem& p, const char* backend) {
  std::vector<std::string> no;
  if (p.dtype != DType::bf16 && p.dtype != DType::f16)
    no.push_back(std::string("dtype ") + dtype_name(p.dtype) + ": " + backend + " runs bfloat16 and float16");
  if (p.mask == MaskType::arbitrary) no.push_back("mask=arbitrary (a mask tensor) is not supported; unfused runs it");
  if (p.bias == BiasType::post_scale_bias)
    no.push_back("post_scale_bias (a bias tensor) is not supported; ALiBi slopes are");
  if (std::string r = detail::row_alignment_reason(p, backend); !r.empty()) no.push_back(std::move(r));
  if (p.s_q > INT32_MAX || p.s_kv > INT32_MAX || p.total_q > INT32_MAX || p.total_kv > INT32_MAX)
    no.push_back("sequence lengths beyond 2^31 tokens");
  return no;
}

// A call with no sequence returns before the backward's dsink pass
// (launch_bwd_dsink), which writes dsink wherever there is one: dsink = 0.
void FlashBackend::backward(const Problem& p, const BackwardArgs& args, const RunContext& ctx) const {
  if (args.dsink.defined() && p.batch == 0)
    detail::launch_fill(static_cast<float*>(args.dsink.data), p.h_q, args.dsink.stride(0), 0.f, ctx.stream);
  e_.backward(p, args, ctx);
}

std::string head_dim_list(std::initializer_list<HeadDims> rows) {
  std::string s;
  for (const HeadDims& r : rows)
    s += (s.empty() ? "" : ", ") + std::to_string(r.qk) + (r.qk == r.v ? "" : "/" + std::to_string(r.v));
  return s;
}

std::vector<std::string> head_dim_reasons(const Problem& p, const DeviceInfo& dev, const char* backend, int64_t smem,
                                          std::initializer_list<HeadDims> rows) {
  const std::string pass = p.pass == Pass::forward ? "forward" : "backward";
  const std::string dims = "head_dim " + std::to_string(p.d_qk) + "/" + std::to_string(p.d_v);
  if (smem == 0)
    return {dims + " has no " + pass + " kernel; " + backend + "'s " + pass + " has " + head_dim_list(rows)};
  if (dev.smem_per_block_optin_bytes > 0 && smem > dev.smem_per_block_optin_bytes)
    return {dims + " needs " + std::to_string(smem / 1024) + " KiB of shared memory per block in the " + pass + "; sm" +
            std::to_string(dev.sm) + " allows " + std::to_string(dev.smem_per_block_optin_bytes / 1024) + " KiB"};
  return {};
}

void fail_missing_table_row(const Problem& p, const char* what, const char* table) {
  fail(ErrorKind::runtime, std::string(what) + " for this head dim", std::to_string(p.d_qk) + "/" + std::to_string(p.d_v),
       std::string("a row of ") + table, "report this: supports() should have refused the call");
}

}  // namespace attn::flash
