// flash_sm90's backward: a consumer warpgroup's main loop, 64 of the CTA's
// keys against each query tile that sees them. Per tile:
//   S^T = K.Q^T and dP^T = V.dO^T on wgmma (both operands in shared memory),
//   P^T = exp2(S^T scale log2e - lse2) under dP^T's product,
//   dV += P^T.dO (P^T a register operand), dS^T = P^T (dP^T - D) under it,
//   dS^T to shared memory, then dQ = dS.K over all the CTA's keys (at d 128
//   each consumer takes half of d's columns; at d 64, 128-row query tiles,
//   half of the rows), and dK += dS^T.Q, under which dQ is staged in the
//   fp32 accumulator's byte order (flash/dq_layout.h) in shared memory for
//   the adder.
// Computing S^T rather than S puts keys on the accumulator's rows, so P^T and
// dS^T are already the A operands of dV's and dK's products.
#pragma once

#include <cstdint>

#include "attn/philox.h"
#include "backends/flash/dq_layout.h"
#include "backends/flash/dropout_bits.cuh"
#include "backends/flash/score_mods.cuh"
#include "backends/flash/sequence.cuh"
#include "backends/flash_sm90/bwd_keep_bits.h"
#include "backends/flash_sm90/bwd_kv_block.cuh"
#include "backends/flash_sm90/bwd_smem.cuh"
#include "kernels/sm80/mma.cuh"
#include "kernels/sm90/stmatrix.cuh"
#include "kernels/sm90/wgmma.cuh"
#include "kernels/sm90/wgmma_ops.cuh"

namespace attn::flash_sm90 {

// Accumulator blocks 2 np and 2 np + 1 (8 columns each, a warp's rows 16
// warp + lane / 4 and + 8), times `scale` and rounded to T, into a
// 128B-swizzled tile with stmatrix.x4; `chunk` is the 16-byte chunk of this
// lane's row there: lane l addresses row l % 8 of matrix l / 8, and matrix j
// holds rows 8 (j % 2).. of block 2 np + j / 2 (stmatrix.cuh).
template <typename T, int NB>
__device__ __forceinline__ void stmatrix_block_pair(uint32_t chunk, const float (&acc)[NB][4], int np, float scale) {
  uint32_t r[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int i = 2 * np + j / 2, e0 = 2 * (j % 2);
    r[j] = sm80::pack2<T>(acc[i][e0] * scale, acc[i][e0 + 1] * scale);
  }
  sm90::stmatrix_x4(chunk, r[0], r[1], r[2], r[3]);
}

// dK and dV of a consumer thread, in registers over the whole walk. A struct
// of its own, not BwdMainloop's members, as the forward's FwdRegisters: the
// compiler then knows their stores leave the parameters alone. Rows: the
// consumer's keys; columns: its part of d (consumer_column).
template <class Cfg>
struct BwdRegisters {
  static constexpr int kColsK = Cfg::ColsK::kCols, kColsV = Cfg::ColsV::kCols;
  float dk[kColsK / 8][4], dv[kColsV / 8][4];

  __device__ __forceinline__ float (&dk_flat())[kColsK / 2] { return *reinterpret_cast<float(*)[kColsK / 2]>(&dk); }
  __device__ __forceinline__ float (&dv_flat())[kColsV / 2] { return *reinterpret_cast<float(*)[kColsV / 2]>(&dv); }
  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < kColsK / 2; ++i) dk_flat()[i] = 0.f;
#pragma unroll
    for (int i = 0; i < kColsV / 2; ++i) dv_flat()[i] = 0.f;
  }
};

// kScoreMods: the build with softcap and ALiBi; kDropout: the build with
// dropout (with or without kScoreMods).
template <typename T, class Cfg, bool kScoreMods, bool kDropout>
struct BwdMainloop {
  static constexpr int kD = Cfg::kHeadDim, kM = Cfg::kBlockM, kN = Cfg::kBlockN, kS = Cfg::kStages;
  static constexpr int kConsumerThreads = 128 * Cfg::kConsumers;
  static constexpr int NS = kM / 8;                                      // S^T's 8-column blocks (queries)
  static constexpr int NQ = (Cfg::kDqRowHalves ? kD : kD / 2) / 8;       // this consumer's dQ columns
  using QueryTile = typename BwdSmem<Cfg>::QueryTile;
  using KeyTile = typename BwdSmem<Cfg>::KeyTile;

