// flash_sm90's backward: the epilogue of a consumer warpgroup's dK and dV
// (its 64 keys, or from d_qk 192 its part of d's columns over the CTA's 64
// keys).
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
// split d, the others the keys; consumer_column gives the columns).
template <class Cfg>
__device__ __forceinline__ int key_row0(int wg) {
  return Cfg::kWide ? 0 : wg * 64;
}

// With a head split: one consumer's part of dK or dV (`acc`, times `scale`)
// added into its fp32 accumulator (`rows`: the CTA's first key row, kWidth
// floats a row) from registers, two floats per reduction, rows past the
// sequence left out (their zeros stay).
template <class Cfg, class Cols, int ND>
__device__ __forceinline__ void add_rows(float* rows, const float (&acc)[ND][4], float scale, const BwdKvBlock& blk,
                                         int wg, int lane, int warp) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {  // accumulator rows 16 warp + lane / 4 (+ 8)
    const int r = key_row0<Cfg>(wg) + 16 * warp + (lane >> 2) + 8 * hr;
    if (r >= blk.rows_out || blk.n0 + r >= blk.seq.len_kv) continue;
#pragma unroll
    for (int i = 0; i < ND; ++i) {
      const int c = consumer_column<Cols>(wg, i) + 2 * (lane & 3);
      asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(rows + r * Cols::kWidth + c),
                   "f"(acc[i][2 * hr] * scale), "f"(acc[i][2 * hr + 1] * scale)
                   : "memory");
    }
  }
}

// One consumer's part of dK or dV (`acc`, times `scale`, rounded to T) into
// `stage` (the CTA's key rows) with stmatrix (stmatrix_block_pair).
template <typename T, class Cfg, class Cols, int ND>
__device__ __forceinline__ void stage_rows(typename BwdSmem<Cfg>::KeyTile stage, const float (&acc)[ND][4],
                                           float scale, int wg, int lane, int warp) {
  const int st_row = key_row0<Cfg>(wg) + 16 * warp + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
  for (int np = 0; np < ND / 2; ++np)
    stmatrix_block_pair<T>(stage.chunk(st_row, consumer_column<Cols>(wg, 2 * np) / 8 + (lane >> 4)), acc, np, scale);
}

// A staged tensor's 64 rows from the CTA's row row0 (kWidth columns) to the
// caller's: TMA stores per column block (by the writer 0), or, where a
// packed sequence ends inside them, its rows 16 bytes at a time.
template <typename T, int kWidth, class Stage>
__device__ __forceinline__ void write_rows(const sm90::SharedBase& smem, const CUtensorMap* map, Stage stage, T* rows,
                                           int64_t row_stride, const BwdKvBlock& blk, bool by_tma, int row0,
                                           int seq_coord, int writer, int writers) {
  if (by_tma) {
    if (writer == 0) {
      const int row = static_cast<int>(blk.seq.start_kv) + blk.n0 + row0;
#pragma unroll
      for (int cb = 0; cb < kWidth / 64; ++cb)
        sm90::tma_store_4d(map, stage.column_block(cb) + row0 * 128, cb * 64, row, blk.h_kv, seq_coord);
    }
    return;
  }
  for (int idx = writer; idx < 64 * (kWidth / 8); idx += writers) {
    const int r = row0 + idx / (kWidth / 8), c = idx % (kWidth / 8);
    if (r < blk.rows_out)
      *reinterpret_cast<uint4*>(rows + r * row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(smem.to_generic(stage.chunk(r, c)));
  }
}

template <typename T, class Cfg>
__device__ __forceinline__ void bwd_store_dk_dv(const Sm90BwdParams& args, const BwdSmem<Cfg>& smem,
                                                const BwdKvBlock& blk, const BwdRegisters<Cfg>& regs, int tid) {
  using ColsK = typename Cfg::ColsK;
  using ColsV = typename Cfg::ColsV;
  const flash::BwdParams& bp = args.p;
  const flash::FwdParams& p = bp.fwd;
  const int wg = tid / 128 - 1, lane = tid & 31, warp = (tid / 32) & 3;
  const int row0 = key_row0<Cfg>(wg);
  // Dropout's 1 / (1 - p), left out of the tile loop (flash::BwdParams::delta_scale).
  const float keep_scale = p.dropout_scale;
  if (args.dkv_accum) {
    const int64_t rows = args.dkv_rows, heads_kv = p.h_q / p.h_per_kv;
    const int64_t first =
        blk.h_kv * rows + (p.packed ? blk.seq.start_kv : static_cast<int64_t>(blk.b) * p.s_kv) + blk.n0;
    float* const dv_acc = args.dkv_accum + heads_kv * rows * Cfg::kHeadDim;  // dV's accumulator follows dK's
    add_rows<Cfg, ColsK>(args.dkv_accum + first * Cfg::kHeadDim, regs.dk, p.scale * keep_scale, blk, wg, lane, warp);
    add_rows<Cfg, ColsV>(dv_acc + first * Cfg::kHeadDimV, regs.dv, keep_scale, blk, wg, lane, warp);
    return;
  }
  const auto dk_stage = smem.dk_stage(), dv_stage = smem.dv_stage();
  sm90::named_sync(kBarEpilogue, 128 * Cfg::kConsumers);
  stage_rows<T, Cfg, ColsK>(dk_stage, regs.dk, p.scale * keep_scale, wg, lane, warp);
  stage_rows<T, Cfg, ColsV>(dv_stage, regs.dv, keep_scale, wg, lane, warp);
  sm90::fence_proxy_async();  // the stores above, before the TMA stores read them
  // A consumer writes its 64 key rows; with the wide tiles the two write
  // the CTA's 64 rows together (at d 192 they share a column block).
  constexpr int kWriters = Cfg::kWide ? 128 * Cfg::kConsumers : 128;
  const int writer = Cfg::kWide ? tid - 128 : tid & 127;
  sm90::named_sync(Cfg::kWide ? kBarEpilogue : kBarConsumer0 + wg, kWriters);
  const bool by_tma = blk.rows_out >= row0 + 64 || !p.packed;
  const int seq_coord = p.packed ? 0 : blk.b;
  const int64_t first = blk.seq.start_kv + blk.n0;
  write_rows<T, Cfg::kHeadDim>(smem, &args.dk, dk_stage,
                               static_cast<T*>(bp.dk) + first * bp.dk_row_stride + blk.h_kv * bp.dk_head_stride,
                               bp.dk_row_stride, blk, by_tma, row0, seq_coord, writer, kWriters);
  write_rows<T, Cfg::kHeadDimV>(smem, &args.dv, dv_stage,
                                static_cast<T*>(bp.dv) + first * bp.dv_row_stride + blk.h_kv * bp.dv_head_stride,
                                bp.dv_row_stride, blk, by_tma, row0, seq_coord, writer, kWriters);
  if (by_tma && writer == 0) {
    sm90::bulk_commit();
    sm90::bulk_wait<0>();  // the stage stays until the stores have read it
  }
}

}  // namespace attn::flash_sm90
