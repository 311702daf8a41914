// flash_sm80's backward kernel: FlashAttention-2's decomposition on mma.sync.
// One CTA per (KV tile, KV head, sequence) keeps dK and dV in registers and
// walks, for each query head of the KV head's group (GQA: nothing repeated),
// the query tiles that see its keys (the forward's mask-rule tile ranges, so
// windows and causal masks skip tiles). Per query tile:
//   S = Q.K^T, dP = dO.V^T -> P, dS (bwd_scores.cuh) -> shared memory ->
//   dV += (P z)^T.dO, dQ += dS.K (fp32 adds, bwd_dq.cuh), dK += dS^T.Q: dQ's
//   add before dK's product, so its memory traffic runs under dK's HMMAs
//   (and at d <= 64 and d 256 before dV's too: BwdConfig::kDqFirst).
// The pre-pass (D, dq_accum = 0) and the dq conversion are in bwd_prepass.cu.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "backends/flash_sm80/ab_overrides.h"
#include "backends/flash_sm80/bwd_config.h"
#include "backends/flash_sm80/bwd_dq.cuh"
#include "backends/flash/params.h"
#include "backends/flash_sm80/bwd_scores.cuh"
#include "backends/flash/epilogue.cuh"
#include "backends/flash_sm80/tile_loads.cuh"
#include "backends/flash/sequence.cuh"
#include "backends/flash/dropout_bits.cuh"
#include "backends/flash/mask.cuh"
#include "backends/flash/online_softmax.cuh"
#include "backends/flash/score_mods.cuh"
#include "attn/error.h"
#include "core/cuda_check.h"
#include "kernels/sm80/cp_async.cuh"
#include "kernels/sm80/swizzle.h"
#include "kernels/sm80/warp_gemm.cuh"

