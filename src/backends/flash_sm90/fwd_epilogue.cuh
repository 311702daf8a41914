// flash_sm90's forward: the epilogue of a consumer warpgroup's 64 rows.
// O / sum (times dropout's 1 / (1 - p)) rounded to T is staged in the output
// tile with stmatrix, then written by one TMA store, or row by row where the
// rows are not all the sequence's; lse per row last. Items no row of which
// sees a key get out = 0 and lse = -inf without the products.
#pragma once

#include <cstdint>

#include "backends/flash/epilogue.cuh"
#include "backends/flash/online_softmax.cuh"
#include "backends/flash_sm90/fwd_params.h"
#include "backends/flash_sm90/fwd_smem.cuh"
#include "backends/flash_sm90/fwd_storage.cuh"
#include "backends/flash_sm90/fwd_work_queue.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/sm80/mma.cuh"
#include "kernels/sm90/stmatrix.cuh"
#include "kernels/sm90/tma.cuh"
#include "kernels/sm90/wgmma.cuh"

namespace attn::flash_sm90 {

// The max logit, one item behind (the epilogue's path holds no reduction):
// an item's epilogue keeps each thread's largest score as an ordered key;
// during the next item's first Q.K^T each warp reduces its keys (one redux)
// into shared memory beside the head (flush); the next epilogue's leader
// reads them past its first barrier and max-es them in with one atomic
// nobody waits for. Every row of a head aims at one address (and every head
// at one line), whose atomics queue up: one per quad cost a 1k causal
// forward 26-49%, one per warp behind a read of the value there 2-5%, one
// per warp without it 3.3%, the reduction inside the epilogue 2.7%, this
// 1.6% (d 64 1k causal, H100). The dropout build reduces in the epilogue:
// the carry's registers spill there.
struct MaxLogitCarry {
  int key = 0;  // this thread's share of the item held (an ordered key)
  int h = -1;   // its head (kept where the next epilogue overlaps: two consumers' registers)
};

template <typename T, class Cfg>
struct FwdEpilogue {
  static constexpr int kM = Cfg::kBlockM, kDV = Cfg::kHeadDimV, NO = kDV / 8;
  static constexpr int kConsumerThreads = 128 * Cfg::kConsumers;
  const Sm90FwdParams& args;
  const FwdSmem<Cfg>& smem;
  const int wg, ctid, lane, row0;

  __device__ __forceinline__ T* out_rows(const FwdItem& c) const {
    const flash::FwdParams& p = args.p;
    return static_cast<T*>(p.out) + c.b * p.o_batch_stride + (c.seq.start_q + c.m0) * p.o_row_stride +
           c.h * p.o_head_stride;
  }
  __device__ __forceinline__ float* lse_rows(const FwdItem& c) const {
    const flash::FwdParams& p = args.p;
    return p.lse + c.b * p.lse_batch_stride + (c.seq.start_q + c.m0) * p.lse_row_stride + c.h * p.lse_head_stride;
  }

  // An item no row of which sees a key: out = 0 and lse = -inf on its rows
  // (every consumer thread together).
  __device__ __forceinline__ void store_empty(const FwdItem& c) const {
    const flash::FwdParams& p = args.p;
    flash::store_zeros<kDV, kM, kConsumerThreads>(out_rows(c) + c.row_begin * p.o_row_stride, p.o_row_stride,
                                                  c.rows_out - c.row_begin, ctid);
    if (p.lse) {
      const float sink = detail::sink_logit(p.sink, c.h);  // -inf without a sink
      for (int r = c.row_begin + ctid; r < c.rows_out; r += kConsumerThreads) lse_rows(c)[r * p.lse_row_stride] = sink;
    }
  }

