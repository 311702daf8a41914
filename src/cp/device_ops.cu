// The ring's memory work on one CUDA device (see ring_ops.h): grid-stride
// kernels over rank-4 strided views, all on the compute stream, so the ring
// never syncs the host. The merge works in fp32 (accumulators are fp32).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "backends/common/softmax_sink.cuh"
#include "core/cuda_check.h"
#include "core/nan_max.h"
#include "cp/ring_ops.h"

namespace attn::cp::internal {
namespace {

__device__ __forceinline__ float load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return 0.f;
  }
}

__device__ __forceinline__ void store(void* p, DType t, int64_t i, float x) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = x; return;
    case DType::f16: static_cast<__half*>(p)[i] = __float2half_rn(x); return;
    case DType::bf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x); return;
    default: return;
  }
}

// Offsets of element e in two same-shape views; `index` remaps a's dim `dim`.
__device__ __forceinline__ void offsets(const View4& a, const View4& b, const int32_t* index, int dim, int64_t e,
                                        int64_t& oa, int64_t& ob) {
  oa = 0, ob = 0;
  for (int d = 3; d >= 0; --d) {
    const int64_t i = e % a.shape[d];
    e /= a.shape[d];
    oa += (index && d == dim ? index[i] : i) * a.stride[d];
    ob += i * b.stride[d];
  }
}

// mode 0: b = a; 1: b (fp32) += a; 2: b = value; 3: b (fp32) = max(b, a), a NaN winning.
__global__ void elementwise_kernel(View4 a, View4 b, const int32_t* index, int dim, int mode, float value, int64_t n) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t oa, ob;
    offsets(a, b, index, dim, e, oa, ob);
    if (mode == 0) store(b.data, b.dtype, ob, load(a.data, a.dtype, oa));
    else if (mode == 1) static_cast<float*>(b.data)[ob] += load(a.data, a.dtype, oa);
    else if (mode == 3) {
      float& x = static_cast<float*>(b.data)[ob];
      x = detail::max_keeping_nan(x, load(a.data, a.dtype, oa));
    } else store(b.data, b.dtype, ob, value);
  }
}

// One warp per row (grid-stride): out_acc = w1 * out_acc + w2 * block_out, lse_acc = merged.
__global__ void merge_kernel(MergeRows m, const void* out, DType t, const float* lse, float* acc, float* acc_lse,
                             int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; row < rows; row += warps) {
    const int64_t x2 = row % m.dims[2], x1 = (row / m.dims[2]) % m.dims[1], x0 = row / (m.dims[2] * m.dims[1]);
    const float l2 = lse[x0 * m.lse_stride[0] + x1 * m.lse_stride[1] + x2 * m.lse_stride[2]];
    if (l2 == -INFINITY) continue;  // the block gave this row nothing
    float* l1p = acc_lse + x0 * m.acc_lse_stride[0] + x1 * m.acc_lse_stride[1] + x2 * m.acc_lse_stride[2];
    const float l1 = *l1p;
    const float mx = fmaxf(l1, l2);
    const float merged = mx + logf(expf(l1 - mx) + expf(l2 - mx));
    const float w1 = l1 == -INFINITY ? 0.f : expf(l1 - merged), w2 = expf(l2 - merged);
    const int64_t o = x0 * m.out_stride[0] + x1 * m.out_stride[1] + x2 * m.out_stride[2];
    float* a = acc + x0 * m.acc_stride[0] + x1 * m.acc_stride[1] + x2 * m.acc_stride[2];
    for (int64_t c = lane; c < m.d; c += 32) a[c] = w1 * a[c] + w2 * load(out, t, o + c);
    __syncwarp();  // every lane has read l1 before lane 0 replaces it
    if (lane == 0) *l1p = merged;
  }
}

