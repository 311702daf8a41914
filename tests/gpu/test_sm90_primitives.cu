// The sm90 primitives (src/kernels/sm90) on their own, on an H100/H200: a TMA
// tile map + mbarrier load puts each element where swizzled_offset() says,
// one warpgroup's wgmma products S = Q.K^T (both operands K-major in shared
// memory) and O = P.V (P from registers, V MN-major) match a host product
// exactly (inputs chosen so every sum is exact in fp32 and P in bf16), and
// stmatrix from accumulator fragments + a TMA store put each element back
// where it belongs, writing no row past the tensor's end.
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstring>
#include <random>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/sm80/mma.cuh"
#include "kernels/sm90/mbarrier.cuh"
#include "kernels/sm90/stmatrix.cuh"
#include "kernels/sm90/tma.cuh"
#include "kernels/sm90/tma_map.h"
#include "kernels/sm90/wgmma.cuh"
#include "kernels/sm90/wgmma_ops.cuh"

namespace attn {
namespace {

constexpr int kRows = 64, kCols = 64, kTile = kRows * kCols * 2;

__global__ void tma_wgmma_probe(const __grid_constant__ CUtensorMap mq, const __grid_constant__ CUtensorMap mk,
                                const __grid_constant__ CUtensorMap mv, uint8_t* q_bytes, float* s_out,
                                float* o_out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(1024) uint8_t tiles[3 * kTile];
  __shared__ __align__(8) uint64_t bar;
  const uint32_t q = sm90::smem_addr(tiles), k = q + kTile, v = k + kTile, b = sm90::smem_addr(&bar);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
  if (tid == 0) {
    sm90::mbar_init(b, 1);
    sm90::mbar_init_fence();
  }
  __syncthreads();
  if (tid == 0) {
    sm90::mbar_arrive_expect_tx(b, 3 * kTile);
    sm90::tma_load_4d(q, &mq, b, 0, 0, 0, 0);
    sm90::tma_load_4d(k, &mk, b, 0, 0, 0, 0);
    sm90::tma_load_4d(v, &mv, b, 0, 0, 0, 0);
  }
  sm90::mbar_wait(b, 0);
  for (int i = tid; i < kTile; i += 128) q_bytes[i] = tiles[i];

  float s[32];
  sm90::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    sm90::Wgmma<64, __nv_bfloat16>::ss<0>(s, sm90::kmajor_descriptor(q, kRows, 0, ks),
                                          sm90::kmajor_descriptor(k, kRows, 0, ks), ks > 0);
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::fence_registers(s);
  uint32_t pa[4][4];
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    pa[ks][0] = sm80::pack2<__nv_bfloat16>(s[8 * ks + 0], s[8 * ks + 1]);
    pa[ks][1] = sm80::pack2<__nv_bfloat16>(s[8 * ks + 2], s[8 * ks + 3]);
    pa[ks][2] = sm80::pack2<__nv_bfloat16>(s[8 * ks + 4], s[8 * ks + 5]);
    pa[ks][3] = sm80::pack2<__nv_bfloat16>(s[8 * ks + 6], s[8 * ks + 7]);
  }
  float o[32];
  sm90::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    sm90::Wgmma<64, __nv_bfloat16>::rs<1>(o, pa[ks], sm90::mnmajor_descriptor(v, kRows, ks), ks > 0);
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::fence_registers(o);
  // Accumulator layout: d[4 i + 2 h + e] = row 16 warp + 8 h + lane / 4, column 8 i + 2 (lane % 4) + e.
  for (int i = 0; i < 8; ++i)
    for (int h = 0; h < 2; ++h)
      for (int e = 0; e < 2; ++e) {
        const int r = 16 * warp + 8 * h + lane / 4, c = 8 * i + 2 * (lane % 4) + e;
        s_out[r * kCols + c] = s[4 * i + 2 * h + e];
        o_out[r * kCols + c] = o[4 * i + 2 * h + e];
      }
#endif
}

// One warpgroup holds a 64 x 64 tile in the accumulator layout (each value its
// position code row * 64 + column, as raw 16-bit words), stages it with
// stmatrix in the swizzled layout, and one thread stores it with TMA.
__global__ void stmatrix_tma_store_probe(const __grid_constant__ CUtensorMap map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(1024) uint8_t tile[kTile];
  const uint32_t base = sm90::smem_addr(tile);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
  auto code = [](int r, int c) { return static_cast<uint32_t>(r * kCols + c); };
  const int st_row = 16 * warp + ((lane >> 3) & 1) * 8 + (lane & 7);
  for (int np = 0; np < kCols / 16; ++np) {
    uint32_t w[4];
    for (int j = 0; j < 4; ++j) {  // matrix j: rows 8 (j % 2).. of 8-column block 2 np + j / 2
      const int r = 16 * warp + 8 * (j % 2) + lane / 4, c = 8 * (2 * np + j / 2) + 2 * (lane % 4);
      w[j] = code(r, c) | (code(r, c + 1) << 16);
    }
    sm90::stmatrix_x4(base + sm90::swizzled_offset(kRows, st_row, 2 * np + (lane >> 4)), w[0], w[1], w[2], w[3]);
  }
  sm90::fence_proxy_async();
  __syncthreads();
  if (tid == 0) {
    sm90::tma_store_4d(&map, base, 0, 0, 0, 0);
    sm90::bulk_commit();
    sm90::bulk_wait<0>();
  }
#endif
}

// A tensor map of a contiguous [tokens, 64] bf16 matrix, copied in 64-row boxes.
CUtensorMap probe_map(void* base, int tokens) {
  sm90::TileMapShape s;
  s.base = base, s.cols = kCols, s.tokens = tokens, s.heads = 1, s.sequences = 1;
  s.token_stride = kCols, s.head_stride = kCols * tokens, s.sequence_stride = kCols * tokens, s.box_rows = kRows;
  return sm90::make_tile_map(s, "probe");
}

bool is_sm90() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
}

