// flash_sm90's forward: the producer. One thread of warpgroup 0 walks the
// work queue and, for each item some row of which sees a key, loads the
// item's Q tile into a Q buffer and its visible K/V tiles, first to last,
// into the kStages-deep ring with TMA. Each buffer is guarded by a "full"
// barrier (its bytes landed) and an "empty" one (every consumer thread done
// reading). It takes the next item once this one's loads are issued (a few
// KV tiles before the consumers need it), not earlier: an item reserved
// while another runs is one an idle SM cannot take.
#pragma once

#include <cstdint>

#include "backends/flash_sm90/fwd_params.h"
#include "backends/flash_sm90/fwd_smem.cuh"
#include "backends/flash_sm90/fwd_work_queue.cuh"
#include "kernels/sm90/pipeline.cuh"
#include "kernels/sm90/tma.cuh"

namespace attn::flash_sm90 {

template <class Cfg>
__device__ __forceinline__ void fwd_producer(const Sm90FwdParams& args, const FwdSmem<Cfg>& smem,
                                             FwdWorkQueue<Cfg>& queue) {
  constexpr int kDQK = Cfg::kHeadDimQK, kDV = Cfg::kHeadDimV, kN = Cfg::kBlockN;
  const flash::FwdParams& p = args.p;
  sm90::PipelineState<Cfg::kQBuffers> q_state;  // Q buffers: one use per item with loads
  sm90::PipelineState<Cfg::kStages> kv_state;   // K/V stages: one use per KV tile
  sm90::tma_prefetch_map(&args.q);
  sm90::tma_prefetch_map(&args.k);
  sm90::tma_prefetch_map(&args.v);
  for (int t = blockIdx.x;; t = queue.claim()) {
    queue.publish(t);
    if (t >= queue.items()) break;
    const FwdItem w = queue.item(t);
    if (!w.has_work()) continue;
    // TMA coordinates: thd addresses tokens of the packed tensor (one
    // "sequence"); the others (token within the sequence, sequence).
    const int seq_coord = p.packed ? 0 : w.b, h_kv = w.h / p.h_per_kv;
    const int kv_row0 = static_cast<int>(w.seq.start_kv);
    const int qb = q_state.stage();
    smem.q_empty(qb).wait(q_state.producer_phase());
    smem.q_full(qb).arrive_expect_tx(Cfg::kSmemQ);
#pragma unroll
    for (int cb = 0; cb < kDQK / 64; ++cb)
      sm90::tma_load_4d(smem.q_tile(qb).column_block(cb), &args.q, smem.q_full(qb).addr, cb * 64,
                        static_cast<int>(w.seq.start_q) + w.m0, w.h, seq_coord);
    q_state.advance();
    for (int n = w.tiles.first; n <= w.tiles.last; ++n, kv_state.advance()) {
      const int stage = kv_state.stage();
      const uint32_t phase = kv_state.producer_phase();
      smem.k_empty(stage).wait(phase);
      smem.k_full(stage).arrive_expect_tx(Cfg::kSmemK);
#pragma unroll
      for (int cb = 0; cb < kDQK / 64; ++cb)
        sm90::tma_load_4d(smem.k_tile(stage).column_block(cb), &args.k, smem.k_full(stage).addr, cb * 64,
                          kv_row0 + n * kN, h_kv, seq_coord);
      smem.v_empty(stage).wait(phase);
      smem.v_full(stage).arrive_expect_tx(Cfg::kSmemV);
#pragma unroll
      for (int cb = 0; cb < kDV / 64; ++cb)
        sm90::tma_load_4d(smem.v_tile(stage).column_block(cb), &args.v, smem.v_full(stage).addr, cb * 64,
                          kv_row0 + n * kN, h_kv, seq_coord);
    }
  }
}

}  // namespace attn::flash_sm90
