// flash_sm80's backward on the host: views + Problem -> BwdParams, workspace
// (per-row lse and D, the fp32 dQ accumulator, deterministic mode's
// counters), then three launches on the caller's stream: pre-pass, main
// kernel (table row for (dtype, d_qk, d_v)), dq conversion. No host sync.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "attn/backend.h"
#include "backends/common/device_reasons.h"  // fail_missing_table_row
#include "backends/flash_sm80/bwd_config.h"
#include "backends/flash_sm80/bwd_launch.h"
#include "backends/flash_sm80/bwd_table.h"
#include "backends/flash_sm80/flash_sm80.h"
#include "backends/flash_sm80/host_params.h"
#include "core/cuda_check.h"
#include "core/workspace.h"

namespace attn::flash_sm80 {
namespace {

// Deterministic mode keeps one counter per (sequence, head, query tile); the
// rows' query tiles differ in size, so the count uses the smallest tile, an
// upper bound for every row (the kernel indexes by its own tile, stride m_tiles).
#define ATTN_BLOCK_M(dqk, dv) BwdConfig<dqk, dv>::kBlockM, BwdConfig<dqk, dv, ATTN_SM80_BWD_DROPOUT_APART(dqk)>::kBlockM,
constexpr int kBlockMs[] = {ATTN_FLASH_SM80_BWD_TABLE(ATTN_BLOCK_M)};
#undef ATTN_BLOCK_M
constexpr int min_block_m() {
  int m = kBlockMs[0];
  for (int b : kBlockMs) m = b < m ? b : m;
  return m;
}

int64_t rows_q_of(const Problem& p) { return p.qkv_format == QkvFormat::thd ? p.total_q : p.batch * p.s_q; }

// Carves the workspace; with a null base only counts its bytes.
int64_t carve(const Problem& p, char* base, BwdParams* k) {
  detail::Carver c(base);
  const int64_t rows = rows_q_of(p);
  float2* row_terms = c.take<float2>(p.h_q * rows);
  float* acc = c.take<float>(p.h_q * rows * p.d_qk);
  const int m_tiles = static_cast<int>((p.s_q + min_block_m() - 1) / min_block_m());
  int* sem = p.deterministic ? c.take<int>(p.batch * p.h_q * m_tiles) : nullptr;
  if (k) {
    k->rows_q = rows;
    k->row_terms = row_terms;
    k->dq_accum = acc;
    k->dq_semaphore = sem;
    k->m_tiles = m_tiles;
  }
  return c.used();
}

// `optin`: the device's shared memory per block, which picks a wide row's
// dropout build (64-row tiles) where the wide one does not fit; dropout picks
// a row's dropout build wherever one exists (bwd_config.h).
template <typename T>
bool dispatch(const Problem& p, const BwdParams& k, int64_t optin, cudaStream_t stream) {
#define ATTN_DISPATCH_ROW(dqk, dv)                                             \
  if (p.d_qk == (dqk) && p.d_v == (dv)) {                                      \
    if constexpr (ATTN_SM80_BWD_DROPOUT_APART(dqk)) {                          \
      if (bwd_uses_dropout_build<dqk, dv>(optin, k.fwd.dropout_threshold != 0)) { \
        launch_bwd<T, dqk, dv, true>(k, stream);                               \
        return true;                                                           \
      }                                                                        \
    }                                                                          \
    launch_bwd<T, dqk, dv, false>(k, stream);                                  \
    return true;                                                               \
  }
  ATTN_FLASH_SM80_BWD_TABLE(ATTN_DISPATCH_ROW)
#undef ATTN_DISPATCH_ROW
  return false;
}

template <typename T>
void run(const Problem& p, const BwdParams& k, cudaStream_t stream) {
  const int dqk = static_cast<int>(p.d_qk), dv = static_cast<int>(p.d_v);
  // ATTN_SIMULATE_DEVICE=sm86 reaches here too: the wide rows' dropout builds can be tested on a larger GPU.
  const int64_t optin = query_device(p.device).smem_per_block_optin_bytes;
  if (k.rows_q > 0) launch_bwd_prepass<T>(k, dqk, dv, stream);
  if (p.s_kv > 0 && !dispatch<T>(p, k, optin, stream))  // supports() refuses these; reaching here is a bug in attn
    detail::fail_missing_table_row(p, "flash_sm80 has no backward kernel", "bwd_table.h");
  if (k.rows_q > 0) launch_bwd_convert_dq<T>(k, dqk, stream);
}

}  // namespace

int64_t backward_workspace_bytes(const Problem& p) { return carve(p, nullptr, nullptr); }

BwdParams backward_params(const Problem& p, const BackwardArgs& a, cudaStream_t stream) {
  BwdParams k;
  k.fwd = forward_params(p, ForwardArgs{a.in, a.out, a.lse});
  const QkvFormat f = p.qkv_format;
  const Strides o = strides_of(a.dout, f), q = strides_of(a.dq, f), kk = strides_of(a.dk, f),
                v = strides_of(a.dv, f);
  k.dout = a.dout.data;
  k.dq = a.dq.data;
  k.dk = a.dk.data;
  k.dv = a.dv.data;
  k.do_batch_stride = o.batch, k.do_row_stride = o.row, k.do_head_stride = o.head;
  k.dq_batch_stride = q.batch, k.dq_row_stride = q.row, k.dq_head_stride = q.head;
  k.dk_batch_stride = kk.batch, k.dk_row_stride = kk.row, k.dk_head_stride = kk.head;
  k.dv_batch_stride = v.batch, k.dv_row_stride = v.row, k.dv_head_stride = v.head;
  const int64_t bytes = backward_workspace_bytes(p);
  carve(p, static_cast<char*>(detail::workspace(p.device.index, stream, bytes)), &k);
  if (k.dq_semaphore)
    ATTN_CUDA(cudaMemsetAsync(k.dq_semaphore, 0, static_cast<size_t>(p.batch * p.h_q * k.m_tiles) * sizeof(int),
                              stream));
  return k;
}

void backward(const Problem& p, const BackwardArgs& a, const RunContext& ctx) {
  ATTN_CUDA(cudaSetDevice(p.device.index));
  if (p.batch == 0 || p.h_q == 0) return;  // nothing to write
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  const BwdParams k = backward_params(p, a, stream);
  if (p.dtype == DType::bf16)
    run<__nv_bfloat16>(p, k, stream);
  else
    run<__half>(p, k, stream);
}

}  // namespace attn::flash_sm80
