// flash_sm90's backward on the host: flash_sm80's backward parameters and
// workspace (the same problem description, row terms and fp32 dQ
// accumulator) plus TMA tensor maps of Q, K, V, dO, dK and dV, then three launches on
// the caller's stream: flash_sm80's pre-pass, the table row for (dtype, d_qk,
// d_v), flash_sm80's dq conversion. No host sync.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "attn/backend.h"
#include "backends/flash/backend_adapter.h"  // fail_missing_table_row
#include "backends/flash/bwd_prepass.h"
#include "backends/flash/params_build.h"
#include "backends/flash_sm90/bwd_config.h"
#include "backends/flash_sm90/bwd_launch.h"
#include "backends/flash_sm90/bwd_table.h"
#include "backends/flash_sm90/flash_sm90.h"
#include "backends/flash_sm90/tensor_maps.h"
#include "backends/flash/heuristics.h"
#include "core/cuda_check.h"

namespace attn::flash_sm90 {
namespace {

// CTAs per KV tile (flash::bwd_head_split).
int head_split_of(const Problem& p) {
  return flash::bwd_head_split(static_cast<int>(p.h_kv > 0 ? p.h_q / p.h_kv : 1), p.window_left, p.window_right);
}
// Accumulator rows: every key token (thd: the packed tokens).
int64_t dkv_rows(const Problem& p) { return p.qkv_format == QkvFormat::thd ? p.total_kv : p.batch * p.s_kv; }
// The head split's fp32 dK / dV accumulators (bwd_params.h): bytes, 0 without a split.
int64_t dkv_accum_bytes(const Problem& p) {
  return head_split_of(p) > 1 ? dkv_rows(p) * p.h_kv * (p.d_qk + p.d_v) * static_cast<int64_t>(sizeof(float)) : 0;
}

template <typename T, int kDQK, int kDV>
void run(const Problem& p, const BackwardArgs& a, const flash::BwdParams& k, float* dkv_accum, cudaStream_t stream) {
  using Cfg = BwdConfig<kDQK, kDV>;
  const bool packed = p.qkv_format == QkvFormat::thd;
  const int64_t tokens_q = packed ? p.total_q : p.s_q, tokens_kv = packed ? p.total_kv : p.s_kv;
  Sm90BwdParams args;
  args.p = k;
  if (dkv_accum) {
    args.head_split = head_split_of(p);
    args.dkv_accum = dkv_accum;
    args.dkv_rows = dkv_rows(p);
    ATTN_CUDA(cudaMemsetAsync(dkv_accum, 0, dkv_accum_bytes(p), stream));
  }
  args.q = tile_map(p, a.in.q, tokens_q, p.h_q, kDQK, Cfg::kBlockM, "q");
  args.dout = tile_map(p, a.dout, tokens_q, p.h_q, kDV, Cfg::kBlockM, "dout");
  args.k = tile_map(p, a.in.k, tokens_kv, p.h_kv, kDQK, Cfg::kBlockN, "k");
  args.v = tile_map(p, a.in.v, tokens_kv, p.h_kv, kDV, Cfg::kBlockN, "v");
  args.dk = tile_map(p, a.dk, tokens_kv, p.h_kv, kDQK, 64, "dk");
  args.dv = tile_map(p, a.dv, tokens_kv, p.h_kv, kDV, 64, "dv");
  if (k.rows_q > 0) flash::launch_bwd_prepass<T>(k, kDQK, kDV, stream);
  flash::launch_bwd_dsink(k, stream);
  // The main kernel and dQ's conversion start early, behind the kernel
  // before each (a memset before the main kernel has no rows to wait for).
  const bool early = k.rows_q > 0;
  if (p.s_kv > 0) {
    if (args.p.fwd.dropout_threshold && args.p.fwd.score_mods)
      launch_bwd<T, kDQK, kDV, true, true>(args, early, stream);
    else if (args.p.fwd.dropout_threshold)
      launch_bwd<T, kDQK, kDV, false, true>(args, early, stream);
    else if (args.p.fwd.score_mods)
      launch_bwd<T, kDQK, kDV, true, false>(args, early, stream);
    else
      launch_bwd<T, kDQK, kDV, false, false>(args, early, stream);
  }
  if (dkv_accum) launch_bwd_convert_dkv<T>(args, kDQK, kDV, stream);
  if (k.rows_q > 0) flash::launch_bwd_convert_dq<T>(k, kDQK, stream, /*early=*/true);
}

template <typename T>
bool dispatch(const Problem& p, const BackwardArgs& a, const flash::BwdParams& k, float* dkv_accum,
              cudaStream_t stream) {
#define ATTN_DISPATCH_ROW(dqk, dv)                   \
  if (p.d_qk == (dqk) && p.d_v == (dv)) {            \
    run<T, dqk, dv>(p, a, k, dkv_accum, stream);     \
    return true;                                     \
  }
  ATTN_FLASH_SM90_BWD_TABLE(ATTN_DISPATCH_ROW)
#undef ATTN_DISPATCH_ROW
  return false;
}

}  // namespace

// flash_sm80's workspace (row terms, dQ accumulator, counters), then the head
// split's accumulators.
int64_t backward_workspace_bytes(const Problem& p) {
  return flash::backward_workspace_bytes(p, kSemaphoreBlockM) + dkv_accum_bytes(p);
}

void backward(const Problem& p, const BackwardArgs& args, const RunContext& ctx) {
  ATTN_CUDA(cudaSetDevice(p.device.index));
  if (p.batch == 0 || p.h_q == 0) return;  // nothing to write
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  void* dkv = nullptr;  // the head split's accumulators, after flash's part of the workspace
  const flash::BwdParams k = flash::backward_params(p, args, kSemaphoreBlockM, ctx, dkv_accum_bytes(p), &dkv);
  float* const dkv_accum = static_cast<float*>(dkv);
  const bool ran = p.dtype == DType::bf16 ? dispatch<__nv_bfloat16>(p, args, k, dkv_accum, stream)
                                          : dispatch<__half>(p, args, k, dkv_accum, stream);
  if (!ran)  // supports() refuses these; reaching here is a bug in attn
    flash::fail_missing_table_row(p, "flash_sm90 has no backward kernel", "bwd_table.h");
}

}  // namespace attn::flash_sm90
