// The rotary kernel: one block per token. The block computes the token's cos
// and sin once into shared memory (every head shares them), then each thread
// rotates V channel pairs of one head per step with 16-byte loads where the
// strides allow (V = 16 / sizeof(T)), else one pair.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "attn/error.h"
#include "core/cuda_check.h"
#include "kernels/float_convert.cuh"
#include "rotary/rotary_params.h"

namespace attn::rotary_detail {
namespace {

constexpr int kThreads = 128;

using kernels::from_float;
using kernels::to_float;

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) rotary_kernel(const RotaryParams p) {
  extern __shared__ float trig[];  // cos of the 2 * half angles, then their sin
  const int64_t token = blockIdx.x;
  const int64_t i0 = token / p.n1, i1 = token % p.n1;
  const int64_t pos = token_position(p, i0, i1);
  const int r = 2 * p.half;
  const bool past_table = pos >= p.max_s;  // NaN out: the caller's table is too short
  for (int c = threadIdx.x; c < r; c += kThreads) {
    float s = 0.f, co = 1.f;  // a token outside every sequence is copied (angle 0)
    if (pos >= 0 && !past_table) sincosf(p.freqs[pos * p.f_stride + c], &s, &co);
    trig[c] = co;
    trig[r + c] = s;
  }
  __syncthreads();

  const T* x = static_cast<const T*>(p.x) + i0 * p.x_s0 + i1 * p.x_s1;
  T* out = static_cast<T*>(p.out) + i0 * p.o_s0 + i1 * p.o_s1;
  const int units = p.half / V;  // per head
  for (int u = threadIdx.x; u < p.heads * units; u += kThreads) {
    const int h = u / units, c = (u - h * units) * V;
    const T* xh = x + h * p.x_sh;
    T* oh = out + h * p.o_sh;
    const Pack<T, V> a = *reinterpret_cast<const Pack<T, V>*>(xh + c);
    const Pack<T, V> b = *reinterpret_cast<const Pack<T, V>*>(xh + c + p.half);
    Pack<T, V> oa, ob;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int i = c + k, j = c + k + p.half;
      float o_i, o_j;
      rotate_pair(p.backward, trig[i], trig[r + i], trig[j], trig[r + j], to_float(a.v[k]), to_float(b.v[k]), o_i,
                  o_j);
      if (past_table) o_i = o_j = __int_as_float(0x7fc00000);
      oa.v[k] = from_float<T>(o_i);
      ob.v[k] = from_float<T>(o_j);
    }
    *reinterpret_cast<Pack<T, V>*>(oh + c) = oa;
    *reinterpret_cast<Pack<T, V>*>(oh + c + p.half) = ob;
  }
  const int rest = p.d - r;  // channels past the rotated ones: copied
  if (rest > 0 && p.x != p.out)
    for (int u = threadIdx.x; u < p.heads * rest; u += kThreads) {
      const int h = u / rest, c = r + (u - h * rest);
      out[h * p.o_sh + c] = x[h * p.x_sh + c];
    }
}

template <typename T>
void launch_typed(const RotaryParams& p, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const bool wide = p.half % V == 0 && aligned(p.x) && aligned(p.out) && p.x_s0 % V == 0 && p.x_s1 % V == 0 &&
                    p.x_sh % V == 0 && p.o_s0 % V == 0 && p.o_s1 % V == 0 && p.o_sh % V == 0;
  const int64_t tokens = p.n0 * p.n1;
  const size_t smem = 2 * static_cast<size_t>(2 * p.half) * sizeof(float);
  if (wide)
    rotary_kernel<T, V><<<static_cast<unsigned>(tokens), kThreads, smem, stream>>>(p);
  else
    rotary_kernel<T, 1><<<static_cast<unsigned>(tokens), kThreads, smem, stream>>>(p);
  ATTN_CUDA(cudaGetLastError());
}

}  // namespace

void launch_rotary(const RotaryParams& p, void* stream) {
  const int64_t tokens = p.n0 * p.n1;
  if (tokens > 0x7fffffff)
    fail(ErrorKind::value, "rotary: too many tokens for one launch", std::to_string(tokens), "at most 2^31 - 1",
         "split the tensor along its sequence");
  const auto s = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
    case DType::f32: launch_typed<float>(p, s); return;
    case DType::f16: launch_typed<__half>(p, s); return;
    case DType::bf16: launch_typed<__nv_bfloat16>(p, s); return;
    default: fail(ErrorKind::type, "rotary: unsupported dtype on the GPU", dtype_name(p.dtype), "f32, f16, bf16", "");
  }
}

}  // namespace attn::rotary_detail
