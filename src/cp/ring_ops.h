// The memory work of a ring, apart from the attention blocks: buffers, strided
// copies, fp32 accumulation and the LSE merge, on the host (host_ops.cpp) or on
// one CUDA device, stream-ordered (device_ops.cu). The ring (ring.cpp) is
// written once against this interface.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "attn/problem.h"
#include "backends/common/sink_logits.h"

namespace attn::cp::internal {

class Ops {
 public:
  virtual ~Ops() = default;
  // Storage that lives as long as the Ops (freed stream-ordered on a device).
  virtual void* alloc(int64_t bytes) = 0;
  virtual const int32_t* upload(const std::vector<int32_t>& values) = 0;
  virtual void fill(const TensorView& t, float value) = 0;
  // dst = src elementwise (same shape, any strides, dtype conversion). With an
  // index, dst's position p along `dim` reads src's position index[p] (thd's
  // permutation between the caller's and the ring's token order).
  virtual void copy(const TensorView& src, const TensorView& dst, const int32_t* index = nullptr, int dim = 0) = 0;
  // dst (fp32) += src, same shape.
  virtual void add(const TensorView& src, const TensorView& dst) = 0;
  // Merges a block's (out, lse) into fp32 accumulators (acc_out, acc_lse) by
  // log-sum-exp, row by row; out-like views in `format`, lse views to match.
  virtual void merge(QkvFormat format, const TensorView& block_out, const TensorView& block_lse,
                     const TensorView& acc_out, const TensorView& acc_lse) = 0;
  // The softmax sink joins merged rows once, at the end: per row of head h,
  // lse' = log(exp(lse) + exp(t_h)) and out *= exp(lse - lse') (a row that saw
  // nothing keeps out = 0 and gets lse = t_h). Views as for merge.
  virtual void add_sink(QkvFormat format, const TensorView& acc_out, const TensorView& acc_lse,
                        const detail::SinkLogits& sink) = 0;
  // dsink[h] (fp32, `heads` of them, written) = -sum over the rows of head h
  // of exp(t_h - lse) (dout . out), summed in a fixed order.
  virtual void sink_grad(QkvFormat format, const TensorView& out, const TensorView& dout, const TensorView& lse,
                         const detail::SinkLogits& sink, float* dsink, int64_t heads) = 0;
  // dst = max(dst, src) elementwise (fp32 dst, same shape), a NaN winning.
  virtual void max_into(const TensorView& src, const TensorView& dst) = 0;
  // n floats of this ops' memory to the host (waiting for them), and back.
  virtual std::vector<float> download(const float* src, int64_t n) = 0;
  virtual void upload_to(const std::vector<float>& values, float* dst) = 0;
};

std::unique_ptr<Ops> host_ops();
std::unique_ptr<Ops> device_ops(int device, void* stream);

// A view's shape and strides padded on the left to rank 4 (the ops' common form).
struct View4 {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t shape[4] = {1, 1, 1, 1};
  int64_t stride[4] = {0, 0, 0, 0};
};
// index_dim is the view's dim, returned shifted into the padded form.
View4 view4(const TensorView& t, int* index_dim = nullptr);

// The rows of an out-like view as three indices (x0, x1, x2) and the d_v
// elements of each; acc/block strides along them, and the lse strides of the
// same row (bshd (b, s, h) -> lse[b, h, s]; sbhd (s, b, h); thd (-, t, h) -> lse[h, t]).
struct MergeRows {
  int64_t dims[3] = {1, 1, 1}, d = 0;
  int64_t out_stride[3] = {0, 0, 0}, acc_stride[3] = {0, 0, 0};
  int64_t lse_stride[3] = {0, 0, 0}, acc_lse_stride[3] = {0, 0, 0};
};
MergeRows merge_rows(QkvFormat format, const TensorView& block_out, const TensorView& block_lse,
                     const TensorView& acc_out, const TensorView& acc_lse);

}  // namespace attn::cp::internal
