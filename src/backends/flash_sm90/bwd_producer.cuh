// flash_sm90's backward: warpgroup 0, which gives up its registers to the
// consumers. Its first warp loads: K and V once, then for each query head of
// the group and each query tile that sees the CTA's keys, the tile's Q and dO
// with TMA and its rows' {lse2, D} (the pre-pass's row terms) into the
// kStages-deep ring. One thread of its second warp adds each query tile's dQ,
// staged by the consumers, to the fp32 accumulator with one bulk reduce-add
// (per-thread red.global adds had the consumers waiting on the memory pipeline).
#pragma once

#include <cstdint>

#include "backends/flash_sm90/bwd_kv_block.cuh"
#include "backends/flash_sm90/bwd_params.h"
#include "backends/flash_sm90/bwd_smem.cuh"
#include "kernels/sm90/tma.cuh"

namespace attn::flash_sm90 {

// The loading warp (lanes 0..31): lane 0 issues the copies, every lane
// stores row terms and arrives on the stage's "full" barrier. With
// kEarlyDo (bwd_early_do) a stage's dO is loaded once the consumers freed
// it (do_empty), before Q's copy waits for the whole stage (empty).
template <class Cfg, bool kEarlyDo>
__device__ __forceinline__ void bwd_load(const Sm90BwdParams& args, const BwdSmem<Cfg>& smem, const BwdKvBlock& blk,
                                         int lane) {
  constexpr int kD = Cfg::kHeadDim, kDV = Cfg::kHeadDimV, kM = Cfg::kBlockM, kS = Cfg::kStages;
  const flash::BwdParams& bp = args.p;
  const flash::FwdParams& p = bp.fwd;
  const int seq_coord = p.packed ? 0 : blk.b;
  if (lane == 0) {
    sm90::tma_prefetch_map(&args.q);
    sm90::tma_prefetch_map(&args.dout);
    smem.kv_full().arrive_expect_tx(Cfg::kSmemK + Cfg::kSmemV);
    const int row = static_cast<int>(blk.seq.start_kv) + blk.n0;
#pragma unroll
    for (int cb = 0; cb < kD / 64; ++cb)
      sm90::tma_load_4d(smem.k_tile().column_block(cb), &args.k, smem.kv_full().addr, cb * 64, row, blk.h_kv,
                        seq_coord);
#pragma unroll
    for (int cb = 0; cb < kDV / 64; ++cb)
      sm90::tma_load_4d(smem.v_tile().column_block(cb), &args.v, smem.kv_full().addr, cb * 64, row, blk.h_kv,
                        seq_coord);
  }
  sm90::PipelineState<kS> ring;
  for (int hh = blk.hh0; hh < blk.hh1; ++hh) {
    const int h = blk.h_kv * p.h_per_kv + hh;
    const float2* terms = bp.row_terms + h * bp.rows_q + blk.tok0;
    for (int m = blk.mt.first; m <= blk.mt.last; ++m, ring.advance()) {
      const int stage = ring.stage(), m0 = m * kM;
      // The tile's row terms are read before its stage is free, so their
      // latency runs under the wait. Rows past the sequence get lse2 = +inf:
      // their P is 0.
      float2 t[kM / 32];
#pragma unroll
      for (int j = 0; j < kM / 32; ++j) {
        const int r = lane + 32 * j;
        t[j] = m0 + r < blk.seq.len_q ? terms[m0 + r] : make_float2(INFINITY, 0.f);
      }
      const int row = static_cast<int>(blk.seq.start_q) + m0;
      auto load_do = [&] {
#pragma unroll
        for (int cb = 0; cb < kDV / 64; ++cb)
          sm90::tma_load_4d(smem.do_tile(stage).column_block(cb), &args.dout, smem.full(stage).addr, cb * 64, row, h,
                            seq_coord);
      };
      if constexpr (kEarlyDo) {  // dO first, on the full barrier's bytes before its arrivals
        smem.do_empty(stage).wait(ring.producer_phase());
        if (lane == 0) {
          smem.full(stage).expect_tx(Cfg::kSmemDo);
          load_do();
        }
      }
      smem.empty(stage).wait(ring.producer_phase());
#pragma unroll
      for (int j = 0; j < kM / 32; ++j) {
        const uint32_t at = smem.terms(stage) + 8 * (lane + 32 * j);
        const float delta = t[j].y * bp.delta_scale;  // D (1 - p) under dropout (flash::BwdParams)
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(t[j].x), "f"(delta) : "memory");
      }
      if (lane == 0) {
        smem.full(stage).arrive_expect_tx(Cfg::kSmemQ + (kEarlyDo ? 0 : Cfg::kSmemDo));
#pragma unroll
        for (int cb = 0; cb < kD / 64; ++cb)
          sm90::tma_load_4d(smem.q_tile(stage).column_block(cb), &args.q, smem.full(stage).addr, cb * 64, row, h,
                            seq_coord);
        if constexpr (!kEarlyDo) load_do();
      } else {
        smem.full(stage).arrive();
      }
    }
  }
}

