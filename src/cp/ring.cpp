// The ring passes of one rank (see attn/cp.h). Each step runs the blocks the
// plan leaves visible through attn::forward / attn::backward while the next
// step's K/V is already in flight; outputs merge by LSE (forward), gradients
// add in fp32 (backward), dK/dV riding the ring back to their owner.
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "attn/cp.h"
#include "core/nan_max.h"
#include "cp/ring_setup.h"

namespace attn::cp {
namespace {

using internal::Ops;
using internal::Ring;

int64_t bytes_of(const TensorView& t) { return t.numel() * static_cast<int64_t>(dtype_size_bytes(t.dtype)); }

// K then V, contiguous in work order, in one buffer that travels as a whole.
struct KvBuffer {
  TensorView k, v;
  void* data = nullptr;
  int64_t bytes = 0;
};

KvBuffer kv_buffer(Ring& ring, const TensorView& k_like, const TensorView& v_like, DType dtype) {
  KvBuffer b;
  const int64_t k_elems = k_like.numel();
  b.bytes = (k_elems + v_like.numel()) * static_cast<int64_t>(dtype_size_bytes(dtype));
  b.data = ring.ops().alloc(b.bytes);
  b.k = Ring::over(b.data, k_like, dtype, k_like.shape[k_like.rank - 1]);
  b.v = Ring::over(static_cast<unsigned char*>(b.data) + k_elems * static_cast<int64_t>(dtype_size_bytes(dtype)),
                   v_like, dtype, v_like.shape[v_like.rank - 1]);
  return b;
}

std::string plan_summary(const Ring& ring) {
  int calls = 0, skipped = 0;
  for (int t = 0; t < ring.size(); ++t) {
    const size_t n = ring.step(t).size();
    calls += static_cast<int>(n);
    skipped += n == 0;
  }
  return std::to_string(ring.size()) + " steps, " + std::to_string(calls) + " block calls, " +
         std::to_string(skipped) + " steps skipped";
}

// A float32 [heads] view of `data` (ops memory).
TensorView per_head(void* data, int64_t heads, Device device) {
  return make_view(data, DType::f32, {heads}, {1}, device);
}

// dst = the sum (or the max, a NaN winning) over the ranks of each rank's
// `mine` (float32 [h]), gathered through the host: a few bytes per rank.
void reduce_over_ranks(Ops& ops, Transport& transport, const TensorView& mine, const TensorView& dst, bool max) {
  const int64_t n = mine.shape[0];
  const std::vector<float> local = ops.download(static_cast<const float*>(mine.data), n);
  std::vector<float> all(static_cast<size_t>(n * transport.size()));
  transport.all_gather_host(local.data(), all.data(), n * static_cast<int64_t>(sizeof(float)));
  std::vector<float> result(local.size(), max ? -std::numeric_limits<float>::infinity() : 0.f);
  for (int r = 0; r < transport.size(); ++r)
    for (int64_t h = 0; h < n; ++h) {
      const float x = all[static_cast<size_t>(r * n + h)];
      float& y = result[static_cast<size_t>(h)];
      y = max ? detail::max_keeping_nan(y, x) : y + x;
    }
  ops.upload_to(result, static_cast<float*>(mine.data));
  ops.copy(mine, dst);
}

}  // namespace

void ring_forward(const Options& opts, const ForwardArgs& local, Transport& transport, const Policy& policy,
                  const RunContext& ctx) {
  Ring ring(opts, local.in, Pass::forward, transport, policy, ctx);
  if (local.max_logit.defined()) Ring::check_per_head(local.max_logit, "max_logit", local.in.q);
  Ops& ops = ring.ops();
  const int cp = ring.size();
  ring.log("forward, " + plan_summary(ring));

  const TensorView q = ring.to_work(local.in.q);
  KvBuffer kv[2] = {kv_buffer(ring, local.in.k, local.in.v, local.in.k.dtype),
                    kv_buffer(ring, local.in.k, local.in.v, local.in.k.dtype)};
  ring.into_work(local.in.k, kv[0].k);
  ring.into_work(local.in.v, kv[0].v);

  const int64_t d_v = local.in.v.shape[local.in.v.rank - 1];
  const TensorView acc = ring.alloc_like(q, DType::f32, d_v), acc_lse = ring.alloc_lse(q);
  ops.fill(acc, 0.f);
  ops.fill(acc_lse, -std::numeric_limits<float>::infinity());
  // One block's outputs at most the size of the whole shard; reused block after block (stream order).
  void* block_out = ops.alloc(bytes_of(Ring::over(nullptr, q, local.in.q.dtype, d_v)));
  void* block_lse = ops.alloc(static_cast<int64_t>(acc_lse.numel() * sizeof(float)));
  // max_logit: each block's, max-ed into this rank's, then over the ranks.
  const int64_t heads = local.in.q.shape[local.in.q.rank - 2];
  const bool want_max = local.max_logit.defined();
  const TensorView acc_max = want_max ? per_head(ops.alloc(heads * 4), heads, q.device) : TensorView{};
  const TensorView block_max = want_max ? per_head(ops.alloc(heads * 4), heads, q.device) : TensorView{};
  if (want_max) ops.fill(acc_max, -std::numeric_limits<float>::infinity());

  for (int t = 0; t < cp; ++t) {
    const KvBuffer &cur = kv[t % 2], &next = kv[(t + 1) % 2];
    if (t + 1 < cp) transport.start(cur.data, next.data, cur.bytes);
    for (const BlockCall& call : ring.step(t)) {
      ForwardArgs a;
      a.in = ring.block_inputs(call, q, cur.k, cur.v);
      a.out = Ring::over(block_out, a.in.q, local.in.q.dtype, d_v);
      a.lse = ring.lse_over(block_lse, a.in.q);
      a.max_logit = block_max;
      forward(ring.block_options(call), a, ctx, policy);
      if (want_max) ops.max_into(block_max, acc_max);
      ops.merge(ring.format(), a.out, a.lse, ring.rows(acc, call.q_begin, call.q_end),
                ring.lse_rows(acc_lse, call.q_begin, call.q_end));
    }
    if (t + 1 < cp) transport.wait();
  }
  // The sink joins each row once, after the blocks (rows that saw no key get
  // out = 0 and lse = the sink's logit, -inf without one: SEMANTICS.md).
  if (opts.softmax_type != SoftmaxType::vanilla)
    ops.add_sink(ring.format(), acc, acc_lse, detail::sink_logits_of(opts.softmax_type, local.in.sink));
  ring.from_work(acc, local.out);
  if (local.lse.defined()) ring.lse_from_work(acc_lse, local.lse);
  if (want_max) reduce_over_ranks(ops, transport, acc_max, local.max_logit, /*max=*/true);
}

void ring_backward(const Options& opts, const BackwardArgs& local, Transport& transport, const Policy& policy,
                   const RunContext& ctx) {
  Ring ring(opts, local.in, Pass::backward, transport, policy, ctx);
  Ops& ops = ring.ops();
  const int cp = ring.size();
  ring.log("backward, " + plan_summary(ring));
  const DType dt = local.in.q.dtype;

  const TensorView q = ring.to_work(local.in.q), out = ring.to_work(local.out), dout = ring.to_work(local.dout);
  const TensorView lse = ring.lse_to_work(local.lse);
  KvBuffer kv[2] = {kv_buffer(ring, local.in.k, local.in.v, dt), kv_buffer(ring, local.in.k, local.in.v, dt)};
  ring.into_work(local.in.k, kv[0].k);
  ring.into_work(local.in.v, kv[0].v);
  // dK/dV of the K/V held now, fp32, travelling one step behind the K/V.
  KvBuffer dkv[2] = {kv_buffer(ring, local.in.k, local.in.v, DType::f32),
                     kv_buffer(ring, local.in.k, local.in.v, DType::f32)};
  ops.fill(dkv[0].k, 0.f);
  ops.fill(dkv[0].v, 0.f);
  const TensorView dq_acc = ring.alloc_like(q, DType::f32, q.shape[q.rank - 1]);
  ops.fill(dq_acc, 0.f);
  void* block_dq = ops.alloc(bytes_of(local.in.q));
  void* block_dk = ops.alloc(bytes_of(Ring::over(nullptr, local.in.k, dt, local.in.k.shape[local.in.k.rank - 1])));
  void* block_dv = ops.alloc(bytes_of(Ring::over(nullptr, local.in.v, dt, local.in.v.shape[local.in.v.rank - 1])));
  if (local.dsink.defined()) {
    if (opts.softmax_type != SoftmaxType::learnable)
      fail(ErrorKind::value, "context parallelism: dsink is given but the sink is not learnable",
           std::string("softmax_type=") + softmax_type_name(opts.softmax_type), "softmax_type=learnable",
           "drop dsink: only a learnable sink has a gradient");
    Ring::check_per_head(local.dsink, "dsink", local.in.q);
    // This rank's rows' share (the ring's blocks see the sink only through lse), then the sum over ranks.
    const int64_t heads = local.in.q.shape[local.in.q.rank - 2];
    const TensorView part = per_head(ops.alloc(heads * 4), heads, q.device);
    ops.sink_grad(ring.format(), out, dout, lse, detail::sink_logits_of(opts.softmax_type, local.in.sink),
                  static_cast<float*>(part.data), heads);
    reduce_over_ranks(ops, transport, part, local.dsink, /*max=*/false);
  }

  // Order of the exchanges (one communication stream runs them in turn):
  // K/V of step 0, dK/dV of step 0, K/V of step 1, dK/dV of step 1, ... and
  // transport.wait() orders the compute after every exchange started so far.
  // Step t reads `cur`, brought by step t-1's K/V exchange, and adds into
  // `acc`, brought by step t-1's dK/dV exchange (step 0: its own K/V, zeros).
  for (int t = 0; t < cp; ++t) {
    const KvBuffer &cur = kv[t % 2], &next = kv[(t + 1) % 2];
    const KvBuffer &acc = dkv[t % 2], &arriving = dkv[(t + 1) % 2];
    if (t + 1 < cp) transport.start(cur.data, next.data, cur.bytes);
    // acc arrived with step t-1's dK/dV exchange: wait for it only once the
    // first block is queued, so that its transfer overlaps that block. This
    // wait also covers the K/V exchange just started (it began earlier), so
    // step t+1 may read `next` after it.
    bool waited = false;
    for (const BlockCall& call : ring.step(t)) {
      BackwardArgs a;
      a.in = ring.block_inputs(call, q, cur.k, cur.v);
      a.out = ring.rows(out, call.q_begin, call.q_end);
      a.dout = ring.rows(dout, call.q_begin, call.q_end);
      a.lse = ring.lse_rows(lse, call.q_begin, call.q_end);
      a.dq = Ring::over(block_dq, a.in.q, dt, a.in.q.shape[a.in.q.rank - 1]);
      a.dk = Ring::over(block_dk, a.in.k, dt, a.in.k.shape[a.in.k.rank - 1]);
      a.dv = Ring::over(block_dv, a.in.v, dt, a.in.v.shape[a.in.v.rank - 1]);
      backward(ring.block_options(call), a, ctx, policy);
      ops.add(a.dq, ring.rows(dq_acc, call.q_begin, call.q_end));
      if (t > 0 && !waited) transport.wait(), waited = true;
      ops.add(a.dk, ring.rows(acc.k, call.kv_begin, call.kv_end));
      ops.add(a.dv, ring.rows(acc.v, call.kv_begin, call.kv_end));
    }
    // Step t+1 reads `next`: unless a wait above covered its exchange (step 0
    // has none: its dK/dV start at zero), wait for it here, after this step's
    // blocks, which its transfer overlapped. (Step 1's first block once read
    // step 0's K/V before any wait covered it: issue 44.)
    if (t + 1 < cp && !waited) transport.wait();
    // Pass this K/V's gradient on; after the last step it reaches its owner.
    if (cp > 1) transport.start(acc.data, arriving.data, acc.bytes);
  }
  if (cp > 1) transport.wait();
  // Step t accumulates into dkv[t % 2] and receives into the other: after the
  // last step this rank's own gradient sits in dkv[cp % 2].
  const KvBuffer& mine = cp > 1 ? dkv[cp % 2] : dkv[0];
  ring.from_work(dq_acc, local.dq);
  ring.from_work(mine.k, local.dk);
  ring.from_work(mine.v, local.dv);
}

}  // namespace attn::cp
