// The `cudnn` backend object: its verdicts (the known limits of cudnn_rules.h,
// then, on a real device, whether cuDNN builds a plan for the problem), and the
// two passes: prepare lengths/offsets, run the cached graph, finish the rows
// whose answer attn defines (cudnn_kernels.h).
#include <cudnn.h>
#include <cuda_runtime.h>

#include <cmath>

#include "attn/error.h"
#include "attn/select.h"
#include "backends/common/fill.h"
#include "backends/cudnn/cudnn.h"
#include "backends/cudnn/cudnn_graph.h"
#include "backends/cudnn/cudnn_kernels.h"
#include "backends/cudnn/cudnn_rules.h"
#include "core/cuda_check.h"
#include "core/workspace.h"

namespace attn::cudnn {

int library_version() { return static_cast<int>(cudnnGetVersion()); }

std::string version_string() {
  const int v = library_version();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

namespace {

bool thd(const Problem& p) { return p.qkv_format == QkvFormat::thd; }

// Rows of cuDNN's [b, h, s, d] views. thd's max_seqlen is rounded up to a power
// of two (at least 64), so batches whose longest sequence varies share a graph;
// cuDNN reads the true lengths, so the extra rows cost nothing but grid slots.
int64_t view_rows(const Problem& p, int64_t s) {
  if (!thd(p)) return s;
  int64_t r = 64;
  while (r < s) r *= 2;
  return r;
}

// A q/k/v/out-like tensor as cuDNN's [b, h, s, d] view.
TensorDesc desc_of(const TensorView& t, QkvFormat f, int64_t batch, int64_t rows) {
  const auto& st = t.strides_elems;
  switch (f) {
    case QkvFormat::bshd: return {{batch, t.shape[2], rows, t.shape[3]}, {st[0], st[2], st[1], st[3]}};
    case QkvFormat::sbhd: return {{batch, t.shape[2], rows, t.shape[3]}, {st[1], st[2], st[0], st[3]}};
    case QkvFormat::thd: return {{batch, t.shape[1], rows, t.shape[2]}, {rows * st[0], st[1], st[0], st[2]}};
  }
  return {};
}

// The same tensor laid out contiguously in its format (what the probe assumes).
TensorDesc canonical(QkvFormat f, int64_t batch, int64_t rows, int64_t heads, int64_t d) {
  switch (f) {
    case QkvFormat::bshd: return {{batch, heads, rows, d}, {rows * heads * d, d, heads * d, 1}};
    case QkvFormat::sbhd: return {{batch, heads, rows, d}, {heads * d, d, batch * heads * d, 1}};
    case QkvFormat::thd: return {{batch, heads, rows, d}, {rows * heads * d, d, heads * d, 1}};
  }
  return {};
}

TensorDesc packed_stats(int64_t batch, int64_t heads, int64_t rows) {
  return {{batch, heads, rows, 1}, {heads * rows, rows, 1, 1}};
}

// lse of bshd/sbhd is [b, h, s]; cuDNN can use it in place when it is packed.
bool lse_packed(const Problem& p, const TensorView& lse) {
  return !thd(p) && lse.defined() && lse.strides_elems[2] == 1 && lse.strides_elems[1] == p.s_q &&
         (p.batch == 1 || lse.strides_elems[0] == p.h_q * p.s_q);
}

// The bias as cuDNN's [b|1, h|1, s_q, s_kv] view. Broadcast dimensions (size 1,
// often stride 0 from expand()) get the stride a packed tensor would have.
TensorDesc bias_desc(const Problem& p, const TensorView* bias) {
  TensorDesc d;
  int64_t packed = 1;
  for (int i = 3; i >= 0; --i) {
    d.dim[i] = p.bias_shape[i];
    d.stride[i] = bias && d.dim[i] != 1 ? bias->strides_elems[i] : packed;
    packed *= d.dim[i];
  }
  return d;
}

// The graph for p: with the caller's strides when args are given, else canonical ones.
GraphSpec spec_for(const Problem& p, const Inputs* in, const TensorView* out, const TensorView* dout,
                   const TensorView* dq, const TensorView* dk, const TensorView* dv,
                   const TensorView* dbias = nullptr) {
  GraphSpec s;
  s.pass = p.pass;
  s.dtype = p.dtype;
  s.device = p.device.index;
  s.batch = p.batch;
  s.h_q = p.h_q;
  s.h_kv = p.h_kv;
  s.s_q = view_rows(p, p.s_q);
  s.s_kv = view_rows(p, p.s_kv);
  s.d_qk = p.d_qk;
  s.d_v = p.d_v;
  s.mask = mask_plan(p);
  s.scale = static_cast<float>(p.softmax_scale);
  s.bias = p.bias == BiasType::post_scale_bias;
  s.dbias = s.bias && p.pass == Pass::backward && p.bias_grad;
  if (s.bias) s.bias_desc = bias_desc(p, in ? &in->bias : nullptr);
  if (s.dbias) s.dbias_desc = bias_desc(p, dbias);
  s.dropout_p = static_cast<float>(p.dropout_p);
  s.seed_in_memory = p.rng_state_in_memory;
  // The max logit comes from cuDNN's per-row Max, which its softmax gives
  // with Sum_exp instead of stats: lse is then Max + log(Sum_exp).
  s.max_sum_exp = p.pass == Pass::forward && p.return_max_logit;
  s.stats = (p.pass == Pass::backward || p.return_lse) && !s.max_sum_exp;
  s.sink = p.has_sink();
  s.dsink = p.pass == Pass::backward && p.sink_grad;
  s.deterministic = p.pass == Pass::backward && p.deterministic;
  s.implementation = forward_implementation();
  const QkvFormat f = p.qkv_format;
  auto desc = [&](const TensorView* t, int64_t rows, int64_t heads, int64_t d) {
    return t ? desc_of(*t, f, p.batch, rows) : canonical(f, p.batch, rows, heads, d);
  };
  s.q = desc(in ? &in->q : nullptr, s.s_q, p.h_q, p.d_qk);
  s.k = desc(in ? &in->k : nullptr, s.s_kv, p.h_kv, p.d_qk);
  s.v = desc(in ? &in->v : nullptr, s.s_kv, p.h_kv, p.d_v);
  s.o = desc(out, s.s_q, p.h_q, p.d_v);
  if (p.pass == Pass::backward) {
    s.d_o = desc(dout, s.s_q, p.h_q, p.d_v);
    s.dq = desc(dq, s.s_q, p.h_q, p.d_qk);
    s.dk = desc(dk, s.s_kv, p.h_kv, p.d_qk);
    s.dv = desc(dv, s.s_kv, p.h_kv, p.d_v);
  }
  // In place (lse_packed) or in the workspace, cuDNN's stats (or Max and
  // Sum_exp) are packed [b, h, s, 1].
  if (s.stats || s.max_sum_exp) s.stats_desc = packed_stats(p.batch, p.h_q, s.s_q);
  return s;
}

// Backends other than cudnn that can run p, for error messages.
std::string alternatives(const Problem& p) {
  std::string names;
  try {
    for (const Verdict& v : explain(p, query_device(p.device), Policy{}))
      if (v.ok() && v.backend != "cudnn") names += (names.empty() ? "" : ", ") + v.backend;
  } catch (const Error&) {
  }
  return names.empty() ? "none in this build (see `attn explain`)" : names;
}

[[noreturn]] void no_plan(const Problem& p, const std::string& why) {
  fail(ErrorKind::unsupported, "cuDNN " + version_string() + " has no attention plan for this problem",
       describe_problem(p) + "; cuDNN says: " + why, "a problem within cuDNN's fused-attention limits",
       "use another backend: ATTN_DISABLE=cudnn (or backend=...), which can run it: " + alternatives(p));
}

// Per-call device arrays: sequence lengths, ragged offsets, packed stats (or
// Max and Sum_exp), the sink logits and their gradient as cuDNN reads and
// writes them (contiguous [h_q]).
struct Scratch {
  int32_t *len_q = nullptr, *len_kv = nullptr;
  int32_t* ragged[kRoles] = {};
  float* stats = nullptr;
  float *row_max = nullptr, *row_sum_exp = nullptr;
  float *sink = nullptr, *dsink = nullptr;
  void* cudnn = nullptr;
};

Scratch carve(detail::Carver& c, const Problem& p, const MaskPlan& m, int64_t rows, bool stats, int64_t cudnn_bytes) {
  Scratch s;
  if (m.padding) {
    s.len_q = c.take<int32_t>(p.batch);
    s.len_kv = c.take<int32_t>(p.batch);
  }
  if (m.ragged)
    for (int r = 0; r < kRoles; ++r) s.ragged[r] = c.take<int32_t>(p.batch + 1);
  if (stats) s.stats = c.take<float>(p.batch * p.h_q * rows);
  if (p.pass == Pass::forward && p.return_max_logit) {
    s.row_max = c.take<float>(p.batch * p.h_q * rows);
    s.row_sum_exp = c.take<float>(p.batch * p.h_q * rows);
  }
  if (p.has_sink()) s.sink = c.take<float>(p.h_q);
  if (p.pass == Pass::backward && p.sink_grad) s.dsink = c.take<float>(p.h_q);
  s.cudnn = c.take_bytes(cudnn_bytes);
  return s;
}

// The sink logits into the [h_q] tensor cuDNN reads: the caller's (learnable) or zeros (off-by-one).
void stage_sink(const Problem& p, const Inputs& in, const Scratch& s, void* stream) {
  if (!s.sink) return;
  if (p.softmax_type == SoftmaxType::learnable)
    launch_copy_per_head(s.sink, 1, static_cast<const float*>(in.sink.data), in.sink.strides_elems[0], p.h_q, stream);
  else
    detail::launch_fill(s.sink, p.h_q, 1, 0.f, stream);
}

void prepare_sequences(const Problem& p, const Inputs& in, const Scratch& s, const TensorView* views[kRoles],
                       void* stream) {
  if (!s.len_q && !s.ragged[kQ]) return;
  SequenceArgs a;
  if (p.has_seqlens) {
    a.cu_q = static_cast<const int32_t*>(in.cu_seqlens_q.data);
    a.cu_kv = static_cast<const int32_t*>(in.cu_seqlens_kv.data);
    a.cu_q_stride = in.cu_seqlens_q.strides_elems[0];
    a.cu_kv_stride = in.cu_seqlens_kv.strides_elems[0];
  }
  a.packed = thd(p);
  a.batch = p.batch;
  a.s_q = p.s_q;
  a.s_kv = p.s_kv;
  a.tokens_q = p.total_q;
  a.tokens_kv = p.total_kv;
  a.len_q = s.len_q;
  a.len_kv = s.len_kv;
  for (int r = 0; r < kRoles; ++r)
    if (s.ragged[r] && views[r]) {
      a.ragged[r] = s.ragged[r];
      a.token_stride[r] = views[r]->strides_elems[0];
    }
  launch_prepare_sequences(a, stream);
}

RowLayout layout_of(const TensorView& t, QkvFormat f) {
  switch (f) {
    case QkvFormat::bshd: return {t.data, t.strides_elems[0], t.strides_elems[1], t.strides_elems[2]};
    case QkvFormat::sbhd: return {t.data, t.strides_elems[1], t.strides_elems[0], t.strides_elems[2]};
    case QkvFormat::thd: return {t.data, 0, t.strides_elems[0], t.strides_elems[1]};
  }
  return {};
}

void lse_strides(const Problem& p, const TensorView& lse, int64_t& b, int64_t& h, int64_t& i) {
  if (thd(p)) {
    b = 0, h = lse.strides_elems[0], i = lse.strides_elems[1];
  } else {
    b = lse.strides_elems[0], h = lse.strides_elems[1], i = lse.strides_elems[2];
  }
}

// What a forward call needs besides its tensors: cuDNN's plan and the
// workspace's layout (forward_workspace_bytes asks the same).
struct ForwardSetup {
  MaskPlan m;
  int64_t rows = 0;
  bool no_keys = false, direct = false, ws_stats = false;
  PlanResult plan;
  int64_t cudnn_bytes = 0;
  int64_t workspace_bytes = 0;
};

ForwardSetup forward_setup(const Problem& p, const ForwardArgs& a) {
  ForwardSetup f;
  f.m = mask_plan(p);
  f.rows = view_rows(p, p.s_q);
  f.no_keys = p.total_kv == 0 || p.s_kv == 0;
  f.direct = p.return_lse && !p.return_max_logit && lse_packed(p, a.lse);
  if (!f.no_keys) {
    f.plan = get_plan(spec_for(p, &a.in, &a.out, nullptr, nullptr, nullptr, nullptr));
    if (!f.plan.plan) no_plan(p, f.plan.error);
  }
  f.cudnn_bytes = f.plan.plan ? workspace_bytes(*f.plan.plan) : 0;
  f.ws_stats = p.return_lse && !f.direct && !p.return_max_logit;
  detail::Carver sizing(nullptr);
  carve(sizing, p, f.m, f.rows, f.ws_stats, f.cudnn_bytes);
  f.workspace_bytes = sizing.used();
  return f;
}

int64_t forward_workspace(const Problem& p, const ForwardArgs& a) {
  return p.total_q == 0 || p.h_q == 0 ? 0 : forward_setup(p, a).workspace_bytes;
}

void forward_pass(const Problem& p, const ForwardArgs& a, const RunContext& ctx) {
  if (p.h_q == 0) return;
  ATTN_CUDA(cudaSetDevice(p.device.index));
  if (p.total_q == 0) {
    if (p.return_max_logit)  // no queries: -inf for every head
      detail::launch_fill(static_cast<float*>(a.max_logit.data), p.h_q, a.max_logit.strides_elems[0], -INFINITY,
                          ctx.stream);
    return;
  }
  const ForwardSetup setup = forward_setup(p, a);
  const MaskPlan& m = setup.m;
  const int64_t rows = setup.rows;
  const bool no_keys = setup.no_keys, direct = setup.direct, ws_stats = setup.ws_stats;
  const PlanResult& plan = setup.plan;
  detail::Carver c(static_cast<char*>(detail::workspace(ctx, p.device.index, setup.workspace_bytes)));
  const Scratch s = carve(c, p, m, rows, ws_stats, setup.cudnn_bytes);
  const TensorView* views[kRoles] = {&a.in.q, &a.in.k, &a.in.v, &a.out, nullptr, nullptr, nullptr, nullptr};
  prepare_sequences(p, a.in, s, views, ctx.stream);
  stage_sink(p, a.in, s, ctx.stream);

  if (plan.plan) {
    Pointers ptr;
    ptr.q = a.in.q.data, ptr.k = a.in.k.data, ptr.v = a.in.v.data, ptr.out = a.out.data;
    ptr.stats = direct ? a.lse.data : s.stats;
    ptr.row_max = s.row_max, ptr.row_sum_exp = s.row_sum_exp;
    ptr.sink = s.sink;
    ptr.bias = a.in.bias.data;
    ptr.len_q = s.len_q, ptr.len_kv = s.len_kv;
    for (int r = 0; r < kRoles; ++r) ptr.ragged[r] = s.ragged[r];
    ptr.seed = static_cast<int64_t>(p.seed), ptr.offset = static_cast<int64_t>(p.offset);
    ptr.rng_state = p.rng_state_in_memory ? static_cast<const int64_t*>(a.in.rng_state.data) : nullptr;
    execute(*plan.plan, ptr, s.cudnn, ctx.stream, p);
  }

  const bool fix = no_keys || may_have_empty_rows(p);
  const bool lse_from_max = p.return_lse && p.return_max_logit;
  if (!fix && !ws_stats && !p.return_max_logit) return;
  ForwardRows f;
  f.cu_q = thd(p) ? static_cast<const int32_t*>(a.in.cu_seqlens_q.data) : nullptr;
  f.cu_q_stride = a.in.cu_seqlens_q.defined() ? a.in.cu_seqlens_q.strides_elems[0] : 1;
  f.tokens_q = p.total_q;
  f.len_q = s.len_q, f.len_kv = s.len_kv;
  f.batch = p.batch, f.heads = p.h_q, f.rows = p.s_q, f.s_q = p.s_q, f.s_kv = no_keys ? 0 : p.s_kv;
  if (no_keys) f.len_kv = nullptr;
  f.left = p.window_left, f.right = p.window_right, f.bottom_right = p.bottom_right;
  f.dtype = p.dtype, f.d_v = p.d_v;
  f.out = layout_of(a.out, p.qkv_format);
  if (p.return_lse) {
    f.lse = static_cast<float*>(a.lse.data);
    lse_strides(p, a.lse, f.lse_b, f.lse_h, f.lse_i);
  }
  f.stats = ws_stats && plan.plan ? s.stats : nullptr;
  f.row_max = p.return_max_logit && plan.plan ? s.row_max : nullptr;
  f.row_sum_exp = f.row_max ? s.row_sum_exp : nullptr;
  // Stats, Max and Sum_exp live in [b, h, rows]; thd's rows are the bucketed view rows.
  if ((f.stats || f.row_max) && thd(p)) f.rows = rows;
  f.fix_empty = fix;
  f.sink = detail::sink_logits_of(p, a.in.sink);
  if (p.return_max_logit)
    launch_max_logit_per_head(f, static_cast<float*>(a.max_logit.data), a.max_logit.strides_elems[0], ctx.stream);
  if (!lse_from_max) f.row_max = f.row_sum_exp = nullptr;
  if (fix || ws_stats || lse_from_max) launch_finish_forward_rows(f, ctx.stream);
}

// Zeroes the rows of dq (dk, dv) at or past len_q[b] (len_kv[b]) of each
// sequence, and all of them where the other side is empty. thd has no
// padding rows: there, all tokens form one sequence whose length (a zero)
// clears every row.
void zero_gradient_rows(const Problem& p, const BackwardArgs& a, int32_t* len_q, int32_t* len_kv, void* stream) {
  const bool t = thd(p);
  const TensorView* grads[] = {&a.dq, &a.dk, &a.dv};
  int32_t* lens[] = {len_q, len_kv, len_kv};
  int32_t* others[] = {len_kv, len_q, len_q};
  const int64_t heads[] = {p.h_q, p.h_kv, p.h_kv}, dims[] = {p.d_qk, p.d_qk, p.d_v};
  const int64_t rows_of[] = {t ? p.total_q : p.s_q, t ? p.total_kv : p.s_kv, t ? p.total_kv : p.s_kv};
  for (int g = 0; g < 3; ++g) {
    PaddedRows z;
    z.len = lens[g], z.other_len = others[g], z.batch = t ? 1 : p.batch;
    z.heads = heads[g], z.rows = rows_of[g], z.dim = dims[g];
    z.dtype = p.dtype, z.t = layout_of(*grads[g], p.qkv_format);
    launch_zero_padded_rows(z, stream);
  }
}

// What a backward call needs besides its tensors: cuDNN's plan and the
// workspace's layout (backward_workspace_bytes asks the same).
struct BackwardSetup {
  MaskPlan m;
  int64_t rows = 0;
  bool nothing_to_attend = false;  // no keys or no queries: every gradient is zero
  bool direct = false;
  PlanResult plan;
  int64_t cudnn_bytes = 0;
  int64_t workspace_bytes = 0;
};

BackwardSetup backward_setup(const Problem& p, const BackwardArgs& a) {
  BackwardSetup b;
  b.m = mask_plan(p);
  b.rows = view_rows(p, p.s_q);
  b.nothing_to_attend = p.total_kv == 0 || p.s_kv == 0 || p.total_q == 0;
  // cuDNN reads packed [b, h, s] stats; the caller's lse serves in place when it
  // is packed and has no -inf (rows that see no key).
  b.direct = !may_have_empty_rows(p) && lse_packed(p, a.lse);
  if (!b.nothing_to_attend) {
    b.plan = get_plan(spec_for(p, &a.in, &a.out, &a.dout, &a.dq, &a.dk, &a.dv, a.dbias.defined() ? &a.dbias : nullptr));
    if (!b.plan.plan) no_plan(p, b.plan.error);
  }
  b.cudnn_bytes = b.plan.plan ? workspace_bytes(*b.plan.plan) : 0;
  detail::Carver sizing(nullptr);
  carve(sizing, p, b.m, b.rows, !b.direct, b.cudnn_bytes);
  if (b.nothing_to_attend) sizing.take<int32_t>(p.batch);  // the zero lengths
  b.workspace_bytes = sizing.used();
  return b;
}

int64_t backward_workspace(const Problem& p, const BackwardArgs& a) {
  return p.h_q == 0 ? 0 : backward_setup(p, a).workspace_bytes;
}

void backward_pass(const Problem& p, const BackwardArgs& a, const RunContext& ctx) {
  if (p.h_q == 0) return;
  ATTN_CUDA(cudaSetDevice(p.device.index));
  const BackwardSetup setup = backward_setup(p, a);
  const int64_t rows = setup.rows;
  const bool direct = setup.direct;
  const PlanResult& plan = setup.plan;
  const bool padded_grads = p.has_seqlens && !thd(p);
  detail::Carver c(static_cast<char*>(detail::workspace(ctx, p.device.index, setup.workspace_bytes)));
  const Scratch s = carve(c, p, setup.m, rows, !direct, setup.cudnn_bytes);

  float* const dsink = static_cast<float*>(a.dsink.data);
  const int64_t dsink_stride = a.dsink.defined() ? a.dsink.strides_elems[0] : 1;
  if (setup.nothing_to_attend) {  // every gradient is zero
    if (p.sink_grad) detail::launch_fill(dsink, p.h_q, dsink_stride, 0.f, ctx.stream);
    int32_t* zeros = c.take<int32_t>(p.batch);
    ATTN_CUDA(cudaMemsetAsync(zeros, 0, p.batch * sizeof(int32_t), static_cast<cudaStream_t>(ctx.stream)));
    zero_gradient_rows(p, a, zeros, zeros, ctx.stream);
    if (a.dbias.defined())
      ATTN_CUDA(cudaMemsetAsync(a.dbias.data, 0, a.dbias.numel() * dtype_size_bytes(a.dbias.dtype),
                                static_cast<cudaStream_t>(ctx.stream)));
    return;
  }

  const TensorView* views[kRoles] = {&a.in.q, &a.in.k, &a.in.v, &a.out, &a.dout, &a.dq, &a.dk, &a.dv};
  prepare_sequences(p, a.in, s, views, ctx.stream);
  stage_sink(p, a.in, s, ctx.stream);
  if (!direct) {
    BackwardStats b;
    b.cu_q = thd(p) ? static_cast<const int32_t*>(a.in.cu_seqlens_q.data) : nullptr;
    b.cu_q_stride = a.in.cu_seqlens_q.defined() ? a.in.cu_seqlens_q.strides_elems[0] : 1;
    b.tokens_q = p.total_q;
    b.len_q = s.len_q, b.batch = p.batch, b.heads = p.h_q, b.rows = rows, b.s_q = p.s_q;
    b.lse = static_cast<const float*>(a.lse.data);
    lse_strides(p, a.lse, b.lse_b, b.lse_h, b.lse_i);
    b.stats = s.stats;
    launch_backward_stats(b, ctx.stream);
  }
  Pointers ptr;
  ptr.q = a.in.q.data, ptr.k = a.in.k.data, ptr.v = a.in.v.data, ptr.o = a.out.data, ptr.d_o = a.dout.data;
  ptr.dq = a.dq.data, ptr.dk = a.dk.data, ptr.dv = a.dv.data;
  ptr.stats = direct ? a.lse.data : s.stats;
  ptr.bias = a.in.bias.data, ptr.dbias = a.dbias.data;
  ptr.sink = s.sink, ptr.dsink = s.dsink;
  ptr.len_q = s.len_q, ptr.len_kv = s.len_kv;
  for (int r = 0; r < kRoles; ++r) ptr.ragged[r] = s.ragged[r];
  ptr.seed = static_cast<int64_t>(p.seed), ptr.offset = static_cast<int64_t>(p.offset);
  ptr.rng_state = p.rng_state_in_memory ? static_cast<const int64_t*>(a.in.rng_state.data) : nullptr;
  execute(*plan.plan, ptr, s.cudnn, ctx.stream, p);
  if (s.dsink) launch_copy_per_head(dsink, dsink_stride, s.dsink, 1, p.h_q, ctx.stream);

  if (padded_grads) zero_gradient_rows(p, a, s.len_q, s.len_kv, ctx.stream);  // cuDNN leaves rows past a length unwritten
}

class CudnnBackend final : public Backend {
 public:
  const char* name() const override { return "cudnn"; }
  bool matches_reference_dropout() const override { return false; }

  std::vector<std::string> supports(const Problem& p, const DeviceInfo& dev) const override {
    std::vector<std::string> no = verdict(p, dev);
    // cuDNN's dropout pattern is its own: a backward on another backend would
    // drop different elements. So a forward with dropout runs here only if its
    // backward (the same problem, default gradients) can run here too.
    if (no.empty() && p.pass == Pass::forward && p.dropout_p > 0) {
      Problem b = p;
      b.pass = Pass::backward;
      b.bias_grad = p.bias == BiasType::post_scale_bias;
      for (const std::string& r : verdict(b, dev))
        no.push_back("dropout: cuDNN draws its own pattern, so the backward must run on cudnn too, and it cannot: " + r);
    }
    return no;
  }

 private:
  static std::vector<std::string> verdict(const Problem& p, const DeviceInfo& dev) {
    std::vector<std::string> no = static_reasons(p, dev, library_version());
    if (!no.empty() || dev.simulated || p.total_q == 0 || p.total_kv == 0 || p.s_kv == 0) return no;
    // The known limits passed; ask cuDNN itself (the plan is cached, so the call
    // that follows reuses it when its tensors are laid out contiguously).
    // Under CUDA graph capture only a plan built before can serve.
    const GraphSpec spec = spec_for(p, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    const std::optional<PlanResult> cached = p.capturing ? cached_plan(spec) : get_plan(spec);
    if (!cached)
      no.push_back("under CUDA graph capture with no cuDNN plan for this shape yet (building one allocates): run "
                   "the call once outside capture");
    else if (!cached->plan)
      no.push_back("cuDNN " + version_string() + " builds no plan for it: " + cached->error);
    return no;
  }

 public:

  int64_t forward_workspace_bytes(const Problem& p, const ForwardArgs& args) const override {
    return forward_workspace(p, args);
  }
  int64_t backward_workspace_bytes(const Problem& p, const BackwardArgs& args) const override {
    return backward_workspace(p, args);
  }
  void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx) const override {
    forward_pass(p, args, ctx);
  }
  void backward(const Problem& p, const BackwardArgs& args, const RunContext& ctx) const override {
    backward_pass(p, args, ctx);
  }
};

}  // namespace

const Backend& backend() {
  static const CudnnBackend instance;
  return instance;
}

}  // namespace attn::cudnn
