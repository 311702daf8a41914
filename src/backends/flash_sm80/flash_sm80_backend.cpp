// The `flash_sm80` backend object: what its kernels can run (supports(), with
// the value and the limit in each reason) and the entry points.
#include <cstdint>
#include <string>
#include <vector>

#include "attn/error.h"
#include "attn/philox.h"
#include "backends/common/device_reasons.h"
#include "backends/flash/backend_adapter.h"
#include "backends/flash_sm80/flash_sm80.h"
#include "backends/flash_sm80/bwd_config.h"
#include "backends/flash_sm80/bwd_table.h"
#include "backends/flash_sm80/fwd_config.h"
#include "backends/flash_sm80/fwd_table.h"

namespace attn::flash_sm80 {
namespace {

// Shared memory of the pass's table row for (d_qk, d_v) on a device allowing
// `optin` bytes per block (the forward's d 256 has a narrow build and the
// backward's wide rows a dropout build with 64-row tiles, chosen by it;
// dropout picks the dropout builds of both passes); 0 when the table lacks
// the row.
int64_t smem_bytes_for(Pass pass, int64_t d_qk, int64_t d_v, int64_t optin, bool dropout) {
#define ATTN_SMEM_FWD(dqk, dv) \
  if (d_qk == (dqk) && d_v == (dv)) return fwd_smem_bytes<dqk, dv>(optin, dropout);
#define ATTN_SMEM_BWD(dqk, dv) \
  if (d_qk == (dqk) && d_v == (dv)) return bwd_smem_bytes<dqk, dv>(optin, dropout);
  if (pass == Pass::forward) {
    ATTN_FLASH_SM80_FWD_TABLE(ATTN_SMEM_FWD)
  } else {
    ATTN_FLASH_SM80_BWD_TABLE(ATTN_SMEM_BWD)
  }
#undef ATTN_SMEM_FWD
#undef ATTN_SMEM_BWD
  return 0;
}

}  // namespace

std::vector<std::string> obstacles(const Problem& p, const DeviceInfo& dev) {
  std::vector<std::string> no = detail::gpu_device_reasons(p, dev);
  if (!p.device.is_cuda()) return no;
  const bool fwd = p.pass == Pass::forward;
  const int64_t smem = smem_bytes_for(p.pass, p.d_qk, p.d_v, dev.smem_per_block_optin_bytes,
                                      fwd ? fwd_needs_dropout_build(p) : dropout_threshold(p.dropout_p) != 0);
  for (std::string& reason :
       fwd ? flash::head_dim_reasons(p, dev, "flash_sm80", smem, {ATTN_FLASH_SM80_FWD_TABLE(ATTN_FLASH_HEAD_DIMS)})
           : flash::head_dim_reasons(p, dev, "flash_sm80", smem, {ATTN_FLASH_SM80_BWD_TABLE(ATTN_FLASH_HEAD_DIMS)}))
    no.push_back(std::move(reason));
  if (p.pass == Pass::backward && dev.global_mem_bytes > 0) {
    // The fp32 dQ accumulator is twice dq's size in 16-bit types (FlashAttention-2's too).
    const int64_t ws = backward_workspace_bytes(p);
    if (ws > dev.global_mem_bytes / 4)
      no.push_back("the backward needs " + std::to_string(ws >> 20) + " MiB of workspace (fp32 dQ), over a quarter of the device's " +
                   std::to_string(dev.global_mem_bytes >> 20) + " MiB");
  }
  for (std::string& reason : flash::kernel_reasons(p, "flash_sm80")) no.push_back(std::move(reason));
  if (p.h_q > 65535 || p.batch > 65535)
    no.push_back("more than 65535 heads or sequences (the kernel's grid dimensions)");
  // d 256's backward grid has its KV tiles in the y dimension (bwd_config.h, chunked_grid).
  constexpr int64_t kMaxKeys256 = 65535LL * BwdConfig<256, 256>::kBlockN;
  if (p.pass == Pass::backward && p.d_qk == 256 && p.s_kv > kMaxKeys256)
    no.push_back("the d 256 backward takes at most " + std::to_string(kMaxKeys256) +
                 " keys per sequence (65535 KV tiles: the grid's y dimension); got " + std::to_string(p.s_kv));
  return no;
}

const Backend& backend() {
  static const flash::FlashBackend instance({"flash_sm80", obstacles, forward, backward, forward_workspace_bytes, backward_workspace_bytes});
  return instance;
}

}  // namespace attn::flash_sm80
