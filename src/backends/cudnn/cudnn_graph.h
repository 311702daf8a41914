// cuDNN SDPA graphs: described by a GraphSpec (plain numbers, hashable), built
// once with cudnn-frontend and kept in a bounded least-recently-used cache, so
// steady-state calls build nothing. Only cudnn_graph.cpp includes the frontend
// (its headers are heavy to compile).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "attn/problem.h"
#include "backends/cudnn/cudnn_kernels.h"
#include "backends/cudnn/cudnn_rules.h"

namespace attn::cudnn {

// One tensor as cuDNN sees it: dims [b, h, s, d] and element strides.
struct TensorDesc {
  std::array<int64_t, 4> dim{}, stride{};
};

struct GraphSpec {
  Pass pass = Pass::forward;
  DType dtype = DType::bf16;
  int device = 0;
  int64_t batch = 0, h_q = 0, h_kv = 0, s_q = 0, s_kv = 0, d_qk = 0, d_v = 0;  // s: rows of the views
  MaskPlan mask;
  float scale = 1.0f;
  bool bias = false, dbias = false;
  TensorDesc bias_desc, dbias_desc;
  float dropout_p = 0.0f;
  bool seed_in_memory = false;  // dropout's seed and offset: device tensors, not host values
  bool stats = false;  // forward: produce stats (lse); backward: always reads them
  // Forward: cuDNN's per-row Max and Sum_exp instead of stats (its softmax
  // gives those two or stats, not both); attn derives lse and the max logit.
  bool max_sum_exp = false;
  bool sink = false;   // a [1, h_q, 1, 1] fp32 sink logit per head joins the softmax
  bool dsink = false;  // backward: its gradient, [1, h_q, 1, 1] fp32
  bool deterministic = false;
  // cuDNN's forward engine family: 0 = the frontend's choice, 1 = composite,
  // 2 = unified (forward_implementation() reads ATTN_CUDNN_IMPL).
  int implementation = 0;
  TensorDesc q, k, v, o, d_o, dq, dk, dv;  // o, d_o... used per pass
  TensorDesc stats_desc;                  // [b, h, s, 1] fp32
  std::string key() const;
};

// ATTN_CUDNN_IMPL = auto | composite | unified, read once (default: see cudnn_graph.cpp).
int forward_implementation();

// Device pointers (and host scalars) for one execution, by role.
struct Pointers {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *d_o = nullptr;
  void *out = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  void* stats = nullptr;  // forward writes, backward reads
  float *row_max = nullptr, *row_sum_exp = nullptr;  // GraphSpec::max_sum_exp
  const float* sink = nullptr;  // [h_q] contiguous
  float* dsink = nullptr;       // [h_q] contiguous
  const void* bias = nullptr;
  void* dbias = nullptr;
  int32_t *len_q = nullptr, *len_kv = nullptr;
  int32_t* ragged[kRoles] = {};
  int64_t seed = 0, offset = 0;      // host values, passed by value
  const int64_t* rng_state = nullptr;  // or (seed, offset) on the device (GraphSpec::seed_in_memory)
};

class Plan;  // a built graph and its workspace size

struct PlanResult {
  std::shared_ptr<const Plan> plan;  // nullptr: cuDNN could not build it
  std::string error;                 // why not: "<stage>: <cuDNN's message>"
};

// The cached plan for spec, building it on first use (also remembers failures).
PlanResult get_plan(const GraphSpec& spec);
// The cached plan (or failure) for spec, never building one: building
// allocates, which a call inside a CUDA graph capture must not do.
std::optional<PlanResult> cached_plan(const GraphSpec& spec);
int64_t workspace_bytes(const Plan& plan);
// Runs the plan on `stream`; throws attn::Error(runtime) naming the problem on failure.
// `problem` is described only if cuDNN fails (building the text costs microseconds per call).
void execute(const Plan& plan, const Pointers& ptrs, void* workspace, void* stream, const Problem& problem);

// For `attn bench` and tests: builds so far, cache hits, entries, and the last build's time.
struct CacheStats {
  int64_t builds = 0, hits = 0, entries = 0, capacity = 0;
  double last_build_ms = 0.0, total_build_ms = 0.0;
};
CacheStats cache_stats();
void clear_cache();

}  // namespace attn::cudnn