// Host only: the descriptors of a product's k steps, each the tile's base
// descriptor plus an offset (advance_descriptor), equal the descriptors built
// from each step's own address, for every step address inside an sm_90 block's
// shared memory (227 KiB): the start-address field never carries.
TEST(Sm90Primitives, DescriptorStepsMatchTheirAddresses) {
  constexpr uint32_t kSmem = 227 * 1024;
  int checked = 0;
  for (uint32_t tile = 0; tile < kSmem; tile += 1024)
    for (int rows : {64, 80, 96, 112, 128, 176, 192, 256})
      for (int ks = 0; ks < 256 / 16; ++ks) {
        for (int row0 : {0, 64, 128}) {
          const uint32_t addr = tile + (ks / 4) * rows * 128 + row0 * 128 + (ks % 4) * 32;
          if (row0 >= rows || addr >= kSmem) continue;
          ASSERT_EQ(sm90::kmajor_descriptor(tile, rows, row0, ks), sm90::sw128_descriptor(addr, 16, 1024))
              << "K-major: tile " << tile << ", rows " << rows << ", row0 " << row0 << ", k step " << ks;
          ++checked;
        }
        const uint32_t addr = tile + ks * 16 * 128;
        if (addr >= kSmem) continue;
        ASSERT_EQ(sm90::mnmajor_descriptor(tile, rows, ks), sm90::sw128_descriptor(addr, rows * 128, 1024))
            << "MN-major: tile " << tile << ", rows " << rows << ", k step " << ks;
        ++checked;
      }
  EXPECT_GT(checked, 10000);
}

