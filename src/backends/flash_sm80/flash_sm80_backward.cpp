// flash_sm80's backward on the host: views + Problem -> BwdParams, workspace
// (per-row lse and D, the fp32 dQ accumulator, deterministic mode's
// counters), then three launches on the caller's stream: pre-pass, main
// kernel (table row for (dtype, d_qk, d_v)), dq conversion. No host sync.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "attn/backend.h"
#include "backends/flash/backend_adapter.h"  // fail_missing_table_row
#include "backends/flash_sm80/bwd_config.h"
#include "backends/flash/bwd_prepass.h"
#include "backends/flash_sm80/bwd_launch.h"
#include "backends/flash_sm80/bwd_table.h"
#include "backends/flash_sm80/flash_sm80.h"
#include "backends/flash/params_build.h"
#include "core/cuda_check.h"
#include "core/workspace.h"

namespace attn::flash_sm80 {
namespace {

// Deterministic mode keeps one counter per (sequence, head, query tile); the
// rows' query tiles differ in size, so the count uses the smallest tile, an
// upper bound for every row (the kernel indexes by its own tile, stride m_tiles).
#define ATTN_BLOCK_M(dqk, dv) BwdConfig<dqk, dv>::kBlockM, BwdConfig<dqk, dv, bwd_has_dropout_build(dqk, dv)>::kBlockM,
constexpr int kBlockMs[] = {ATTN_FLASH_SM80_BWD_TABLE(ATTN_BLOCK_M)};
#undef ATTN_BLOCK_M
constexpr int min_block_m() {
  int m = kBlockMs[0];
  for (int b : kBlockMs) m = b < m ? b : m;
  return m;
}

// `optin`: the device's shared memory per block, which picks a wide row's
// dropout build (64-row tiles) where the wide one does not fit; dropout picks
// a row's dropout build wherever one exists (bwd_config.h).
template <typename T>
bool dispatch(const Problem& p, const flash::BwdParams& k, int64_t optin, cudaStream_t stream) {
#define ATTN_DISPATCH_ROW(dqk, dv)                                                                 \
  if (p.d_qk == (dqk) && p.d_v == (dv)) {                                                          \
    launch_bwd<T, dqk, dv>(k, bwd_uses_dropout_build<dqk, dv>(optin, k.fwd.dropout_threshold != 0), stream); \
    return true;                                                                                   \
  }
  ATTN_FLASH_SM80_BWD_TABLE(ATTN_DISPATCH_ROW)
#undef ATTN_DISPATCH_ROW
  return false;
}

template <typename T>
void run(const Problem& p, const flash::BwdParams& k, cudaStream_t stream) {
  const int dqk = static_cast<int>(p.d_qk), dv = static_cast<int>(p.d_v);
  // ATTN_SIMULATE_DEVICE=sm86 reaches here too: the wide rows' dropout builds can be tested on a larger GPU.
  const int64_t optin = query_device(p.device).smem_per_block_optin_bytes;
  if (k.rows_q > 0) flash::launch_bwd_prepass<T>(k, dqk, dv, stream);
  flash::launch_bwd_dsink(k, stream);
  if (p.s_kv > 0 && !dispatch<T>(p, k, optin, stream))  // supports() refuses these; reaching here is a bug in attn
    flash::fail_missing_table_row(p, "flash_sm80 has no backward kernel", "bwd_table.h");
  if (k.rows_q > 0) flash::launch_bwd_convert_dq<T>(k, dqk, stream);
}

}  // namespace

int64_t forward_workspace_bytes(const Problem&) { return 0; }
int64_t backward_workspace_bytes(const Problem& p) { return flash::backward_workspace_bytes(p, min_block_m()); }

void backward(const Problem& p, const BackwardArgs& a, const RunContext& ctx) {
  ATTN_CUDA(cudaSetDevice(p.device.index));
  if (p.batch == 0 || p.h_q == 0) return;  // nothing to write
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  const flash::BwdParams k = flash::backward_params(p, a, min_block_m(), ctx);
  if (p.dtype == DType::bf16)
    run<__nv_bfloat16>(p, k, stream);
  else
    run<__half>(p, k, stream);
}

}  // namespace attn::flash_sm80
