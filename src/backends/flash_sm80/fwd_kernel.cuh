// flash_sm80's forward kernel: FlashAttention-2's algorithm on mma.sync. One
// CTA per (128-row query tile, query head, sequence); it wires the stages:
// schedule (flash/sequence.cuh) -> loads (tile_loads.cuh) -> S = Q.K^T
// (warp_gemm.cuh) -> score changes, mask, online softmax and dropout (flash/score_mods.cuh,
// mask.cuh, online_softmax.cuh, dropout_bits.cuh) ->
// O += P.V -> epilogue (flash/epilogue.cuh). Head dims and dtype are template
// parameters; every other feature is a run-time value tested per tile.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/flash_sm80/fwd_config.h"
#include "backends/flash/epilogue.cuh"
#include "backends/flash_sm80/tile_loads.cuh"
#include "backends/flash/params.h"
#include "backends/flash/sequence.cuh"
#include "backends/flash/dropout_bits.cuh"
#include "backends/flash/mask.cuh"
#include "backends/common/softmax_sink.cuh"
#include "backends/flash/online_softmax.cuh"
#include "backends/flash/score_mods.cuh"
#include "attn/error.h"
#include "core/cuda_check.h"
#include "kernels/sm80/cp_async.cuh"
#include "kernels/sm80/swizzle.h"
#include "kernels/sm80/warp_gemm.cuh"

