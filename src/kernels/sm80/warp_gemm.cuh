// The two warp-level products of attention on mma.sync m16n8k16, reading
// swizzled shared tiles through ldmatrix:
//   gemm_abt: acc[MA][NA] += A . B^T with A (rows x k) and B (cols x k) both
//             row-major in shared memory: S = Q.K^T, K's rows are S's columns;
//   gemm_rb:  acc[MA][NA] += A . B with A already in registers (P, from S's
//             accumulators) and B (k x cols) row-major in shared memory, read
//             transposed by ldmatrix.trans: O += P.V.
// A warp owns MA blocks of 16 rows starting at row0, and all NA*8 columns.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/sm80/ldmatrix.cuh"
#include "kernels/sm80/mma.cuh"
#include "kernels/sm80/swizzle.h"

namespace attn::sm80 {

// acc += A[row0 .. row0 + 16*MA, 0..K) . B[0 .. 8*NA, 0..K)^T (row0 % 16 == 0).
template <typename T, int MA, int NA, int K, class TileA, class TileB>
__device__ __forceinline__ void gemm_abt(float (&acc)[MA][NA][4], uint32_t a_smem, uint32_t b_smem, int row0,
                                         int lane) {
  static_assert(NA % 2 == 0 && K % 16 == 0, "B is read 16 columns and 16 k at a time");
  // A matrices: (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15)
  // = a0..a3. B matrices: (cols 0-7, k 0-7), (cols 0-7, k 8-15), (cols 8-15, k 0-7),
  // (cols 8-15, k 8-15) = b0, b1 of column block 2np, then of block 2np+1.
  const LaneAddresses<TileA> a_at(a_smem + row0 * TileA::kRowBytes, lane & 15, lane >> 4);
  const LaneAddresses<TileB> b_at(b_smem, ((lane >> 4) << 3) + (lane & 7), (lane >> 3) & 1);
#pragma unroll
  for (int kc = 0; kc < K / 16; ++kc) {
    uint32_t a[MA][4];
#pragma unroll
    for (int ma = 0; ma < MA; ++ma) ldmatrix_x4(a[ma], a_at.at(16 * ma, kc));
#pragma unroll
    for (int np = 0; np < NA / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, b_at.at(16 * np, kc));
#pragma unroll
      for (int ma = 0; ma < MA; ++ma) {
        mma_16816<T>(acc[ma][2 * np], a[ma], b[0], b[1]);
        mma_16816<T>(acc[ma][2 * np + 1], a[ma], b[2], b[3]);
      }
    }
  }
}

// The A fragment of k step kc (16 wide) from fp32 accumulators of 8-wide
// column blocks 2kc and 2kc+1, rounded to T (see mma.cuh on why this is free).
template <typename T, int NA>
__device__ __forceinline__ void accumulators_to_a(uint32_t (&a)[4], const float (&c)[NA][4], int kc) {
  a[0] = pack2<T>(c[2 * kc][0], c[2 * kc][1]);
  a[1] = pack2<T>(c[2 * kc][2], c[2 * kc][3]);
  a[2] = pack2<T>(c[2 * kc + 1][0], c[2 * kc + 1][1]);
  a[3] = pack2<T>(c[2 * kc + 1][2], c[2 * kc + 1][3]);
}

// An accumulator (MA x NA fragments of 16 x 8) set to 0.
template <int MA, int NA>
__device__ __forceinline__ void zero(float (&acc)[MA][NA][4]) {
#pragma unroll
  for (int ma = 0; ma < MA; ++ma)
#pragma unroll
    for (int na = 0; na < NA; ++na)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[ma][na][e] = 0.f;
}

// acc[MA][NB] += P . B where P's fp32 accumulators p[MA][NP] (16*MA rows x
// 8*NP k) are rounded to T, and B (8*NP k rows x 8*NB cols) is row-major.
template <typename T, int MA, int NP, int NB, class TileB>
__device__ __forceinline__ void gemm_rb(float (&acc)[MA][NB][4], const float (&p)[MA][NP][4], uint32_t b_smem,
                                        int lane) {
  static_assert(NP % 2 == 0 && NB % 2 == 0, "B is read 16 k and 16 columns at a time");
  // Transposed matrices: (k 0-7, cols 0-7), (k 8-15, cols 0-7), (k 0-7, cols 8-15),
  // (k 8-15, cols 8-15) = b0, b1 of column block 2nb, then of block 2nb+1.
  const LaneAddresses<TileB> b_at(b_smem, (((lane >> 3) & 1) << 3) + (lane & 7), lane >> 4);
#pragma unroll
  for (int kc = 0; kc < NP / 2; ++kc) {
    uint32_t a[MA][4];
#pragma unroll
    for (int ma = 0; ma < MA; ++ma) accumulators_to_a<T, NP>(a[ma], p[ma], kc);
#pragma unroll
    for (int nb = 0; nb < NB / 2; ++nb) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, b_at.at(16 * kc, nb));
#pragma unroll
      for (int ma = 0; ma < MA; ++ma) {
        mma_16816<T>(acc[ma][2 * nb], a[ma], b[0], b[1]);
        mma_16816<T>(acc[ma][2 * nb + 1], a[ma], b[2], b[3]);
      }
    }
  }
}