// One warp per row: the sink joins the merged row (Ops::add_sink).
__global__ void add_sink_kernel(MergeRows m, detail::SinkLogits sink, float* acc, float* acc_lse, int64_t rows) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; row < rows; row += warps) {
    const int64_t x2 = row % m.dims[2], x1 = (row / m.dims[2]) % m.dims[1], x0 = row / (m.dims[2] * m.dims[1]);
    const float t = detail::sink_logit(sink, x2);
    float* lp = acc_lse + x0 * m.acc_lse_stride[0] + x1 * m.acc_lse_stride[1] + x2 * m.acc_lse_stride[2];
    const float l = *lp, mx = fmaxf(l, t);
    if (mx == -INFINITY) continue;
    const float merged = mx + logf(expf(l - mx) + expf(t - mx));
    const float w = l == -INFINITY ? 0.f : expf(l - merged);
    float* a = acc + x0 * m.acc_stride[0] + x1 * m.acc_stride[1] + x2 * m.acc_stride[2];
    for (int64_t c = lane; c < m.d; c += 32) a[c] *= w;
    __syncwarp();  // every lane has read l before lane 0 replaces it
    if (lane == 0) *lp = merged;
  }
}

// One block per head (blockIdx.x = x2): each thread's rows in order, then a
// tree over the block: the same bits every run.
__global__ void sink_grad_kernel(MergeRows m, MergeRows g, const void* out, const void* dout, DType t, const float* lse,
                                 detail::SinkLogits sink, float* dsink) {
  const int64_t x2 = blockIdx.x, rows = m.dims[0] * m.dims[1];
  const float sink_t = detail::sink_logit(sink, x2);
  float sum = 0.f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t x1 = r % m.dims[1], x0 = r / m.dims[1];
    const float l = lse[x0 * m.lse_stride[0] + x1 * m.lse_stride[1] + x2 * m.lse_stride[2]];
    const int64_t o = x0 * m.out_stride[0] + x1 * m.out_stride[1] + x2 * m.out_stride[2];
    const int64_t d = x0 * g.out_stride[0] + x1 * g.out_stride[1] + x2 * g.out_stride[2];
    float dot = 0.f;
    for (int64_t c = 0; c < m.d; ++c) dot += load(out, t, o + c) * load(dout, t, d + c);
    sum -= expf(sink_t - l) * dot;
  }
  __shared__ float part[256];
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int s = 128; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) dsink[x2] = part[0];
}

int blocks_for(int64_t n, int threads) { return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 1 << 16)); }

// The ring's buffers (K/V twice, fp32 accumulators, the work-order copies) are
// gigabytes at long lengths. cudaMallocAsync's default pool hands memory back
// to the driver at every synchronization (release threshold 0), so each call
// would map it again; attn's own pool per device keeps it, as PyTorch's caching
// allocator does, without changing the process's default pool.
cudaMemPool_t ring_pool(int device) {
  static std::mutex mutex;
  static std::map<int, cudaMemPool_t> pools;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = pools.find(device); it != pools.end()) return it->second;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  ATTN_CUDA(cudaMemPoolCreate(&pool, &props));
  uint64_t keep = UINT64_MAX;
  ATTN_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  pools[device] = pool;
  return pool;
}

