// flash_sm90's backward from d_qk 192 (BwdConfig::kWide: 192 / 128, 192,
// 256): the two consumers share the CTA's 64 keys and split d. Per query
// tile and consumer:
//   S = Q.K^T and dP = dO.V^T for its 32 keys over all of d (both operands
//   K-major in shared memory; queries on the accumulator's rows, the
//   forward's layout, so flash_sm80's backward score code runs unchanged:
//   row terms, dropout's keep bits, softcap, ALiBi, the mask),
//   P and dS to shared memory (queries x the 64 keys, each consumer its 32
//   columns), a barrier of the two, then over its part of d's columns
//   (ConsumerColumns): dV += P^T.dO and dK += dS^T.Q, after which Q and
//   dO's stage goes back to the producer (at d 256, with one stage, the next
//   tile's loads then run under dQ), then dQ = dS.K, all from shared
//   memory, and dQ staged for the adder as at d 128 (the stage's other
//   columns are the other consumer's).
// dK and dV of 64 keys over all of d (192-256 floats each per thread) cannot
// stay in one warpgroup's registers: split by columns they take half each,
// as dQ.
// The plain build (no score changes, no dropout) splits S and dP by product
// instead (run_tile_split): consumer 0 takes S over all 64 keys, consumer 1
// dP, so Q and dO are each read once by the scores' products (at d 256 128
// KiB of shared-memory reads per query tile instead of 192). Consumer 0
// writes P (T, for dV) and P in fp16 where dS will go; consumer 1 reads the
// latter in its own fragments' layout (ldmatrix inverts stmatrix), forms
// dS = P (dP - D) and overwrites it with dS. fp16 keeps P to 2^-11 relative
// (its subnormals to 3e-8 absolute), below dS's own rounding to T.
#pragma once

#include <cstdint>

#include "backends/flash/dropout_bits.cuh"
#include "backends/flash/mask.cuh"
#include "backends/flash/tile_ranges.h"
#include "backends/flash_sm80/bwd_scores.cuh"
#include "kernels/sm80/ldmatrix.cuh"
#include "backends/flash_sm90/bwd_mainloop.cuh"

namespace attn::flash_sm90 {

constexpr int kBarPWritten = 6;  // both consumers of the split tile: consumer 0's P (and its fp16 copy) written

template <typename T, class Cfg, bool kScoreMods, bool kDropout>
struct BwdMainloopWide : BwdMainloop<T, Cfg, kScoreMods, kDropout> {
  using Base = BwdMainloop<T, Cfg, kScoreMods, kDropout>;
  static_assert(Cfg::kWide, "the wide tiles' loop");
  static constexpr int kD = Cfg::kHeadDim, kM = Cfg::kBlockM, kN = Cfg::kBlockN, kS = Cfg::kStages;
  static constexpr int kKeys = Cfg::kConsumerKeys, NA = kKeys / 8;  // S's 8-key blocks per consumer
  static constexpr int kDV = Cfg::kHeadDimV;
  using ColsK = typename Cfg::ColsK;  // this consumer's columns of dK and dQ
  using ColsV = typename Cfg::ColsV;  // of dV
  using QueryTile = typename Base::QueryTile;
  using KeyTile = typename Base::KeyTile;
  using Base::blk;
  using Base::lane;
  using Base::p;
  using Base::regs;
  using Base::smem;
  using Base::warp;
  using Base::wg;

  __device__ __forceinline__ explicit BwdMainloopWide(const Base& base) : Base(base) {}

  // S = Q.K^T and dP = dO.V^T over this consumer's keys (rows wg_key0.. of K, V).
  __device__ __forceinline__ void issue_scores(QueryTile q_tile, QueryTile do_tile, float (&s)[1][NA][4],
                                               float (&dp)[1][NA][4]) const {
    float(&s_flat)[kKeys / 2] = *reinterpret_cast<float(*)[kKeys / 2]>(&s);
    float(&dp_flat)[kKeys / 2] = *reinterpret_cast<float(*)[kKeys / 2]>(&dp);
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks)
      sm90::Wgmma<kKeys, T>::template ss<0>(s_flat, q_tile.kmajor(0, ks), smem.k_tile().kmajor(this->wg_key0, ks),
                                            ks > 0);
    sm90::wgmma_commit();
#pragma unroll
    for (int ks = 0; ks < kDV / 16; ++ks)
      sm90::Wgmma<kKeys, T>::template ss<0>(dp_flat, do_tile.kmajor(0, ks), smem.v_tile().kmajor(this->wg_key0, ks),
                                            ks > 0);
    sm90::wgmma_commit();
  }

