// flash_sm90's backward kernel: FlashAttention's backward on Hopper's
// asynchronous units (FlashAttention-3's arrangement of the products). One CTA
// per (KV tile of 128 keys, KV head, sequence), in flash_sm80's chunked grid
// order, walks, for each query head of the KV head's group (GQA: nothing
// repeated), the query tiles of 64 rows that see its keys (flash_sm80's tile
// ranges):
// - warpgroup 0, the producer: one warp loads K and V once, then each query
//   tile's Q and dO with TMA and its rows' {lse, D} (the pre-pass's row terms)
//   into a kStages-deep ring guarded by "full" and "empty" mbarriers;
// - warpgroups 1 and 2, the consumers, 64 keys each. Per query tile:
//     S^T = K.Q^T and dP^T = V.dO^T on wgmma (both operands in shared memory),
//     P^T = exp2(S^T scale log2e - lse2) under dP^T's product,
//     dV += P^T.dO (P^T a register operand), dS^T = P^T (dP^T - D) under it,
//     dS^T to shared memory, then dQ = dS.K: each consumer half of d's
//     columns over all 128 keys (dS read MN-major), and dK += dS^T.Q, under
//     which dQ is staged in shared memory in the fp32 accumulator's byte
//     order (flash_sm80's layout and passes);
// - one thread of warpgroup 0's second warp adds each staged dQ tile to the
//   accumulator with one bulk reduce-add (per-thread red.global adds had the
//   consumers waiting on the memory pipeline: 0.68-0.73x cuDNN's backward).
// Computing S^T rather than S puts keys on the accumulator's rows, so P^T and
// dS^T are already the A operands of dV's and dK's products. dK and dV stay
// in registers over the whole walk and leave by TMA stores. Rows of a tile
// past its sequence (cu_seqlens) are cleared in shared memory first.
// The pre-pass (D, dq_accum = 0) and the dq conversion are flash_sm80's.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "attn/error.h"
#include "backends/flash_sm80/bwd_config.h"  // bwd_group_chunk
#include "backends/flash/dq_layout.h"
#include "backends/flash/sequence.cuh"
#include "backends/flash_sm90/bwd_config.h"
#include "backends/flash_sm90/bwd_params.h"
#include "core/cuda_check.h"
#include "kernels/sm80/mma.cuh"
#include "kernels/sm90/mbarrier.cuh"
#include "kernels/sm90/stmatrix.cuh"
#include "kernels/sm90/tma.cuh"
#include "kernels/sm90/wgmma.cuh"
#include "kernels/sm90/wgmma_ops.cuh"

