// flash_sm90's forward: the work queue. A persistent CTA takes work items
// (query tile, query head, sequence) one at a time: its first is blockIdx.x,
// the next ones come from a global counter, in fwd_tiles.h's order (the
// heaviest tiles first). The producer takes each index and publishes it to
// the consumers through a two-slot ring in shared memory, so it can run one
// item ahead; both roles derive the same item from an index.
#pragma once

#include <cstdint>

#include "backends/flash/params.h"
#include "backends/flash/sequence.cuh"
#include "backends/flash/tile_ranges.h"
#include "backends/flash_sm90/fwd_params.h"
#include "backends/flash_sm90/fwd_smem.cuh"
#include "backends/flash_sm90/fwd_tiles.h"
#include "kernels/dependent_launch.cuh"

namespace attn::flash_sm90 {

// One work item, as both roles derive it: which of its tiles have loads
// (the producer) and which rows it computes and writes (the consumers).
struct FwdItem {
  int t = -1;  // its index; -1: the walk is over
  int b, h, m0;
  int row_begin;  // rows [row_begin, rows) of the tile are its sequence's (fwd_tiles.h)
  int rows;
  int rows_out;  // rows it writes: a padded batch (bshd/sbhd with cu_seqlens) also gets out = 0, lse = -inf
                 // on its padding rows; in thd the rows past a sequence belong to the next one
  flash::SeqExtent seq;
  flash::KvTiles tiles;
  // Some row sees a key: the producer loads Q and K/V tiles, the consumers
  // compute (otherwise they write out = 0 and lse = -inf).
  __device__ bool has_work() const { return rows > row_begin && tiles.last >= tiles.first; }
  __device__ bool writes(int r) const { return r >= row_begin && r < rows_out; }
};

template <class Cfg>
struct FwdWorkQueue {
  static constexpr int kM = Cfg::kBlockM, kN = Cfg::kBlockN;
  const Sm90FwdParams& args;
  const FwdSmem<Cfg>& smem;
  int taken = 0;  // indices passed through the ring (the slots' phases)

  // Query tiles x query heads x sequences. Computed where it is used (a
  // few uniform instructions from the parameters): held across the walk,
  // it spilled from the producer's 24 registers.
  __device__ __forceinline__ int items() const {
    return ((args.p.s_q + kM - 1) / kM) * args.p.h_q * args.p.batch;
  }

  // The item at index t.
  __device__ __forceinline__ FwdItem item(int t) const {
    const flash::FwdParams& p = args.p;
    FwdItem c;
    c.t = t;
    const WorkItem w = work_item(t, (p.s_q + kM - 1) / kM, p.h_q, p.h_q * p.batch, args.section_pairs);
    c.b = w.b;
    c.h = w.h;
    c.seq = flash::sequence_extent(p, c.b);
    const QueryTile q = query_tile(w.tile, kM, c.seq.len_q, p.s_q, p.packed);
    c.m0 = q.m0;
    c.row_begin = q.row_begin;
    c.rows = q.rows;
    c.rows_out = q.rows_out;
    c.tiles = q.has_rows() ? flash::kv_tiles<kM, kN>(p, c.seq, c.m0) : flash::KvTiles{};
    return c;
  }

  // The producer's next index after its CTA's first: from the counter, past
  // the indices the grid's first items took. The grid's size is read where
  // it is used (a volatile read of %nctaid.x): ptxas otherwise keeps
  // gridDim.x across the loop in the producer's 24 registers and spills it.
  // A producer warp (a paged cache's: fwd_producer.cuh) claims once, in
  // lane 0, and every lane gets the index.
  // The kernel before this one may still be zeroing the counter (an early
  // launch, fwd_launch.h): the wait returns at once after the first.
  __device__ __forceinline__ int claim(bool warp) const {
    int grid;
    asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(grid));
    kernels::wait_for_prior_grid();
    if (!warp) return atomicAdd(args.item_counter, 1) + grid;
    int t = 0;
    if ((threadIdx.x & 31) == 0) t = atomicAdd(args.item_counter, 1);
    return __shfl_sync(0xffffffffu, t, 0) + grid;
  }

  // The producer: index t into the next slot (an index >= items ends the
  // walk); `leader`: the one thread of the producer's that writes it.
  __device__ __forceinline__ void publish(int t, bool leader) {
    const int slot = taken & 1;
    smem.item_empty(slot).wait(((taken >> 1) & 1) ^ 1);
    if (leader) {
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(smem.item_slot(slot)), "r"(t) : "memory");
      smem.item_full(slot).arrive();  // release: the consumers see the index
    }
    ++taken;
  }

  // A consumer: the index in the current slot, which it then frees for the
  // producer; advance() moves to the next slot. (Advancing inside this
  // read, before the caller's branch on the index, cost d 64's consumers
  // 160 B of spills.)
  __device__ __forceinline__ int read_index() const {
    const int slot = taken & 1;
    smem.item_full(slot).wait((taken >> 1) & 1);
    int t;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(t) : "r"(smem.item_slot(slot)) : "memory");
    smem.item_empty(slot).arrive();
    return t;
  }
  __device__ __forceinline__ void advance() { ++taken; }
};

}  // namespace attn::flash_sm90