  // Dropout's keep bits of this thread's elements of S^T: a word per 64
  // queries of the tile (keep_bits).
  struct KeepWords {
    uint32_t w[kM / 64];
  };
  static __device__ __forceinline__ KeepWords keep_all() {
    KeepWords k;
#pragma unroll
    for (int h = 0; h < kM / 64; ++h) k.w[h] = ~0u;
    return k;
  }
  // Element s[i][2 hr + e]'s keep bit (bwd_keep_bits.h: where the lanes'
  // trade leaves it), in word i / 8.
  __device__ __forceinline__ static bool kept(const KeepWords& keep, int i, int hr, int e) {
    return (keep.w[i / 8] >> keep_bit(i, hr, e)) & 1u;
  }

  const flash::FwdParams& p;
  const BwdSmem<Cfg>& smem;
  const BwdKvBlock& blk;
  BwdRegisters<Cfg>& regs;
  const int wg, ctid, lane, warp;
  // This warpgroup's first key in the tile, from lane 0's wg: warp-uniform
  // for ptxas, so the descriptors derived from it stay in uniform registers.
  const int wg_key0;
  const int key0;  // this consumer's first key in the sequence

  // Rows of a tile past its sequence (thd: the next sequence's tokens; a
  // padded batch: its padding, possibly not finite) are cleared in shared
  // memory before any product reads them: a masked score gives P = 0 and
  // dS = 0, but 0 * NaN is NaN in the products that sum over those rows.
  // TMA already zero-fills rows past the tensor's end (bshd/sbhd's s), so
  // only cu_seqlens calls get here. Both consumers clear, then sync.
  template <int kCols = kD, int kRows>
  __device__ __forceinline__ void clear_rows(sm90::SwizzledTileAt<kRows> tile, int first) const {
    sm90::clear_rows<kCols>(smem.to_generic(tile.addr), kRows, first, ctid, kConsumerThreads);
  }
  __device__ __forceinline__ void cleared() const {
    sm90::fence_proxy_async();
    sm90::named_sync(kBarCleared, kConsumerThreads);
  }

  // K and V in shared memory, their rows past the sequence cleared.
  __device__ __forceinline__ void await_keys() const {
    smem.kv_full().wait(0);
    if ((p.packed || blk.seq.len_kv < p.s_kv) && blk.n0 + kN > blk.seq.len_kv) {
      clear_rows(smem.k_tile(), max(0, blk.seq.len_kv - blk.n0));
      clear_rows<Cfg::kHeadDimV>(smem.v_tile(), max(0, blk.seq.len_kv - blk.n0));
      cleared();
    }
  }

  // The `it`-th query tile's Q and dO in shared memory (stage it % kS),
  // their rows past the sequence cleared.
  __device__ __forceinline__ void await_query_tile(int it, int m0) const {
    const int stage = it % kS;
    smem.full(stage).wait((it / kS) & 1);
    if ((p.packed || blk.seq.len_q < p.s_q) && m0 + kM > blk.seq.len_q) {
      clear_rows(smem.q_tile(stage), max(0, blk.seq.len_q - m0));
      clear_rows<Cfg::kHeadDimV>(smem.do_tile(stage), max(0, blk.seq.len_q - m0));
      cleared();
    }
  }

  // An S^T-shaped accumulator (n8 blocks of query columns) as the A
  // fragments of a product over those queries: blocks 2 ks and 2 ks + 1 are
  // k16 step ks (the accumulator's layout per warp is the A fragment's).
  static __device__ __forceinline__ void a_fragments(const float (&acc)[NS][4], uint32_t (&a)[NS / 2][4]) {
#pragma unroll
    for (int ks = 0; ks < NS / 2; ++ks) {
      a[ks][0] = sm80::pack2<T>(acc[2 * ks][0], acc[2 * ks][1]);
      a[ks][1] = sm80::pack2<T>(acc[2 * ks][2], acc[2 * ks][3]);
      a[ks][2] = sm80::pack2<T>(acc[2 * ks + 1][0], acc[2 * ks + 1][1]);
      a[ks][3] = sm80::pack2<T>(acc[2 * ks + 1][2], acc[2 * ks + 1][3]);
    }
  }