// The general product of two shared tiles, for kernels whose warps tile both
// dimensions of the result (the backward): acc[MA][NA] += A . B for the warp's
// block of rows row0 .. row0 + 16 MA and columns col0 .. col0 + 8 NA (row0 and
// col0 multiples of 16), summed over k = 0..K. Operand storage:
//   A: kATrans ? TileA is k x rows (read by ldmatrix.trans: A = P^T from P)
//              : TileA is rows x k;
//   B: kBTrans ? TileB is k x cols (ldmatrix.trans: B = V from V's rows)
//              : TileB is cols x k (B = K^T from K's rows).
// gemm_ss<.., false, false> with col0 = 0 is gemm_abt.
template <typename T, int MA, int NA, int K, class TileA, class TileB, bool kATrans, bool kBTrans>
__device__ __forceinline__ void gemm_ss(float (&acc)[MA][NA][4], uint32_t a_smem, uint32_t b_smem, int row0,
                                        int col0, int lane) {
  static_assert(NA % 2 == 0 && K % 16 == 0, "B is read 16 columns and 16 k at a time");
  // Matrix i of an x4 load comes from lanes 8i..8i+7. Non-transposed A: a0..a3 =
  // (rows 0-7 | 8-15, k 0-7), then k 8-15: lane row lane & 15, chunk lane >> 4.
  // Transposed A (stored k x rows): a0 = stored (k 0-7, rows 0-7), a1 = (k 0-7,
  // rows 8-15), a2 = (k 8-15, rows 0-7), a3 = (k 8-15, rows 8-15).
  // B as in gemm_abt (cols x k) and gemm_rb (k x cols).
  const int a_rl = kATrans ? (lane & 7) + ((lane >> 4) << 3) : lane & 15;
  const int a_ch = kATrans ? (lane >> 3) & 1 : lane >> 4;
  const int b_rl = kBTrans ? (lane & 7) + (((lane >> 3) & 1) << 3) : (lane & 7) + ((lane >> 4) << 3);
  const int b_ch = kBTrans ? lane >> 4 : (lane >> 3) & 1;
  using AAt = std::conditional_t<kATrans, ColumnAddresses<TileA, MA>, LaneAddresses<TileA>>;
  using BAt = std::conditional_t<kBTrans, ColumnAddresses<TileB, NA / 2>, LaneAddresses<TileB>>;
  AAt a_at = [&] {
    if constexpr (kATrans) return AAt(a_smem, a_rl, a_ch, row0 / 16);
    else return AAt(a_smem + row0 * TileA::kRowBytes, a_rl, a_ch);
  }();
  BAt b_at = [&] {
    if constexpr (kBTrans) return BAt(b_smem, b_rl, b_ch, col0 / 16);
    else return BAt(b_smem + col0 * TileB::kRowBytes, b_rl, b_ch);
  }();
#pragma unroll
  for (int kc = 0; kc < K / 16; ++kc) {
    uint32_t a[MA][4];
#pragma unroll
    for (int ma = 0; ma < MA; ++ma) {
      if constexpr (kATrans) ldmatrix_x4_trans(a[ma], a_at.at(16 * kc, ma));
      else ldmatrix_x4(a[ma], a_at.at(16 * ma, kc));
    }
#pragma unroll
    for (int np = 0; np < NA / 2; ++np) {
      uint32_t b[4];
      if constexpr (kBTrans) ldmatrix_x4_trans(b, b_at.at(16 * kc, np));
      else ldmatrix_x4(b, b_at.at(16 * np, kc));
#pragma unroll
      for (int ma = 0; ma < MA; ++ma) {
        mma_16816<T>(acc[ma][2 * np], a[ma], b[0], b[1]);
        mma_16816<T>(acc[ma][2 * np + 1], a[ma], b[2], b[3]);
      }
    }
  }
}

}  // namespace attn::sm80
