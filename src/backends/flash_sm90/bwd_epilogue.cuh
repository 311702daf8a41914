// flash_sm90's backward: the epilogue of a consumer warpgroup's dK and dV
// (its 64 keys, or at d 256 its half of d's columns over the CTA's 64 keys).
// dK (times the softmax scale: dS is the gradient of the scaled scores) and
// dV, rounded to T, are staged with stmatrix where the Q and dO stages were
// (the CTA's key rows of 128-byte swizzled blocks each, like the forward's
// output tile) once both consumers' last products have read them, then
// written by TMA stores of the consumer's 64 rows and column blocks (TMA
// writes no row past the tensor's end), or row by row where a packed
// sequence ends inside the consumer's rows.
#pragma once

#include <cstdint>

#include "backends/flash_sm90/bwd_kv_block.cuh"
#include "backends/flash_sm90/bwd_mainloop.cuh"
#include "backends/flash_sm90/bwd_params.h"
#include "backends/flash_sm90/bwd_smem.cuh"
#include "kernels/sm80/mma.cuh"
#include "kernels/sm90/stmatrix.cuh"
#include "kernels/sm90/tma.cuh"

namespace attn::flash_sm90 {

// A consumer's first key row of dK / dV in the CTA's tile (the wide tiles
// split d, the others the keys; BwdRegisters::column gives the columns).
template <class Cfg>
__device__ __forceinline__ int key_row0(int wg) {
  return Cfg::kWide ? 0 : wg * 64;
}

// With a head split (args.dkv_accum): this CTA's part of dK (times the
// scale) and dV added into the fp32 accumulators from registers, two floats
// per reduction, rows past the sequence left out (their zeros stay).
template <class Cfg>
__device__ __forceinline__ void bwd_add_dk_dv(const Sm90BwdParams& args, const BwdKvBlock& blk,
                                              const BwdRegisters<Cfg>& regs, int tid) {
  constexpr int kD = Cfg::kHeadDim, ND = Cfg::kConsumerCols / 8;
  const flash::FwdParams& p = args.p.fwd;
  const int wg = tid / 128 - 1, lane = tid & 31, warp = (tid / 32) & 3;
  const int row0 = key_row0<Cfg>(wg);
  const int64_t rows = static_cast<int64_t>(p.batch) * p.s_kv, heads_kv = p.h_q / p.h_per_kv;
  float* const dk_acc = args.dkv_accum + (blk.h_kv * rows + static_cast<int64_t>(blk.b) * p.s_kv + blk.n0) * kD;
  float* const dv_acc = dk_acc + heads_kv * rows * kD;  // dV's accumulator follows dK's
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {  // accumulator rows 16 warp + lane / 4 (+ 8)
    const int r = row0 + 16 * warp + (lane >> 2) + 8 * hr;
    if (r >= blk.rows_out || blk.n0 + r >= blk.seq.len_kv) continue;
#pragma unroll
    for (int i = 0; i < ND; ++i) {
      const int c = BwdRegisters<Cfg>::column(wg, i) + 2 * (lane & 3);
      asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dk_acc + r * kD + c),
                   "f"(regs.dk[i][2 * hr] * p.scale), "f"(regs.dk[i][2 * hr + 1] * p.scale)
                   : "memory");
      asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dv_acc + r * kD + c), "f"(regs.dv[i][2 * hr]),
                   "f"(regs.dv[i][2 * hr + 1])
                   : "memory");
    }
  }
}

