// A small forward through attn's public API, on the CPU reference backend, so
// it runs without a GPU: a causal GQA problem in bshd, fp32 host tensors.
// Prints the backend that ran and a checksum of the output.
#include <attn/attn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  constexpr int64_t batch = 2, seq = 16, heads_q = 4, heads_kv = 2, dim = 32;
  // Deterministic inputs: a smooth function of the index, no random state.
  auto fill = [](std::vector<float>& x, float phase) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * static_cast<float>(i) + phase);
  };
  std::vector<float> q(batch * seq * heads_q * dim), k(batch * seq * heads_kv * dim),
      v(batch * seq * heads_kv * dim), out(batch * seq * heads_q * dim, 0.0f);
  fill(q, 0.0f);
  fill(k, 1.0f);
  fill(v, 2.0f);

  attn::Options opts;
  opts.qkv_format = attn::QkvFormat::bshd;
  opts.mask = attn::MaskType::causal;

  attn::ForwardArgs args;
  args.in.q = attn::make_view(q.data(), attn::DType::f32, {batch, seq, heads_q, dim});
  args.in.k = attn::make_view(k.data(), attn::DType::f32, {batch, seq, heads_kv, dim});
  args.in.v = attn::make_view(v.data(), attn::DType::f32, {batch, seq, heads_kv, dim});
  args.out = attn::make_view(out.data(), attn::DType::f32, {batch, seq, heads_q, dim});

  // Host tensors select the CPU reference anyway; forcing it makes the
  // example's answer the same on every machine (ATTN_BACKEND does the same).
  attn::Policy policy;
  policy.forced = "reference";
  try {
    const attn::Selection sel = attn::forward(opts, args, {}, policy);
    double checksum = 0.0;
    for (float x : out) checksum += x;
    std::printf("attn %s (%s): backend %s, out %s, checksum %.6f\n", attn::version(), attn::git_commit(),
                sel.backend->name(), args.out.shape_str().c_str(), checksum);
  } catch (const attn::Error& e) {
    std::fprintf(stderr, "attn::forward failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