namespace attn::flash_sm80 {

template <typename T, int kDQK, int kDV, FwdBuild kBuild>
__global__ void __launch_bounds__(FwdConfig<kDQK, kDV, kBuild>::kThreads)
    flash_fwd_kernel(const __grid_constant__ flash::FwdParams p) {
  using Cfg = FwdConfig<kDQK, kDV, kBuild>;
  constexpr int kM = Cfg::kBlockM, kN = Cfg::kBlockN, kThreads = Cfg::kThreads;
  constexpr int MA = Cfg::kRowBlocks, NA = Cfg::kColBlocksS, NO = Cfg::kColBlocksO;
  using QTile = sm80::SwizzledTile<kM, kDQK>;
  using KTile = sm80::SwizzledTile<kN, kDQK>;
  using VTile = sm80::SwizzledTile<kN, kDV>;
  using OTile = sm80::SwizzledTile<kM, kDV>;

  extern __shared__ __align__(128) char smem[];
  char* q_smem = smem;
  const uint32_t q_s = sm80::smem_addr(smem);
  const uint32_t k_s = q_s + Cfg::kSmemQ;
  const uint32_t v_s = k_s + Cfg::kSmemK;

  // Schedule. Heavy (late, for causal) query tiles first: shorter tail.
  const int b = blockIdx.z, h = blockIdx.y;
  const int m0 = (gridDim.x - 1 - blockIdx.x) * kM;
  const flash::SeqExtent seq = flash::sequence_extent(p, b);
  // Rows of this tile in the sequence, and rows it writes: a padded batch
  // (bshd/sbhd with cu_seqlens) also gets out = 0, lse = -inf on its padding
  // rows; in thd the rows past a sequence belong to the next one.
  const int rows = max(0, min(kM, seq.len_q - m0));
  const int rows_out = p.packed ? rows : min(kM, p.s_q - m0);
  if (rows_out <= 0) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_row = warp * MA * 16;  // first row of this warp within the tile
  const bool dropout = Cfg::kDropout && p.dropout_threshold != 0;  // compiled out where a dropout build exists

  const int h_kv = h / p.h_per_kv;
  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + (seq.start_q + m0) * p.q_row_stride +
               h * p.q_head_stride;
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + seq.start_kv * p.k_row_stride +
               h_kv * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + seq.start_kv * p.v_row_stride +
               h_kv * p.v_head_stride;
  T* out = static_cast<T*>(p.out) + b * p.o_batch_stride + (seq.start_q + m0) * p.o_row_stride +
           h * p.o_head_stride;
  float* lse = p.lse ? p.lse + b * p.lse_batch_stride + (seq.start_q + m0) * p.lse_row_stride +
                           h * p.lse_head_stride
                     : nullptr;

  const flash::KvTiles tiles = rows > 0 ? flash::kv_tiles<kM, kN>(p, seq, m0) : flash::KvTiles{};
  if (tiles.last < tiles.first) {  // no row of this tile sees a key: lse = the sink's logit (-inf without one)
    flash::store_zeros<kDV, kM, kThreads>(out, p.o_row_stride, rows_out, tid);
    if (lse)
      for (int r = tid; r < rows_out; r += kThreads) lse[r * p.lse_row_stride] = detail::sink_logit(p.sink, h);
    return;
  }

  // Prologue: Q and the last KV tile's K (boundary tiles first, as FA2 does).
  load_tile<QTile, kM, kThreads>(q_s, q, p.q_row_stride, rows, tid);
  load_tile<KTile, kN, kThreads>(k_s, k + tiles.last * kN * p.k_row_stride, p.k_row_stride,
                                 seq.len_kv - tiles.last * kN, tid);
  sm80::cp_async_commit();

  // (In this order: with the slope read first, ptxas spilled 36 B in sm_90a's
  // d 64 wide loop, two reloads per tile; 16 B this way, and d 64 1-2% faster.)
  const float unit = p.score_mods ? 1.f : p.scale_log2;  // score units -> log2 units
  const float slope = p.alibi ? p.alibi[b * p.alibi_batch_stride + h * p.alibi_head_stride] : 0.f;
  const uint32_t bh = static_cast<uint32_t>(b) * static_cast<uint32_t>(p.h_q) + static_cast<uint32_t>(h);

  flash::OnlineSoftmax<MA, Cfg::kQuadSums> softmax;
  float o[MA][NO][4];
  sm80::zero(o);

  for (int n = tiles.last; n >= tiles.first; --n) {
    const int n0 = n * kN;
    // K[n] (and Q) landed, and every warp is done with V[n + 1]: load V[n].
    // The copies' per-thread addresses are the same in every tile; hoisted
    // out of the loop as 64-bit pointers, they spilled (reloads per tile).
    // With kRebuildCopyAddressesSm80 an opaque thread index keeps them here
    // on sm_80, a few integer ops per tile (bwd_dq.cuh does the same).
    int copy_tid = tid;
#if !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
    if constexpr (Cfg::kRebuildCopyAddressesSm80) asm volatile("" : "+r"(copy_tid));
#endif
    sm80::cp_async_wait<0>();
    __syncthreads();
    load_tile<VTile, kN, kThreads>(v_s, v + n0 * p.v_row_stride, p.v_row_stride, seq.len_kv - n0, copy_tid);
    sm80::cp_async_commit();

    flash::KeepBits<MA, NA> keep;
    if (dropout) keep.compute(p, bh, m0 + warp_row, n0, lane);

    float s[MA][NA][4];
    sm80::zero(s);
    sm80::gemm_abt<T, MA, NA, kDQK, QTile, KTile>(s, q_s, k_s, warp_row, lane);

    // V[n] landed, and every warp is done with K[n]: load K[n - 1] behind the softmax and P.V.
    sm80::cp_async_wait<0>();
    __syncthreads();
    if (n > tiles.first) {
      load_tile<KTile, kN, kThreads>(k_s, k + (n0 - kN) * p.k_row_stride, p.k_row_stride, seq.len_kv - n0 + kN,
                                     copy_tid);
      sm80::cp_async_commit();
    }

    if (p.score_mods) flash::apply_score_mods(s, p, slope, m0 + warp_row, n0, seq.shift, lane);
    if (!(n0 >= tiles.all_begin && n0 + kN <= tiles.all_end)) flash::apply_mask(s, p, seq, m0 + warp_row, n0, lane);
    softmax.step(s, o, unit);
    if (dropout) keep.apply(s);

    sm80::gemm_rb<T, MA, NA, NO, VTile>(o, s, v_s, lane);
  }

  // Read after the loop: the lse of a row that sees no key (-inf without a sink).
  const float sink = detail::sink_logit(p.sink, h);
  float inv[MA][2], row_lse[MA][2];
  softmax.finish(inv, row_lse, unit, p.dropout_scale, sink * flash::kLog2e);
  // Padding rows (past len_q) read zero Q rows and may sit in unmasked tiles: clear them.
  bool valid[MA][2];
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      valid[ma][hh] = warp_row + 16 * ma + 8 * hh + (lane >> 2) < rows;
      if (!valid[ma][hh]) {
        inv[ma][hh] = 0.f;
        row_lse[ma][hh] = sink;
      }
    }
  // The max logit lives in the builds with dropout's path (fwd_build): in the
  // wide d 64 / d 128 builds its few instructions moved ptxas to 12-40 B of
  // spills in the tile loop.
  flash::PendingMaxLogit max_logit;  // read before the output's staging, settled after its store
  if (Cfg::kDropout && p.max_logit)
    max_logit.hold(p.max_logit + h * p.max_logit_stride, softmax.largest_score(row_lse, unit, valid), lane);
  // Q's shared memory is free: every warp passed the last barrier after its
  // last Q.K^T. Each warp stages its own rows; the barrier makes them visible.
  flash::stage_block<T, OTile>(q_smem, o, inv, warp_row, 0, lane);
  if (lse && (lane & 3) == 0)
#pragma unroll
    for (int ma = 0; ma < MA; ++ma)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = warp_row + 16 * ma + 8 * hh + (lane >> 2);
        if (r < rows_out) lse[r * p.lse_row_stride] = row_lse[ma][hh];
      }
  __syncthreads();
  flash::store_tile<OTile, kM, kThreads>(out, p.o_row_stride, q_smem, rows_out, tid);
  if (Cfg::kDropout && p.max_logit) max_logit.settle(lane);
}

// Launches the kernel for one instantiation on the caller's stream.
template <typename T, int kDQK, int kDV, FwdBuild kBuild>
void launch_fwd(const flash::FwdParams& p, cudaStream_t stream) {
  using Cfg = FwdConfig<kDQK, kDV, kBuild>;
  auto* kernel = flash_fwd_kernel<T, kDQK, kDV, kBuild>;
  if (!Cfg::kDropout && (p.dropout_threshold || p.max_logit))  // fwd_build() picks the row's dropout build
    fail(ErrorKind::runtime, "flash_sm80's wide forward build has no dropout or max logit path",
         p.dropout_threshold ? "dropout" : "max_logit", "the row's dropout build",
         "report this: fwd_build() should have chosen it");
  if (Cfg::kSmemBytes > 48 * 1024)
    ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  const dim3 grid((p.s_q + Cfg::kBlockM - 1) / Cfg::kBlockM, p.h_q, p.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  ATTN_CUDA(cudaGetLastError());
}

}  // namespace attn::flash_sm80
