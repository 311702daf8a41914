// Building, caching and running cuDNN SDPA graphs (see cudnn_graph.h).
#include "backends/cudnn/cudnn_graph.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "attn/error.h"
#include "backends/cudnn/cudnn.h"
#include "core/cuda_check.h"

namespace fe = cudnn_frontend;

namespace attn::cudnn {

// Fixed tensor ids, so a variant pack is built without looking tensors up.
enum Uid : int64_t {
  uQ = 1, uK, uV, uO, udO, udQ, udK, udV, uStats, uBias, udBias, uLenQ, uLenKV, uSeed, uOffset, uSink, udSink,
  uMax, uSumExp,
  uRagged0 = 100,  // + Role
};

class Plan {
 public:
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
  bool ragged = false, padding = false, bias = false, dbias = false, dropout = false, stats = false;
  bool max_sum_exp = false, sink = false, dsink = false;
  Pass pass = Pass::forward;
  int device = 0;
};

// Built on every call (twice: the verdict's probe and the run), so plain
// appends and to_chars rather than a stream.
std::string GraphSpec::key() const {
  std::string s;
  s.reserve(512);
  char buf[64];
  auto num = [&](auto x, char sep) {
    s.append(buf, std::to_chars(buf, buf + sizeof(buf), x).ptr);
    s += sep;
  };
  auto hex = [&](float x) {  // exact: two scales that print alike must not share a graph
    s.append(buf, std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::hex).ptr);
    s += ' ';
  };
  auto desc = [&](const TensorDesc& t) {
    for (int64_t x : t.dim) num(x, ',');
    for (int64_t x : t.stride) num(x, ',');
    s += '|';
  };
  for (int64_t x : {int64_t(pass), int64_t(dtype), int64_t(device), batch, h_q, h_kv, s_q, s_kv, d_qk, d_v})
    num(x, ' ');
  for (bool b : {mask.padding, mask.ragged, mask.diagonal, mask.bottom_right}) s += b ? '1' : '0';
  s += ' ';
  num(mask.left_bound, ' ');
  num(mask.right_bound, ' ');
  hex(scale);
  hex(dropout_p);
  for (bool b : {bias, dbias, stats, deterministic, seed_in_memory, max_sum_exp, sink, dsink}) s += b ? '1' : '0';
  s += ' ';
  num(int64_t(implementation), ' ');
  if (bias) desc(bias_desc);
  if (dbias) desc(dbias_desc);
  for (const TensorDesc* t : {&q, &k, &v, &o, &d_o, &dq, &dk, &dv, &stats_desc}) desc(*t);
  return s;
}

namespace {

fe::DataType_t io_type(DType t) { return t == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF; }

std::vector<int64_t> vec(const std::array<int64_t, 4>& a) { return {a[0], a[1], a[2], a[3]}; }

struct Handles {
  std::mutex mutex;  // guards the cache, the handles and execution (a handle's stream is shared state)
  std::map<int, cudnnHandle_t> by_device;
  // LRU: most recent first; failed builds are remembered too so selection does not retry them.
  std::list<std::string> order;
  struct Entry {
    PlanResult result;
    std::list<std::string>::iterator pos;
  };
  std::unordered_map<std::string, Entry> entries;
  CacheStats stats;
};

Handles& state() {
  static Handles* h = [] {
    auto* s = new Handles;  // never destroyed: cuDNN handles must not outlive the driver at exit
    s->stats.capacity = 256;
    if (const char* c = std::getenv("ATTN_CUDNN_CACHE_SIZE")) s->stats.capacity = std::max(1, std::atoi(c));
    return s;
  }();
  return *h;
}

cudnnHandle_t handle_for(Handles& s, int device) {
  auto it = s.by_device.find(device);
  if (it != s.by_device.end()) return it->second;
  ATTN_CUDA(cudaSetDevice(device));
  cudnnHandle_t h = nullptr;
  const cudnnStatus_t st = cudnnCreate(&h);
  if (st != CUDNN_STATUS_SUCCESS)
    fail(ErrorKind::runtime, "cudnnCreate failed on cuda:" + std::to_string(device), cudnnGetErrorString(st),
         "CUDNN_STATUS_SUCCESS", "check that cuDNN 9 matches the driver, or set ATTN_DISABLE=cudnn");
  s.by_device[device] = h;
  return h;
}

std::shared_ptr<fe::graph::Tensor_attributes> io_tensor(fe::graph::Graph& g, const char* name, Uid uid,
                                                        const TensorDesc& d) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(vec(d.dim)).set_stride(
      vec(d.stride)));
}