TEST(Sm90Primitives, TmaSwizzleAndWgmmaProducts) {
  ATTN_REQUIRE_GPU();
  if (!is_sm90()) GTEST_SKIP() << "sm_90a code: needs an H100/H200";
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> pick(-1, 1);  // values -0.25, 0, 0.25: every sum exact
  std::vector<__nv_bfloat16> hq(kRows * kCols), hk(hq.size()), hv(hq.size());
  std::vector<float> fq(hq.size()), fk(hq.size()), fv(hq.size());
  for (size_t i = 0; i < hq.size(); ++i) {
    fq[i] = 0.25f * pick(gen), fk[i] = 0.25f * pick(gen), fv[i] = 0.25f * pick(gen);
    hq[i] = __float2bfloat16(fq[i]), hk[i] = __float2bfloat16(fk[i]), hv[i] = __float2bfloat16(fv[i]);
  }
  // Q's tile also carries a position code (row * 64 + column, as raw bits) to check the layout.
  std::vector<uint16_t> codes(hq.size());
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint16_t>(i);
  void *dq, *dk, *dv, *dcode;
  uint8_t* bytes;
  float *ds, *dout;
  const size_t n = hq.size() * 2;
  ATTN_CUDA_OK(cudaMalloc(&dq, n));
  ATTN_CUDA_OK(cudaMalloc(&dk, n));
  ATTN_CUDA_OK(cudaMalloc(&dv, n));
  ATTN_CUDA_OK(cudaMalloc(&dcode, n));
  ATTN_CUDA_OK(cudaMalloc(&bytes, kTile));
  ATTN_CUDA_OK(cudaMalloc(&ds, hq.size() * 4));
  ATTN_CUDA_OK(cudaMalloc(&dout, hq.size() * 4));
  ATTN_CUDA_OK(cudaMemcpy(dq, hq.data(), n, cudaMemcpyHostToDevice));
  ATTN_CUDA_OK(cudaMemcpy(dk, hk.data(), n, cudaMemcpyHostToDevice));
  ATTN_CUDA_OK(cudaMemcpy(dv, hv.data(), n, cudaMemcpyHostToDevice));
  ATTN_CUDA_OK(cudaMemcpy(dcode, codes.data(), n, cudaMemcpyHostToDevice));
  auto map = [](void* base) { return probe_map(base, kRows); };
  // Pass 1: the position codes as Q (layout); pass 2: the values (products).
  std::vector<uint8_t> got_bytes(kTile);
  std::vector<float> s(hq.size()), o(hq.size());
  tma_wgmma_probe<<<1, 128>>>(map(dcode), map(dk), map(dv), bytes, ds, dout);
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  ATTN_CUDA_OK(cudaMemcpy(got_bytes.data(), bytes, kTile, cudaMemcpyDeviceToHost));
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      uint16_t code;
      std::memcpy(&code, got_bytes.data() + sm90::swizzled_offset(kRows, r, c / 8) + 2 * (c % 8), 2);
      ASSERT_EQ(code, r * kCols + c) << "row " << r << " column " << c;
    }
  tma_wgmma_probe<<<1, 128>>>(map(dq), map(dk), map(dv), bytes, ds, dout);
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  ATTN_CUDA_OK(cudaMemcpy(s.data(), ds, s.size() * 4, cudaMemcpyDeviceToHost));
  ATTN_CUDA_OK(cudaMemcpy(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost));
  std::vector<float> ws(hq.size());
  for (int i = 0; i < kRows; ++i)
    for (int j = 0; j < kRows; ++j) {
      float acc = 0.f;
      for (int c = 0; c < kCols; ++c) acc += fq[i * kCols + c] * fk[j * kCols + c];
      ws[i * kRows + j] = acc;
      ASSERT_EQ(s[i * kRows + j], acc) << "S row " << i << " column " << j;
    }
  for (int i = 0; i < kRows; ++i)
    for (int c = 0; c < kCols; ++c) {
      float acc = 0.f;
      for (int j = 0; j < kRows; ++j) acc += ws[i * kRows + j] * fv[j * kCols + c];
      ASSERT_EQ(o[i * kCols + c], acc) << "O row " << i << " column " << c;
    }
  for (void* p : {dq, dk, dv, dcode, static_cast<void*>(bytes), static_cast<void*>(ds), static_cast<void*>(dout)})
    cudaFree(p);
}

TEST(Sm90Primitives, StmatrixAndTmaStore) {
  ATTN_REQUIRE_GPU();
  if (!is_sm90()) GTEST_SKIP() << "sm_90a code: needs an H100/H200";
  // The tensor has 40 rows; the 64-row box's last 24 fall outside it and must
  // not be written (the buffer behind them keeps its fill).
  constexpr int kTensorRows = 40;
  const size_t n = kRows * kCols;
  void* dst;
  ATTN_CUDA_OK(cudaMalloc(&dst, n * 2));
  ATTN_CUDA_OK(cudaMemset(dst, 0xFF, n * 2));
  stmatrix_tma_store_probe<<<1, 128>>>(probe_map(dst, kTensorRows));
  ATTN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint16_t> got(n);
  ATTN_CUDA_OK(cudaMemcpy(got.data(), dst, n * 2, cudaMemcpyDeviceToHost));
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      const uint16_t want = r < kTensorRows ? static_cast<uint16_t>(r * kCols + c) : 0xFFFF;
      ASSERT_EQ(got[r * kCols + c], want) << "row " << r << " column " << c;
    }
  cudaFree(dst);
}

}  // namespace
}  // namespace attn