class DeviceOps : public Ops {
 public:
  DeviceOps(int device, void* stream) : device_(device), stream_(static_cast<cudaStream_t>(stream)) {
    ATTN_CUDA(cudaSetDevice(device));
  }
  ~DeviceOps() override {
    for (void* p : owned_) cudaFreeAsync(p, stream_);  // stream-ordered: after the ring's last kernel
  }
  void* alloc(int64_t bytes) override {
    void* p = nullptr;
    ATTN_CUDA(cudaMallocFromPoolAsync(&p, static_cast<size_t>(std::max<int64_t>(bytes, 16)), ring_pool(device_),
                                      stream_));
    owned_.push_back(p);
    return p;
  }
  const int32_t* upload(const std::vector<int32_t>& values) override {
    auto* p = static_cast<int32_t*>(alloc(static_cast<int64_t>(values.size() * sizeof(int32_t))));
    // From pageable memory the driver stages the bytes before returning, so
    // `values` may die at once.
    ATTN_CUDA(cudaMemcpyAsync(p, values.data(), values.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    return p;
  }
  void fill(const TensorView& t, float value) override { run(view4(t), view4(t), nullptr, 0, 2, value); }
  void copy(const TensorView& src, const TensorView& dst, const int32_t* index, int dim) override {
    const View4 s = view4(src, &dim);
    run(s, view4(dst), index, dim, 0);
  }
  void add(const TensorView& src, const TensorView& dst) override { run(view4(src), view4(dst), nullptr, 0, 1); }
  void add_sink(QkvFormat format, const TensorView& acc_out, const TensorView& acc_lse,
                const detail::SinkLogits& sink) override {
    const MergeRows m = merge_rows(format, acc_out, acc_lse, acc_out, acc_lse);
    const int64_t rows = m.dims[0] * m.dims[1] * m.dims[2];
    if (rows == 0) return;
    add_sink_kernel<<<blocks_for(rows * 32, 256), 256, 0, stream_>>>(m, sink, static_cast<float*>(acc_out.data),
                                                                     static_cast<float*>(acc_lse.data), rows);
    ATTN_CUDA(cudaGetLastError());
  }
  void sink_grad(QkvFormat format, const TensorView& out, const TensorView& dout, const TensorView& lse,
                 const detail::SinkLogits& sink, float* dsink, int64_t heads) override {
    if (heads == 0) return;
    const MergeRows m = merge_rows(format, out, lse, out, lse), g = merge_rows(format, dout, lse, dout, lse);
    sink_grad_kernel<<<static_cast<unsigned>(heads), 256, 0, stream_>>>(m, g, out.data, dout.data, out.dtype,
                                                                       static_cast<const float*>(lse.data), sink,
                                                                       dsink);
    ATTN_CUDA(cudaGetLastError());
  }
  void max_into(const TensorView& src, const TensorView& dst) override { run(view4(src), view4(dst), nullptr, 0, 3); }
  std::vector<float> download(const float* src, int64_t n) override {
    std::vector<float> host(static_cast<size_t>(n));
    ATTN_CUDA(cudaMemcpyAsync(host.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    ATTN_CUDA(cudaStreamSynchronize(stream_));
    return host;
  }
  void upload_to(const std::vector<float>& values, float* dst) override {
    ATTN_CUDA(cudaMemcpyAsync(dst, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
    ATTN_CUDA(cudaStreamSynchronize(stream_));  // `values` dies when this returns
  }
  void merge(QkvFormat format, const TensorView& block_out, const TensorView& block_lse, const TensorView& acc_out,
             const TensorView& acc_lse) override {
    const MergeRows m = merge_rows(format, block_out, block_lse, acc_out, acc_lse);
    const int64_t rows = m.dims[0] * m.dims[1] * m.dims[2];
    if (rows == 0) return;
    merge_kernel<<<blocks_for(rows * 32, 256), 256, 0, stream_>>>(m, block_out.data, block_out.dtype,
                                                                  static_cast<const float*>(block_lse.data),
                                                                  static_cast<float*>(acc_out.data),
                                                                  static_cast<float*>(acc_lse.data), rows);
    ATTN_CUDA(cudaGetLastError());
  }

 private:
  void run(const View4& a, const View4& b, const int32_t* index, int dim, int mode, float value = 0.f) {
    const int64_t n = a.shape[0] * a.shape[1] * a.shape[2] * a.shape[3];
    if (n == 0) return;
    elementwise_kernel<<<blocks_for(n, 256), 256, 0, stream_>>>(a, b, index, dim, mode, value, n);
    ATTN_CUDA(cudaGetLastError());
  }

  int device_;
  cudaStream_t stream_;
  std::vector<void*> owned_;
};

}  // namespace

std::unique_ptr<Ops> device_ops(int device, void* stream) { return std::make_unique<DeviceOps>(device, stream); }

}  // namespace attn::cp::internal
