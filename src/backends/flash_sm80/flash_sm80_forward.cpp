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
#include "backends/common/device_reasons.h"  // fail_missing_table_row
#include "backends/flash_sm80/flash_sm80.h"
#include "backends/flash_sm80/fwd_config.h"
#include "backends/flash_sm80/fwd_launch.h"
#include "backends/flash_sm80/host_params.h"
#include "backends/flash_sm80/fwd_table.h"
#include "core/cuda_check.h"

namespace attn::flash_sm80 {
namespace {

// `optin`: the device's shared memory per block, which picks a row's narrow
// build where it has one and it pays or alone fits; dropout picks a row's
// dropout build where it has one (fwd_config.h).
template <typename T>
bool dispatch(const Problem& p, const FwdParams& k, int64_t optin, cudaStream_t stream) {
#define ATTN_DISPATCH_ROW(dqk, dv)                                              \
  if (p.d_qk == (dqk) && p.d_v == (dv)) {                                       \
    const FwdBuild build = fwd_build<dqk, dv>(optin, k.dropout_threshold != 0); \
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

Strides strides_of(const TensorView& t, QkvFormat f) {
  switch (f) {
    case QkvFormat::bshd: return {t.stride(0), t.stride(1), t.stride(2)};
    case QkvFormat::sbhd: return {t.stride(1), t.stride(0), t.stride(2)};
    case QkvFormat::thd: return {0, t.stride(0), t.stride(1)};
  }
  return {0, 0, 0};
}

FwdParams forward_params(const Problem& p, const ForwardArgs& a) {
  FwdParams k;
  k.q = a.in.q.data;
  k.k = a.in.k.data;
  k.v = a.in.v.data;
  k.out = a.out.data;
  const QkvFormat f = p.qkv_format;
  const Strides q = strides_of(a.in.q, f), kk = strides_of(a.in.k, f), v = strides_of(a.in.v, f),
                o = strides_of(a.out, f);
  k.q_batch_stride = q.batch, k.q_row_stride = q.row, k.q_head_stride = q.head;
  k.k_batch_stride = kk.batch, k.k_row_stride = kk.row, k.k_head_stride = kk.head;
  k.v_batch_stride = v.batch, k.v_row_stride = v.row, k.v_head_stride = v.head;
  k.o_batch_stride = o.batch, k.o_row_stride = o.row, k.o_head_stride = o.head;
  if (a.lse.defined()) {
    k.lse = static_cast<float*>(a.lse.data);
    if (f == QkvFormat::thd) {  // [h_q, t_q]
      k.lse_head_stride = a.lse.stride(0), k.lse_row_stride = a.lse.stride(1);
    } else {  // [b, h_q, s_q]
      k.lse_batch_stride = a.lse.stride(0), k.lse_head_stride = a.lse.stride(1), k.lse_row_stride = a.lse.stride(2);
    }
  }
  if (p.has_seqlens) {
    k.cu_seqlens_q = static_cast<const int32_t*>(a.in.cu_seqlens_q.data);
    k.cu_seqlens_kv = static_cast<const int32_t*>(a.in.cu_seqlens_kv.data);
    k.cu_q_stride = a.in.cu_seqlens_q.stride(0);
    k.cu_kv_stride = a.in.cu_seqlens_kv.stride(0);
    k.packed = f == QkvFormat::thd;
    k.tokens_q = static_cast<int>(p.total_q);  // < 2^31: detail::flash_kernel_reasons
    k.tokens_kv = static_cast<int>(p.total_kv);
  }
  k.batch = static_cast<int>(p.batch);
  k.h_q = static_cast<int>(p.h_q);
  k.h_per_kv = static_cast<int>(p.h_q / p.h_kv);
  k.s_q = static_cast<int>(p.s_q);
  k.s_kv = static_cast<int>(p.s_kv);
  k.window_left = p.window_left;
  k.window_right = p.window_right;
  k.bottom_right = p.bottom_right;
  k.scale = static_cast<float>(p.softmax_scale);
  k.scale_log2 = static_cast<float>(p.softmax_scale * 1.4426950408889634);
  k.softcap = static_cast<float>(p.softcap);
  k.softcap_inv = p.softcap > 0 ? static_cast<float>(1.0 / p.softcap) : 0.f;
  if (p.bias == BiasType::alibi) {
    const TensorView& s = a.in.alibi_slopes;
    k.alibi = static_cast<const float*>(s.data);
    k.alibi_batch_stride = s.rank == 2 ? s.stride(0) : 0;
    k.alibi_head_stride = s.stride(-1);
  }
  // The fast path exponentiates scale * log2(e) * q.k against the row's max
  // q.k, which needs a positive scale and no other change to the scores.
  k.score_mods = p.softcap > 0 || k.alibi != nullptr || !(p.softmax_scale > 0);
  if (p.dropout_p > 0) {
    k.dropout_threshold = dropout_threshold(p.dropout_p);
    k.dropout_scale = static_cast<float>(1.0 / (1.0 - p.dropout_p));
    k.seed = p.seed;
    k.offset = static_cast<uint32_t>(p.offset);
  }
  return k;
}

void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx) {
  ATTN_CUDA(cudaSetDevice(p.device.index));
  if (p.batch == 0 || p.h_q == 0 || p.s_q == 0 || p.total_q == 0) return;  // nothing to write
  const FwdParams k = forward_params(p, args);
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  // ATTN_SIMULATE_DEVICE reaches here too: either build of a row can be tested on one GPU.
  const int64_t optin = query_device(p.device).smem_per_block_optin_bytes;
  const bool ran = p.dtype == DType::bf16 ? dispatch<__nv_bfloat16>(p, k, optin, stream)
                                          : dispatch<__half>(p, k, optin, stream);
  if (!ran)  // supports() refuses these; reaching here is a bug in attn
    detail::fail_missing_table_row(p, "flash_sm80 has no kernel", "fwd_table.h");
}

}  // namespace attn::flash_sm80
