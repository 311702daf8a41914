// flash_sm80's forward on the host: the caller's views and the Problem ->
// FwdParams, then the table row for (dtype, d_qk, d_v). No host sync: the
// kernel reads cu_seqlens on the device and the grid is sized by max_seqlen.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "attn/backend.h"  // query_device
#include "attn/philox.h"
#include "backends/common/fill.h"
#include "backends/flash/backend_adapter.h"  // fail_missing_table_row
#include "backends/flash_sm80/flash_sm80.h"
#include "backends/flash_sm80/fwd_config.h"
#include "backends/flash_sm80/fwd_launch.h"
#include "backends/flash/params_build.h"
#include "backends/flash_sm80/fwd_table.h"
#include "core/cuda_check.h"

namespace attn::flash_sm80 {
namespace {

// `optin`: the device's shared memory per block, which picks a row's narrow
// build where it has one and it pays or alone fits; dropout picks a row's
// dropout build where it has one (fwd_config.h).
template <typename T>
bool dispatch(const Problem& p, const flash::FwdParams& k, int64_t optin, cudaStream_t stream) {
#define ATTN_DISPATCH_ROW(dqk, dv)                                              \
  if (p.d_qk == (dqk) && p.d_v == (dv)) {                                       \
    const FwdBuild build = fwd_build<dqk, dv>(optin, fwd_needs_dropout_build(p));   \
    if constexpr (ATTN_SM80_FWD_NARROW(dqk))                                    \
      if (build == FwdBuild::narrow) {                                          \
        launch_fwd<T, dqk, dv, FwdBuild::narrow>(k, stream);                    \
        return true;                                                            \
      }                                                                         \
    if constexpr (ATTN_SM80_FWD_DROPOUT_APART(dqk))                             \
      if (build == FwdBuild::dropout) {                                         \
        launch_fwd<T, dqk, dv, FwdBuild::dropout>(k, stream);                   \
        return true;                                                            \
      }                                                                         \
    launch_fwd<T, dqk, dv, FwdBuild::wide>(k, stream);                          \
    return true;                                                                \
  }
  ATTN_FLASH_SM80_FWD_TABLE(ATTN_DISPATCH_ROW)
#undef ATTN_DISPATCH_ROW
  return false;
}

}  // namespace

bool fwd_needs_dropout_build(const Problem& p) { return dropout_threshold(p.dropout_p) != 0 || p.return_max_logit; }

void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx) {
  ATTN_CUDA(cudaSetDevice(p.device.index));
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  if (args.max_logit.defined())  // -inf for the rows to max into
    detail::launch_fill(static_cast<float*>(args.max_logit.data), p.h_q, args.max_logit.stride(0), -INFINITY, stream);
  if (p.batch == 0 || p.h_q == 0 || p.s_q == 0 || p.total_q == 0) return;  // nothing more to write
  const flash::FwdParams k = flash::forward_params(p, args);
  // ATTN_SIMULATE_DEVICE reaches here too: either build of a row can be tested on one GPU.
  const int64_t optin = query_device(p.device).smem_per_block_optin_bytes;
  const bool ran = p.dtype == DType::bf16 ? dispatch<__nv_bfloat16>(p, k, optin, stream)
                                          : dispatch<__half>(p, k, optin, stream);
  if (!ran)  // supports() refuses these; reaching here is a bug in attn
    flash::fail_missing_table_row(p, "flash_sm80 has no kernel", "fwd_table.h");
}

}  // namespace attn::flash_sm80