namespace attn::flash_sm80 {

// This CTA's (KV tile n, KV head, sequence) from the grid: (KV tiles, h_kv,
// batch), or with bp.kv_tiles_slowest (h_kv, batch, KV tiles) on the rows
// that choose, or at d 256 (pairs of a chunk, KV tiles, chunks) of (KV head,
// sequence) pairs (bwd_config.h). False for the last chunk's CTAs past the
// pairs (a chunk may be short).
template <class Cfg>
__device__ __forceinline__ bool bwd_grid_position(const flash::BwdParams& bp, int& n, int& h_kv, int& b) {
  const flash::FwdParams& p = bp.fwd;
  if constexpr (Cfg::kChunkedGrid) {
    const int heads_kv = p.h_q / p.h_per_kv, pair = blockIdx.z * bp.group_chunk + blockIdx.x;
    if (pair >= heads_kv * p.batch) return false;
    n = blockIdx.y;
    h_kv = pair % heads_kv;
    b = pair / heads_kv;
  } else {
    const bool kv_slowest = Cfg::kKvOrderChosen && bp.kv_tiles_slowest;
    n = kv_slowest ? blockIdx.z : blockIdx.x;
    h_kv = kv_slowest ? blockIdx.x : blockIdx.y;
    b = kv_slowest ? blockIdx.y : blockIdx.z;
  }
  return true;
}

// dK (times softmax_scale) and dV through K's and V's shared memory, then
// whole 16-byte chunks per row; zeros where no query saw these keys. Both
// take dropout's 1 / (1 - p) here (bwd_scores.cuh).
template <typename T, class Cfg, class DK, class DV>
__device__ __forceinline__ void bwd_store_dk_dv(const flash::BwdParams& bp, const flash::SeqExtent& seq, int b,
                                                int h_kv, int n0, int rows_out, const DK& dk, const DV& dv,
                                                char* k_smem, char* v_smem, int row0_k, int col0_k, int row0_v,
                                                int col0_v, int tid, int lane) {
  constexpr int kN = Cfg::kBlockN, kThreads = Cfg::kThreads;
  using KTile = sm80::SwizzledTile<kN, Cfg::kHeadDimQK>;
  using VTile = sm80::SwizzledTile<kN, Cfg::kHeadDimV>;
  sm80::cp_async_wait<0>();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (bp.dq_bulk) dq_bulk_wait_read();  // shared memory stays until the last bulk add has read it
#endif
  __syncthreads();
  flash::stage_block<T, KTile>(k_smem, dk, bp.fwd.scale * bp.fwd.dropout_scale, row0_k, col0_k, lane);
  flash::stage_block<T, VTile>(v_smem, dv, bp.fwd.dropout_scale, row0_v, col0_v, lane);
  __syncthreads();
  T* dk_out = static_cast<T*>(bp.dk) + b * bp.dk_batch_stride + (seq.start_kv + n0) * bp.dk_row_stride +
              h_kv * bp.dk_head_stride;
  T* dv_out = static_cast<T*>(bp.dv) + b * bp.dv_batch_stride + (seq.start_kv + n0) * bp.dv_row_stride +
              h_kv * bp.dv_head_stride;
  flash::store_tile<KTile, kN, kThreads>(dk_out, bp.dk_row_stride, k_smem, rows_out, tid);
  flash::store_tile<VTile, kN, kThreads>(dv_out, bp.dv_row_stride, v_smem, rows_out, tid);
}

template <typename T, int kDQK, int kDV, bool kDropoutBuild>
__global__ void __launch_bounds__(BwdConfig<kDQK, kDV, kDropoutBuild>::kThreads)
    flash_bwd_kernel(const __grid_constant__ flash::BwdParams bp) {
  using Cfg = BwdConfig<kDQK, kDV, kDropoutBuild>;
  const flash::FwdParams& p = bp.fwd;
  constexpr int kM = Cfg::kBlockM, kN = Cfg::kBlockN, kThreads = Cfg::kThreads;
  constexpr int MAS = Cfg::kMAS, NAS = Cfg::kNAS;
  using QTile = sm80::SwizzledTile<kM, kDQK>;
  using DOTile = sm80::SwizzledTile<kM, kDV>;
  using KTile = sm80::SwizzledTile<kN, kDQK>;
  using VTile = sm80::SwizzledTile<kN, kDV>;
  using PTile = sm80::SwizzledTile<kM, kN>;

  // Q[0], Q[1], dO[0], dO[1] (kStages of each), K, V, P, dS.
  extern __shared__ __align__(128) char smem[];
  const uint32_t q_s0 = sm80::smem_addr(smem);
  const uint32_t do_s0 = q_s0 + Cfg::kStages * Cfg::kSmemQ;
  const uint32_t k_s = do_s0 + Cfg::kStages * Cfg::kSmemDO;
  const uint32_t v_s = k_s + Cfg::kSmemK;
  const uint32_t p_s = v_s + Cfg::kSmemV;
  const uint32_t ds_s = p_s + Cfg::kSmemP;
  const uint32_t dq_s = ds_s + Cfg::kSmemP;  // with bp.dq_bulk: dQ's stage (bwd_dq.cuh)
  char* k_smem = smem + Cfg::kStages * (Cfg::kSmemQ + Cfg::kSmemDO);
  char* v_smem = k_smem + Cfg::kSmemK;
  char* p_smem = v_smem + Cfg::kSmemV;
  char* ds_smem = p_smem + Cfg::kSmemP;

  int n, h_kv, b;
  if (!bwd_grid_position<Cfg>(bp, n, h_kv, b)) return;
  const int n0 = n * kN;
  const flash::SeqExtent seq = flash::sequence_extent(p, b);
  // Key rows this CTA writes: in a padded batch also those past len_kv (dk =
  // dv = 0 there); in thd the rows past a sequence belong to the next one.
  const int rows_out = p.packed ? min(kN, seq.len_kv - n0) : min(kN, p.s_kv - n0);
  if (rows_out <= 0) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const bool dropout = Cfg::kDropout && p.dropout_threshold != 0;  // compiled out of the wide builds

  // Each product's warp block (bwd_config.h).
  const int row0_s = (warp / Cfg::kWarpsNS) * 16 * MAS, col0_s = (warp % Cfg::kWarpsNS) * 8 * NAS;
  const int row0_k = (warp / Cfg::kWarpsDK) * 16 * Cfg::kMAK, col0_k = (warp % Cfg::kWarpsDK) * 8 * Cfg::kNAK;
  const int row0_v = (warp / Cfg::kWarpsDV) * 16 * Cfg::kMAV, col0_v = (warp % Cfg::kWarpsDV) * 8 * Cfg::kNAV;
  const int row0_q = (warp / Cfg::kWarpsDQ) * 16 * Cfg::kMAQ, col0_q = (warp % Cfg::kWarpsDQ) * 8 * Cfg::kNAQ;

  float dk[Cfg::kMAK][Cfg::kNAK][4], dv[Cfg::kMAV][Cfg::kNAV][4];
  sm80::zero(dk);
  sm80::zero(dv);

  // The query tiles that see these keys: a contiguous run (both ends of a
  // row's key range grow with the row), found exactly from the superset.
  flash::QTiles mt = flash::q_tiles<kM, kN>(p, seq, n0);
  auto sees = [&](int m) {
    const flash::KvTiles kt = flash::kv_tiles<kM, kN>(p, seq, m * kM);
    return kt.first <= n && n <= kt.last;
  };
  while (mt.first <= mt.last && !sees(mt.first)) ++mt.first;
  while (mt.first <= mt.last && !sees(mt.last)) --mt.last;
  // kv_tiles() says every tile between these two sees the keys too (one run:
  // tests/backends/test_sm80_tile_ranges.cpp checks it against the mask rule),
  // so the items need no visit test, and the deterministic mode's counters
  // (one turn per KV tile in kv_tiles()'s range) cannot stall on a gap.
  // (Found before the branch below: inside it, ptxas spilled in the loops of
  // three more builds: sm_90a d 64 and d 96, sm_80 d 128.)
  const flash::QTiles unmasked = flash::unmasked_q_tiles<kM, kN>(p, seq, n0);
  if (mt.first <= mt.last) {
    const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + (seq.start_kv + n0) * p.k_row_stride +
                 h_kv * p.k_head_stride;
    const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + (seq.start_kv + n0) * p.v_row_stride +
                 h_kv * p.v_head_stride;
    load_tile<KTile, kN, kThreads>(k_s, k, p.k_row_stride, seq.len_kv - n0, tid);
    load_tile<VTile, kN, kThreads>(v_s, v, p.v_row_stride, seq.len_kv - n0, tid);

    const float unit = p.score_mods ? 1.f : p.scale_log2;  // score units -> log2 units
    const int64_t tok0 = p.packed ? seq.start_q : static_cast<int64_t>(b) * p.s_q;  // workspace token of row 0
    // Work items: (query head of the group, query tile m), m fastest. The item
    // loop steps (h, m) and the next item's (h, m) by counting: a division by
    // the run's length per item cost ~25 instructions each, in the part of the
    // tile that no product overlaps.
    const int n_m = mt.last - mt.first + 1, items = p.h_per_kv * n_m;
    auto load_q_do = [&](int h, int m, int stage) {
      const int m0 = m * kM, rows = min(kM, seq.len_q - m0);
      // BwdConfig::kRebuild*Addresses: an opaque thread index, so that those
      // copies' per-thread addresses are rebuilt here per item instead of
      // held across the loop.
      int copy_tid = tid;
      asm volatile("" : "+r"(copy_tid));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      constexpr bool kRebuildQ = Cfg::kRebuildQAddressesSm90, kRebuildDo = Cfg::kRebuildDoAddressesSm90;
#else
      constexpr bool kRebuildQ = Cfg::kRebuildQAddresses, kRebuildDo = Cfg::kRebuildDoAddresses;
#endif
      const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + (seq.start_q + m0) * p.q_row_stride +
                   h * p.q_head_stride;
      const T* dout = static_cast<const T*>(bp.dout) + b * bp.do_batch_stride +
                      (seq.start_q + m0) * bp.do_row_stride + h * bp.do_head_stride;
      load_tile<QTile, kM, kThreads>(q_s0 + stage * Cfg::kSmemQ, q, p.q_row_stride, rows,
                                     kRebuildQ ? copy_tid : tid);
      load_tile<DOTile, kM, kThreads>(do_s0 + stage * Cfg::kSmemDO, dout, bp.do_row_stride, rows,
                                      kRebuildDo ? copy_tid : tid);
    };
    // Where BwdConfig::kDiagonalStart: each head's run of query tiles starts
    // at this CTA's diagonal tile and wraps around (not in deterministic
    // mode, whose turns go in tile order; under a causal mask the run starts
    // there anyway).
    const int diag = n0 / kM;
    const int m_start =
        Cfg::kDiagonalStart && !bp.dq_semaphore && diag >= mt.first && diag <= mt.last ? diag : mt.first;
    int h = h_kv * p.h_per_kv, m = m_start;  // the item's query head and tile
    if (Cfg::kStages == 2) load_q_do(h, m, 0);
    sm80::cp_async_commit();  // K, V (and the first Q, dO)

    // (h, m) step at the end of each item.
    for (int item = 0; item < items; ++item, m = m == mt.last ? mt.first : m + 1, h += (m == m_start)) {
      const int stage = Cfg::kStages == 2 ? item & 1 : 0;
      const uint32_t q_s = q_s0 + stage * Cfg::kSmemQ, do_s = do_s0 + stage * Cfg::kSmemDO;
      const bool last_m = m == mt.last;
      if (Cfg::kStages == 1) {  // its buffer was last read before the previous item's final barrier
        load_q_do(h, m, 0);
        sm80::cp_async_commit();
      }
      const int m0 = m * kM;
      const int rows = min(kM, seq.len_q - m0);
      const uint32_t bh = static_cast<uint32_t>(b) * static_cast<uint32_t>(p.h_q) + static_cast<uint32_t>(h);
      RowTerms<MAS> rt;
      rt.load(bp.row_terms + h * bp.rows_q + tok0 + m0, row0_s, rows, lane, bp.delta_scale);
      flash::KeepBits<MAS, NAS> keep;
      if (dropout) keep.compute(p, bh, m0 + row0_s, n0 + col0_s, lane);

      // This tile's Q and dO are the only loads in flight. The barrier makes
      // them visible and also ends every warp's reads of the previous tile
      // (its Q/dO stage, P and dS), so with two stages the next tile's loads
      // go into that stage right after it and run behind this tile's
      // products: two barriers per tile instead of three.
      sm80::cp_async_wait<0>();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (bp.dq_bulk) dq_bulk_wait_read();  // the previous tile's dQ stage is read before the barrier
#endif
      __syncthreads();
      if (Cfg::kStages == 2 && item + 1 < items) {
        const int m_next = last_m ? mt.first : m + 1;
        load_q_do(m_next == m_start ? h + 1 : h, m_next, stage ^ 1);
        sm80::cp_async_commit();
      }

      float s[MAS][NAS][4], dp[MAS][NAS][4];
      sm80::zero(s);
      sm80::zero(dp);
      sm80::gemm_ss<T, MAS, NAS, kDV, DOTile, VTile, false, false>(dp, do_s, v_s, row0_s, col0_s, lane);
      sm80::gemm_ss<T, MAS, NAS, kDQK, QTile, KTile, false, false>(s, q_s, k_s, row0_s, col0_s, lane);

      if (dropout) dp_minus_delta<true>(dp, rt, keep);
      else dp_minus_delta<false>(dp, rt, keep);
      if (p.score_mods) {
        const float slope = p.alibi ? p.alibi[b * p.alibi_batch_stride + h * p.alibi_head_stride] : 0.f;
        score_mods_bwd(s, dp, p, slope, m0 + row0_s, n0 + col0_s, seq.shift, lane);
      }
      if (m < unmasked.first || m > unmasked.last) {
        if constexpr (Cfg::kMaskBits) flash::apply_mask_bits(s, p, seq, m0 + row0_s, n0 + col0_s, lane);
        else flash::apply_mask_by_key(s, p, seq, m0 + row0_s, n0 + col0_s, lane);
      }
      if (dropout) probabilities_and_grads<true>(s, dp, rt, keep, unit);
      else probabilities_and_grads<false>(s, dp, rt, keep, unit);
      flash::stage_block<T, PTile>(p_smem, s, 1.f, row0_s, col0_s, lane);
      flash::stage_block<T, PTile>(ds_smem, dp, 1.f, row0_s, col0_s, lane);
      __syncthreads();

      auto dv_product = [&] {
        sm80::gemm_ss<T, Cfg::kMAV, Cfg::kNAV, kM, PTile, DOTile, true, true>(dv, p_s, do_s, row0_v, col0_v, lane);
      };
      if constexpr (!Cfg::kDqFirst) dv_product();
      {
        float dq[Cfg::kMAQ][Cfg::kNAQ][4];
        sm80::zero(dq);
        sm80::gemm_ss<T, Cfg::kMAQ, Cfg::kNAQ, kN, PTile, KTile, false, true>(dq, ds_s, k_s, row0_q, col0_q, lane);
        float* const dq_rows = bp.dq_accum + (h * bp.rows_q + tok0 + m0) * kDQK;
        if (bp.dq_semaphore) {
          int* sem = bp.dq_semaphore + (static_cast<int64_t>(b) * p.h_q + h) * bp.m_tiles + m;
          wait_turn(sem, n - flash::kv_tiles<kM, kN>(p, seq, m0).first, tid);
          add_dq<kDQK>(dq_rows, tok0 + m0, dq, row0_q, col0_q, rows, lane);
          pass_turn(sem, tid);
        } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
          if (bp.dq_bulk)
            add_dq_bulk<kDQK, Cfg::kMAQ, Cfg::kNAQ, Cfg::kWarpsDQ>(dq_rows, tok0 + m0, dq_s, dq, row0_q, col0_q, rows,
                                                                  warp / Cfg::kWarpsDQ, warp, lane);
          else
#endif
            add_dq<kDQK>(dq_rows, tok0 + m0, dq, row0_q, col0_q, rows, lane);
        }
      }
      if constexpr (Cfg::kDqFirst) dv_product();
      sm80::gemm_ss<T, Cfg::kMAK, Cfg::kNAK, kM, PTile, QTile, true, true>(dk, ds_s, q_s, row0_k, col0_k, lane);
      // One stage: the next item loads into this tile's Q/dO buffers at its top.
      if (Cfg::kStages == 1) __syncthreads();
    }
  }

