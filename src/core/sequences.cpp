// Per-sequence lengths and offsets of a call (see sequences.h).
#include "core/sequences.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "attn/error.h"

namespace attn::detail {

namespace {

bool same_view(const TensorView& a, const TensorView& b) {
  return a.data == b.data && a.numel() == b.numel() && a.device == b.device &&
         (a.numel() <= 1 || a.strides_elems[0] == b.strides_elems[0]);
}

[[noreturn]] void read_failed(const TensorView& t, cudaError_t err) {
  fail(ErrorKind::runtime, "reading an int32 tensor from " + device_name(t.device) + " failed",
       cudaGetErrorString(err), "a readable device pointer", "check that the tensor lives on the stated device");
}

// Page-locked staging for the copies: a copy into pageable memory goes through
// the driver's own staging buffer, a second hop on the GPU's idle time.
int32_t* pinned_staging(size_t elems, const TensorView& t) {
  thread_local struct Staging {
    int32_t* ptr = nullptr;
    size_t cap = 0;
    ~Staging() {
      if (ptr) cudaFreeHost(ptr);  // at thread exit; an error there has no one to report to
    }
  } staging;
  if (elems > staging.cap) {
    if (staging.ptr) cudaFreeHost(staging.ptr);
    staging.ptr = nullptr;
    staging.cap = 0;
    const size_t cap = std::max<size_t>(elems, 1024);
    void* p = nullptr;
    const cudaError_t err = cudaMallocHost(&p, cap * sizeof(int32_t));
    if (err != cudaSuccess) read_failed(t, err);
    staging.ptr = static_cast<int32_t*>(p);
    staging.cap = cap;
  }
  return staging.ptr;
}

std::vector<int32_t> read_host(const TensorView& t) {
  std::vector<int32_t> host(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) host[i] = t.as<const int32_t>()[i * t.strides_elems[0]];
  return host;
}

// Reads up to two device tensors (count 1 or 2) on one device with one wait.
void read_device(const TensorView* const* views, std::vector<int32_t>* const* outs, int count) {
  const TensorView& t0 = *views[0];
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += static_cast<size_t>(views[i]->numel());
  // The values may come from work on any stream, including non-blocking ones
  // (PyTorch's side streams) that a copy on the default stream would not wait
  // for: wait for the whole device first. Callers that cannot afford this turn
  // check_seqlens off and pass max_seqlen.
  cudaError_t err = cudaSetDevice(t0.device.index);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) read_failed(t0, err);
  int32_t* staged = pinned_staging(total, t0);
  int32_t* dst = staged;
  for (int i = 0; i < count && err == cudaSuccess; ++i) {
    const TensorView& t = *views[i];
    const int64_t n = t.numel(), stride = t.strides_elems[0];
    err = stride == 1 ? cudaMemcpyAsync(dst, t.data, n * sizeof(int32_t), cudaMemcpyDeviceToHost, cudaStreamLegacy)
                      : cudaMemcpy2DAsync(dst, sizeof(int32_t), t.data, stride * sizeof(int32_t), sizeof(int32_t),
                                          n, cudaMemcpyDeviceToHost, cudaStreamLegacy);
    dst += n;
  }
  if (err == cudaSuccess) err = cudaStreamSynchronize(cudaStreamLegacy);
  if (err != cudaSuccess) read_failed(t0, err);
  dst = staged;
  for (int i = 0; i < count; ++i) {
    outs[i]->assign(dst, dst + views[i]->numel());
    dst += views[i]->numel();
  }
}

}  // namespace

std::vector<int32_t> read_int32(const TensorView& t) {
  if (t.numel() == 0) return {};
  if (!t.device.is_cuda()) return read_host(t);
  std::vector<int32_t> host;
  const TensorView* views[] = {&t};
  std::vector<int32_t>* outs[] = {&host};
  read_device(views, outs, 1);
  return host;
}

Int32Pair read_int32_pair(const TensorView& a, const TensorView& b) {
  Int32Pair r;
  if (same_view(a, b)) {
    r.first = read_int32(a);
    r.second = r.first;
    return r;
  }
  if (a.numel() == 0 || b.numel() == 0 || !a.device.is_cuda() || !b.device.is_cuda() || a.device != b.device) {
    r.first = read_int32(a);
    r.second = read_int32(b);
    return r;
  }
  const TensorView* views[] = {&a, &b};
  std::vector<int32_t>* outs[] = {&r.first, &r.second};
  read_device(views, outs, 2);
  return r;
}

Sequences sequences_of(const Problem& p, const Inputs& in) {
  Sequences s;
  const auto n = static_cast<size_t>(p.batch);
  s.len_q.assign(n, p.s_q);
  s.len_kv.assign(n, p.s_kv);
  s.start_q.assign(n, 0);
  s.start_kv.assign(n, 0);
  if (!p.has_seqlens) return s;
  const Int32Pair cu = read_int32_pair(in.cu_seqlens_q, in.cu_seqlens_kv);
  const std::vector<int32_t>& cq = cu.first;
  const std::vector<int32_t>& ck = cu.second;
  for (size_t b = 0; b < n; ++b) {
    // In 64 bits: unchecked offsets (check_seqlens off) may be any int32s,
    // and checked_sequences then reports the length, not an overflow.
    s.len_q[b] = int64_t{cq[b + 1]} - cq[b];
    s.len_kv[b] = int64_t{ck[b + 1]} - ck[b];
    if (p.qkv_format == QkvFormat::thd) {
      s.start_q[b] = cq[b];
      s.start_kv[b] = ck[b];
    }
  }
  return s;
}

Sequences checked_sequences(const Problem& p, const Inputs& in) {
  Sequences seqs = detail::sequences_of(p, in);
  const bool thd = p.qkv_format == QkvFormat::thd;
  for (int64_t b = 0; b < seqs.batch(); ++b) {
    for (bool q : {true, false}) {
      const int64_t len = q ? seqs.len_q[b] : seqs.len_kv[b], start = q ? seqs.start_q[b] : seqs.start_kv[b];
      const int64_t max_len = q ? p.s_q : p.s_kv, tokens = q ? p.total_q : p.total_kv;
      if (len >= 0 && len <= max_len && (!thd || (start >= 0 && start + len <= tokens))) continue;
      const std::string name = q ? "cu_seqlens_q" : "cu_seqlens_kv";
      const std::string got = "sequence " + std::to_string(b) + " of length " + std::to_string(len) +
                              " at token " + std::to_string(start);
      const std::string limit = thd ? " (max_seqlen) within " + std::to_string(tokens) + " tokens"
                                    : std::string(" (the padded length)");
      fail(ErrorKind::value, name + " does not fit the tensors", got,
           "lengths from 0 to " + std::to_string(max_len) + limit,
           "pass non-decreasing cumulative lengths that match the tensors "
           "(with check_seqlens on, validation says which)");
    }
  }
  return seqs;
}

}  // namespace attn::detail