namespace attn::flash_sm90 {

// Named barriers (0 is __syncthreads): both consumers, once per query tile,
// after each wrote its half of dS^T; both, before the epilogue stages dK and
// dV where Q and dO were; each consumer alone, before its TMA stores.
constexpr int kBarDsWritten = 1;
constexpr int kBarEpilogue = 2;
constexpr int kBarConsumer0 = 3;  // 3, 4
constexpr int kBarCleared = 5;    // both consumers, after clearing rows past a sequence

template <typename T, int kDQK, int kDV>
__global__ void __launch_bounds__(BwdConfig<kDQK, kDV>::kThreads, 1)
    flash_bwd_sm90_kernel(const __grid_constant__ Sm90BwdParams args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = BwdConfig<kDQK, kDV>;
  constexpr int kD = kDQK, kM = Cfg::kBlockM, kN = Cfg::kBlockN, kS = Cfg::kStages;
  const flash::BwdParams& bp = args.p;
  const flash::FwdParams& p = bp.fwd;

  extern __shared__ char smem_raw[];
  // TMA and wgmma assume tiles start on the swizzle's 1024-byte period.
  char* const smem = smem_raw + ((1024u - (sm90::smem_addr(smem_raw) & 1023u)) & 1023u);
  const uint32_t k_s = sm90::smem_addr(smem);
  const uint32_t v_s = k_s + Cfg::kSmemK;
  const uint32_t q_s = v_s + Cfg::kSmemK;          // kS stages
  const uint32_t do_s = q_s + kS * Cfg::kSmemQ;    // kS stages
  const uint32_t ds_s = do_s + kS * Cfg::kSmemQ;   // kDsBuffers, by query tile parity
  const uint32_t dq_s = ds_s + Cfg::kDsBuffers * Cfg::kSmemDs;    // kDqStages of a tile's dQ, fp32
  const uint32_t terms_s = dq_s + Cfg::kDqStages * Cfg::kSmemDq;  // kS stages of float2 {lse2, D}
  const uint32_t bars = terms_s + kS * Cfg::kSmemTerms;
  const uint32_t kv_full = bars;
  auto full = [&](int s) { return bars + 8 * (1 + s); };
  auto empty = [&](int s) { return bars + 8 * (1 + kS + s); };
  constexpr int kDqStages = Cfg::kDqStages;
  auto dq_full = [&](int q) { return bars + 8 * (1 + 2 * kS + q); };
  auto dq_empty = [&](int q) { return bars + 8 * (1 + 2 * kS + kDqStages + q); };
  static_assert(8 * (1 + 2 * kS + 2 * kDqStages) <= Cfg::kSmemBarriers, "barrier area");
  constexpr int kConsumerThreads = 128 * Cfg::kConsumers;

  // Grid (pairs of a chunk, KV tiles, chunks) over (KV head, sequence) pairs
  // (flash_sm80's d 256 order, bwd_group_chunk()): under a causal mask with
  // GQA the first KV tiles carry the most work, and a chunk's pairs start
  // theirs together; otherwise one pair per chunk, each pair's tiles in turn.
  const int heads_kv = p.h_q / p.h_per_kv, pair = blockIdx.z * bp.group_chunk + blockIdx.x;
  if (pair >= heads_kv * p.batch) return;  // the last chunk may be short
  const int n = blockIdx.y, h_kv = pair % heads_kv, b = pair / heads_kv;
  const int n0 = n * kN;
  const flash::SeqExtent seq = flash::sequence_extent(p, b);
  // Key rows this CTA writes: in a padded batch also those past len_kv (dK =
  // dV = 0 there); in thd the rows past a sequence are the next one's.
  const int rows_out = p.packed ? min(kN, seq.len_kv - n0) : min(kN, p.s_kv - n0);
  if (rows_out <= 0) return;
  // The query tiles that see these keys: a contiguous run, found exactly from
  // the superset (as flash_sm80's backward does).
  flash::QTiles mt = flash::q_tiles<kM, kN>(p, seq, n0);
  auto sees = [&](int m) {
    const flash::KvTiles kt = flash::kv_tiles<kM, kN>(p, seq, m * kM);
    return kt.first <= n && n <= kt.last;
  };
  while (mt.first <= mt.last && !sees(mt.first)) ++mt.first;
  while (mt.first <= mt.last && !sees(mt.last)) --mt.last;
  const bool has_work = mt.first <= mt.last;
  const int64_t tok0 = p.packed ? seq.start_q : static_cast<int64_t>(b) * p.s_q;  // workspace token of row 0

  const int tid = threadIdx.x;
  if (tid == 0) {
    sm90::mbar_init(kv_full, 1);
    for (int s = 0; s < kS; ++s) {
      sm90::mbar_init(full(s), 32);  // the producer warp's lanes (row terms), one with the TMA bytes
      sm90::mbar_init(empty(s), kConsumerThreads);
    }
    for (int q = 0; q < kDqStages; ++q) {
      sm90::mbar_init(dq_full(q), kConsumerThreads / kDqStages);  // the consumers that stage it
      sm90::mbar_init(dq_empty(q), 1);
    }
    sm90::mbar_init_fence();
  }
  __syncthreads();

  if (tid < 128) {  // producer warpgroup: its first warp loads, a thread of the second adds dQ
    sm90::regs_decrease<Cfg::kProducerRegs>();
    if (tid == 32 && has_work) {
      int it = 0;
      for (int hh = 0; hh < p.h_per_kv; ++hh) {
        float* const dq_rows = bp.dq_accum + ((h_kv * p.h_per_kv + hh) * bp.rows_q + tok0) * kD;
        for (int m = mt.first; m <= mt.last; ++m, ++it) {
          const int rows = min(kM, seq.len_q - m * kM);  // rows past the sequence are not added
          for (int q = 0; q < kDqStages; ++q) {
            sm90::mbar_wait(dq_full(q), it & 1);
            if (rows > 0) {
              sm90::bulk_reduce_add_f32(dq_rows + static_cast<int64_t>(m) * kM * kD, dq_s + q * Cfg::kSmemDq,
                                        rows * kD * 4);
              sm90::bulk_commit();
              sm90::bulk_wait_read<0>();
            }
            sm90::mbar_arrive(dq_empty(q));
          }
        }
      }
      sm90::bulk_wait<0>();
      return;
    }
    if (tid >= 32 || !has_work) return;
    const int lane = tid;
    const int seq_coord = p.packed ? 0 : b;
    if (lane == 0) {
      sm90::tma_prefetch_map(&args.q);
      sm90::tma_prefetch_map(&args.dout);
      sm90::mbar_arrive_expect_tx(kv_full, 2 * Cfg::kSmemK);
#pragma unroll
      for (int cb = 0; cb < kD / 64; ++cb) {
        sm90::tma_load_4d(k_s + cb * kN * 128, &args.k, kv_full, cb * 64, static_cast<int>(seq.start_kv) + n0, h_kv,
                          seq_coord);
        sm90::tma_load_4d(v_s + cb * kN * 128, &args.v, kv_full, cb * 64, static_cast<int>(seq.start_kv) + n0, h_kv,
                          seq_coord);
      }
    }
    int it = 0;
    for (int hh = 0; hh < p.h_per_kv; ++hh) {
      const int h = h_kv * p.h_per_kv + hh;
      const float2* terms = bp.row_terms + h * bp.rows_q + tok0;
      for (int m = mt.first; m <= mt.last; ++m, ++it) {
        const int stage = it % kS, m0 = m * kM;
        // The tile's row terms are read before its stage is free, so their
        // latency runs under the wait. Rows past the sequence get lse2 =
        // +inf: their P is 0.
        float2 t[kM / 32];
#pragma unroll
        for (int j = 0; j < kM / 32; ++j) {
          const int r = lane + 32 * j;
          t[j] = m0 + r < seq.len_q ? terms[m0 + r] : make_float2(INFINITY, 0.f);
        }
        sm90::mbar_wait(empty(stage), ((it / kS) & 1) ^ 1);  // a fresh barrier's "previous phase" is complete
#pragma unroll
        for (int j = 0; j < kM / 32; ++j) {
          const uint32_t at = terms_s + stage * Cfg::kSmemTerms + 8 * (lane + 32 * j);
          asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(t[j].x), "f"(t[j].y) : "memory");
        }
        if (lane == 0) {
          sm90::mbar_arrive_expect_tx(full(stage), 2 * Cfg::kSmemQ);
#pragma unroll
          for (int cb = 0; cb < kD / 64; ++cb) {
            sm90::tma_load_4d(q_s + stage * Cfg::kSmemQ + cb * kM * 128, &args.q, full(stage), cb * 64,
                              static_cast<int>(seq.start_q) + m0, h, seq_coord);
            sm90::tma_load_4d(do_s + stage * Cfg::kSmemQ + cb * kM * 128, &args.dout, full(stage), cb * 64,
                              static_cast<int>(seq.start_q) + m0, h, seq_coord);
          }
        } else {
          sm90::mbar_arrive(full(stage));
        }
      }
    }
    return;
  }