  bwd_store_dk_dv<T, Cfg>(bp, seq, b, h_kv, n0, rows_out, dk, dv, k_smem, v_smem, row0_k, col0_k, row0_v, col0_v, tid,
                         lane);
}

// Whether this instantiation adds dQ by bulk reduce on the current device:
// its code there is an sm_90 build (the kernel has the path) and the stage
// fits. Asked once per device; an A/B override can turn it off (ab_overrides.h).
constexpr int kMaxDevicesCached = 64;

template <typename T, int kDQK, int kDV, bool kDropoutBuild>
bool bwd_dq_bulk() {
  using Cfg = BwdConfig<kDQK, kDV, kDropoutBuild>;
  static std::atomic<signed char> known[kMaxDevicesCached] = {};  // 0 unknown, 1 no, 2 yes
  if (bwd_overrides().dq_red_only) return false;
  int device = 0;
  ATTN_CUDA(cudaGetDevice(&device));
  if (device < kMaxDevicesCached && known[device].load(std::memory_order_relaxed)) return known[device] == 2;
  cudaFuncAttributes attr{};
  ATTN_CUDA(cudaFuncGetAttributes(&attr, flash_bwd_kernel<T, kDQK, kDV, kDropoutBuild>));
  int optin = 0;
  ATTN_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const bool yes = attr.binaryVersion >= 90 && Cfg::kSmemBytes + Cfg::kSmemDqStage <= optin;
  if (device < kMaxDevicesCached) known[device] = yes ? 2 : 1;
  return yes;
}