void describe_output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, const char* name, Uid uid,
                     const TensorDesc& d) {
  t->set_output(true).set_name(name).set_uid(uid).set_dim(vec(d.dim)).set_stride(vec(d.stride));
}

std::shared_ptr<fe::graph::Tensor_attributes> int_tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                         int64_t n) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({n, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(fe::DataType_t::INT32));
}

// An int64 scalar: a host value passed by value, or read from device memory
// when the graph runs (dropout's seed and offset in Inputs::rng_state).
std::shared_ptr<fe::graph::Tensor_attributes> int64_scalar(fe::graph::Graph& g, const char* name, Uid uid,
                                                           bool in_device_memory) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({1, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_is_pass_by_value(!in_device_memory)
                      .set_data_type(fe::DataType_t::INT64));
}

// An fp32 tensor the graph reads or writes: [1, h_q, 1, 1] per query head
// (the sink logits, dsink) or packed [b, h, s, 1] per row (cuDNN's Max, Sum_exp).
std::shared_ptr<fe::graph::Tensor_attributes> fp32_tensor(fe::graph::Graph& g, const char* name, Uid uid,
                                                          const TensorDesc& d) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(vec(d.dim)).set_stride(
      vec(d.stride)).set_data_type(fe::DataType_t::FLOAT));
}

TensorDesc per_head(int64_t h_q) { return {{1, h_q, 1, 1}, {h_q, 1, 1, 1}}; }

// The mask, scale and dropout settings both passes share.
template <typename Attributes>
void apply_common(const GraphSpec& s, fe::graph::Graph& g, Attributes& a) {
  a.set_attn_scale(s.scale);
  if (s.mask.padding)
    a.set_padding_mask(true)
        .set_seq_len_q(int_tensor(g, "len_q", uLenQ, s.batch))
        .set_seq_len_kv(int_tensor(g, "len_kv", uLenKV, s.batch));
  if (s.mask.diagonal) {
    a.set_diagonal_alignment(s.mask.bottom_right ? fe::DiagonalAlignment_t::BOTTOM_RIGHT
                                                 : fe::DiagonalAlignment_t::TOP_LEFT);
    if (s.mask.left_bound >= 0) a.set_diagonal_band_left_bound(static_cast<int>(s.mask.left_bound));
    if (s.mask.right_bound >= 0) a.set_diagonal_band_right_bound(static_cast<int>(s.mask.right_bound));
  }
  if (s.dropout_p > 0)
    a.set_dropout(s.dropout_p, int64_scalar(g, "seed", uSeed, s.seed_in_memory),
                  int64_scalar(g, "offset", uOffset, s.seed_in_memory));
}

void set_ragged(fe::graph::Graph& g, const GraphSpec& s, const std::shared_ptr<fe::graph::Tensor_attributes>& t,
                Role r) {
  if (!s.mask.ragged) return;
  static const char* names[kRoles] = {"rag_q", "rag_k", "rag_v", "rag_o", "rag_do", "rag_dq", "rag_dk", "rag_dv"};
  t->set_ragged_offset(int_tensor(g, names[r], int64_t{uRagged0} + r, s.batch + 1));
}