  // P^T's kept elements (the dropped ones 0) as dV's A fragments; P^T stays
  // in s for dS. 1 / (1 - p) is applied to dV in the epilogue
  // (flash::BwdParams::delta_scale).
  __device__ __forceinline__ void kept_fragments(const float (&s)[NS][4], uint32_t (&a)[NS / 2][4],
                                                 const KeepWords& keep) const {
    float z[NS][4];
#pragma unroll
    for (int i = 0; i < NS; ++i)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          z[i][2 * hr + e] = kept(keep, i, hr, e) ? s[i][2 * hr + e] : 0.f;
    a_fragments(z, a);
  }

  // S^T = K.Q^T and dP^T = V.dO^T: this consumer's 64 keys x the tile's kM
  // queries, committed apart so that P is computed under dP^T's product.
  __device__ __forceinline__ void issue_scores(QueryTile q_tile, QueryTile do_tile, float (&s)[NS][4],
                                               float (&dp)[NS][4]) const {
    float(&s_flat)[kM / 2] = *reinterpret_cast<float(*)[kM / 2]>(&s);
    float(&dp_flat)[kM / 2] = *reinterpret_cast<float(*)[kM / 2]>(&dp);
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks)
      sm90::Wgmma<kM, T>::template ss<0>(s_flat, smem.k_tile().kmajor(wg_key0, ks), q_tile.kmajor(0, ks), ks > 0);
    sm90::wgmma_commit();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks)
      sm90::Wgmma<kM, T>::template ss<0>(dp_flat, smem.v_tile().kmajor(wg_key0, ks), do_tile.kmajor(0, ks), ks > 0);
    sm90::wgmma_commit();
  }

  // Element s[i][2 hr + e] of S^T: key first_key() + 8 hr, query m0 + 8 i +
  // 2 (lane % 4) + e. A consumer tile needs the mask unless every valid
  // query row sees all 64 of its keys (both ends of a row's range grow with
  // the row, so the first and last rows decide).
  __device__ __forceinline__ bool needs_mask(int m0) const {
    const int last_row = min(m0 + kM, blk.seq.len_q) - 1;
    return last_row < m0 || flash::row_key_begin(p, blk.seq, last_row) > key0 ||
           flash::row_key_end(p, blk.seq, m0) < key0 + 64;
  }
  __device__ __forceinline__ int first_key() const { return key0 + 16 * warp + (lane >> 2); }
  // The keys [begin, end) query m0 + c sees (all of the sequence's where the
  // tile needs no mask). Tested as j < begin || j >= end: KeyRange's
  // contains() made ptxas branch around each element's exp2.
  __device__ __forceinline__ void row_bounds(int m0, int c, bool masked, int& begin, int& end) const {
    begin = 0;
    end = blk.seq.len_kv;
    if (masked) {
      const bool valid = m0 + c < blk.seq.len_q;
      begin = valid ? flash::row_key_begin(p, blk.seq, m0 + c) : 0;
      end = valid ? flash::row_key_end(p, blk.seq, m0 + c) : 0;
    }
  }

  // S^T -> P^T in place. P = 0 where masked, so dS = P (dP - D) is 0 there too.
  // A tile without a mask (needs_mask: the same for the consumer's warps)
  // takes the loop built without the per-element test: with the test under a
  // runtime flag, ptxas kept three compares, a constant reload and a move per
  // element.
  __device__ __forceinline__ void probabilities(float (&s)[NS][4], int m0, const float2* terms) const {
    if (needs_mask(m0))
      probabilities<true>(s, m0, terms);
    else
      probabilities<false>(s, m0, terms);
  }
  template <bool kMasked>
  __device__ __forceinline__ void probabilities(float (&s)[NS][4], int m0, const float2* terms) const {
    const float unit = p.scale_log2;  // scores -> log2 units
    const int j0 = first_key();
#pragma unroll
    for (int i = 0; i < NS; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = 8 * i + 2 * (lane & 3) + e;
        const float lse2 = terms[c].x;
        int begin = 0, end = 0;
        if constexpr (kMasked) row_bounds(m0, c, true, begin, end);
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int j = j0 + 8 * hr;
          float& x = s[i][2 * hr + e];
          x = (kMasked && (j < begin || j >= end)) ? 0.f : sm80::fast_exp2(x * unit - lse2);
        }
      }
  }

  // With score changes: the forward's operations (flash/score_mods.cuh's
  // order: scale, softcap, ALiBi, so P matches its lse), each a compile-time
  // choice so the element loop has no branches. P^T goes straight into dV's
  // A fragments (a_fragments' layout) and P^T (1 - tanh^2) stays in s, so
  // dscores' dS = s (dP - D) carries softcap's derivative: one tanh and one
  // exp2 per element, no register held across dV's product. ALiBi's
  // distance |i + shift - j| is formed in floats (exact below 2^24):
  // attn/mask_rule.h's alibi_bias in ints, or in floats through its
  // branch, cost 168 more SASS instructions at d 64.
  template <bool kSoftcap, bool kAlibi>
  __device__ __forceinline__ void probabilities_modified(float (&s)[NS][4], uint32_t (&pa)[NS / 2][4], int m0,
                                                         const float2* terms, float slope,
                                                         const KeepWords& keep) const {
    const bool masked = needs_mask(m0);
    const int j0 = first_key();
    const float key_at[2] = {static_cast<float>(j0), static_cast<float>(j0 + 8)};
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      float pr[4];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = 8 * i + 2 * (lane & 3) + e;
        const float lse2 = terms[c].x, query_at = static_cast<float>(m0 + c + blk.seq.shift);
        int begin, end;
        row_bounds(m0, c, masked, begin, end);
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          float x = s[i][2 * hr + e] * p.scale, grad = 1.f;
          if constexpr (kSoftcap) x = flash::softcapped(x, p, grad);
          if constexpr (kAlibi) x -= slope * fabsf(query_at - key_at[hr]);
          const int j = j0 + 8 * hr;
          const float prob = (masked && (j < begin || j >= end)) ? 0.f : sm80::fast_exp2(x * flash::kLog2e - lse2);
          // dV's P is the dropped one (kept; 1 / (1 - p) in the epilogue);
          // dS's P (1 - tanh^2) is not: dscores applies the keep bit to dP.
          pr[2 * hr + e] = kDropout ? (kept(keep, i, hr, e) ? prob : 0.f) : prob;
          s[i][2 * hr + e] = prob * grad;
        }
      }
      pa[i / 2][(i % 2) * 2] = sm80::pack2<T>(pr[0], pr[1]);
      pa[i / 2][(i % 2) * 2 + 1] = sm80::pack2<T>(pr[2], pr[3]);
    }
  }
  // The build for this call's changes (uniform: one branch per tile). A
  // non-positive softmax_scale alone takes the <false, false> build.
  __device__ __forceinline__ void probabilities_modified(float (&s)[NS][4], uint32_t (&pa)[NS / 2][4], int m0,
                                                         const float2* terms, float slope,
                                                         const KeepWords& keep) const {
    if (p.softcap > 0.f) {
      if (p.alibi) probabilities_modified<true, true>(s, pa, m0, terms, slope, keep);
      else probabilities_modified<true, false>(s, pa, m0, terms, slope, keep);
    } else {
      if (p.alibi) probabilities_modified<false, true>(s, pa, m0, terms, slope, keep);
      else probabilities_modified<false, false>(s, pa, m0, terms, slope, keep);
    }
  }

  __device__ __forceinline__ KeepWords keep_bits(int m0, uint32_t bh) const {
    uint64_t seed;
    uint32_t offset;
    flash::dropout_key(p, seed, offset);
    KeepWords keep;
#pragma unroll
    for (int h = 0; h < kM / 64; ++h) keep.w[h] = keep_word(m0 + 64 * h, bh, seed, offset);
    return keep;
  }

  // The keep bits of this thread's 32 elements of S^T among queries [m0, m0
  // + 64) (kept() says where element (i, hr, e) lies), drawn by
  // include/attn/philox.h's rule as the forward drew them
  // (flash/dropout_bits.cuh): one Philox block per (query, 8 keys). The 8
  // lanes with the same lane % 4 hold a block's 8 keys for the same 16
  // queries: each draws the blocks of one query pair for both of its key
  // halves (hr), 4 blocks, and the 8 trade them in 8 shuffles, each lane
  // taking its key's bit of every block of a trade at once
  // (bwd_keep_bits.h). Drawn a tile ahead (run_tile), not under S^T's and
  // dP^T's products: there the Philox rounds' registers sat beside both
  // accumulators (more spills, and the dropout backward 8% slower over the
  // d 64 / 128 grid).
  __device__ __forceinline__ uint32_t keep_word(int m0, uint32_t bh, uint64_t seed, uint32_t offset) const {
    const uint32_t oct0 = static_cast<uint32_t>(key0 + 16 * warp) >> 3;
    const uint32_t mine = keep_drawn(lane, m0, oct0, bh, seed, offset, p.dropout_threshold);
    uint32_t keep = 0u;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      keep |= keep_gather(__shfl_sync(0xffffffffu, mine, keep_source_lane(lane, i)), lane, i);
    return keep;
  }

  // dV += P^T.dO (dO read MN-major: d is its contiguous dim).
  __device__ __forceinline__ void issue_dv(const uint32_t (&pa)[kM / 16][4], QueryTile do_tile) const {
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kM / 16; ++ks) sm90::Wgmma<kD, T>::template rs<1>(regs.dv_flat(), pa[ks], do_tile.mnmajor(ks), 1);
    sm90::wgmma_commit();
  }

  // dS^T = P^T (dP^T - D), in dp's registers (with softcap, s holds P^T (1 -
  // tanh^2); ALiBi's bias has no gradient: the slopes are not learned).
  // With dropout dS = P (z dP - D), z = keep / (1 - p) (D = rowsum(dO O)
  // of the dropped output), formed here as P (keep dP - (1 - p) D): the
  // producer staged D (1 - p), and dQ and dK take 1 / (1 - p) after the
  // loop (flash::BwdParams::delta_scale).
  __device__ __forceinline__ void dscores(const float (&s)[NS][4], float (&dp)[NS][4], const float2* terms,
                                          const KeepWords& keep) const {
#pragma unroll
    for (int i = 0; i < NS; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float delta = terms[8 * i + 2 * (lane & 3) + e].y;
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          float d = dp[i][2 * hr + e];
          if constexpr (kDropout) d = kept(keep, i, hr, e) ? d : 0.f;
          dp[i][2 * hr + e] = s[i][2 * hr + e] * (d - delta);
        }
      }
  }

  // dS^T into its buffer (rows: keys, kM query columns), with stmatrix: lane
  // l addresses row l % 8 of matrix l / 8, and matrix j holds rows 8 (j %
  // 2).. of n8 block 2 np + j / 2 (stmatrix.cuh), which is dsa[np][j]. Two
  // buffers by tile parity, as both consumers read both halves: a consumer
  // writes tile i + 1's while the other may still read tile i's, and it
  // cannot reach tile i + 2 before the other passed tile i + 1's barrier.
  __device__ __forceinline__ KeyTile store_ds(const uint32_t (&dsa)[kM / 16][4], int it) const {
    const KeyTile ds_tile = smem.ds_tile(it & 1);
    const int st_row = wg * 64 + 16 * warp + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
    for (int np = 0; np < kM / 16; ++np)
      sm90::stmatrix_x4(ds_tile.chunk(st_row, 2 * np + (lane >> 4)), dsa[np][0], dsa[np][1], dsa[np][2], dsa[np][3]);
    sm90::fence_proxy_async();  // the stores above, before wgmma reads them
    return ds_tile;
  }

  // dQ's product over the tile's kN keys, once both consumers wrote their
  // rows of dS^T: at d 128 this consumer's 64-column half of d (dQ[:, half]
  // = dS.K[:, half]), at d 64 its 64 of the tile's 128 query rows over all
  // of d (dQ[rows, :] = dS[rows, :].K). dS is read MN-major from dS^T
  // (queries contiguous), K MN-major.
  __device__ __forceinline__ void issue_dq(KeyTile ds_tile, float (&dq)[NQ][4]) const {
    float(&dq_flat)[NQ * 4] = *reinterpret_cast<float(*)[NQ * 4]>(&dq);
    sm90::named_sync(kBarDsWritten, kConsumerThreads);
    const KeyTile ds_part{Cfg::kDqRowHalves ? ds_tile.column_block(wg) : ds_tile.addr};  // its rows' 64 queries
    const KeyTile k_part{Cfg::kDqRowHalves ? smem.k_tile().addr
                                           : smem.k_tile().column_block((wg_key0 / 64) * (kD / 128))};  // its columns
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kN / 16; ++ks)
      sm90::Wgmma<NQ * 8, T>::template ss<1, 1>(dq_flat, ds_part.mnmajor(ks), k_part.mnmajor(ks), ks > 0);
    sm90::wgmma_commit();
  }

  // dK += dS^T.Q (Q read MN-major), issued after dQ's so that dQ's staging runs under it.
  __device__ __forceinline__ void issue_dk(const uint32_t (&dsa)[kM / 16][4], QueryTile q_tile) const {
#pragma unroll
    for (int ks = 0; ks < kM / 16; ++ks) sm90::Wgmma<kD, T>::template rs<1>(regs.dk_flat(), dsa[ks], q_tile.mnmajor(ks), 1);
    sm90::wgmma_commit();
  }

  // Two floats to shared address at + kOffset (an immediate).
  template <int kOffset>
  static __device__ __forceinline__ void store_pair(uint32_t at, float x, float y) {
    asm volatile("st.shared.v2.f32 [%0+%3], {%1, %2};\n" ::"r"(at), "f"(x), "f"(y), "n"(kOffset) : "memory");
  }

  // dq[i][2 hr + e]: query row row0 + 16 warp + 8 hr + lane / 4 of the tile
  // at m0 (row0: this consumer's rows, 0 where it has all of them), column
  // column(i) + 2 (lane % 4) + e, staged two floats at a time at its place in
  // the accumulator's row (flash/dq_layout.h) once the previous tile's bulk
  // add has read the stage; then the adder may take it.
  __device__ __forceinline__ void stage_dq(const float (&dq)[NQ][4], int m0, int it) const {
    // Block i's first column: all of d's at d 64, at d 128 this consumer's
    // half, with the wide tiles its columns as dK's.
    auto column = [&](int i) {
      return Cfg::kWide ? consumer_column<typename Cfg::ColsK>(wg, i) : (Cfg::kDqRowHalves ? 0 : wg * (kD / 2)) + 8 * i;
    };
    const int row0 = Cfg::kDqRowHalves ? 64 * wg : 0;
    // Every row this thread stages has the same token % 4 (rows 4 apart, m0
    // a multiple of 64), and column(i) is column(i & ~3) + 8 (i % 4) with
    // column(i & ~3) a multiple of 32 (dq_column's case): an address per
    // column block i, the second row an immediate (ptxas otherwise kept an
    // address per store).
    static_assert(NQ % 4 == 0, "dQ's columns come in 32-column groups");
    const int sw = static_cast<int>(blk.tok0 + m0 + (lane >> 2)) & 3;
    const uint32_t row_at = smem.dq_stage() + 4u * static_cast<uint32_t>((row0 + 16 * warp + (lane >> 2)) * kD);
    smem.dq_empty().wait((it & 1) ^ 1);
#pragma unroll
    for (int i = 0; i < NQ; ++i) {
      const uint32_t at = row_at + 4u * static_cast<uint32_t>(flash::dq_column<4>(column(i & ~3), i & 3, sw, lane));
      store_pair<0>(at, dq[i][0], dq[i][1]);
      store_pair<4 * 8 * kD>(at, dq[i][2], dq[i][3]);  // 8 rows further
    }
    sm90::fence_proxy_async();  // the stores above, before the bulk add reads them
    smem.dq_full().arrive();
  }

  // Dropout's keep bits of the walk's tile (m, hh); all kept past the walk's
  // end or without dropout.
  __device__ __forceinline__ KeepWords keep_for(int m, int hh) const {
    if (m > blk.mt.last) {
      m = blk.mt.first;
      ++hh;
    }
    if (!kDropout || !p.dropout_threshold || hh >= blk.hh1) return keep_all();
    return keep_bits(m * kM, static_cast<uint32_t>(blk.b) * p.h_q + blk.h_kv * p.h_per_kv + hh);
  }

  // The `it`-th query tile of the walk (tile m of query head hh of the
  // group). `keep` holds its keep bits and leaves with the next tile's: with
  // dropout a tile's bits are drawn during the tile before it, while dQ's
  // and dK's products run, where the consumers' issue slots are free and
  // S^T's and dP^T's registers dead (at the tile's start both consumers'
  // Philox rounds left the tensor cores idle). The dropout backward gained
  // 4% at d 64 on an H200 (0.74-0.81 -> 0.77-0.84x cuDNN's); at d 128 it lost
  // 1% under the 32-bit draws and gains 0.2-2% under the 16-bit ones (half
  // the blocks, the same spills).
  __device__ __forceinline__ void run_tile(int it, int m, int hh, KeepWords& keep) const {
    const int stage = it % kS, m0 = m * kM;
    const QueryTile q_tile = smem.q_tile(stage), do_tile = smem.do_tile(stage);
    await_query_tile(it, m0);
    const int hq = blk.h_kv * p.h_per_kv + hh;
    float s[NS][4], dp[NS][4];
    issue_scores(q_tile, do_tile, s, dp);
    sm90::wgmma_wait<1>();  // S^T
    sm90::fence_registers(*reinterpret_cast<float(*)[kM / 2]>(&s));
    const float2* terms = reinterpret_cast<const float2*>(smem.to_generic(smem.terms(stage)));
    uint32_t pa[kM / 16][4];
    if constexpr (kScoreMods) {
      const float slope = p.alibi ? p.alibi[blk.b * p.alibi_batch_stride + hq * p.alibi_head_stride] : 0.f;
      probabilities_modified(s, pa, m0, terms, slope, keep);
    } else {
      probabilities(s, m0, terms);
      if constexpr (kDropout)
        kept_fragments(s, pa, keep);
      else
        a_fragments(s, pa);
    }
    issue_dv(pa, do_tile);
    sm90::wgmma_wait<1>();  // dP^T (dV's product may run on)
    sm90::fence_registers(*reinterpret_cast<float(*)[kM / 2]>(&dp));
    dscores(s, dp, terms, keep);
    uint32_t dsa[kM / 16][4];
    a_fragments(dp, dsa);
    const KeyTile ds_tile = store_ds(dsa, it);
    float dq[NQ][4];
    issue_dq(ds_tile, dq);
    issue_dk(dsa, q_tile);
    if constexpr (kDropout) keep = keep_for(m + 1, hh);
    sm90::wgmma_wait<1>();  // dQ (and dV before it)
    sm90::fence_registers(*reinterpret_cast<float(*)[NQ * 4]>(&dq));
    stage_dq(dq, m0, it);
    sm90::wgmma_wait<0>();  // dK
    sm90::fence_registers(regs.dk_flat());
    sm90::fence_registers(regs.dv_flat());
    smem.empty(stage).arrive();  // Q, dO and the terms are read
  }

  // The walk: every query head of the group, every query tile that sees the keys.
  __device__ __forceinline__ void run() const {
    await_keys();
    KeepWords keep = keep_for(blk.mt.first, blk.hh0);
    int it = 0;
    for (int hh = blk.hh0; hh < blk.hh1; ++hh)
      for (int m = blk.mt.first; m <= blk.mt.last; ++m, ++it) run_tile(it, m, hh, keep);
  }
};

}  // namespace attn::flash_sm90