  // Consumers.
  sm90::regs_increase<Cfg::kConsumerRegs>();
  constexpr int NS = kM / 8;         // S^T's 8-column blocks (query columns)
  constexpr int ND = kD / 8;         // dK's and dV's
  constexpr int NQ = (Cfg::kDqOverOwnKeys ? kD : kD / 2) / 8;  // this consumer's dQ columns
  const int wg = tid / 128 - 1, lane = tid & 31, warp = (tid / 32) & 3;
  // This warpgroup's first key in the tile, from lane 0's wg: warp-uniform
  // for ptxas, so the descriptors derived from it stay in uniform registers.
  const int wg_key0 = __shfl_sync(0xffffffff, wg, 0) * 64;
  const int key0 = n0 + wg * 64;  // this consumer's first key in the sequence

  // An S^T-shaped accumulator (n8 blocks of query columns) as the A
  // fragments of a product over those queries: blocks 2 ks and 2 ks + 1 are
  // k16 step ks (the accumulator's layout per warp is the A fragment's).
  auto a_fragments = [](const float (&acc)[NS][4], uint32_t (&a)[NS / 2][4]) {
#pragma unroll
    for (int ks = 0; ks < NS / 2; ++ks) {
      a[ks][0] = sm80::pack2<T>(acc[2 * ks][0], acc[2 * ks][1]);
      a[ks][1] = sm80::pack2<T>(acc[2 * ks][2], acc[2 * ks][3]);
      a[ks][2] = sm80::pack2<T>(acc[2 * ks + 1][0], acc[2 * ks + 1][1]);
      a[ks][3] = sm80::pack2<T>(acc[2 * ks + 1][2], acc[2 * ks + 1][3]);
    }
  };
  float dk[ND][4], dv[ND][4];
  float(&dk_flat)[kD / 2] = *reinterpret_cast<float(*)[kD / 2]>(&dk);
  float(&dv_flat)[kD / 2] = *reinterpret_cast<float(*)[kD / 2]>(&dv);
#pragma unroll
  for (int i = 0; i < ND; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;

  // Rows of a tile past its sequence (thd: the next sequence's tokens; a
  // padded batch: its padding, possibly not finite) are cleared in shared
  // memory before any product reads them: a masked score gives P = 0 and
  // dS = 0, but 0 * NaN is NaN in the products that sum over those rows.
  // TMA already zero-fills rows past the tensor's end (bshd/sbhd's s), so
  // only cu_seqlens calls get here. Both consumers clear, then sync.
  auto clear_rows = [&](uint32_t tile, int rows, int first) {
    sm90::clear_rows<kD>(smem + (tile - k_s), rows, first, tid - 128, kConsumerThreads);
  };
  const bool padded_kv = (p.packed || seq.len_kv < p.s_kv) && n0 + kN > seq.len_kv;
  const bool padded_q = p.packed || seq.len_q < p.s_q;

  if (has_work) {
    sm90::mbar_wait(kv_full, 0);
    if (padded_kv) {
      clear_rows(k_s, kN, max(0, seq.len_kv - n0));
      clear_rows(v_s, kN, max(0, seq.len_kv - n0));
      sm90::fence_proxy_async();
      sm90::named_sync(kBarCleared, kConsumerThreads);
    }
    const float unit = p.scale_log2;  // scores -> log2 units (score modifications are refused)
    int it = 0;
    for (int hh = 0; hh < p.h_per_kv; ++hh) {  // the group's query heads
      for (int m = mt.first; m <= mt.last; ++m, ++it) {
        const int stage = it % kS, m0 = m * kM;
        const uint32_t q_tile = q_s + stage * Cfg::kSmemQ, do_tile = do_s + stage * Cfg::kSmemQ;
        sm90::mbar_wait(full(stage), (it / kS) & 1);
        if (padded_q && m0 + kM > seq.len_q) {
          clear_rows(q_tile, kM, max(0, seq.len_q - m0));
          clear_rows(do_tile, kM, max(0, seq.len_q - m0));
          sm90::fence_proxy_async();
          sm90::named_sync(kBarCleared, kConsumerThreads);
        }

        // S^T = K.Q^T and dP^T = V.dO^T: this consumer's 64 keys x the tile's
        // 64 queries, committed apart so that P is computed under dP^T's
        // product, and dS under dV's.
        float s[NS][4], dp[NS][4];
        float(&s_flat)[kM / 2] = *reinterpret_cast<float(*)[kM / 2]>(&s);
        float(&dp_flat)[kM / 2] = *reinterpret_cast<float(*)[kM / 2]>(&dp);
        sm90::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks)
          sm90::Wgmma<kM, T>::template ss<0>(s_flat, sm90::kmajor_descriptor(k_s, kN, wg_key0, ks),
                                              sm90::kmajor_descriptor(q_tile, kM, 0, ks), ks > 0);
        sm90::wgmma_commit();
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks)
          sm90::Wgmma<kM, T>::template ss<0>(dp_flat, sm90::kmajor_descriptor(v_s, kN, wg_key0, ks),
                                              sm90::kmajor_descriptor(do_tile, kM, 0, ks), ks > 0);
        sm90::wgmma_commit();
        sm90::wgmma_wait<1>();
        sm90::fence_registers(s_flat);

        // Element s[i][2 hh + e]: key key0 + 16 warp + 8 hh + lane / 4,
        // query m0 + 8 i + 2 (lane % 4) + e. A consumer tile needs the mask
        // unless every valid query row sees all 64 of its keys (both ends of
        // a row's range grow with the row, so the first and last rows decide).
        // P = 0 where masked, so dS = P (dP - D) is 0 there too.
        const int last_row = min(m0 + kM, seq.len_q) - 1;
        const bool masked = last_row < m0 || flash::row_key_begin(p, seq, last_row) > key0 ||
                            flash::row_key_end(p, seq, m0) < key0 + 64;
        const float2* terms = reinterpret_cast<const float2*>(smem + (terms_s - k_s) + stage * Cfg::kSmemTerms);
        const int j0 = key0 + 16 * warp + (lane >> 2);  // this thread's first key (and j0 + 8)
#pragma unroll
        for (int i = 0; i < NS; ++i)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int c = 8 * i + 2 * (lane & 3) + e;
            const float lse2 = terms[c].x;
            int begin = 0, end = seq.len_kv;
            if (masked) {
              const bool valid = m0 + c < seq.len_q;
              begin = valid ? flash::row_key_begin(p, seq, m0 + c) : 0;
              end = valid ? flash::row_key_end(p, seq, m0 + c) : 0;
            }
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              const int j = j0 + 8 * hr;
              float& x = s[i][2 * hr + e];
              x = (masked && (j < begin || j >= end)) ? 0.f : sm80::fast_exp2(x * unit - lse2);
            }
          }
        // P^T as wgmma's A fragments, then dV += P^T.dO (dO read MN-major:
        // d is its contiguous dim).
        uint32_t pa[kM / 16][4];
        a_fragments(s, pa);
        sm90::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kM / 16; ++ks)
          sm90::Wgmma<kD, T>::template rs<1>(dv_flat, pa[ks], sm90::mnmajor_descriptor(do_tile, kM, ks), 1);
        sm90::wgmma_commit();
        sm90::wgmma_wait<1>();  // dP^T (dV's product may run on)
        sm90::fence_registers(dp_flat);

        // dS^T = P^T (dP^T - D) and its A fragments.