// The grid's order: bwd_config.h's rule, or the one an A/B override names
// (on the rows that choose).
inline bool launch_kv_tiles_slowest(int d_qk, int d_v, const flash::FwdParams& p) {
  switch (bwd_overrides().order) {
    case BwdOrder::kv_fastest: return false;
    case BwdOrder::kv_slowest: return bwd_tuning(d_qk, d_v, false).kv_order_chosen;
    case BwdOrder::rule: break;
  }
  return bwd_kv_tiles_slowest(d_qk, d_v, p.h_per_kv, p.window_left, p.window_right);
}

// The chunked grid's pairs per chunk (flash/heuristics.h), or the ones an A/B
// override names.
inline int launch_group_chunk(const flash::FwdParams& p, int d_qk, int d_v, int pairs) {
  if (const int forced = bwd_overrides().group_chunk) return bwd_clamp_group_chunk(forced, pairs);
  return bwd_group_chunk(p.h_per_kv, p.window_left, p.window_right, p.s_q, d_qk, d_v, pairs);
}

// One build of a row.
template <typename T, int kDQK, int kDV, bool kDropoutBuild>
void launch_bwd_build(const flash::BwdParams& params, cudaStream_t stream) {
  using Cfg = BwdConfig<kDQK, kDV, kDropoutBuild>;
  auto* kernel = flash_bwd_kernel<T, kDQK, kDV, kDropoutBuild>;
  flash::BwdParams p = params;
  if (!Cfg::kDropout && p.fwd.dropout_threshold)  // the dispatch picks the dropout build for dropout
    fail(ErrorKind::runtime, "flash_sm80's main backward build of this head dim has no dropout path", "dropout",
         "the row's dropout build", "report this: bwd_uses_dropout_build() should have chosen it");
  p.dq_bulk = !p.dq_semaphore && bwd_dq_bulk<T, kDQK, kDV, kDropoutBuild>();
  const int smem = Cfg::kSmemBytes + (p.dq_bulk ? Cfg::kSmemDqStage : 0);
  if (smem > 48 * 1024) ATTN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int kv_tiles = (p.fwd.s_kv + Cfg::kBlockN - 1) / Cfg::kBlockN, h_kv = p.fwd.h_q / p.fwd.h_per_kv;
  dim3 grid;
  if constexpr (Cfg::kChunkedGrid) {
    if (kv_tiles > 65535)  // grid y (supports() refuses these first)
      fail(ErrorKind::unsupported, "flash_sm80's d 256 backward takes at most 65535 KV tiles of 64 keys", "max_seqlen_kv",
           "at most 4194240 keys per sequence", "use another backend (cudnn, unfused) for longer sequences");
    const int pairs = h_kv * p.fwd.batch;
    p.group_chunk = launch_group_chunk(p.fwd, kDQK, kDV, pairs);
    grid = dim3(p.group_chunk, kv_tiles, (pairs + p.group_chunk - 1) / p.group_chunk);
  } else {
    p.kv_tiles_slowest = kv_tiles <= 65535 && launch_kv_tiles_slowest(kDQK, kDV, p.fwd);  // grid z: at most 65535
    grid = p.kv_tiles_slowest ? dim3(h_kv, p.fwd.batch, kv_tiles) : dim3(kv_tiles, h_kv, p.fwd.batch);
  }
  kernel<<<grid, Cfg::kThreads, smem, stream>>>(p);
  ATTN_CUDA(cudaGetLastError());
}

// A row's entry (bwd_launch.h): its dropout build where it has one and
// `dropout_build` asks for it, its main build otherwise.
template <typename T, int kDQK, int kDV>
void launch_bwd(const flash::BwdParams& params, bool dropout_build, cudaStream_t stream) {
  if constexpr (bwd_has_dropout_build(kDQK, kDV)) {
    if (dropout_build) {
      launch_bwd_build<T, kDQK, kDV, true>(params, stream);
      return;
    }
  }
  launch_bwd_build<T, kDQK, kDV, false>(params, stream);
}

}  // namespace attn::flash_sm80
