// A ring's set-up (ring_setup.h): everything that can refuse a call runs here,
// before the first transfer, so a bad call is an error on every rank rather
// than a hang.
#include "cp/ring_setup.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>

#include "core/sequences.h"

namespace attn::cp::internal {
namespace {

void refuse(const std::string& what, const std::string& got, const std::string& expected, const std::string& fix) {
  fail(ErrorKind::unsupported, "context parallelism: " + what, got, expected, fix);
}

int64_t seq_dim(QkvFormat f) { return f == QkvFormat::bshd ? 1 : 0; }

// The problem as numbers every rank must agree on, with their names.
struct Fingerprint {
  static constexpr int kFields = 16;
  std::array<int64_t, kFields> v{};
  static const char* name(int i) {
    static const char* names[kFields] = {"ring size",  "qkv_format", "mask",         "window.left",
                                         "window.right", "batch",    "local tokens", "h_q",
                                         "h_kv",       "d_qk",       "d_v",          "dtype",
                                         "pass",       "softmax_scale (bits)", "softcap (bits)", "sequence lengths (hash)"};
    return names[i];
  }
};

int64_t bits(double x) {
  int64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

}  // namespace

Ring::Ring(const Options& opts, const Inputs& in, Pass pass, Transport& transport, const Policy& policy,
           const RunContext& ctx)
    : opts_(opts), policy_(policy), ctx_(ctx), transport_(transport) {
  cp_ = transport.size(), rank_ = transport.rank();
  if (cp_ < 1 || rank_ < 0 || rank_ >= cp_)
    fail(ErrorKind::value, "context parallelism: bad rank or ring size",
         "rank " + std::to_string(rank_) + " of " + std::to_string(cp_), "0 <= rank < size, size >= 1",
         "build the communicator with this process's rank and the number of ranks");
  check_features(in, pass);
  const bool on_device = in.q.device.is_cuda();
  ops_ = on_device ? device_ops(in.q.device.index, ctx.stream) : host_ops();
  read_lengths(in);
  check_ranks_agree(in, pass);
  causal_ = opts_.mask == MaskType::causal || opts_.mask == MaskType::causal_bottom_right ||
            opts_.mask == MaskType::padding_causal || opts_.mask == MaskType::padding_causal_bottom_right;
  per_chunk_ = opts_.qkv_format == QkvFormat::thd || opts_.window.left >= 0 || opts_.window.right >= 0;
}

void Ring::check_features(const Inputs& in, Pass pass) const {
  const QkvFormat f = opts_.qkv_format;
  const std::string later = "issue 9 lists what context parallelism covers; run this call without cp";
  const bool thd = f == QkvFormat::thd;
  // thd applies sequence bounds whatever the mask, so padding* is no_mask/causal there.
  const bool mask_ok = opts_.mask == MaskType::no_mask || opts_.mask == MaskType::causal ||
                       opts_.mask == MaskType::causal_bottom_right ||
                       (thd && (opts_.mask == MaskType::padding || opts_.mask == MaskType::padding_causal ||
                                opts_.mask == MaskType::padding_causal_bottom_right));
  if (!mask_ok)
    refuse("mask type", mask_name(opts_.mask), thd ? "no_mask, causal or padding(_causal)" : "no_mask or causal",
           later);
  if (in.bias.defined() || in.alibi_slopes.defined() || in.attn_mask.defined())
    refuse("bias, ALiBi or an explicit mask", "given", "none", later);
  if (opts_.dropout_p != 0.0)
    refuse("dropout", std::to_string(opts_.dropout_p), "0 (a ring block's dropout pattern differs from the whole's)",
           later);
  if (!thd && (in.cu_seqlens_q.defined() || in.cu_seqlens_kv.defined()))
    refuse("padded bshd/sbhd (cu_seqlens)", "given", "full sequences, or thd for packed ones",
           "pack the batch to thd, or (Python) pass cp_fallback=True to run it unsplit with K/V gathered");
  if (!in.q.defined() || !in.k.defined() || !in.v.defined())
    fail(ErrorKind::value, "context parallelism: q, k and v are required", "missing", "all three", "pass them");
  if (in.q.device != in.k.device || in.q.device != in.v.device)
    fail(ErrorKind::type, "context parallelism: q, k, v on different devices",
         device_name(in.q.device) + ", " + device_name(in.k.device) + ", " + device_name(in.v.device), "one device",
         "move them to one device");
  const int sd = static_cast<int>(seq_dim(f));
  if (in.q.rank != in.k.rank || in.q.rank <= sd || in.q.shape[sd] != in.k.shape[sd])
    refuse("cross-attention (q and k of different lengths)", in.q.shape_str() + " vs " + in.k.shape_str(),
           "self-attention: q and k hold the same tokens", later);
  if (opts_.softmax_type == SoftmaxType::learnable && !in.sink.defined())
    fail(ErrorKind::value, "context parallelism: sink is missing", "softmax_type=learnable without sink",
         "sink, float32 [heads_q]", "pass the sink logits");
  if (opts_.softmax_type != SoftmaxType::learnable && in.sink.defined())
    fail(ErrorKind::value, "context parallelism: sink is given but the softmax type ignores it",
         std::string("softmax_type=") + softmax_type_name(opts_.softmax_type), "softmax_type=learnable",
         "pass softmax_type=learnable, or drop sink");
  if (in.sink.defined()) check_per_head(in.sink, "sink", in.q);
  (void)pass;
}

void Ring::check_per_head(const TensorView& t, const char* name, const TensorView& q) {
  const int64_t heads = q.rank >= 2 ? q.shape[q.rank - 2] : 0;
  if (t.dtype != DType::f32 || t.rank != 1 || t.shape[0] != heads || t.device != q.device)
    fail(ErrorKind::value, std::string("context parallelism: ") + name + " is not float32 [heads_q] on q's device",
         std::string(dtype_name(t.dtype)) + " " + t.shape_str() + " on " + device_name(t.device),
         "float32 [" + std::to_string(heads) + "] on " + device_name(q.device),
         std::string("allocate ") + name + " with one float32 per query head, beside q");
}

void Ring::read_lengths(const Inputs& in) {
  const QkvFormat f = opts_.qkv_format;
  if (f != QkvFormat::thd) {
    const int64_t local = in.q.shape[seq_dim(f)], batch = in.q.shape[f == QkvFormat::bshd ? 0 : 1];
    lengths_.assign(static_cast<size_t>(batch), local * cp_);
    check_lengths(lengths_, cp_);
    chunk_ = local / 2;
    return;
  }
  // thd: the global cu_seqlens (of the whole sequences) give each sequence's
  // chunk length; read once on the host, before the ring starts.
  const TensorView& cu = in.cu_seqlens_q;
  if (!cu.defined() || cu.dtype != DType::i32 || cu.rank != 1 || cu.shape[0] < 1)
    fail(ErrorKind::value, "context parallelism in thd needs cu_seqlens_q", cu.defined() ? cu.shape_str() : "none",
         "int32 [batch + 1]: the cumulative lengths of the whole (unsplit) sequences",
         "pass the global cu_seqlens; attn.cp.shard returns them");
  const std::vector<int32_t> host = detail::read_int32(cu);
  for (size_t b = 0; b + 1 < host.size(); ++b) lengths_.push_back(int64_t{host[b + 1]} - host[b]);
  check_lengths(lengths_, cp_);
  std::vector<int32_t> cum{0};
  for (int64_t len : lengths_) {
    cum.push_back(cum.back() + static_cast<int32_t>(len / (2 * cp_)));
    max_chunk_ = std::max(max_chunk_, len / (2 * cp_));
  }
  chunk_start_.assign(cum.begin(), cum.end());
  half_tokens_ = cum.back();
  if (in.q.shape[0] != 2 * half_tokens_)
    fail(ErrorKind::value, "context parallelism: the thd shard does not match cu_seqlens",
         std::to_string(in.q.shape[0]) + " local tokens",
         std::to_string(2 * half_tokens_) + " (each sequence's length / cp, from the global cu_seqlens)",
         "shard with attn.cp.shard, or pass the global cu_seqlens of the sequences this shard came from");
  // Plan units: a thd call covers whole halves, [0, 2) or [2, 4); a chunk of
  // 1 would make a causal diagonal look fully visible.
  chunk_ = 2;
  // Work order: all first chunks, then all second chunks; user order: per
  // sequence, its first chunk then its second.
  const int64_t tokens = 2 * half_tokens_;
  to_work_index_.resize(static_cast<size_t>(tokens));
  to_user_index_.resize(static_cast<size_t>(tokens));
  for (int h = 0; h < 2; ++h)
    for (size_t b = 0; b + 1 < cum.size(); ++b)
      for (int32_t i = 0; i < cum[b + 1] - cum[b]; ++i) {
        const int64_t work = h * half_tokens_ + cum[b] + i, user = 2 * cum[b] + h * (cum[b + 1] - cum[b]) + i;
        to_work_index_[work] = static_cast<int32_t>(user);
        to_user_index_[user] = static_cast<int32_t>(work);
      }
  to_work_ = ops_->upload(to_work_index_);
  to_user_ = ops_->upload(to_user_index_);
  const int32_t* cu_dev = ops_->upload(cum);
  cu_half_ = make_view(const_cast<int32_t*>(cu_dev), DType::i32, {static_cast<int64_t>(cum.size())}, in.q.device);
}

void Ring::check_ranks_agree(const Inputs& in, Pass pass) {
  Fingerprint mine;
  const TensorView &q = in.q, &k = in.k, &v = in.v;
  const bool thd = opts_.qkv_format == QkvFormat::thd;
  int64_t hash = 1469598103934665603LL;
  for (int64_t len : lengths_) hash = (hash ^ len) * 1099511628211LL;
  mine.v = {cp_,
            static_cast<int64_t>(opts_.qkv_format),
            static_cast<int64_t>(opts_.mask),
            opts_.window.left,
            opts_.window.right,
            static_cast<int64_t>(lengths_.size()),
            q.shape[seq_dim(opts_.qkv_format)],
            q.shape[thd ? 1 : 2],
            k.shape[thd ? 1 : 2],
            q.shape[q.rank - 1],
            v.shape[v.rank - 1],
            static_cast<int64_t>(q.dtype),
            static_cast<int64_t>(pass),
            bits(opts_.softmax_scale.value_or(-1.0)),
            bits(opts_.softcap),
            hash};
  std::vector<Fingerprint> all(static_cast<size_t>(cp_));
  transport_.all_gather_host(&mine, all.data(), sizeof(Fingerprint));
  for (int r = 1; r < cp_; ++r)
    for (int i = 0; i < Fingerprint::kFields; ++i)
      if (all[r].v[i] != all[0].v[i])
        fail(ErrorKind::value, std::string("context parallelism: the ranks disagree on ") + Fingerprint::name(i),
             "rank " + std::to_string(r) + " has " + std::to_string(all[r].v[i]) + ", rank 0 has " +
                 std::to_string(all[0].v[i]),
             "the same problem on every rank (each holding its own shard)",
             "call attn with the same options and shard shapes on every rank of the communicator");
}

std::vector<BlockCall> Ring::step(int t) const {
  if (opts_.qkv_format != QkvFormat::thd) return plan_step(rank_, t, cp_, chunk_, causal_, opts_.window, per_chunk_);
  // thd: block rows become work rows (all first chunks, then all second chunks).
  // Without a window a call covers whole halves of every sequence; with one, a
  // block's bounds depend on the sequence's own chunk length, so each sequence
  // plans and runs on its own.
  std::vector<BlockCall> calls;
  const bool windowed = opts_.window.left >= 0 || opts_.window.right >= 0;
  if (!windowed) {
    for (BlockCall c : plan_step(rank_, t, cp_, chunk_, causal_, opts_.window, true)) {
      c.q_begin = c.q_begin / chunk_ * half_tokens_, c.q_end = c.q_end / chunk_ * half_tokens_;
      c.kv_begin = c.kv_begin / chunk_ * half_tokens_, c.kv_end = c.kv_end / chunk_ * half_tokens_;
      calls.push_back(c);
    }
    return calls;
  }
  for (size_t s = 0; s + 1 < chunk_start_.size(); ++s) {
    const int64_t c = chunk_start_[s + 1] - chunk_start_[s];
    auto work_row = [&](int64_t plan_row) {  // the sequence's [chunk r | chunk 2cp-1-r] -> work order
      const int64_t half = plan_row / c;
      return half * half_tokens_ + chunk_start_[s] + (plan_row - half * c);
    };
    for (BlockCall b : plan_step(rank_, t, cp_, c, causal_, opts_.window, true)) {
      b.seq_tokens = b.q_end - b.q_begin;  // a trimmed block is square: as many keys
      b.q_begin = work_row(b.q_begin), b.kv_begin = work_row(b.kv_begin);
      b.q_end = b.q_begin + b.seq_tokens, b.kv_end = b.kv_begin + b.seq_tokens;
      calls.push_back(b);
    }
  }
  return calls;
}

TensorView Ring::alloc_like(const TensorView& t, DType dtype, int64_t d) {
  std::array<int64_t, kMaxRank> shape = t.shape;
  shape[t.rank - 1] = d;
  int64_t n = 1;
  for (int i = 0; i < t.rank; ++i) n *= shape[i];
  void* p = ops_->alloc(n * static_cast<int64_t>(dtype_size_bytes(dtype)));
  return make_view(p, dtype, t.rank, shape.data(), nullptr, t.device);
}

TensorView Ring::over(void* data, const TensorView& like, DType dtype, int64_t d) {
  std::array<int64_t, kMaxRank> shape = like.shape;
  shape[like.rank - 1] = d;
  return make_view(data, dtype, like.rank, shape.data(), nullptr, like.device);
}

TensorView Ring::alloc_lse(const TensorView& q) {
  const QkvFormat f = opts_.qkv_format;
  const int64_t h = q.shape[f == QkvFormat::thd ? 1 : 2];
  if (f == QkvFormat::thd) {
    void* p = ops_->alloc(h * q.shape[0] * static_cast<int64_t>(sizeof(float)));
    return make_view(p, DType::f32, {h, q.shape[0]}, q.device);
  }
  const int64_t b = q.shape[f == QkvFormat::bshd ? 0 : 1], s = q.shape[seq_dim(f)];
  void* p = ops_->alloc(b * h * s * static_cast<int64_t>(sizeof(float)));
  return make_view(p, DType::f32, {b, h, s}, q.device);
}

TensorView Ring::lse_over(void* data, const TensorView& q_rows) const {
  const QkvFormat f = opts_.qkv_format;
  const int64_t h = q_rows.shape[f == QkvFormat::thd ? 1 : 2];
  if (f == QkvFormat::thd) return make_view(data, DType::f32, {h, q_rows.shape[0]}, q_rows.device);
  return make_view(data, DType::f32, {q_rows.shape[f == QkvFormat::bshd ? 0 : 1], h, q_rows.shape[seq_dim(f)]},
                   q_rows.device);
}

TensorView Ring::rows(const TensorView& t, int64_t begin, int64_t end) const {
  const int dim = static_cast<int>(seq_dim(opts_.qkv_format));
  TensorView v = t;
  v.shape[dim] = end - begin;
  v.data = static_cast<unsigned char*>(t.data) + begin * t.strides_elems[dim] * dtype_size_bytes(t.dtype);
  return v;
}

TensorView Ring::lse_rows(const TensorView& lse, int64_t begin, int64_t end) const {
  const bool thd = opts_.qkv_format == QkvFormat::thd;
  const int dim = thd ? 1 : 2;
  TensorView v = lse;
  v.shape[dim] = end - begin;
  v.data = static_cast<unsigned char*>(lse.data) + begin * lse.strides_elems[dim] * sizeof(float);
  return v;
}

TensorView Ring::to_work(const TensorView& user) {
  if (opts_.qkv_format != QkvFormat::thd) return user;
  TensorView w = alloc_like(user, user.dtype, user.shape[user.rank - 1]);
  ops_->copy(user, w, to_work_, 0);
  return w;
}

TensorView Ring::lse_to_work(const TensorView& user) {
  if (opts_.qkv_format != QkvFormat::thd) return user;
  TensorView w = alloc_like(user, DType::f32, user.shape[1]);
  ops_->copy(user, w, to_work_, 1);
  return w;
}

void Ring::into_work(const TensorView& user, const TensorView& work) {
  ops_->copy(user, work, opts_.qkv_format == QkvFormat::thd ? to_work_ : nullptr, 0);
}

void Ring::from_work(const TensorView& work, const TensorView& user) {
  ops_->copy(work, user, opts_.qkv_format == QkvFormat::thd ? to_user_ : nullptr, 0);
}

void Ring::lse_from_work(const TensorView& work, const TensorView& user) {
  ops_->copy(work, user, opts_.qkv_format == QkvFormat::thd ? to_user_ : nullptr, 1);
}

Options Ring::block_options(const BlockCall& call) const {
  Options o = opts_;
  o.softmax_type = SoftmaxType::vanilla;  // blocks merge without the sink; it joins once at the end
  o.mask = call.mask;
  o.window = call.window;
  if (opts_.qkv_format == QkvFormat::thd) {
    o.max_seqlen_q = o.max_seqlen_kv = call.seq_tokens > 0 ? call.seq_tokens : max_chunk_;
    o.check_seqlens = false;  // built here, valid; reading them back would sync every block
  }
  return o;
}

Inputs Ring::block_inputs(const BlockCall& call, const TensorView& q, const TensorView& k,
                          const TensorView& v) const {
  Inputs in;
  in.q = rows(q, call.q_begin, call.q_end);
  in.k = rows(k, call.kv_begin, call.kv_end);
  in.v = rows(v, call.kv_begin, call.kv_end);
  if (opts_.qkv_format == QkvFormat::thd)
    in.cu_seqlens_q = in.cu_seqlens_kv = call.seq_tokens > 0 ? cu_single(call.seq_tokens) : cu_half_;
  return in;
}

TensorView Ring::cu_single(int64_t n) const {
  auto it = cu_single_.find(n);
  if (it == cu_single_.end()) {
    const int32_t* p = ops_->upload({0, static_cast<int32_t>(n)});  // freed with the ring's other buffers
    it = cu_single_.emplace(n, make_view(const_cast<int32_t*>(p), DType::i32, {2}, cu_half_.device)).first;
  }
  return it->second;
}

void Ring::log(const std::string& what) const {
  if (policy_.log_level >= 1)
    std::fprintf(stderr, "attn: cp rank %d/%d: %s\n", rank_, cp_, what.c_str());
}

}  // namespace attn::cp::internal