#pragma unroll
        for (int i = 0; i < NS; ++i)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float delta = terms[8 * i + 2 * (lane & 3) + e].y;
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) dp[i][2 * hr + e] = s[i][2 * hr + e] * (dp[i][2 * hr + e] - delta);
          }
        uint32_t dsa[kM / 16][4];
        a_fragments(dp, dsa);

        // dS^T into this tile's buffer (rows: keys, 64 query columns), with
        // stmatrix: lane l addresses row l % 8 of matrix l / 8, and matrix j
        // holds rows 8 (j % 2).. of n8 block 2 np + j / 2 (stmatrix.cuh),
        // which is dsa[np][j]. Two buffers by tile parity where both
        // consumers read both halves: a consumer writes tile i + 1's while
        // the other may still read tile i's, and it cannot reach tile i + 2
        // before the other passed tile i + 1's barrier. One where each reads
        // its own rows (kDqOverOwnKeys), after its own last dQ product.
        const uint32_t ds_tile = ds_s + (Cfg::kDsBuffers == 2 ? (it & 1) * Cfg::kSmemDs : 0);
        {
          const int st_row = wg * 64 + 16 * warp + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
          for (int np = 0; np < kM / 16; ++np)
            sm90::stmatrix_x4(ds_tile + sm90::swizzled_offset(kN, st_row, 2 * np + (lane >> 4)), dsa[np][0],
                              dsa[np][1], dsa[np][2], dsa[np][3]);
        }
        sm90::fence_proxy_async();  // the stores above, before wgmma reads them
        float dq[NQ][4];
        float(&dq_flat)[NQ * 4] = *reinterpret_cast<float(*)[NQ * 4]>(&dq);
        if constexpr (Cfg::kDqOverOwnKeys) {
          // dQ's part from this consumer's keys: dS[:, own keys].K[own keys, :]
          // (both read MN-major, k steps over its own 64 rows of dS^T and K).
          sm90::named_sync(kBarConsumer0 + wg, 128);
          const int ks0 = wg_key0 / 16;
          sm90::wgmma_fence();
#pragma unroll
          for (int ks = 0; ks < 64 / 16; ++ks)
            sm90::Wgmma<kD, T>::template ss<1, 1>(dq_flat, sm90::mnmajor_descriptor(ds_tile, kN, ks0 + ks),
                                                   sm90::mnmajor_descriptor(k_s, kN, ks0 + ks), ks > 0);
        } else {
          // dQ[:, this half] = dS.K[:, this half] over the tile's 128 keys: dS
          // read MN-major from dS^T (queries contiguous), K MN-major.
          sm90::named_sync(kBarDsWritten, kConsumerThreads);
          const uint32_t k_half = k_s + (wg_key0 / 64) * (kD / 128) * kN * 128;  // its first 64-column block
          sm90::wgmma_fence();
#pragma unroll
          for (int ks = 0; ks < kN / 16; ++ks)
            sm90::Wgmma<kD / 2, T>::template ss<1, 1>(dq_flat, sm90::mnmajor_descriptor(ds_tile, kN, ks),
                                                       sm90::mnmajor_descriptor(k_half, kN, ks), ks > 0);
        }
        sm90::wgmma_commit();
        // dK += dS^T.Q (Q read MN-major) after dQ, so that dQ's staging below runs under it.