  // This warpgroup's rows of item `cur`, whose Q is in buffer q_buf: O and
  // the softmax's state are final (the last P.V has left O's registers).
  // kDefer: the max logit one item behind (MaxLogitCarry); otherwise this
  // item's, reduced here (the dropout build: the carry's registers spill there).
  template <bool kDefer>
  __device__ __forceinline__ void store(const FwdItem& cur, int q_buf, const float (&o)[1][NO][4],
                                        flash::OnlineSoftmax<1>& softmax, float unit, MaxLogitCarry& carry) const {
    const flash::FwdParams& p = args.p;
    float inv[1][2], row_lse[1][2];
    const float sink = detail::sink_logit(p.sink, cur.h);  // lse of a row that sees no key (-inf without a sink)
    softmax.finish(inv, row_lse, unit, p.dropout_scale, sink * flash::kLog2e);
    // Rows outside the sequence (padding, the next or the previous
    // sequence's tokens in thd, or before the first token) read whatever Q
    // rows were there: their output is 0 or unwritten.
    bool row_valid[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = row0 + 8 * hh + (lane >> 2);
      row_valid[hh] = r >= cur.row_begin && r < cur.rows;
      if (!row_valid[hh]) {
        inv[0][hh] = 0.f;
        row_lse[0][hh] = sink;
      }
    }
    // Stage O in this warpgroup's 64 rows of the output tile with stmatrix
    // (its leader's store of the previous item has read them, and every
    // thread is past its Q.K^T reads of this item's Q rows where the output
    // goes in Q's buffer), then write them out: one TMA store by the
    // leader, or row by row where the warpgroup's rows are not all the
    // sequence's (thd, where other sequences' tokens lie around it, or rows
    // before the first token, which TMA would not write but we do not ask it to).
    const auto o_stage = smem.o_tile(q_buf);
    const bool leader = (ctid & 127) == 0;
    const bool by_tma = cur.row_begin <= wg * 64 && (!p.packed || cur.rows >= wg * 64 + 64);
    const sm90::NamedBarrier own{kBarConsumer0 + wg, 128};
    if (leader) sm90::bulk_wait_read<0>();
    own.sync();
    // The previous item's warp keys (flushed under this item's first Q.K^T),
    // read now and max-ed in after the staging below.
    int prev[4] = {0, 0, 0, 0}, prev_h = -1;
    if (kDefer && p.max_logit && leader) {
      read_warp_keys(prev);
      prev_h = read_held_head();
    }
    {
      // Lane l addresses row l % 8 of matrix l / 8: matrix j holds rows
      // 8 (j % 2).. of accumulator block 2 np + j / 2 (stmatrix.cuh).
      const int st_row = row0 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
      for (int np = 0; np < NO / 2; ++np) {
        uint32_t r[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int no = 2 * np + j / 2, hh = j % 2;
          const float x = row_valid[hh] ? o[0][no][2 * hh] * inv[0][hh] : 0.f;
          const float y = row_valid[hh] ? o[0][no][2 * hh + 1] * inv[0][hh] : 0.f;
          r[j] = sm80::pack2<T>(x, y);
        }
        sm90::stmatrix_x4(o_stage.chunk(st_row, 2 * np + (lane >> 4)), r[0], r[1], r[2], r[3]);
      }
    }
    if (p.max_logit) {
      const bool (&valid)[1][2] = *reinterpret_cast<const bool(*)[1][2]>(&row_valid);
      const float largest = softmax.largest_score(row_lse, unit, valid);
      if constexpr (kDefer) {
        carry.key = flash::ordered_key(largest);
        carry.h = cur.h;
      } else {  // each warp's key now, read by the leader past the barrier below
        sm90::store_after(smem.warp_max(ctid / 32), __int_as_float(flash::warp_max_key(largest)), lane);
      }
    }
    sm90::fence_proxy_async();  // the stores above, before the TMA store reads them
    own.sync();
    if (by_tma && leader) {
#pragma unroll
      for (int cb = 0; cb < kDV / 64; ++cb)
        sm90::tma_store_4d(&args.o, o_stage.column_block(cb) + wg * 64 * 128, cb * 64,
                           static_cast<int>(cur.seq.start_q) + cur.m0 + wg * 64, cur.h, p.packed ? 0 : cur.b);
      sm90::bulk_commit();
    }
    if (p.max_logit && leader) {
      if constexpr (!kDefer) {
        read_warp_keys(prev);
        prev_h = cur.h;
      }
      max_into(prev_h, prev);
    }
    if (!by_tma) {
      constexpr int kChunks = kDV / 8;
      T* const out = out_rows(cur);
      const char* const o_gen = smem.to_generic(o_stage.addr);
#pragma unroll
      for (int idx = ctid - wg * 128; idx < 64 * kChunks; idx += 128) {
        const int r = wg * 64 + idx / kChunks, c = idx % kChunks;
        if (cur.writes(r))
          *reinterpret_cast<uint4*>(out + r * p.o_row_stride + c * 8) =
              *reinterpret_cast<const uint4*>(o_gen + sm90::swizzled_offset(kM, r, c));
      }
    }
    if (!Cfg::kSeparateO) {
      // Q's buffer held the output until now: once the store has read it
      // (and past these generic-proxy accesses), the producer may load the
      // next Q there.
      if (leader) sm90::bulk_wait_read<0>();
      sm90::fence_proxy_async();
      smem.q_empty(q_buf).arrive();
    }
    // Last: a proxy fence (above) waits for these global stores.
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = row0 + 8 * hh + (lane >> 2);
      if (p.lse && (lane & 3) == 0 && cur.writes(r)) lse_rows(cur)[r * p.lse_row_stride] = row_lse[0][hh];
    }
  }

