// The `flash_sm90` backend object: what its kernels can run (supports(), with
// the value and the limit in each reason) and the entry points.
#include <cstdint>
#include <string>
#include <vector>

#include "attn/error.h"
#include "backends/common/device_reasons.h"
#include "backends/flash_sm90/flash_sm90.h"
#include "backends/flash_sm90/fwd_config.h"
#include "backends/flash_sm90/fwd_table.h"

namespace attn::flash_sm90 {
namespace {

int64_t smem_bytes_for(int64_t d_qk, int64_t d_v) {
#define ATTN_SMEM_ROW(dqk, dv) \
  if (d_qk == (dqk) && d_v == (dv)) return FwdConfig<dqk, dv>::kSmemBytes;
  ATTN_FLASH_SM90_FWD_TABLE(ATTN_SMEM_ROW)
#undef ATTN_SMEM_ROW
  return 0;
}

std::string head_dim_list() {
  std::string s;
#define ATTN_LIST_ROW(dqk, dv) s += std::string(s.empty() ? "" : ", ") + (dqk == dv ? #dqk : #dqk "/" #dv);
  ATTN_FLASH_SM90_FWD_TABLE(ATTN_LIST_ROW)
#undef ATTN_LIST_ROW
  return s;
}

class FlashSm90Backend final : public Backend {
 public:
  const char* name() const override { return "flash_sm90"; }
  std::vector<std::string> supports(const Problem& p, const DeviceInfo& dev) const override {
    return obstacles(p, dev);
  }
  void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx) const override {
    flash_sm90::forward(p, args, ctx);
  }
  void backward(const Problem&, const BackwardArgs&, const RunContext&) const override {
    fail(ErrorKind::unsupported, "flash_sm90 has no backward", "a backward call", "a forward call",
         "let attn choose (flash_sm80 or cudnn run the backward), or force one of them");
  }
};

}  // namespace

std::vector<std::string> obstacles(const Problem& p, const DeviceInfo& dev) {
  std::vector<std::string> no = detail::gpu_device_reasons(p, dev);
  if (!p.device.is_cuda()) return no;
  if (dev.sm != 90)
    no.push_back("sm" + std::to_string(dev.sm) + ": flash_sm90 is built for sm_90a (H100/H200) only");
  if (p.pass == Pass::backward)
    no.push_back("backward: flash_sm90 has only the forward so far (flash_sm80 and cudnn run the backward)");
  const int64_t smem = smem_bytes_for(p.d_qk, p.d_v);
  if (smem == 0)
    no.push_back("head_dim " + std::to_string(p.d_qk) + "/" + std::to_string(p.d_v) +
                 " has no kernel; flash_sm90 has " + head_dim_list());
  else if (dev.smem_per_block_optin_bytes > 0 && smem > dev.smem_per_block_optin_bytes)
    no.push_back("head_dim " + std::to_string(p.d_qk) + "/" + std::to_string(p.d_v) + " needs " +
                 std::to_string(smem / 1024) + " KiB of shared memory per block; the device allows " +
                 std::to_string(dev.smem_per_block_optin_bytes / 1024) + " KiB");
  for (std::string& reason : detail::flash_kernel_reasons(p, "flash_sm90")) no.push_back(std::move(reason));
  if ((p.s_q + 127) / 128 * p.h_q * p.batch > INT32_MAX)
    no.push_back("more than 2^31 work items (128-row query tiles x heads x sequences)");
  return no;
}

const Backend& backend() {
  static const FlashSm90Backend instance;
  return instance;
}

}  // namespace attn::flash_sm90