  // Where this lane addresses key blocks block0 + 2 np and + 1 of `tile`
  // (queries on the rows) for stmatrix and ldmatrix: row l % 8 of matrix
  // l / 8, matrix j holding rows 8 (j % 2).. of key block 2 np + j / 2.
  __device__ __forceinline__ uint32_t key_pair_chunk(KeyTile tile, int block0, int np) const {
    const int st_row = 16 * warp + ((lane >> 3) & 1) * 8 + (lane & 7);
    return tile.chunk(st_row, block0 + 2 * np + (lane >> 4));
  }
  // NB key blocks of a queries x keys tile of fragments (P, dS, or P in
  // fp16: U) into the key columns 8 block0.. of `tile`, with stmatrix.
  template <typename U, int NB>
  __device__ __forceinline__ void store_key_blocks(KeyTile tile, const float (&x)[1][NB][4], int block0) const {
#pragma unroll
    for (int np = 0; np < NB / 2; ++np) stmatrix_block_pair<U>(key_pair_chunk(tile, block0, np), x[0], np, 1.f);
  }

  // P's and dS's buffers of tile `it` (two each, by parity).
  __device__ __forceinline__ QueryTile p_tile(int it) const { return {smem.ds_tile(2 * (it & 1)).addr}; }
  __device__ __forceinline__ QueryTile ds_tile(int it) const { return {smem.ds_tile(2 * (it & 1) + 1).addr}; }

  // This consumer's columns (split as Cols) of an MN-major operand tile
  // (rows: the product's k; d contiguous): its whole blocks and at d 192 its
  // half of the middle block, which starts 64 bytes into the block's rows
  // for consumer 1 (the swizzle applies to the address wgmma forms, as for a
  // K-major k step 32 bytes along the row).
  template <class Cols, class Tile>
  __device__ __forceinline__ Tile whole_blocks(Tile t) const {
    return {t.column_block(wg * (Cols::kWidth - Cols::kWhole) / 64)};
  }
  template <class Cols, class Tile>
  __device__ __forceinline__ Tile half_block(Tile t) const {
    return {t.column_block(Cols::kWhole / 64) + static_cast<uint32_t>(wg * Cols::kHalf * 2)};
  }