// Builds the graph; on failure returns "<stage>: <cuDNN's message>".
PlanResult build(const GraphSpec& s, cudnnHandle_t handle) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io_type(s.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto plan = std::make_shared<Plan>();
  plan->pass = s.pass;
  plan->device = s.device;
  plan->ragged = s.mask.ragged;
  plan->padding = s.mask.padding;
  plan->bias = s.bias;
  plan->dbias = s.dbias;
  plan->dropout = s.dropout_p > 0;
  plan->stats = s.stats;
  plan->max_sum_exp = s.max_sum_exp;
  plan->sink = s.sink;
  plan->dsink = s.dsink;

  auto Q = io_tensor(*g, "Q", uQ, s.q), K = io_tensor(*g, "K", uK, s.k), V = io_tensor(*g, "V", uV, s.v);
  set_ragged(*g, s, Q, kQ);
  set_ragged(*g, s, K, kK);
  set_ragged(*g, s, V, kV);
  std::shared_ptr<fe::graph::Tensor_attributes> bias;
  if (s.bias) bias = io_tensor(*g, "bias", uBias, s.bias_desc);

  if (s.pass == Pass::forward) {
    auto a = fe::graph::SDPA_attributes().set_name("attn_sdpa").set_generate_stats(s.stats);
    if (s.implementation == 1) a.set_implementation(fe::AttentionImplementation_t::COMPOSITE);
    if (s.implementation == 2) a.set_implementation(fe::AttentionImplementation_t::UNIFIED);
    apply_common(s, *g, a);
    if (bias) a.set_bias(bias);
    if (s.sink) a.set_sink_token(fp32_tensor(*g, "sink", uSink, per_head(s.h_q)));
    if (s.max_sum_exp)
      a.set_logit_max(fp32_tensor(*g, "max", uMax, s.stats_desc))
          .set_score_sum_exp(fp32_tensor(*g, "sum_exp", uSumExp, s.stats_desc));
    auto [O, Stats] = g->sdpa(Q, K, V, a);
    describe_output(O, "O", uO, s.o);
    set_ragged(*g, s, O, kO);
    if (s.stats) {
      describe_output(Stats, "stats", uStats, s.stats_desc);
      Stats->set_data_type(fe::DataType_t::FLOAT);
    }
  } else {
    auto O = io_tensor(*g, "O", uO, s.o), dO = io_tensor(*g, "dO", udO, s.d_o);
    set_ragged(*g, s, O, kO);
    set_ragged(*g, s, dO, kdO);
    auto Stats = io_tensor(*g, "stats", uStats, s.stats_desc);
    Stats->set_data_type(fe::DataType_t::FLOAT);
    auto a = fe::graph::SDPA_backward_attributes().set_name("attn_sdpa_backward");
    apply_common(s, *g, a);
    if (s.deterministic) a.set_deterministic_algorithm(true);
    if (bias) a.set_bias(bias);
    if (s.sink) a.set_sink_token(fp32_tensor(*g, "sink", uSink, per_head(s.h_q)));
    if (s.dsink) {
      auto dSink = fp32_tensor(*g, "dsink", udSink, per_head(s.h_q));
      dSink->set_output(true);  // as dbias: declared before the node
      a.set_dsink_token(dSink);
    }
    if (s.dbias) {
      auto dB = io_tensor(*g, "dbias", udBias, s.dbias_desc);
      dB->set_output(true);  // the frontend wants dbias declared before the node
      a.set_dbias(dB);
    }
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, a);
    describe_output(dQ, "dQ", udQ, s.dq);
    describe_output(dK, "dK", udK, s.dk);
    describe_output(dV, "dV", udV, s.dv);
    set_ragged(*g, s, dQ, kdQ);
    set_ragged(*g, s, dK, kdK);
    set_ragged(*g, s, dV, kdV);
  }

  PlanResult r;
  const std::pair<const char*, std::function<fe::error_t()>> steps[] = {
      {"validate", [&] { return g->validate(); }},
      {"build_operation_graph", [&] { return g->build_operation_graph(handle); }},
      {"create_execution_plans", [&] { return g->create_execution_plans({fe::HeurMode_t::A}); }},
      {"check_support", [&] { return g->check_support(handle); }},
      {"build_plans", [&] { return g->build_plans(handle); }},
  };
  for (const auto& [name, step] : steps) {
    fe::error_t e = step();
    if (e.is_bad()) {
      r.error = std::string(name) + ": " + e.get_message();
      return r;
    }
  }
  if (fe::error_t e = g->get_workspace_size(plan->workspace); e.is_bad()) {
    r.error = std::string("get_workspace_size: ") + e.get_message();
    return r;
  }
  plan->graph = g;
  r.plan = plan;
  return r;
}

}  // namespace

int forward_implementation() {
  static const int impl = [] {
    const char* e = std::getenv("ATTN_CUDNN_IMPL");
    const std::string v = e ? e : "auto";
    if (v == "composite") return 1;
    if (v == "unified") return 2;
    if (v != "auto")
      fail(ErrorKind::value, "ATTN_CUDNN_IMPL names an unknown cuDNN implementation", v, "auto, composite or unified",
           "unset ATTN_CUDNN_IMPL, or set one of the expected values");
    return 0;
  }();
  return impl;
}

