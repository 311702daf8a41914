// The `flash_sm90` backend object: what its kernels can run (supports(), with
// the value and the limit in each reason) and the entry points.
#include <cstdint>
#include <string>
#include <vector>

#include "attn/error.h"
#include "backends/common/device_reasons.h"
#include "backends/flash/backend_adapter.h"
#include "backends/flash_sm90/bwd_config.h"
#include "backends/flash_sm90/bwd_table.h"
#include "backends/flash_sm90/flash_sm90.h"
#include "backends/flash_sm90/fwd_config.h"
#include "backends/flash_sm90/fwd_table.h"

namespace attn::flash_sm90 {
namespace {

// Keys per KV tile of the backward's row for (d_qk, d_v); 0: no such row.
int64_t bwd_tile_keys(int64_t d_qk, int64_t d_v) {
  int64_t keys = 0;
#define ATTN_BWD_ROW(dqk, dv) \
  if (d_qk == (dqk) && d_v == (dv)) keys = BwdConfig<dqk, dv>::kBlockN;
  ATTN_FLASH_SM90_BWD_TABLE(ATTN_BWD_ROW)
#undef ATTN_BWD_ROW
  return keys;
}

// Shared memory of the pass's kernel for (d_qk, d_v); 0: no such row.
int64_t smem_bytes_for(Pass pass, int64_t d_qk, int64_t d_v) {
  int64_t bytes = 0;
  if (pass == Pass::forward) {
#define ATTN_FWD_ROW(dqk, dv) \
  if (d_qk == (dqk) && d_v == (dv)) bytes = FwdConfig<dqk, dv>::kSmemBytes;
    ATTN_FLASH_SM90_FWD_TABLE(ATTN_FWD_ROW)
#undef ATTN_FWD_ROW
  } else {
#define ATTN_BWD_ROW(dqk, dv) \
  if (d_qk == (dqk) && d_v == (dv)) bytes = BwdConfig<dqk, dv>::kSmemBytes;
    ATTN_FLASH_SM90_BWD_TABLE(ATTN_BWD_ROW)
#undef ATTN_BWD_ROW
  }
  return bytes;
}

}  // namespace

std::vector<std::string> obstacles(const Problem& p, const DeviceInfo& dev) {
  std::vector<std::string> no = detail::gpu_device_reasons(p, dev);
  if (!p.device.is_cuda()) return no;
  if (dev.sm != 90)
    no.push_back("sm" + std::to_string(dev.sm) + ": flash_sm90 is built for sm_90a (H100/H200) only");
  const bool bwd = p.pass == Pass::backward;
  const int64_t smem = smem_bytes_for(p.pass, p.d_qk, p.d_v);
  for (std::string& reason :
       bwd ? flash::head_dim_reasons(p, dev, "flash_sm90", smem, {ATTN_FLASH_SM90_BWD_TABLE(ATTN_FLASH_HEAD_DIMS)})
           : flash::head_dim_reasons(p, dev, "flash_sm90", smem, {ATTN_FLASH_SM90_FWD_TABLE(ATTN_FLASH_HEAD_DIMS)}))
    no.push_back(std::move(reason));
  if (const int64_t tile_keys = bwd ? bwd_tile_keys(p.d_qk, p.d_v) : 0; tile_keys > 0 && p.s_kv > 65535 * tile_keys)
    no.push_back("max_seqlen_kv " + std::to_string(p.s_kv) + ": the backward's grid takes at most 65535 KV " +
                 "tiles of " + std::to_string(tile_keys) + " keys (" + std::to_string(65535 * tile_keys) + ")");
  for (std::string& reason : flash::kernel_reasons(p, "flash_sm90")) no.push_back(std::move(reason));
  if ((p.s_q + 127) / 128 * p.h_q * p.batch > INT32_MAX)
    no.push_back("more than 2^31 work items (128-row query tiles x heads x sequences)");
  return no;
}

bool leads_backward(const Problem& p, std::string* rule) {
  // Measured against SDPA cuDNN's backward over ANCHORS.md's points (bf16,
  // docs/PERF.md): d 64 1.04-1.17x and d 128 1.02-1.16x for MHA, 1.09-1.27x
  // with GQA 4 and 8 (H200, 573d7a7); d 256 1.13-1.35x, d 192 1.26-1.49x;
  // 192 / 128 only without a right edge (1.31-1.46x; causal 0.86-0.90x,
  // where cuDNN runs faster than without a mask). Not with dropout: at d 64
  // / 128 its Philox draws still cost it more than cuDNN's cost cuDNN
  // (0.89-1.00x cuDNN's dropout backward, d 256 1.21-1.66x; H200, a0c7faa).
  // cudnn is skipped for attn's dropout unless named (its pattern is its
  // own), so flash_sm90 runs these backwards anyway.
  const int64_t h_per_kv = p.h_kv > 0 ? p.h_q / p.h_kv : 0;
  if (p.dropout_p != 0) return false;
  const bool narrow = p.d_qk == p.d_v && (p.d_qk == 64 || p.d_qk == 128);
  const bool wide = (p.d_qk == 256 && p.d_v == 256) || (p.d_qk == 192 && (p.d_v == 192 || p.window_right < 0));
  auto dims = [&] { return "d_qk " + std::to_string(p.d_qk) + ", d_v " + std::to_string(p.d_v); };
  if (p.deterministic) {
    // Deterministic backwards against each other (time over SDPA cuDNN's
    // default backward, H200, ANCHORS.md's points): at d 64 flash_sm90
    // 1.09-1.18 against cuDNN's 1.08-1.58 (MHA; GQA 4 and 8 0.97-1.15
    // against 1.04-1.62), at d 128 0.91-0.98 (573d7a7) against 1.08-1.11,
    // at d 192 0.71-1.03 against 1.09-1.45, at d 256 0.82-1.10 against
    // 1.07-1.31. Not with GQA and a right edge at the wide tiles (d 256 GQA
    // 4 causal 1.29-1.36 against 1.06-1.22).
    const bool yes = narrow || (wide && (h_per_kv == 1 || p.window_right < 0));
    if (yes && rule) *rule = "flash_sm90 first for a deterministic backward at " + dims();
    return yes;
  }
  const bool yes = narrow || wide;
  if (yes && rule) *rule = "flash_sm90 first for the backward at " + dims();
  return yes;
}

const Backend& backend() {
  static const flash::FlashBackend instance({"flash_sm90", obstacles, forward, backward, forward_workspace_bytes, backward_workspace_bytes});
  return instance;
}

}  // namespace attn::flash_sm90