// The dQ adders: each query tile's staged dQ into the rows of the
// accumulator, rows past the sequence left out. Two threads (of two warps)
// take the walk's tiles in turn, `odd` the odd ones. In the deterministic
// mode an adder holds a tile's turn until its add has landed in global
// memory (a microsecond or two); meanwhile the other adder takes the next
// tile, which one adder alone made the walk wait for (docs/FLASH_SM90.md).
template <class Cfg>
__device__ __forceinline__ void bwd_add_dq(const flash::BwdParams& bp, const BwdSmem<Cfg>& smem, const BwdKvBlock& blk,
                                           bool odd) {
  constexpr int kD = Cfg::kHeadDim, kM = Cfg::kBlockM;
  const flash::FwdParams& p = bp.fwd;
  int it = 0;
  for (int hh = blk.hh0; hh < blk.hh1; ++hh) {
    const int hq = blk.h_kv * p.h_per_kv + hh;
    float* const dq_rows = bp.dq_accum + (hq * bp.rows_q + blk.tok0) * kD;
    for (int m = blk.mt.first; m <= blk.mt.last; ++m, ++it) {
      if ((it & 1) != static_cast<int>(odd)) continue;
      const int rows = min(kM, blk.seq.len_q - m * kM);
      // Deterministic mode: the KV tiles that see query tile m add its dQ in
      // bp.dq_order (bwd_dq_order.h), each behind a per-(sequence, head,
      // tile) counter (flash_sm80's wait_turn / pass_turn; the same
      // counters). KV tile n adds for m exactly when n is in kv_tiles(m)
      // (bwd_kv_block's `sees`).
      int* const sem = bp.dq_semaphore ? bp.dq_semaphore + (static_cast<int64_t>(blk.b) * p.h_q + hq) * bp.m_tiles + m
                                       : nullptr;
      if (sem && rows > 0) {
        const flash::KvTiles kt = flash::kv_tiles<kM, Cfg::kBlockN>(p, blk.seq, m * kM);
        const int last = last_adding_kv_tile(kt.last, blk.seq.len_kv, Cfg::kBlockN);
        const int turn = dq_turn(bp.dq_order, kt.first, last, blk.n);
        while (*reinterpret_cast<const volatile int*>(sem) != turn) {
        }
        __threadfence();  // their adds are visible before ours start
      }
      // The other adder has read tile it - 1 (so dq_full's phase it - 1 is
      // complete, and the parity wait below cannot pass on it).
      if (it > 0) smem.dq_empty().wait((it - 1) & 1);
      smem.dq_full().wait(it & 1);
      if (rows > 0) {
        sm90::bulk_reduce_add_f32(dq_rows + static_cast<int64_t>(m) * kM * kD, smem.dq_stage(), rows * kD * 4);
        sm90::bulk_commit();
        sm90::bulk_wait_read<0>();
      }
      smem.dq_empty().arrive();
      if (sem && rows > 0) {
        sm90::bulk_wait<0>();  // the adds are done in global memory, not only read from shared
        __threadfence();
        atomicAdd(sem, 1);
      }
    }
  }
  sm90::bulk_wait<0>();
}

}  // namespace attn::flash_sm90
