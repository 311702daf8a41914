// The sm80 tile primitives (src/kernels/sm80) on their own: the swizzle is a
// bank-conflict-free permutation for every tile shape the kernels use (host
// test), and one warp's cp.async -> ldmatrix -> mma.sync products S = A.B^T and
// O = round(S).V match a host product (GPU test), zero fill included; the
// general product gemm_ss (either operand stored transposed, warps at row and
// column offsets, swizzle tails crossed) matches a host product exactly.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <random>
#include <set>
#include <type_traits>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/sm80/cp_async.cuh"
#include "kernels/sm80/swizzle.h"
#include "kernels/sm80/warp_gemm.cuh"

namespace attn {
namespace {

template <int kCols>
void check_swizzle() {
  using Tile = sm80::SwizzledTile<16, kCols>;
  for (int r = 0; r < 16; ++r) {  // a permutation of the row's own chunks
    std::set<int> seen;
    for (int c = 0; c < Tile::kChunks; ++c) {
      const int idx = Tile::chunk(r, c);
      EXPECT_GE(idx, r * Tile::kChunks);
      EXPECT_LT(idx, (r + 1) * Tile::kChunks);
      seen.insert(idx);
    }
    EXPECT_EQ(static_cast<int>(seen.size()), Tile::kChunks) << "cols " << kCols << " row " << r;
  }
  for (int r0 = 0; r0 < 16; r0 += 8)  // an ldmatrix phase: 8 rows, one chunk column
    for (int c = 0; c < Tile::kChunks; ++c) {
      std::set<int> banks;
      for (int r = r0; r < r0 + 8; ++r) banks.insert(Tile::chunk(r, c) % 8);
      EXPECT_EQ(banks.size(), 8u) << "cols " << kCols << " chunk " << c << ": bank-group conflict";
    }
  // The per-lane decomposition the warp products use equals the swizzle.
  using Big = sm80::SwizzledTile<64, kCols>;
  for (int rl = 0; rl < 16; ++rl)
    for (int ch = 0; ch < 2; ++ch) {
      const sm80::LaneAddresses<Big> at(1024, rl, ch);
      for (int R = 0; R + 16 <= 64; R += 8)
        for (int pair = 0; pair < Big::kChunks / 2; ++pair)
          EXPECT_EQ(at.at(R, pair), 1024u + Big::byte_offset(R + rl, 2 * pair + ch))
              << "cols " << kCols << " R " << R << " rl " << rl << " pair " << pair;
    }
}

TEST(Sm80Swizzle, ConflictFreePermutationForEveryHeadDim) {
  check_swizzle<32>();
  check_swizzle<64>();
  check_swizzle<96>();
  check_swizzle<128>();
  check_swizzle<160>();
  check_swizzle<192>();
  check_swizzle<256>();
}

constexpr int kVCols = 32;

// One warp: A (16 x K), B (N x K, rows >= valid_b zero-filled), V (N x 32).
template <typename T, int K, int N>
__global__ void products_kernel(const T* a, const T* b, const T* v, int valid_b, float* s_out, float* o_out) {
  using TA = sm80::SwizzledTile<16, K>;
  using TB = sm80::SwizzledTile<N, K>;
  using TV = sm80::SwizzledTile<N, kVCols>;
  __shared__ __align__(128) char sa[TA::kBytes], sb[TB::kBytes], sv[TV::kBytes];
  const int lane = threadIdx.x;
  for (int i = lane; i < 16 * TA::kChunks; i += 32)
    sm80::cp_async_16(sm80::smem_addr(sa) + TA::byte_offset(i / TA::kChunks, i % TA::kChunks), a + i * 8, true);
  for (int i = lane; i < N * TB::kChunks; i += 32) {
    const int r = i / TB::kChunks;
    sm80::cp_async_16(sm80::smem_addr(sb) + TB::byte_offset(r, i % TB::kChunks), b + i * 8, r < valid_b);
  }
  for (int i = lane; i < N * TV::kChunks; i += 32)
    sm80::cp_async_16(sm80::smem_addr(sv) + TV::byte_offset(i / TV::kChunks, i % TV::kChunks), v + i * 8, true);
  sm80::cp_async_commit();
  sm80::cp_async_wait<0>();
  __syncwarp();

  float s[1][N / 8][4] = {};
  sm80::gemm_abt<T, 1, N / 8, K, TA, TB>(s, sm80::smem_addr(sa), sm80::smem_addr(sb), 0, lane);
  float o[1][kVCols / 8][4] = {};
  sm80::gemm_rb<T, 1, N / 8, kVCols / 8, TV>(o, s, sm80::smem_addr(sv), lane);
  const int g = lane / 4, t = lane % 4;
  for (int nb = 0; nb < N / 8; ++nb)
    for (int e = 0; e < 4; ++e) s_out[(g + 8 * (e / 2)) * N + 8 * nb + 2 * t + e % 2] = s[0][nb][e];
  for (int nb = 0; nb < kVCols / 8; ++nb)
    for (int e = 0; e < 4; ++e) o_out[(g + 8 * (e / 2)) * kVCols + 8 * nb + 2 * t + e % 2] = o[0][nb][e];
}

template <typename T>
double round_to(double x) {
  if constexpr (std::is_same_v<T, __half>) return static_cast<double>(__half2float(__float2half_rn(static_cast<float>(x))));
  else return static_cast<double>(__bfloat162float(__float2bfloat16_rn(static_cast<float>(x))));
}

template <typename T>
T make(double x) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(static_cast<float>(x));
  else return __float2bfloat16_rn(static_cast<float>(x));
}

template <typename T, int K, int N>
void check_products() {
  std::mt19937 rng(K * 131 + N);
  std::uniform_int_distribution<int> small(-8, 8);  // exact in either dtype, exact fp32 sums
  const int valid_b = N - 3;
  std::vector<double> a(16 * K), b(N * K), v(N * kVCols);
  for (double& x : a) x = small(rng) / 8.0;
  for (double& x : b) x = small(rng) / 8.0;
  for (double& x : v) x = small(rng) / 8.0;
  std::vector<T> ah(a.size()), bh(b.size()), vh(v.size());
  for (size_t i = 0; i < a.size(); ++i) ah[i] = make<T>(a[i]);
  for (size_t i = 0; i < b.size(); ++i) bh[i] = make<T>(b[i]);
  for (size_t i = 0; i < v.size(); ++i) vh[i] = make<T>(v[i]);
  T *ad, *bd, *vd;
  float *sd, *od;
  ATTN_CUDA_OK(cudaMalloc(&ad, ah.size() * sizeof(T)));
  ATTN_CUDA_OK(cudaMalloc(&bd, bh.size() * sizeof(T)));
  ATTN_CUDA_OK(cudaMalloc(&vd, vh.size() * sizeof(T)));
  ATTN_CUDA_OK(cudaMalloc(&sd, 16 * N * sizeof(float)));
  ATTN_CUDA_OK(cudaMalloc(&od, 16 * kVCols * sizeof(float)));
  ATTN_CUDA_OK(cudaMemcpy(ad, ah.data(), ah.size() * sizeof(T), cudaMemcpyHostToDevice));
  ATTN_CUDA_OK(cudaMemcpy(bd, bh.data(), bh.size() * sizeof(T), cudaMemcpyHostToDevice));
  ATTN_CUDA_OK(cudaMemcpy(vd, vh.data(), vh.size() * sizeof(T), cudaMemcpyHostToDevice));
  products_kernel<T, K, N><<<1, 32>>>(ad, bd, vd, valid_b, sd, od);
  ATTN_CUDA_OK(cudaGetLastError());
  std::vector<float> s(16 * N), o(16 * kVCols);
  ATTN_CUDA_OK(cudaMemcpy(s.data(), sd, s.size() * sizeof(float), cudaMemcpyDeviceToHost));
  ATTN_CUDA_OK(cudaMemcpy(o.data(), od, o.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (void* p : {static_cast<void*>(ad), static_cast<void*>(bd), static_cast<void*>(vd), static_cast<void*>(sd),
                  static_cast<void*>(od)})
    ATTN_CUDA_OK(cudaFree(p));
  std::vector<double> sr(16 * N, 0.0);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < valid_b; ++j)  // zero-filled rows of B contribute 0
      for (int k = 0; k < K; ++k) sr[i * N + j] += a[i * K + k] * b[j * K + k];
  for (int i = 0; i < 16 * N; ++i) ASSERT_EQ(s[i], sr[i]) << "S element " << i;
  for (int i = 0; i < 16; ++i)
    for (int c = 0; c < kVCols; ++c) {
      double ref = 0;
      for (int j = 0; j < N; ++j) ref += round_to<T>(sr[i * N + j]) * v[j * kVCols + c];
      EXPECT_NEAR(o[i * kVCols + c], ref, 1e-4 * (1 + std::fabs(ref))) << "O(" << i << ", " << c << ")";
    }
}

TEST(Sm80WarpGemm, ProductsMatchTheHost) {
  ATTN_REQUIRE_GPU();
  check_products<__nv_bfloat16, 64, 16>();
  check_products<__nv_bfloat16, 96, 32>();  // a trailing 4-chunk swizzle group
  check_products<__half, 32, 16>();
  check_products<__half, 160, 32>();
}


// gemm_ss: C (M x N) = A (M x K) . B (K x N), 4 warps in a 2 x 2 grid, each
// 16 MA x 8 NA at (row0, col0). A is stored M x K, or K x M when kATrans; B
// is stored N x K (B^T row-major), or K x N when kBTrans.
template <typename T, int M, int N, int K, bool kATrans, bool kBTrans>
__global__ void gemm_ss_kernel(const T* a_stored, const T* b_stored, float* c) {
  using TA = std::conditional_t<kATrans, sm80::SwizzledTile<K, M>, sm80::SwizzledTile<M, K>>;
  using TB = std::conditional_t<kBTrans, sm80::SwizzledTile<K, N>, sm80::SwizzledTile<N, K>>;
  constexpr int MA = M / 32, NA = N / 16;
  __shared__ __align__(128) char sa[TA::kBytes], sb[TB::kBytes];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int a_cols = kATrans ? M : K, b_cols = kBTrans ? N : K;
  for (int i = tid; i < M * K; i += blockDim.x)  // element (r, col) of the stored tile
    *reinterpret_cast<T*>(sa + TA::byte_offset(i / a_cols, (i % a_cols) / 8) + 2 * (i % 8)) = a_stored[i];
  for (int i = tid; i < N * K; i += blockDim.x)
    *reinterpret_cast<T*>(sb + TB::byte_offset(i / b_cols, (i % b_cols) / 8) + 2 * (i % 8)) = b_stored[i];
  __syncthreads();
  const int row0 = (warp / 2) * (M / 2), col0 = (warp % 2) * (N / 2);
  float acc[MA][NA][4] = {};
  sm80::gemm_ss<T, MA, NA, K, TA, TB, kATrans, kBTrans>(acc, sm80::smem_addr(sa), sm80::smem_addr(sb), row0, col0,
                                                        lane);
  const int g = lane / 4, t = lane % 4;
  for (int ma = 0; ma < MA; ++ma)
    for (int na = 0; na < NA; ++na)
      for (int e = 0; e < 4; ++e)
        c[(row0 + 16 * ma + g + 8 * (e / 2)) * N + col0 + 8 * na + 2 * t + e % 2] = acc[ma][na][e];
}

template <typename T, int M, int N, int K, bool kATrans, bool kBTrans>
void check_gemm_ss() {
  std::mt19937 rng(M * 7 + N * 131 + K + kATrans * 3 + kBTrans * 5);
  std::uniform_int_distribution<int> small(-8, 8);  // exact products and fp32 sums
  std::vector<double> a(M * K), b(K * N);  // logical A (M x K) and B (K x N), row-major
  for (double& x : a) x = small(rng) / 8.0;
  for (double& x : b) x = small(rng) / 8.0;
  std::vector<T> as(M * K), bs(K * N);
  for (int i = 0; i < M; ++i)
    for (int k = 0; k < K; ++k) as[kATrans ? k * M + i : i * K + k] = make<T>(a[i * K + k]);
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < N; ++j) bs[kBTrans ? k * N + j : j * K + k] = make<T>(b[k * N + j]);
  T *ad, *bd;
  float* cd;
  ATTN_CUDA_OK(cudaMalloc(&ad, as.size() * sizeof(T)));
  ATTN_CUDA_OK(cudaMalloc(&bd, bs.size() * sizeof(T)));
  ATTN_CUDA_OK(cudaMalloc(&cd, M * N * sizeof(float)));
  ATTN_CUDA_OK(cudaMemcpy(ad, as.data(), as.size() * sizeof(T), cudaMemcpyHostToDevice));
  ATTN_CUDA_OK(cudaMemcpy(bd, bs.data(), bs.size() * sizeof(T), cudaMemcpyHostToDevice));
  ATTN_CUDA_OK(cudaMemset(cd, 0xff, M * N * sizeof(float)));  // NaN: every element must be written
  gemm_ss_kernel<T, M, N, K, kATrans, kBTrans><<<1, 128>>>(ad, bd, cd);
  ATTN_CUDA_OK(cudaGetLastError());
  std::vector<float> c(M * N);
  ATTN_CUDA_OK(cudaMemcpy(c.data(), cd, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (void* p : {static_cast<void*>(ad), static_cast<void*>(bd), static_cast<void*>(cd)}) ATTN_CUDA_OK(cudaFree(p));
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += a[i * K + k] * b[k * N + j];
      ASSERT_EQ(c[i * N + j], ref) << "M " << M << " N " << N << " K " << K << " transA " << kATrans << " transB "
                                   << kBTrans << ": C(" << i << ", " << j << ")";
    }
}

TEST(Sm80WarpGemm, GeneralProductMatchesTheHost) {
  ATTN_REQUIRE_GPU();
  check_gemm_ss<__nv_bfloat16, 32, 64, 64, false, false>();  // S = Q.K^T, dP = dO.V^T
  check_gemm_ss<__half, 64, 64, 32, true, true>();           // dV = P^T.dO, dK = dS^T.Q
  check_gemm_ss<__nv_bfloat16, 96, 32, 32, true, true>();    // warp columns cross into a swizzle tail
  check_gemm_ss<__nv_bfloat16, 32, 96, 64, false, true>();   // dQ = dS.K, B columns cross a tail
  check_gemm_ss<__half, 64, 32, 96, true, false>();
}

TEST(Sm80Swizzle, ColumnAddressesEqualTheSwizzle) {
  using Big = sm80::SwizzledTile<64, 160>;  // a full group and a trailing group
  for (int rl = 0; rl < 16; ++rl)
    for (int ch = 0; ch < 2; ++ch)
      for (int pair0 = 0; pair0 + 3 <= Big::kChunks / 2; ++pair0) {
        const sm80::ColumnAddresses<Big, 3> at(512, rl, ch, pair0);
        for (int R = 0; R + 16 <= 64; R += 8)
          for (int q = 0; q < 3; ++q)
            EXPECT_EQ(at.at(R, q), 512u + Big::byte_offset(R + rl, 2 * (pair0 + q) + ch));
      }
}

}  // namespace
}  // namespace attn
