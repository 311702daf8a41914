// flash_sm90's backward kernel: FlashAttention's backward on Hopper's
// asynchronous units (FlashAttention-3's arrangement of the products). One CTA
// per (KV tile of 128 keys, 64 from d_qk 192, KV head, sequence)
// (bwd_kv_block.cuh: the grid's order, the query tiles that see the keys);
// this file wires its stages:
// - warpgroup 0 (bwd_producer.cuh): one warp loads K and V once, then each
//   query tile's Q, dO and rows' {lse2, D} into a kStages-deep ring; one
//   thread of each of two other warps adds every other tile's staged dQ to
//   the fp32 accumulator;
// - warpgroups 1 and 2, the consumers, 64 keys each (from d_qk 192 the same
//   64 keys, half of d each): the main loop (bwd_mainloop.cuh, from d_qk 192
//   bwd_mainloop_wide.cuh: the five products, P and dS, dQ's staging) over
//   the query tiles, dK and dV in registers throughout, then the epilogue
//   (bwd_epilogue.cuh: dK and dV staged with stmatrix, written by TMA).
// Shared memory is one struct (bwd_storage.cuh), addressed by bwd_smem.cuh.
// The pre-pass (D, dq_accum = 0) and the dq conversion are the flash library's.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "attn/error.h"
#include "backends/flash/heuristics.h"
#include "backends/flash_sm90/bwd_config.h"
#include "backends/flash_sm90/bwd_epilogue.cuh"
#include "backends/flash_sm90/bwd_kv_block.cuh"
#include "backends/flash_sm90/bwd_mainloop.cuh"
#include "backends/flash_sm90/bwd_mainloop_wide.cuh"
#include "backends/flash_sm90/bwd_params.h"
#include "backends/flash_sm90/bwd_producer.cuh"
#include "backends/flash_sm90/bwd_smem.cuh"
#include "core/cuda_check.h"
#include "kernels/dependent_launch.cuh"
#include "kernels/sm90/mbarrier.cuh"

namespace attn::flash_sm90 {

template <typename T, int kDQK, int kDV, bool kScoreMods, bool kDropout>
__global__ void __launch_bounds__(BwdConfig<kDQK, kDV>::kThreads, 1)
    flash_bwd_sm90_kernel(const __grid_constant__ Sm90BwdParams args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = BwdConfig<kDQK, kDV>;
  // An early launch (below): the pre-pass may still write the row terms and
  // zero dq_accum. Every thread waits, those of CTAs without work too, so
  // this grid's end implies the pre-pass's for dQ's conversion, launched
  // early behind it; the conversion may launch once every CTA has started.
  kernels::wait_for_prior_grid();
  kernels::allow_dependent_launch();
  BwdKvBlock blk;
  if (!bwd_kv_block<Cfg>(args, blk)) return;  // the whole CTA
  extern __shared__ char smem_raw[];
  const BwdSmem<Cfg> smem(smem_raw);
  const int tid = threadIdx.x;
  if (tid == 0) smem.init_barriers();
  __syncthreads();

  if (tid < 128) {  // warpgroup 0: its first warp loads, a thread each of the next two adds dQ
    sm90::regs_decrease<Cfg::kProducerRegs>();
    if (!blk.has_work()) return;
    if (tid < 32) bwd_load<Cfg, bwd_early_do<Cfg>(kScoreMods, kDropout)>(args, smem, blk, tid);
    if (tid == 32 || tid == 64) bwd_add_dq<Cfg>(args.p, smem, blk, tid == 64);
    return;
  }

  sm90::regs_increase<Cfg::kConsumerRegs>();
  const int wg = tid / 128 - 1;
  BwdRegisters<Cfg> regs;
  regs.clear();
  if (blk.has_work()) {
    // The warp index and the consumer's first key from lane 0: warp-uniform
    // for ptxas, they live in uniform registers. At d 64 the plain build's
    // spills fell from 60 / 76 to 32 / 44 bytes, its tile loop's reloads from
    // 3 to 2 per tile, and its backward gained 2-4% on an H200.
    const int warp = __shfl_sync(0xffffffff, (tid / 32) & 3, 0);
    const int key0 = __shfl_sync(0xffffffff, blk.n0 + wg * Cfg::kConsumerKeys, 0);
    const BwdMainloop<T, Cfg, kScoreMods, kDropout> mainloop{args.p.fwd,
                                                              smem,
                                                              blk,
                                                              regs,
                                                              wg,
                                                              tid - 128,
                                                              tid & 31,
                                                              warp,
                                                              __shfl_sync(0xffffffff, wg, 0) * Cfg::kConsumerKeys,
                                                              key0};
    if constexpr (Cfg::kWide)
      BwdMainloopWide<T, Cfg, kScoreMods, kDropout>(mainloop).run();
    else
      mainloop.run();
  }
  bwd_store_dk_dv<T, Cfg>(args, smem, blk, regs, tid);
#endif
}

// One CTA per (KV tile, KV head, sequence) on the caller's stream, in the
// chunked order above. `early`: launched behind the pre-pass (or dsink's
// sum), so that its CTAs start on the SMs the pre-pass's last wave leaves.
template <typename T, int kDQK, int kDV, bool kScoreMods, bool kDropout>
void launch_bwd(const Sm90BwdParams& args, bool early, cudaStream_t stream) {
  using Cfg = BwdConfig<kDQK, kDV>;
  auto* kernel = flash_bwd_sm90_kernel<T, kDQK, kDV, kScoreMods, kDropout>;
  ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  const auto& p = args.p.fwd;
  const int kv_tiles = (p.s_kv + Cfg::kBlockN - 1) / Cfg::kBlockN;
  const int units = p.h_q / p.h_per_kv * p.batch * args.head_split;  // (KV head, sequence) pairs, or their parts
  if (kv_tiles > 65535)  // grid y (supports() refuses these first)
    fail(ErrorKind::unsupported, "flash_sm90's backward takes at most 65535 KV tiles",
         "max_seqlen_kv " + std::to_string(p.s_kv),
         "at most " + std::to_string(65535LL * Cfg::kBlockN) + " keys per sequence",
         "use another backend (cudnn, flash_sm80) for longer sequences");
  Sm90BwdParams a = args;
  if (a.p.dq_semaphore) a.p.dq_order = dq_order(p.window_right);
  const int heads = p.h_per_kv / args.head_split;  // query heads per unit
  // The deterministic mode's descending order keeps bwd_group_chunk (MHA in
  // chunks there is not measured).
  if (!a.p.dq_semaphore)
    a.p.group_chunk = flash::sm90_bwd_group_chunk(heads, p.window_left, p.window_right, p.s_q, kDQK, kDV, units);
  else if (a.p.dq_order == kDqAscending)
    a.p.group_chunk = flash::bwd_ascending_dq_chunk(heads, p.s_q, kDQK, kDV, units);
  else
    a.p.group_chunk = flash::bwd_group_chunk(heads, p.window_left, p.window_right, p.s_q, kDQK, kDV, units);
  const dim3 grid(a.p.group_chunk, kv_tiles, (units + a.p.group_chunk - 1) / a.p.group_chunk);
  kernels::launch_dependent(kernel, grid, Cfg::kThreads, Cfg::kSmemBytes, stream, early, a);
}

}  // namespace attn::flash_sm90