#pragma unroll
        for (int ks = 0; ks < kM / 16; ++ks)
          sm90::Wgmma<kD, T>::template rs<1>(dk_flat, dsa[ks], sm90::mnmajor_descriptor(q_tile, kM, ks), 1);
        sm90::wgmma_commit();
        sm90::wgmma_wait<1>();  // dQ (and dV before it)
        sm90::fence_registers(dq_flat);

        // dq[i][2 hh + e]: query row 16 warp + 8 hh + lane / 4 of the tile,
        // column col0 + 8 i + 2 (lane % 4) + e, staged two floats at a time
        // at its place in the accumulator's row (flash/dq_layout.h) once the
        // previous tile's bulk add has read the stage.
        const int q_stage = Cfg::kDqOverOwnKeys ? wg : 0, col0 = Cfg::kDqOverOwnKeys ? 0 : wg * (kD / 2);
        const uint32_t dq_stage = dq_s + q_stage * Cfg::kSmemDq;
        sm90::mbar_wait(dq_empty(q_stage), (it & 1) ^ 1);
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int r = 16 * warp + 8 * hr + (lane >> 2);
#pragma unroll
          for (int i = 0; i < NQ; ++i) {
            const int col = flash::dq_swizzle(tok0 + m0 + r, col0 + 8 * i + 2 * (lane & 3));
            const uint32_t at = dq_stage + 4u * static_cast<uint32_t>(r * kD + col);
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(dq[i][2 * hr]), "f"(dq[i][2 * hr + 1])
                         : "memory");
          }
        }
        sm90::fence_proxy_async();  // the stores above, before the bulk add reads them
        sm90::mbar_arrive(dq_full(q_stage));
        sm90::wgmma_wait<0>();  // dK
        sm90::fence_registers(dk_flat);
        sm90::fence_registers(dv_flat);
        sm90::mbar_arrive(empty(stage));  // Q, dO and the terms are read
      }
    }
  }

  // dK (times the softmax scale: dS is the gradient of the scaled scores)
  // and dV, staged with stmatrix in the Q and dO stages (128 key rows of
  // 128-byte swizzled blocks each, like the forward's output tile) once both
  // consumers' last products have read them, then written by TMA stores of
  // 64 rows per consumer (rows past the tensor's end are not written).
  // Lane l addresses row l % 8 of matrix l / 8; matrix j holds rows 8 (j % 2)..
  // of n8 block 2 np + j / 2 (stmatrix.cuh).
  sm90::named_sync(kBarEpilogue, kConsumerThreads);
  {
    const int st_row = wg * 64 + 16 * warp + ((lane >> 3) & 1) * 8 + (lane & 7);
    const float scale = p.scale;
#pragma unroll
    for (int np = 0; np < ND / 2; ++np) {
      uint32_t rk[4], rv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = 2 * np + j / 2, e0 = 2 * (j % 2);
        rk[j] = sm80::pack2<T>(dk[i][e0] * scale, dk[i][e0 + 1] * scale);
        rv[j] = sm80::pack2<T>(dv[i][e0], dv[i][e0 + 1]);
      }
      const uint32_t at = sm90::swizzled_offset(kN, st_row, 2 * np + (lane >> 4));
      sm90::stmatrix_x4(q_s + at, rk[0], rk[1], rk[2], rk[3]);
      sm90::stmatrix_x4(do_s + at, rv[0], rv[1], rv[2], rv[3]);
    }
  }
  sm90::fence_proxy_async();  // the stores above, before the TMA stores read them
  sm90::named_sync(kBarConsumer0 + wg, 128);
  if (rows_out >= wg * 64 + 64 || !p.packed) {  // TMA writes no row past the tensor's end
    if ((tid & 127) == 0) {
      const int seq_coord = p.packed ? 0 : b, row = static_cast<int>(seq.start_kv) + n0 + wg * 64;
#pragma unroll
      for (int cb = 0; cb < kD / 64; ++cb) {
        sm90::tma_store_4d(&args.dk, q_s + cb * kN * 128 + wg * 64 * 128, cb * 64, row, h_kv, seq_coord);
        sm90::tma_store_4d(&args.dv, do_s + cb * kN * 128 + wg * 64 * 128, cb * 64, row, h_kv, seq_coord);
      }
      sm90::bulk_commit();
      sm90::bulk_wait<0>();  // the stage stays until the stores have read it
    }
  } else {  // thd, the sequence ends inside this consumer's rows: its rows alone, 16 bytes at a time
    T* const dk_rows = static_cast<T*>(bp.dk) + (seq.start_kv + n0) * bp.dk_row_stride + h_kv * bp.dk_head_stride;
    T* const dv_rows = static_cast<T*>(bp.dv) + (seq.start_kv + n0) * bp.dv_row_stride + h_kv * bp.dv_head_stride;
    for (int idx = tid & 127; idx < 64 * (kD / 8); idx += 128) {
      const int r = wg * 64 + idx / (kD / 8), c = idx % (kD / 8);
      if (r >= rows_out) continue;
      const uint32_t at = sm90::swizzled_offset(kN, r, c);
      *reinterpret_cast<uint4*>(dk_rows + r * bp.dk_row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(smem + (q_s - k_s) + at);
      *reinterpret_cast<uint4*>(dv_rows + r * bp.dv_row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(smem + (do_s - k_s) + at);
    }
  }
#endif
}

// One CTA per (KV tile, KV head, sequence) on the caller's stream, in the
// chunked order above.
template <typename T, int kDQK, int kDV>
void launch_bwd(const Sm90BwdParams& args, cudaStream_t stream) {
  using Cfg = BwdConfig<kDQK, kDV>;
  auto* kernel = flash_bwd_sm90_kernel<T, kDQK, kDV>;
  ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  const auto& p = args.p.fwd;
  const int kv_tiles = (p.s_kv + Cfg::kBlockN - 1) / Cfg::kBlockN, pairs = p.h_q / p.h_per_kv * p.batch;
  if (kv_tiles > 65535)  // grid y (supports() refuses these first)
    fail(ErrorKind::unsupported, "flash_sm90's backward takes at most 65535 KV tiles",
         "max_seqlen_kv " + std::to_string(p.s_kv),
         "at most " + std::to_string(65535LL * Cfg::kBlockN) + " keys per sequence",
         "use another backend (cudnn, flash_sm80) for longer sequences");
  Sm90BwdParams a = args;
  a.p.group_chunk = flash::bwd_group_chunk(p.h_per_kv, p.window_left, p.window_right, p.s_q, kDQK, kDV, pairs);
  const dim3 grid(a.p.group_chunk, kv_tiles, (pairs + a.p.group_chunk - 1) / a.p.group_chunk);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(a);
  ATTN_CUDA(cudaGetLastError());
}

}  // namespace attn::flash_sm90