  // acc (+)= A.B over this consumer's columns of B: the whole blocks into
  // acc's first kWhole / 2 floats, the half block into the rest
  // (consumer_column's order).
  template <class Cols, int kTransA, int kSteps, class ATile, class BTile>
  __device__ __forceinline__ void column_product(float (&acc)[Cols::kCols / 2], ATile a, BTile b,
                                                 bool accumulate) const {
    float(&acc_a)[Cols::kWhole / 2] = *reinterpret_cast<float(*)[Cols::kWhole / 2]>(&acc[0]);
    const BTile b_a = whole_blocks<Cols>(b);
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks)
      sm90::Wgmma<Cols::kWhole, T>::template ss<1, kTransA>(acc_a, a_descriptor<kTransA>(a, ks), b_a.mnmajor(ks),
                                                            accumulate || ks > 0);
    if constexpr (Cols::kHalf > 0) {
      float(&acc_b)[Cols::kHalf / 2] = *reinterpret_cast<float(*)[Cols::kHalf / 2]>(&acc[Cols::kWhole / 2]);
      const BTile b_b = half_block<Cols>(b);
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks)
        sm90::Wgmma<Cols::kHalf, T>::template ss<1, kTransA>(acc_b, a_descriptor<kTransA>(a, ks), b_b.mnmajor(ks),
                                                             accumulate || ks > 0);
    }
  }
  template <int kTransA, class ATile>
  static __device__ __forceinline__ uint64_t a_descriptor(ATile a, int ks) {
    return kTransA ? a.mnmajor(ks) : a.kmajor(0, ks);
  }

  // dV += P^T.dO and dK += dS^T.Q over this consumer's columns of d (P^T
  // and dS^T read MN-major from the P and dS tiles, keys contiguous; dO and
  // Q MN-major), one group.
  __device__ __forceinline__ void issue_dv_dk(QueryTile q_tile, QueryTile do_tile, int it) const {
    sm90::wgmma_fence();
    column_product<ColsV, 1, kM / 16>(regs.dv_flat(), p_tile(it), do_tile, true);
    column_product<ColsK, 1, kM / 16>(regs.dk_flat(), ds_tile(it), q_tile, true);
    sm90::wgmma_commit();
  }

  // dQ = dS.K over this consumer's columns (dS K-major, K MN-major).
  __device__ __forceinline__ void issue_dq(float (&dq)[ColsK::kCols / 8][4], int it) const {
    float(&dq_flat)[ColsK::kCols / 2] = *reinterpret_cast<float(*)[ColsK::kCols / 2]>(&dq);
    column_product<ColsK, 0, kN / 16>(dq_flat, ds_tile(it), smem.k_tile(), false);
    sm90::wgmma_commit();
  }

  // The `it`-th query tile of the walk (tile m of query head hh of the group).
  __device__ __forceinline__ void run_tile(int it, int m, int hh, const flash::QTiles& unmasked) const {
    const int stage = it % kS, m0 = m * kM;
    const QueryTile q_tile = smem.q_tile(stage), do_tile = smem.do_tile(stage);
    this->await_query_tile(it, m0);
    float s[1][NA][4], dp[1][NA][4];
    issue_scores(q_tile, do_tile, s, dp);
    const int hq = blk.h_kv * p.h_per_kv + hh, row0 = m0 + 16 * warp;
    flash_sm80::RowTerms<1> rt;
    rt.load(reinterpret_cast<const float2*>(smem.to_generic(smem.terms(stage))), 16 * warp, blk.seq.len_q - m0,
            lane, 1.f);  // D staged times delta_scale
    const bool dropout = kDropout && p.dropout_threshold;
    flash::KeepBits<1, NA> keep;
    if (dropout) keep.compute(p, static_cast<uint32_t>(blk.b) * p.h_q + hq, row0, this->key0, lane);
    sm90::wgmma_wait<0>();  // S and dP
    sm90::fence_registers(*reinterpret_cast<float(*)[kKeys / 2]>(&s));
    sm90::fence_registers(*reinterpret_cast<float(*)[kKeys / 2]>(&dp));
    if (dropout) flash_sm80::dp_minus_delta<true>(dp, rt, keep);
    else flash_sm80::dp_minus_delta<false>(dp, rt, keep);
    float unit = p.scale_log2;
    if constexpr (kScoreMods) {
      if (p.score_mods) {
        const float slope = p.alibi ? p.alibi[blk.b * p.alibi_batch_stride + hq * p.alibi_head_stride] : 0.f;
        flash_sm80::score_mods_bwd(s, dp, p, slope, row0, this->key0, blk.seq.shift, lane);
        unit = 1.f;
      }
    }
    if (m < unmasked.first || m > unmasked.last) flash::apply_mask_by_key(s, p, blk.seq, row0, this->key0, lane);
    if (dropout) flash_sm80::probabilities_and_grads<true>(s, dp, rt, keep, unit);
    else flash_sm80::probabilities_and_grads<false>(s, dp, rt, keep, unit);
    store_key_blocks<T>(p_tile(it), s, this->wg_key0 / 8);   // P (times keep with dropout)
    store_key_blocks<T>(ds_tile(it), dp, this->wg_key0 / 8);  // dS
    sm90::fence_proxy_async();          // the stores above, before wgmma reads them
    sm90::named_sync(kBarDsWritten, 128 * Cfg::kConsumers);
    issue_dv_dk(q_tile, do_tile, it);
    float dq[ColsK::kCols / 8][4];
    issue_dq(dq, it);
    sm90::wgmma_wait<1>();  // dV and dK
    sm90::fence_registers(regs.dk_flat());
    sm90::fence_registers(regs.dv_flat());
    smem.empty(stage).arrive();  // Q, dO and the terms are read
    sm90::wgmma_wait<0>();       // dQ
    sm90::fence_registers(*reinterpret_cast<float(*)[ColsK::kCols / 2]>(&dq));
    this->stage_dq(dq, m0, it);
  }

  // The split tile's fragments: queries on the rows (16 warp + lane / 4, + 8),
  // all kN keys on the columns; block na's columns 8 na + 2 (lane % 4) + e.
  static constexpr int NF = kN / 8;

  // store_key_blocks' inverse for all kN keys in fp16: ldmatrix at
  // stmatrix's addresses hands each lane the pairs that lane stored.
  __device__ __forceinline__ void load_all_keys_half(KeyTile tile, float (&x)[1][NF][4]) const {
#pragma unroll
    for (int np = 0; np < NF / 2; ++np) {
      uint32_t r[4];
      sm80::ldmatrix_x4(r, key_pair_chunk(tile, 0, np));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r[j]));
        x[0][2 * np + j / 2][2 * (j % 2)] = f.x;
        x[0][2 * np + j / 2][2 * (j % 2) + 1] = f.y;
      }
    }
  }

  // The plain build's tile, S and dP split by product (the header's second
  // paragraph). Group order per consumer: 0 its score product, then dV, dK,
  // dQ as in run_tile.
  __device__ __forceinline__ void run_tile_split(int it, int m, const flash::QTiles& unmasked) const {
    const int stage = it % kS, m0 = m * kM;
    const QueryTile q_tile = smem.q_tile(stage), do_tile = smem.do_tile(stage);
    this->await_query_tile(it, m0);
    float x[1][NF][4];  // consumer 0: S, then P; consumer 1: dP, then dS
    float(&x_flat)[kN / 2] = *reinterpret_cast<float(*)[kN / 2]>(&x);
    // One instruction sequence for both (operands chosen by the consumer's
    // uniform wg_key0): two branches of wgmma into the same accumulators
    // made ptxas inject a warpgroup.arrive at their join.
    const bool dp_side = this->wg_key0 != 0;
    const QueryTile a_tile = dp_side ? do_tile : q_tile;
    const KeyTile b_tile = dp_side ? smem.v_tile() : smem.k_tile();
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks)
      sm90::Wgmma<kN, T>::template ss<0>(x_flat, a_tile.kmajor(0, ks), b_tile.kmajor(0, ks), ks > 0);
    sm90::wgmma_commit();
    const int row0 = m0 + 16 * warp;
    flash_sm80::RowTerms<1> rt;
    rt.load(reinterpret_cast<const float2*>(smem.to_generic(smem.terms(stage))), 16 * warp, blk.seq.len_q - m0,
            lane, 1.f);  // D staged times delta_scale
    sm90::wgmma_wait<0>();
    sm90::fence_registers(x_flat);
    const KeyTile p_buf = p_tile(it), ds_buf = ds_tile(it);
    if (!dp_side) {
      if (m < unmasked.first || m > unmasked.last) flash::apply_mask_by_key(x, p, blk.seq, row0, blk.n0, lane);
#pragma unroll
      for (int na = 0; na < NF; ++na)
#pragma unroll
        for (int e = 0; e < 4; ++e) x[0][na][e] = sm80::fast_exp2(x[0][na][e] * p.scale_log2 - rt.lse2[0][e >> 1]);
      store_key_blocks<T>(p_buf, x, 0);       // P for dV
      store_key_blocks<__half>(ds_buf, x, 0);  // P for dS, overwritten by consumer 1
      sm90::fence_proxy_async();          // P's stores, before wgmma reads them
    } else {
#pragma unroll
      for (int na = 0; na < NF; ++na)
#pragma unroll
        for (int e = 0; e < 4; ++e) x[0][na][e] -= rt.delta[0][e >> 1];
    }
    sm90::named_sync(kBarPWritten, 128 * Cfg::kConsumers);
    sm90::wgmma_fence();
    column_product<ColsV, 1, kM / 16>(regs.dv_flat(), p_buf, do_tile, true);
    sm90::wgmma_commit();
    if (dp_side) {  // dS = P (dP - D) under dV's product
      float pr[1][NF][4];
      load_all_keys_half(ds_buf, pr);
#pragma unroll
      for (int na = 0; na < NF; ++na)
#pragma unroll
        for (int e = 0; e < 4; ++e) x[0][na][e] *= pr[0][na][e];
      store_key_blocks<T>(ds_buf, x, 0);
      sm90::fence_proxy_async();
    }
    sm90::named_sync(kBarDsWritten, 128 * Cfg::kConsumers);
    sm90::wgmma_fence();
    column_product<ColsK, 1, kM / 16>(regs.dk_flat(), ds_buf, q_tile, true);
    sm90::wgmma_commit();
    if constexpr (bwd_early_do<Cfg>(kScoreMods, kDropout)) {
      sm90::wgmma_wait<1>();          // dV
      smem.do_empty(stage).arrive();  // dO is read: the next one loads under dK and dQ
    }
    float dq[ColsK::kCols / 8][4];
    issue_dq(dq, it);
    sm90::wgmma_wait<1>();  // dK
    sm90::fence_registers(regs.dk_flat());
    sm90::fence_registers(regs.dv_flat());
    smem.empty(stage).arrive();  // Q (and dO unless freed above) and the terms are read
    sm90::wgmma_wait<0>();       // dQ
    sm90::fence_registers(*reinterpret_cast<float(*)[ColsK::kCols / 2]>(&dq));
    this->stage_dq(dq, m0, it);
  }

  __device__ __forceinline__ void run() const {
    this->await_keys();
    const flash::QTiles unmasked = flash::unmasked_q_tiles<kM, kN>(p, blk.seq, blk.n0);
    int it = 0;
    for (int hh = blk.hh0; hh < blk.hh1; ++hh)
      for (int m = blk.mt.first; m <= blk.mt.last; ++m, ++it) {
        if constexpr (bwd_split_by_product<Cfg>(kScoreMods, kDropout)) run_tile_split(it, m, unmasked);
        else run_tile(it, m, hh, unmasked);
      }
  }
};

}  // namespace attn::flash_sm90
