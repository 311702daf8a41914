// Host-side pieces the unfused forward and backward share: where each
// sequence's rows live, the per-sequence RowParams, the workspace layout and the
// pointer tables of the batched products.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/problem.h"
#include "backends/unfused/gemm.h"
#include "backends/unfused/row_params.h"
#include "core/sequences.h"

namespace attn::unfused {

// A q/k/v-like tensor seen as rows of one sequence: element (pos, head, c) at
// base + pos * row_stride + head * head_stride + c.
struct SeqRows {
  char* base = nullptr;
  int64_t row_stride = 0, head_stride = 0;
  DType dtype = DType::bf16;
  void* row(int64_t head) const { return base + head * head_stride * static_cast<int64_t>(dtype_size_bytes(dtype)); }
};
SeqRows seq_rows(const TensorView& t, const Problem& p, const detail::Sequences& s, int64_t b, bool is_q_side);

// Rows (M) and columns (N) of sequence b's score matrices: the padded lengths in
// bshd/sbhd (padding is masked), the true lengths in thd.
int64_t score_rows(const Problem& p, const detail::Sequences& s, int64_t b);
int64_t score_cols(const Problem& p, const detail::Sequences& s, int64_t b);

RowParams row_params(const Problem& p, const Inputs& in, const detail::Sequences& s, int64_t b);


// Collects the pointer arrays of many batched products on the host, then
// writes them to the device in kernel parameters (so a CUDA graph capture
// keeps them); each product then reads its slice on the device.
class PointerTable {
 public:
  // Appends one array; returns its index (offset in pointers).
  int64_t add(const std::vector<const void*>& ptrs);
  void upload(const void** device_table, void* stream) const;
  int64_t size() const { return static_cast<int64_t>(host_.size()); }

 private:
  std::vector<const void*> host_;
};

// Pointer arrays of batched products. Heads first, first + step, ... (count of
// them), each mapped to the tensor head (head / divide: GQA's query -> KV head).
std::vector<const void*> rows_of_heads(const SeqRows& r, int64_t first, int64_t count, int64_t step, int64_t divide);
// Slices first, first + step, ... of a dense workspace array of bytes_each-sized slices.
std::vector<const void*> slices(const void* base, int64_t first, int64_t count, int64_t step, int64_t bytes_each);

// S = scale * Q.K^T of one sequence, fp32 [h_q, M, N] (as col-major S^T = K . Q^T),
// batched over query heads: the first product of both passes. k_ptrs / q_ptrs /
// s_ptrs are device pointer arrays of h_q entries.
BatchedGemm scores_product(const Problem& p, int64_t M, int64_t N, int64_t ldk, int64_t ldq, const void* const* k_ptrs,
                           const void* const* q_ptrs, void* const* s_ptrs);

// ld for a strided operand: its row stride, or the dimension when one row makes the stride meaningless.
inline int64_t leading(int64_t row_stride, int64_t rows, int64_t dim) {
  return rows <= 1 && row_stride < dim ? dim : row_stride;
}

}  // namespace attn::unfused