  // The leader's reads of its warpgroup's four warp keys and of the head
  // they belong to (-1: none), and the max of the keys into that head's max
  // logit with one atomic nobody waits for.
  __device__ __forceinline__ void read_warp_keys(int (&k)[4]) const {
    asm volatile("ld.shared.v4.s32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(k[0]), "=r"(k[1]), "=r"(k[2]), "=r"(k[3])
                 : "r"(smem.warp_max(wg * 4))
                 : "memory");
  }
  __device__ __forceinline__ int read_held_head() const {
    int h;
    asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(h) : "r"(smem.held_head(wg)) : "memory");
    return h;
  }
  __device__ __forceinline__ void max_into(int h, const int (&k)[4]) const {
    const float m = flash::from_ordered_key(max(max(k[0], k[1]), max(k[2], k[3])));
    if (h >= 0 && m != -INFINITY) {
      kernels::wait_for_prior_grid();  // max_logit's fill may still run (an early launch: fwd_launch.h)
      detail::atomic_max_keeping_nan(args.p.max_logit + h * args.p.max_logit_stride, m);
    }
  }

  // Each warp's key of the item held (head h; -1: none) into shared memory,
  // one redux: run under the next item's first Q.K^T, or at the end.
  template <bool kDefer>
  __device__ __forceinline__ void flush(const MaxLogitCarry& carry, int h) const {
    if (!kDefer || !args.p.max_logit) return;
    if (h >= 0)  // carry.key is an ordered key already (flash::warp_max_key without the conversion)
      sm90::store_after(smem.warp_max(ctid / 32), __int_as_float(__reduce_max_sync(0xffffffffu, carry.key)), lane);
    if ((ctid & 127) == 0) asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(smem.held_head(wg)), "r"(h) : "memory");
  }

  // The output tile stays until its last store is done; the last item's max
  // logit goes in (flushed already where the epilogue does not overlap).
  template <bool kDefer>
  __device__ __forceinline__ void finish(const MaxLogitCarry& carry) const {
    if (kDefer && args.p.max_logit) {
      if (Cfg::kOverlapEpilogue) flush<kDefer>(carry, carry.h);
      const sm90::NamedBarrier own{kBarConsumer0 + wg, 128};
      own.sync();
      if ((ctid & 127) == 0) {
        int k[4];
        read_warp_keys(k);
        max_into(read_held_head(), k);
      }
    }
    if ((ctid & 127) == 0) sm90::bulk_wait<0>();
  }
};

}  // namespace attn::flash_sm90
