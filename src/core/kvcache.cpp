// forward_with_kvcache (attn/kvcache.h): every argument and each sequence's
// length checked first (on CUDA tensors, lengths, rows and blocks are read
// back from the device unless check_seqlens is off). CPU tensors: the new
// tokens (rotated) are written into the cache, and the attention runs as a
// padded bshd call over each sequence's cache gathered into one buffer, with
// the query rows bottom-right aligned. CUDA tensors: flash_decode appends and
// attends in place (backends/flash_decode/kvcache_run.cpp).
#include "attn/kvcache.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attn/attn.h"
#include "backends/flash_decode/flash_decode.h"
#include "backends/flash_sm90/flash_sm90.h"
#include "core/cuda_check.h"
#include "core/numeric.h"
#include "core/validate_internal.h"
#include "core/workspace.h"

namespace attn {
namespace {

using detail::bad_type;
using detail::bad_value;
using detail::load_as_double;
using detail::store_from_double;
using detail::str;

// The call's shapes, from the tensors.
struct KvShape {
  int64_t b = 0, s_q = 0, h_q = 0, h_kv = 0, d_qk = 0, d_v = 0, s_new = 0;
  bool paged = false;
  int64_t cache_rows = 0;  // contiguous: b_cache; paged: num_blocks
  int64_t block = 0;       // contiguous: s_cache; paged: block_size
  int64_t max_blocks = 0;
  int64_t capacity = 0;    // positions a sequence may fill
  int64_t rotary_half = 0; // r / 2, 0 without rotary
};

void require_rank(const TensorView& t, const char* name, int rank, const char* layout) {
  if (t.rank != rank)
    bad_value(std::string(name) + " has the wrong rank", t.shape_str(), layout,
              std::string("pass ") + name + " as " + layout);
  if (t.stride(-1) != 1)
    bad_value(std::string(name) + "'s last dimension is not contiguous", "stride " + str(t.stride(-1)), "stride 1",
              std::string("make ") + name + "'s last dimension contiguous");
}

void require_int32(const TensorView& t, const char* name, std::initializer_list<int64_t> shape) {
  if (t.dtype != DType::i32)
    bad_type(std::string(name) + " has the wrong dtype", dtype_name(t.dtype), "int32",
             std::string("pass ") + name + " as int32");
  std::vector<int64_t> want(shape);
  bool ok = t.rank == static_cast<int>(want.size());
  for (size_t i = 0; ok && i < want.size(); ++i) ok = t.shape[i] == want[i];
  std::string expected = "[";
  for (size_t i = 0; i < want.size(); ++i) expected += (i ? ", " : "") + str(want[i]);
  if (!ok)
    bad_value(std::string(name) + " has the wrong shape", t.shape_str(), expected + "]",
              std::string("pass ") + name + " with one entry per sequence");
}

KvShape check_shapes(const Options& o, const KvCacheArgs& a) {
  if (!a.q.defined() || !a.k_cache.defined() || !a.v_cache.defined() || !a.out.defined())
    bad_value("forward_with_kvcache needs q, k_cache, v_cache and out", "one of them missing",
              "all four tensors", "pass q, k_cache, v_cache and out");
  require_rank(a.q, "q", 4, "[b, s_q, h_q, d_qk]");
  require_rank(a.k_cache, "k_cache", 4, "[b_cache, s_cache, h_kv, d_qk] or [num_blocks, block_size, h_kv, d_qk]");
  require_rank(a.v_cache, "v_cache", 4, "[b_cache, s_cache, h_kv, d_v] or [num_blocks, block_size, h_kv, d_v]");
  require_rank(a.out, "out", 4, "[b, s_q, h_q, d_v]");
  KvShape z;
  z.b = a.q.size(0), z.s_q = a.q.size(1), z.h_q = a.q.size(2), z.d_qk = a.q.size(3);
  z.cache_rows = a.k_cache.size(0), z.block = a.k_cache.size(1), z.h_kv = a.k_cache.size(2);
  z.d_v = a.v_cache.size(3);
  if (a.k_cache.size(3) != z.d_qk)
    bad_value("k_cache's head dim differs from q's", str(a.k_cache.size(3)), str(z.d_qk),
              "give k_cache q's head dim");
  if (a.v_cache.size(0) != z.cache_rows || a.v_cache.size(1) != z.block || a.v_cache.size(2) != z.h_kv)
    bad_value("v_cache's shape does not match k_cache's", a.v_cache.shape_str(),
              "[" + str(z.cache_rows) + ", " + str(z.block) + ", " + str(z.h_kv) + ", d_v]",
              "allocate v_cache like k_cache (its head dim may differ)");
  if (z.h_kv == 0 || z.h_q % z.h_kv != 0)
    bad_value("q's heads are not a multiple of the cache's", "h_q=" + str(z.h_q) + ", h_kv=" + str(z.h_kv),
              "h_q % h_kv == 0", "use a cache whose KV heads divide q's heads");
  if (a.out.size(0) != z.b || a.out.size(1) != z.s_q || a.out.size(2) != z.h_q || a.out.size(3) != z.d_v)
    bad_value("out has the wrong shape", a.out.shape_str(),
              "[" + str(z.b) + ", " + str(z.s_q) + ", " + str(z.h_q) + ", " + str(z.d_v) + "]",
              "allocate out like q with v_cache's head dim");
  for (const auto& [t, name] : {std::pair{&a.k_cache, "k_cache"}, {&a.v_cache, "v_cache"}, {&a.out, "out"},
                                {&a.k, "k"}, {&a.v, "v"}})
    if (t->defined() && t->dtype != a.q.dtype)
      bad_type(std::string(name) + "'s dtype differs from q's", dtype_name(t->dtype), dtype_name(a.q.dtype),
               std::string("give ") + name + " q's dtype");
  if (a.k.defined() != a.v.defined())
    bad_value("k and v are appended together", a.k.defined() ? "k without v" : "v without k", "both or neither",
              "pass both new k and new v, or neither");
  if (a.k.defined()) {
    require_rank(a.k, "k", 4, "[b, s_new, h_kv, d_qk]");
    require_rank(a.v, "v", 4, "[b, s_new, h_kv, d_v]");
    z.s_new = a.k.size(1);
    const bool ok = a.k.size(0) == z.b && a.k.size(2) == z.h_kv && a.k.size(3) == z.d_qk && a.v.size(0) == z.b &&
                    a.v.size(1) == z.s_new && a.v.size(2) == z.h_kv && a.v.size(3) == z.d_v;
    if (!ok)
      bad_value("new k / v do not match q and the cache", "k " + a.k.shape_str() + ", v " + a.v.shape_str(),
                "[" + str(z.b) + ", s_new, " + str(z.h_kv) + ", d_qk / d_v]", "shape k and v like the cache's rows");
  }
  z.paged = a.block_table.defined();
  if (z.paged) {
    if (a.block_table.rank != 2 || a.block_table.size(0) != z.b)
      bad_value("block_table has the wrong shape", a.block_table.shape_str(), "[" + str(z.b) + ", max_blocks]",
                "pass one row of block indices per sequence");
    require_int32(a.block_table, "block_table", {z.b, a.block_table.size(1)});
    if (a.cache_batch_idx.defined())
      bad_value("cache_batch_idx with a paged cache", "both given", "block_table alone names a sequence's blocks",
                "drop cache_batch_idx: the block table already maps each sequence");
    z.max_blocks = a.block_table.size(1);
    z.capacity = z.max_blocks * z.block;
  } else {
    z.capacity = z.block;
    if (!a.cache_batch_idx.defined() && z.cache_rows < z.b)
      bad_value("the cache has fewer rows than q has sequences", str(z.cache_rows), ">= " + str(z.b),
                "allocate a cache row per sequence, or pass cache_batch_idx");
  }
  if (a.cache_seqlens.defined()) require_int32(a.cache_seqlens, "cache_seqlens", {z.b});
  if (a.cache_batch_idx.defined()) require_int32(a.cache_batch_idx, "cache_batch_idx", {z.b});
  if (a.rotary_cos.defined() != a.rotary_sin.defined())
    bad_value("rotary needs cos and sin", a.rotary_cos.defined() ? "rotary_cos alone" : "rotary_sin alone",
              "both or neither", "pass rotary_cos and rotary_sin together");
  if (a.rotary_cos.defined()) {
    require_rank(a.rotary_cos, "rotary_cos", 2, "[s_ro, rotary_dim / 2]");
    require_rank(a.rotary_sin, "rotary_sin", 2, "[s_ro, rotary_dim / 2]");
    // The append kernel reads float32 tables, or tables of q's dtype; any
    // other would be read as one of those.
    for (const auto& [t, name] : {std::pair{&a.rotary_cos, "rotary_cos"}, {&a.rotary_sin, "rotary_sin"}})
      if (t->dtype != DType::f32 && t->dtype != a.q.dtype)
        bad_type(std::string(name) + " has the wrong dtype", dtype_name(t->dtype),
                 std::string("float32 or q's dtype (") + dtype_name(a.q.dtype) + ")",
                 std::string("convert ") + name + " to float32");
    if (a.rotary_sin.dtype != a.rotary_cos.dtype)
      bad_type("rotary_cos and rotary_sin have different dtypes",
               std::string(dtype_name(a.rotary_cos.dtype)) + " / " + dtype_name(a.rotary_sin.dtype), "one dtype",
               "pass cos and sin in one dtype (float32 or q's)");
    z.rotary_half = a.rotary_cos.size(1);
    if (a.rotary_sin.size(0) != a.rotary_cos.size(0) || a.rotary_sin.size(1) != z.rotary_half ||
        z.rotary_half == 0 || 2 * z.rotary_half > z.d_qk)
      bad_value("rotary_cos / rotary_sin have the wrong shape",
                a.rotary_cos.shape_str() + " / " + a.rotary_sin.shape_str(),
                "the same [s_ro, r / 2] with 0 < r <= d_qk=" + str(z.d_qk), "pass cos and sin of one rotary table");
  }
  if (o.qkv_format != QkvFormat::bshd)
    bad_value("forward_with_kvcache takes bshd q, k and v", format_name(o.qkv_format), "bshd",
              "pass q as [b, s_q, h_q, d] (qkv_format=\"bshd\")");
  if (o.mask != MaskType::no_mask && o.mask != MaskType::causal_bottom_right)
    bad_value("forward_with_kvcache's mask", mask_name(o.mask), "no_mask or causal_bottom_right",
              "use causal_bottom_right: q's rows are the sequence's last s_q positions");
  if (o.dropout_p != 0.0)
    bad_value("forward_with_kvcache has no dropout", "dropout_p=" + std::to_string(o.dropout_p), "0",
              "drop dropout_p: a KV-cache call is inference");
  for (const auto& [t, name] :
       {std::pair{&a.k_cache, "k_cache"}, {&a.v_cache, "v_cache"}, {&a.k, "k"}, {&a.v, "v"}, {&a.out, "out"},
        {&a.lse, "lse"}, {&a.cache_seqlens, "cache_seqlens"}, {&a.cache_batch_idx, "cache_batch_idx"},
        {&a.block_table, "block_table"}, {&a.rotary_cos, "rotary_cos"}, {&a.rotary_sin, "rotary_sin"},
        {&a.alibi_slopes, "alibi_slopes"}, {&a.sink, "sink"}}) {
    detail::require_data(*t, name);  // read here, on the host, before any backend would
    if (t->defined()) detail::require_device(*t, name, a.q.device);
  }
  detail::require_data(a.q, "q");
  return z;
}

int32_t at_i32(const TensorView& t, int64_t i, int64_t j = 0) {
  return static_cast<const int32_t*>(t.data)[i * t.strides_elems[0] + (t.rank > 1 ? j * t.strides_elems[1] : 0)];
}

// Where sequence i's position p lives: the cache row (contiguous) or block (paged) and the row within it.
struct Slot {
  int64_t outer = 0, inner = 0;
};

struct Sequences {
  std::vector<int64_t> len;  // before the append
  std::vector<int64_t> row;  // contiguous: the cache row
};

// Each sequence's length and cache row, checked against the cache before anything is written.
Sequences read_sequences(const KvCacheArgs& a, const KvShape& z) {
  Sequences s;
  for (int64_t i = 0; i < z.b; ++i) {
    const int64_t len = a.cache_seqlens.defined() ? at_i32(a.cache_seqlens, i) : z.capacity - z.s_new;
    if (len < 0 || len + z.s_new > z.capacity)
      bad_value("a sequence's cache length leaves no room for its tokens",
                "cache_seqlens[" + str(i) + "]=" + str(len) + " with " + str(z.s_new) + " new tokens",
                "0 <= cache_seqlens[i] and cache_seqlens[i] + s_new <= " + str(z.capacity) +
                    (z.paged ? " (max_blocks * block_size)" : " (s_cache)"),
                "grow the cache (or the block table) or shorten the sequence");
    const int64_t row = a.cache_batch_idx.defined() ? at_i32(a.cache_batch_idx, i) : i;
    if (!z.paged && (row < 0 || row >= z.cache_rows))
      bad_value("cache_batch_idx names a row outside the cache", "cache_batch_idx[" + str(i) + "]=" + str(row),
                "0 <= index < " + str(z.cache_rows), "pass indices of the cache's rows");
    if (z.paged)
      for (int64_t blk = 0; blk * z.block < len + z.s_new; ++blk) {
        const int64_t id = at_i32(a.block_table, i, blk);
        if (id < 0 || id >= z.cache_rows)
          bad_value("block_table names a block outside the cache",
                    "block_table[" + str(i) + "][" + str(blk) + "]=" + str(id), "0 <= block < " + str(z.cache_rows),
                    "fill the sequence's used blocks with indices of the cache's blocks");
      }
    s.len.push_back(len);
    s.row.push_back(row);
  }
  return s;
}

Slot slot_of(const KvCacheArgs& a, const KvShape& z, const Sequences& s, int64_t i, int64_t pos) {
  if (!z.paged) return {s.row[i], pos};
  return {at_i32(a.block_table, i, pos / z.block), pos % z.block};
}

int64_t offset4(const TensorView& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return i0 * t.strides_elems[0] + i1 * t.strides_elems[1] + i2 * t.strides_elems[2] + i3 * t.strides_elems[3];
}

// Row x of head dim d (element `base`, unit stride) rotated at position pos
// (checked against the table before the call writes anything) into dst[0..d).
void rotate_row(const KvCacheArgs& a, const KvShape& z, const void* x, DType t, int64_t base, int64_t d,
                int64_t pos, std::vector<double>& dst) {
  dst.resize(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c) dst[c] = load_as_double(x, t, base + c);
  const int64_t half = z.rotary_half;
  for (int64_t c = 0; c < half; ++c) {
    const double cs = load_as_double(a.rotary_cos.data, a.rotary_cos.dtype, pos * a.rotary_cos.stride(0) + c);
    const double sn = load_as_double(a.rotary_sin.data, a.rotary_sin.dtype, pos * a.rotary_sin.stride(0) + c);
    const int64_t i = a.rotary_interleaved ? 2 * c : c, j = a.rotary_interleaved ? 2 * c + 1 : c + half;
    const double xi = dst[i], xj = dst[j];
    dst[i] = xi * cs - xj * sn;
    dst[j] = xj * cs + xi * sn;
  }
}

// An owned host buffer with a contiguous view over it.
struct HostTensor {
  std::vector<unsigned char> bytes;
  TensorView view;
  HostTensor(DType t, std::initializer_list<int64_t> shape) {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    bytes.assign(static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size_bytes(t), 0);
    view = make_view(bytes.data(), t, shape);
  }
};

// q's row j sits at the sequence's last s_q positions where the mask or a
// window places it there, else (as in FlashAttention) at the cache length.
bool q_by_row(const Options& o) {
  return o.mask == MaskType::causal_bottom_right || o.window.left >= 0 || o.window.right >= 0;
}

int64_t q_position(const Options& o, const KvShape& z, const Sequences& seq, int64_t i, int64_t j) {
  return std::max<int64_t>(q_by_row(o) ? seq.len[i] + z.s_new - z.s_q + j : seq.len[i], 0);
}

// Every rotary position checked before the first write.
void check_rotary_positions(const Options& o, const KvCacheArgs& a, const KvShape& z, const Sequences& seq) {
  if (!z.rotary_half) return;
  for (int64_t i = 0; i < z.b; ++i) {
    const int64_t last = std::max(seq.len[i] + z.s_new - 1, z.s_q ? q_position(o, z, seq, i, z.s_q - 1) : int64_t{0});
    if (last >= a.rotary_cos.size(0))
      bad_value("a position is past the rotary table", "sequence " + str(i) + " reaches position " + str(last),
                "< " + str(a.rotary_cos.size(0)) + " (rotary_cos rows)", "pass cos / sin tables as long as the cache");
  }
}

// A device tensor of int32 copied to the host with its strides kept (so
// read_sequences() indexes it as it would the original).
struct HostInts {
  std::vector<int32_t> values;
  TensorView view;
  HostInts(const TensorView& t, void* stream) {
    if (!t.defined()) return;
    int64_t span = 1;
    for (int d = 0; d < t.rank; ++d) span += (t.shape[d] - 1) * t.strides_elems[d];
    if (t.numel() == 0) span = 0;
    values.assign(static_cast<size_t>(std::max<int64_t>(span, 1)), 0);
    if (span > 0) {
      ATTN_CUDA(cudaMemcpyAsync(values.data(), t.data, static_cast<size_t>(span) * 4, cudaMemcpyDeviceToHost,
                                static_cast<cudaStream_t>(stream)));
      ATTN_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    }
    view = t;
    view.data = values.data();
    view.device = Device::cpu();
  }
};

void require_unit_stride(const TensorView& t, const char* name) {
  if (t.defined() && t.numel() > 1 && t.stride(-1) != 1)
    bad_value(std::string(name) + " is not contiguous", "stride " + str(t.stride(-1)), "stride 1",
              std::string("pass ") + name + " contiguous (.contiguous())");
}

// The attention of a GPU call as flash_decode reads it: bshd, len_kv = the
// cache's length after the append (from the device), s_kv = capacity (its
// ALiBi slopes are checked and set by the caller).
Problem gpu_problem(const Options& o, const KvCacheArgs& a, const KvShape& z, const RunContext& ctx) {
  Problem p;
  p.pass = Pass::forward;
  p.qkv_format = QkvFormat::bshd;
  p.dtype = a.q.dtype;
  p.device = a.q.device;
  p.batch = z.b;
  p.s_q = z.s_q;
  p.s_kv = z.capacity;
  p.total_q = z.b * z.s_q;
  p.total_kv = z.capacity;
  p.h_q = z.h_q;
  p.h_kv = z.h_kv;
  p.d_qk = z.d_qk;
  p.d_v = z.d_v;
  p.mask = o.mask == MaskType::causal_bottom_right ? MaskType::padding_causal_bottom_right : MaskType::padding;
  p.window_left = o.window.left;
  p.window_right = o.mask == MaskType::causal_bottom_right ? 0 : o.window.right;
  p.bottom_right = true;
  p.softmax_scale = o.softmax_scale.value_or(1.0 / std::sqrt(static_cast<double>(z.d_qk)));
  p.softcap = o.softcap;
  p.softmax_type = o.softmax_type;
  p.return_lse = a.lse.defined();
  p.row_alignment_bytes = detail::row_alignment({&a.q, &a.k_cache, &a.v_cache, &a.k, &a.v, &a.out});
  p.capturing = detail::stream_is_capturing(ctx.stream);
  return p;
}

// The kernel of a GPU call over a KV cache: flash_decode (split-KV, GQA
// heads packed) up to its 16 query tokens per sequence; longer queries
// (chunked prefill) on flash_sm90's forward where it can read the cache,
// else flash_decode, which takes any s_q. A forced backend must be one of
// the two and able to run the call.
struct KvCacheRunner {
  const Backend* backend = nullptr;
  std::string why;
};

std::vector<std::string> runner_reasons(const Backend& b, const Problem& p, const KvShape& z, const DeviceInfo& dev,
                                        const Policy& policy) {
  std::vector<std::string> no;
  if (&b == &flash_decode::backend()) {
    Problem judged = p;  // its 16-token limit is the selection's, for forward() calls
    judged.s_q = std::min<int64_t>(p.s_q, flash_decode::kMaxQueryTokens);
    no = b.supports(judged, dev);
  } else {
    no = b.supports(p, dev);
    for (std::string& r : flash_sm90::cache_obstacles(z.paged ? z.block : 0)) no.push_back(std::move(r));
  }
  for (const std::string& d : policy.disabled)
    if (d == b.name()) no.push_back(std::string(b.name()) + " is disabled (ATTN_DISABLE or disable=)");
  return no;
}

KvCacheRunner choose_runner(const Problem& p, const KvShape& z, const DeviceInfo& dev, const Policy& policy) {
  const Backend& decode = flash_decode::backend();
  const Backend& prefill = flash_sm90::backend();
  const bool forced = !policy.forced.empty();
  if (forced && policy.forced != decode.name() && policy.forced != prefill.name())
    fail(ErrorKind::unsupported, "forward_with_kvcache cannot run this call on the GPU",
         "forced backend " + policy.forced, "flash_decode or flash_sm90 (the kernels that read a KV cache in place)",
         "force one of them, or none");
  const bool long_query = p.s_q > flash_decode::kMaxQueryTokens;
  std::string prefill_no;
  if ((long_query && !forced) || policy.forced == prefill.name()) {
    const std::vector<std::string> no = runner_reasons(prefill, p, z, dev, policy);
    if (no.empty())
      return {&prefill, forced ? "forced backend flash_sm90 (the forward over the cache in place)"
                               : "forward_with_kvcache on CUDA tensors with more than " +
                                     std::to_string(flash_decode::kMaxQueryTokens) +
                                     " query tokens runs flash_sm90's forward over the cache in place"};
    if (forced)
      fail(ErrorKind::unsupported, "forward_with_kvcache cannot run this call on the GPU", detail::join(no, "; "),
           "a call flash_sm90 supports", "force flash_decode or none, or change what the reasons name");
    prefill_no = " (flash_sm90: " + detail::join(no, "; ") + ")";
  }
  const std::vector<std::string> no = runner_reasons(decode, p, z, dev, policy);
  if (!no.empty())
    fail(ErrorKind::unsupported, "forward_with_kvcache cannot run this call on the GPU", detail::join(no, "; ") + prefill_no,
         "a call flash_decode supports", "use bf16/fp16 tensors with head dims 64, 128, 192/128 or 256, rows 16-byte "
                                         "aligned; or run the call on CPU tensors");
  return {&decode, long_query ? "forward_with_kvcache on CUDA tensors runs flash_decode over the cache in place, " +
                                    std::to_string(flash_decode::kMaxQueryTokens) + " query rows per pass" + prefill_no
                              : "forward_with_kvcache on CUDA tensors runs flash_decode (split-KV over the cache in "
                                "place)"};
}

// CUDA tensors: the checks that read lengths, indices and block ids from the
// device (with check_seqlens), then flash_decode in place on the cache.
Selection forward_with_kvcache_gpu(const Options& o, const KvCacheArgs& a, const KvShape& z, const RunContext& ctx,
                                   const Policy& policy) {
  // ALiBi, sinks and lse by forward()'s own rules.
  Problem p = gpu_problem(o, a, z, ctx);
  if (a.alibi_slopes.defined()) {
    p.bias = BiasType::alibi;
    p.alibi_per_batch = detail::check_alibi_slopes(a.alibi_slopes, p);
  }
  detail::check_sink(a.sink, p);
  if (a.lse.defined()) detail::check_lse(a.lse, p);
  for (const auto& [t, name] : {std::pair{&a.cache_seqlens, "cache_seqlens"}, {&a.cache_batch_idx, "cache_batch_idx"},
                                {&a.block_table, "block_table"}})
    require_unit_stride(*t, name);
  if (z.capacity > INT32_MAX || z.cache_rows > INT32_MAX)
    bad_value("the cache is too large for the decode kernel's 32-bit positions", "capacity " + str(z.capacity),
              "< 2^31 positions per sequence and rows / blocks", "use a smaller cache per sequence");
  check_problem(p);
  if (o.check_seqlens) {
    if (p.capturing)
      fail(ErrorKind::value,
           "forward_with_kvcache's checks read cache_seqlens, cache_batch_idx and block_table back to the host, which "
           "a call inside a CUDA graph capture cannot do",
           "check_seqlens=true while the call's stream is capturing", "check_seqlens=false",
           "turn the checks off for captured calls (Python: check_seqlens=False); the kernels then bound every "
           "value to the cache (a length past it writes nothing, an index outside it is clamped)");
    KvCacheArgs host = a;
    const HostInts lens(a.cache_seqlens, ctx.stream), rows(a.cache_batch_idx, ctx.stream),
        table(a.block_table, ctx.stream);
    host.cache_seqlens = lens.view;
    host.cache_batch_idx = rows.view;
    host.block_table = table.view;
    const Sequences seq = read_sequences(host, z);
    check_rotary_positions(o, a, z, seq);
  }
  // Which kernel runs the attention over the cache, and why.
  const DeviceInfo dev = query_device(p.device);
  const KvCacheRunner runner = choose_runner(p, z, dev, policy);
  flash_decode::KvCacheLayout layout;
  layout.s_new = z.s_new;
  layout.capacity = z.capacity;
  layout.cache_rows = z.cache_rows;
  layout.block_size = z.paged ? z.block : 0;
  layout.rotary_half = z.rotary_half;
  layout.q_by_row = q_by_row(o);
  layout.prefill = runner.backend == &flash_sm90::backend();
  flash_decode::run_kvcache(p, a, layout, ctx);
  Selection sel;
  sel.backend = runner.backend;
  sel.device = dev;
  sel.why = runner.why;
  return sel;
}

}  // namespace

Selection forward_with_kvcache(const Options& opts, const KvCacheArgs& a, const RunContext& ctx,
                               const Policy& policy) {
  const KvShape z = check_shapes(opts, a);
  if (a.q.device.is_cuda()) return forward_with_kvcache_gpu(opts, a, z, ctx, policy);
  const Sequences seq = read_sequences(a, z);
  check_rotary_positions(opts, a, z, seq);

  // The attention's call over buffers for q (rotated) and each sequence's
  // keys and values (gathered, padded bshd), validated and its backend chosen
  // before the cache is written: its errors too come first.
  int64_t longest = 1;
  for (int64_t i = 0; i < z.b; ++i) longest = std::max(longest, seq.len[i] + z.s_new);
  HostTensor q(a.q.dtype, {z.b, z.s_q, z.h_q, z.d_qk});
  HostTensor k(a.q.dtype, {z.b, longest, z.h_kv, z.d_qk}), v(a.q.dtype, {z.b, longest, z.h_kv, z.d_v});
  HostTensor cu_q(DType::i32, {z.b + 1}), cu_kv(DType::i32, {z.b + 1});
  auto* cq = static_cast<int32_t*>(cu_q.view.data);
  auto* ckv = static_cast<int32_t*>(cu_kv.view.data);
  for (int64_t i = 0; i < z.b; ++i) {
    cq[i + 1] = static_cast<int32_t>(cq[i] + z.s_q);
    ckv[i + 1] = static_cast<int32_t>(ckv[i] + seq.len[i] + z.s_new);
  }
  Options o = opts;
  o.mask = opts.mask == MaskType::causal_bottom_right ? MaskType::padding_causal_bottom_right : MaskType::padding;
  ForwardArgs f;
  f.in.q = q.view;
  f.in.k = k.view;
  f.in.v = v.view;
  f.in.cu_seqlens_q = cu_q.view;
  f.in.cu_seqlens_kv = cu_kv.view;
  f.in.alibi_slopes = a.alibi_slopes;
  f.in.sink = a.sink;
  f.out = a.out;
  f.lse = a.lse;
  forward_workspace_size(o, f, policy);  // validation and selection only

  // The append: new key j of sequence i at position len + j, rotated there.
  std::vector<double> row;
  for (int64_t i = 0; i < z.b; ++i)
    for (int64_t j = 0; j < z.s_new; ++j) {
      const Slot at = slot_of(a, z, seq, i, seq.len[i] + j);
      for (int64_t h = 0; h < z.h_kv; ++h) {
        rotate_row(a, z, a.k.data, a.k.dtype, offset4(a.k, i, j, h, 0), z.d_qk, seq.len[i] + j, row);
        for (int64_t c = 0; c < z.d_qk; ++c)
          store_from_double(a.k_cache.data, a.k_cache.dtype, offset4(a.k_cache, at.outer, at.inner, h, c), row[c]);
        for (int64_t c = 0; c < z.d_v; ++c)
          store_from_double(a.v_cache.data, a.v_cache.dtype, offset4(a.v_cache, at.outer, at.inner, h, c),
                            load_as_double(a.v.data, a.v.dtype, offset4(a.v, i, j, h, c)));
      }
    }

  // q, rotated at its rows' positions; the caches' rows gathered.
  for (int64_t i = 0; i < z.b; ++i)
    for (int64_t j = 0; j < z.s_q; ++j)
      for (int64_t h = 0; h < z.h_q; ++h) {
        rotate_row(a, z, a.q.data, a.q.dtype, offset4(a.q, i, j, h, 0), z.d_qk, q_position(opts, z, seq, i, j), row);
        for (int64_t c = 0; c < z.d_qk; ++c)
          store_from_double(q.view.data, q.view.dtype, offset4(q.view, i, j, h, c), row[c]);
      }
  for (int64_t i = 0; i < z.b; ++i)
    for (int64_t p = 0; p < seq.len[i] + z.s_new; ++p) {
      const Slot at = slot_of(a, z, seq, i, p);
      for (int64_t h = 0; h < z.h_kv; ++h) {
        auto gather = [&](const TensorView& cache, const TensorView& dst, int64_t d) {
          for (int64_t c = 0; c < d; ++c)
            store_from_double(dst.data, dst.dtype, offset4(dst, i, p, h, c),
                              load_as_double(cache.data, cache.dtype, offset4(cache, at.outer, at.inner, h, c)));
        };
        gather(a.k_cache, k.view, z.d_qk);
        gather(a.v_cache, v.view, z.d_v);
      }
    }
  return forward(o, f, ctx, policy);
}

Selection forward_with_kvcache(const Options& opts, const KvCacheArgs& args, const RunContext& ctx) {
  return forward_with_kvcache(opts, args, ctx, Policy::from_env());
}

}  // namespace attn
