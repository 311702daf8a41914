// flash_sm90's forward kernel: FlashAttention's algorithm on Hopper's
// asynchronous units. A persistent grid (one CTA per SM) walks the work
// queue (fwd_work_queue.cuh: query tiles of 64 rows per consumer, heaviest
// first); this file wires the stages of each CTA:
// - warpgroup 0, the producer (fwd_producer.cuh): one thread loads each
//   item's Q and its visible K/V tiles, first to last, into a ring of
//   shared-memory stages with TMA, running an item ahead of the consumers;
// - warpgroups 1.. (two, or three at d 64), the consumers, 64 query rows each:
//   the main loop (fwd_mainloop.cuh: the two products on wgmma, the
//   consumers' turn-taking) over an item's KV tiles with the softmax in
//   registers (fwd_softmax.cuh), then the epilogue (fwd_epilogue.cuh: O
//   staged with stmatrix, written by TMA stores).
// Shared memory is one struct (fwd_storage.cuh), its barriers typed handles
// (fwd_smem.cuh, kernels/sm90/pipeline.cuh). Where the registers allow
// (FwdConfig::kOverlapEpilogue), an item's last P.V goes in with the next
// item's first Q.K^T, and the epilogue runs under that Q.K^T.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/flash_sm90/fwd_config.h"
#include "backends/flash_sm90/fwd_epilogue.cuh"
#include "backends/flash_sm90/fwd_mainloop.cuh"
#include "backends/flash_sm90/fwd_params.h"
#include "backends/flash_sm90/fwd_producer.cuh"
#include "backends/flash_sm90/fwd_smem.cuh"
#include "backends/flash_sm90/fwd_storage.cuh"
#include "backends/flash_sm90/fwd_work_queue.cuh"
#include "core/cuda_check.h"
#include "kernels/dependent_launch.cuh"
#include "kernels/sm90/mbarrier.cuh"
#include "kernels/sm90/wgmma.cuh"

namespace attn::flash_sm90 {

// kDropout: the build with dropout's path (Philox bits per tile), run for
// calls with dropout. Compiled into every call, its bits and code cost d 64
// spills (the softmax's running max and sum reloaded on every tile), so it
// is a build apart, as FlashAttention's dropout kernels are. Its tests keep
// p.dropout_threshold beside kDropout, with which ptxas spills less.
template <typename T, int kDQK, int kDV, bool kDropout>
__global__ void __launch_bounds__(FwdConfig<kDQK, kDV>::kThreads, 1)
    flash_fwd_sm90_kernel(const __grid_constant__ Sm90FwdParams args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = FwdConfig<kDQK, kDV>;
  extern __shared__ char smem_raw[];
  const FwdSmem<Cfg> smem(smem_raw);
  const int tid = threadIdx.x;
  if (tid == 0) smem.init_barriers(args.p.cache.block_table ? args.kv_warps : 1);
  __syncthreads();
  FwdWorkQueue<Cfg> queue(args, smem);

  if (tid < 128) {  // the producer warpgroup: one thread issues the copies (warps for a paged cache)
    sm90::regs_decrease<Cfg::kProducerRegs>();
    if (args.p.cache.block_table) {
      if (tid < 32 * args.kv_warps) fwd_producer<Cfg, true>(args, smem, queue);
    } else if (tid == 0) {
      fwd_producer<Cfg, false>(args, smem, queue);
    }
    return;
  }

  sm90::regs_increase<Cfg::kConsumerRegs>();
  const int wg = tid / 128 - 1, ctid = tid - 128, lane = tid & 31;
  const int row0 = wg * 64 + ((tid / 32) & 3) * 16;  // this warp's first row in the tile
  const FwdEpilogue<T, Cfg> epilogue{args, smem, wg, ctid, lane, row0};
  FwdRegisters<Cfg> regs;
  FwdMainloop<T, Cfg, kDropout> mainloop{args.p, smem, queue, epilogue, regs, wg, ctid, lane, row0,
                                         args.p.score_mods ? 1.f : args.p.scale_log2};
  mainloop.first_turn();

  // Each pass of the loop starts with the item's first scores in S. No
  // product is in flight across a branch that ptxas cannot see through
  // (a conditional wgmma or one in flight over the loop's back edge
  // serializes every wgmma of the kernel: ptxas C7518), so the one product
  // issued without knowing whether a next item exists reads whatever K and
  // Q are in shared memory and is discarded.
  MaxLogitCarry carry;
  constexpr bool kDeferMax = !kDropout;  // the max logit one item behind (fwd_epilogue.cuh)
  FwdItem cur = mainloop.take_item();
  int q_cur = cur.t >= 0 ? mainloop.first_scores([] {}) : 0;  // the current item's Q buffer
  while (cur.t >= 0) {
    const auto last = mainloop.run_tiles(cur, q_cur);
    FwdItem next;
    int q_next = 0;
    if (Cfg::kOverlapEpilogue) {
      // The last P.V and the next item's first Q.K^T go in together, and
      // this item's epilogue runs under the Q.K^T.
      next = mainloop.take_item();
      smem.v_full(last.stage).wait(last.phase);
      q_next = mainloop.q_state.stage();  // with two buffers, not the one the epilogue writes
      if (next.t >= 0) mainloop.await_first();
      mainloop.turn_begin();
      mainloop.issue_pv(last.stage);
      mainloop.issue_qk(mainloop.kv_state.stage(), q_next);
      mainloop.turn_end();
      epilogue.template flush<kDeferMax>(carry, carry.h);  // the previous item's max logit, under the products
      sm90::wgmma_wait<1>();
    } else if (!last.done) {
      smem.v_full(last.stage).wait(last.phase);
      mainloop.issue_pv(last.stage);
      sm90::wgmma_wait<0>();
    }
    if (!last.done) {
      sm90::fence_registers(regs.o_flat());
      smem.v_empty(last.stage).arrive();
    }
    epilogue.template store<kDeferMax>(cur, q_cur, regs.o, regs.softmax, mainloop.unit, carry);
    if (Cfg::kOverlapEpilogue) {
      sm90::wgmma_wait<0>();  // the next item's first scores (or the discarded product)
      sm90::fence_registers(regs.s_flat());
    } else {
      next = mainloop.take_item();
      if (next.t >= 0) q_next = mainloop.first_scores([&] { epilogue.template flush<kDeferMax>(carry, cur.h); });
      else epilogue.template flush<kDeferMax>(carry, cur.h);
    }
    cur = next;
    q_cur = q_next;
  }
  epilogue.template finish<kDeferMax>(carry);
#endif
}

// Launches the kernel for one instantiation on the caller's stream: one
// persistent CTA per SM (fewer for fewer items). `item_counter` is a zeroed
// int in device memory (zeroed by the kernel before where `early`); the CTAs
// take their second and later items from it.
template <typename T, int kDQK, int kDV, bool kDropout>
void launch_fwd(const Sm90FwdParams& args, int sm_count, bool early, cudaStream_t stream) {
  using Cfg = FwdConfig<kDQK, kDV>;
  auto* kernel = flash_fwd_sm90_kernel<T, kDQK, kDV, kDropout>;
  ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  const int64_t items =
      static_cast<int64_t>((args.p.s_q + Cfg::kBlockM - 1) / Cfg::kBlockM) * args.p.h_q * args.p.batch;
  const int grid = static_cast<int>(sm_count > 0 && items > sm_count ? sm_count : items);
  kernels::launch_dependent(kernel, grid, Cfg::kThreads, Cfg::kSmemBytes, stream, early, args);
}

}  // namespace attn::flash_sm90