PlanResult get_plan(const GraphSpec& spec) {
  Handles& s = state();
  const std::string key = spec.key();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (auto it = s.entries.find(key); it != s.entries.end()) {
    s.order.splice(s.order.begin(), s.order, it->second.pos);
    ++s.stats.hits;
    return it->second.result;
  }
  ATTN_CUDA(cudaSetDevice(spec.device));
  const auto t0 = std::chrono::steady_clock::now();
  PlanResult r = build(spec, handle_for(s, spec.device));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ++s.stats.builds;
  s.stats.last_build_ms = ms;
  s.stats.total_build_ms += ms;
  s.order.push_front(key);
  s.entries[key] = {r, s.order.begin()};
  while (static_cast<int64_t>(s.entries.size()) > s.stats.capacity) {
    s.entries.erase(s.order.back());
    s.order.pop_back();
  }
  s.stats.entries = static_cast<int64_t>(s.entries.size());
  return r;
}

std::optional<PlanResult> cached_plan(const GraphSpec& spec) {
  Handles& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto it = s.entries.find(spec.key());
  if (it == s.entries.end()) return std::nullopt;
  return it->second.result;
}

int64_t workspace_bytes(const Plan& plan) { return plan.workspace; }

void execute(const Plan& plan, const Pointers& p, void* workspace, void* stream, const Problem& problem) {
  std::unordered_map<int64_t, void*> pack;
  pack[uQ] = const_cast<void*>(p.q);
  pack[uK] = const_cast<void*>(p.k);
  pack[uV] = const_cast<void*>(p.v);
  if (plan.pass == Pass::forward) {
    pack[uO] = p.out;
    if (plan.stats) pack[uStats] = p.stats;
    if (plan.max_sum_exp) {
      pack[uMax] = p.row_max;
      pack[uSumExp] = p.row_sum_exp;
    }
  } else {
    pack[uO] = const_cast<void*>(p.o);
    pack[udO] = const_cast<void*>(p.d_o);
    pack[uStats] = p.stats;
    pack[udQ] = p.dq;
    pack[udK] = p.dk;
    pack[udV] = p.dv;
    if (plan.dbias) pack[udBias] = p.dbias;
    if (plan.dsink) pack[udSink] = p.dsink;
  }
  if (plan.sink) pack[uSink] = const_cast<float*>(p.sink);
  if (plan.bias) pack[uBias] = const_cast<void*>(p.bias);
  if (plan.padding) {
    pack[uLenQ] = p.len_q;
    pack[uLenKV] = p.len_kv;
  }
  if (plan.ragged)
    for (int r = 0; r < kRoles; ++r)
      if (p.ragged[r]) pack[uRagged0 + r] = p.ragged[r];
  int64_t seed = p.seed, offset = p.offset;
  if (plan.dropout && p.rng_state) {
    pack[uSeed] = const_cast<int64_t*>(p.rng_state);
    pack[uOffset] = const_cast<int64_t*>(p.rng_state + 1);
  } else if (plan.dropout) {
    pack[uSeed] = &seed;
    pack[uOffset] = &offset;
  }
  Handles& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  cudnnHandle_t h = handle_for(s, plan.device);
  if (const cudnnStatus_t st = cudnnSetStream(h, static_cast<cudaStream_t>(stream)); st != CUDNN_STATUS_SUCCESS)
    fail(ErrorKind::runtime, "cudnnSetStream failed", cudnnGetErrorString(st), "CUDNN_STATUS_SUCCESS",
         "pass a valid CUDA stream of the tensors' device");
  if (fe::error_t e = plan.graph->execute(h, pack, workspace); e.is_bad())
    fail(ErrorKind::runtime, "cuDNN " + version_string() + " failed to run its attention graph", describe_problem(problem),
         "a graph cuDNN built for this problem runs", "cuDNN says: " + e.get_message() +
                                                          "; run with ATTN_DISABLE=cudnn to use another backend");
}

CacheStats cache_stats() {
  Handles& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stats;
}

void clear_cache() {
  Handles& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.entries.clear();
  s.order.clear();
  s.stats.entries = 0;
}

}  // namespace attn::cudnn