template <typename T, class Cfg>
__device__ __forceinline__ void bwd_store_dk_dv(const Sm90BwdParams& args, const BwdSmem<Cfg>& smem,
                                                const BwdKvBlock& blk, const BwdRegisters<Cfg>& regs, int tid) {
  constexpr int kD = Cfg::kHeadDim, ND = Cfg::kConsumerCols / 8;
  const flash::BwdParams& bp = args.p;
  const flash::FwdParams& p = bp.fwd;
  const int wg = tid / 128 - 1, lane = tid & 31, warp = (tid / 32) & 3;
  const int row0 = key_row0<Cfg>(wg);
  if (args.dkv_accum) {
    bwd_add_dk_dv<Cfg>(args, blk, regs, tid);
    return;
  }
  const auto dk_stage = smem.dk_stage(), dv_stage = smem.dv_stage();
  sm90::named_sync(kBarEpilogue, 128 * Cfg::kConsumers);
  {
    // Lane l addresses row l % 8 of matrix l / 8; matrix j holds rows 8 (j %
    // 2).. of n8 block 2 np + j / 2 (stmatrix.cuh).
    const int st_row = row0 + 16 * warp + ((lane >> 3) & 1) * 8 + (lane & 7);
    const float scale = p.scale;
#pragma unroll
    for (int np = 0; np < ND / 2; ++np) {
      uint32_t rk[4], rv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = 2 * np + j / 2, e0 = 2 * (j % 2);
        rk[j] = sm80::pack2<T>(regs.dk[i][e0] * scale, regs.dk[i][e0 + 1] * scale);
        rv[j] = sm80::pack2<T>(regs.dv[i][e0], regs.dv[i][e0 + 1]);
      }
      const int chunk = BwdRegisters<Cfg>::column(wg, 2 * np) / 8 + (lane >> 4);
      sm90::stmatrix_x4(dk_stage.chunk(st_row, chunk), rk[0], rk[1], rk[2], rk[3]);
      sm90::stmatrix_x4(dv_stage.chunk(st_row, chunk), rv[0], rv[1], rv[2], rv[3]);
    }
  }
  sm90::fence_proxy_async();  // the stores above, before the TMA stores read them
  // A consumer writes its 64 key rows; with the wide tiles the two write
  // the CTA's 64 rows together (at d 192 they share a column block).
  constexpr int kWriters = Cfg::kWide ? 128 * Cfg::kConsumers : 128;
  const int writer = Cfg::kWide ? tid - 128 : tid & 127;
  sm90::named_sync(Cfg::kWide ? kBarEpilogue : kBarConsumer0 + wg, kWriters);
  if (blk.rows_out >= row0 + 64 || !p.packed) {
    if (writer == 0) {
      const int seq_coord = p.packed ? 0 : blk.b, row = static_cast<int>(blk.seq.start_kv) + blk.n0 + row0;
#pragma unroll
      for (int cb = 0; cb < kD / 64; ++cb) {
        sm90::tma_store_4d(&args.dk, dk_stage.column_block(cb) + row0 * 128, cb * 64, row, blk.h_kv, seq_coord);
        sm90::tma_store_4d(&args.dv, dv_stage.column_block(cb) + row0 * 128, cb * 64, row, blk.h_kv, seq_coord);
      }
      sm90::bulk_commit();
      sm90::bulk_wait<0>();  // the stage stays until the stores have read it
    }
  } else {  // thd, the sequence ends inside this consumer's rows: its rows alone, 16 bytes at a time
    T* const dk_rows = static_cast<T*>(bp.dk) + (blk.seq.start_kv + blk.n0) * bp.dk_row_stride + blk.h_kv * bp.dk_head_stride;
    T* const dv_rows = static_cast<T*>(bp.dv) + (blk.seq.start_kv + blk.n0) * bp.dv_row_stride + blk.h_kv * bp.dv_head_stride;
    for (int idx = writer; idx < 64 * (kD / 8); idx += kWriters) {
      const int r = row0 + idx / (kD / 8), c = idx % (kD / 8);
      if (r >= blk.rows_out) continue;
      *reinterpret_cast<uint4*>(dk_rows + r * bp.dk_row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(smem.to_generic(dk_stage.chunk(r, c)));
      *reinterpret_cast<uint4*>(dv_rows + r * bp.dv_row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(smem.to_generic(dv_stage.chunk(r, c)));
    }
  }
}

}  // namespace attn::flash_sm90
