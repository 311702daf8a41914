// From command-line flags to a problem: presets, overrides, the device the
// tensors live on and the selection policy.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "attn/error.h"
#include "commands.h"

namespace attn::cli {
namespace {

using testing::CaseSpec;

[[noreturn]] void bad_flag(const std::string& flag, const std::string& got, const std::string& expected,
                           const std::string& fix) {
  fail(ErrorKind::value, "bad value for " + flag, got, expected, fix);
}

// `example`: a good value of this flag for the fix line.
std::vector<int64_t> parse_ints(const std::string& flag, const std::string& text, const std::string& example) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0') bad_flag(flag, text, "comma-separated integers", "e.g. " + flag + " " + example);
    out.push_back(v);
  }
  return out;
}

int64_t longest(const std::vector<int64_t>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

DType parse_dtype(const std::string& s) {
  if (s == "bf16") return DType::bf16;
  if (s == "fp16") return DType::f16;
  if (s == "fp32") return DType::f32;
  if (s == "fp64") return DType::f64;
  bad_flag("--dtype", s, "bf16, fp16, fp32 or fp64 (fp64: CPU reference only)", "pass one of those");
}

BiasType parse_bias(const std::string& s) {
  if (s == "none") return BiasType::none;
  if (s == "post_scale" || s == "post_scale_bias") return BiasType::post_scale_bias;
  if (s == "alibi") return BiasType::alibi;
  bad_flag("--bias", s, "none, post_scale or alibi", "pass one of those");
}

struct Preset {
  const char* name;
  const char* about;
  CaseSpec spec;
};

CaseSpec dense(QkvFormat f, int64_t b, int64_t s_q, int64_t s_kv, int64_t h, int64_t kv, int64_t d_qk,
               int64_t d_v, MaskType m) {
  CaseSpec s;
  s.format = f;
  s.batch = b;
  s.s_q = s_q;
  s.s_kv = s_kv;
  s.h_q = h;
  s.h_kv = kv;
  s.d_qk = d_qk;
  s.d_v = d_v;
  s.mask = m;
  return s;
}

CaseSpec packed(std::vector<int64_t> lens, int64_t h, int64_t kv, int64_t d_qk, int64_t d_v, Window w) {
  CaseSpec s = dense(QkvFormat::thd, static_cast<int64_t>(lens.size()), 0, 0, h, kv, d_qk, d_v,
                     MaskType::padding_causal);
  s.seqlens_q = std::move(lens);
  s.window = w;
  return s;
}

CaseSpec with_window(CaseSpec s, Window w) {
  s.window = w;
  return s;
}

CaseSpec with_softcap(CaseSpec s, double c) {
  s.softcap = c;
  return s;
}

const std::vector<Preset>& preset_table() {
  using enum MaskType;
  static const std::vector<Preset> table = {
      {"llama3-8b-prefill", "bshd b=1 s=4096 h=32/8 d=128 causal",
       dense(QkvFormat::bshd, 1, 4096, 4096, 32, 8, 128, 128, causal)},
      {"llama3-70b-prefill", "bshd b=1 s=8192 h=64/8 d=128 causal",
       dense(QkvFormat::bshd, 1, 8192, 8192, 64, 8, 128, 128, causal)},
      {"llama3-8b-decode", "bshd b=16 s_q=1 s_kv=4096 h=32/8 d=128 causal_bottom_right (one new token vs a KV cache)",
       dense(QkvFormat::bshd, 16, 1, 4096, 32, 8, 128, 128, causal_bottom_right)},
      {"deepseek-v3-prefill", "bshd b=1 s=4096 h=128/128 d=192/128 causal",
       dense(QkvFormat::bshd, 1, 4096, 4096, 128, 128, 192, 128, causal)},
      {"mistral-swa", "bshd b=1 s=8192 h=32/8 d=128 causal, sliding window (4095,0)",
       with_window(dense(QkvFormat::bshd, 1, 8192, 8192, 32, 8, 128, 128, causal), {4095, 0})},
      {"gemma2-softcap", "bshd b=1 s=4096 h=16/8 d=256 causal, softcap 50",
       with_softcap(dense(QkvFormat::bshd, 1, 4096, 4096, 16, 8, 256, 256, causal), 50.0)},
      {"gqa-thd", "thd seqlens 1,0,77,300 h=8/2 d=192/128 padding_causal window (31,0)",
       packed({1, 0, 77, 300}, 8, 2, 192, 128, {31, 0})},
      {"packed-thd", "thd seqlens 300,800,948 h=16/4 d=128 padding_causal window (256,0)",
       packed({300, 800, 948}, 16, 4, 128, 128, {256, 0})},
  };
  return table;
}

// Without a preset: small enough for the CPU reference, big enough to time.
CaseSpec default_spec() { return dense(QkvFormat::bshd, 1, 512, 512, 8, 8, 128, 128, MaskType::no_mask); }

CaseSpec base_spec(const ProblemFlags& f) {
  if (!f.preset) return default_spec();
  for (const Preset& p : preset_table())
    if (*f.preset == p.name) return p.spec;
  std::string names;
  for (const Preset& p : preset_table()) names += (names.empty() ? "" : ", ") + std::string(p.name);
  bad_flag("--preset", *f.preset, names, "pick one of the listed presets (attn run --help describes them)");
}

// Sequence flags: --seqlens/--seqlens-kv give per-sequence lengths (and the
// batch); --batch or --seqlen alone replace a preset's lengths with uniform ones.
void apply_lengths(const ProblemFlags& f, CaseSpec& s) {
  if (f.seqlens) {
    s.seqlens_q = parse_ints("--seqlens", *f.seqlens, "300,800,948");
    s.seqlens_kv.clear();
    s.batch = static_cast<int64_t>(s.seqlens_q.size());
  } else if (f.batch || f.seqlen) {
    s.seqlens_q.clear();
    s.seqlens_kv.clear();
  }
  if (f.seqlens_kv) {
    s.seqlens_kv = parse_ints("--seqlens-kv", *f.seqlens_kv, "300,800,948");
    if (s.seqlens_q.empty())
      bad_flag("--seqlens-kv", *f.seqlens_kv, "--seqlens given too", "pass the query lengths with --seqlens");
  }
  if (f.batch) s.batch = *f.batch;
  if (f.seqlen) s.s_q = s.s_kv = *f.seqlen;
  if (f.seqlen_kv) s.s_kv = *f.seqlen_kv;
  // A padded batch's dimension defaults to its longest sequence.
  if (!s.seqlens_q.empty() && s.format != QkvFormat::thd) {
    if (!f.seqlen) s.s_q = longest(s.seqlens_q);
    if (!f.seqlen && !f.seqlen_kv) s.s_kv = longest(s.seqlens_kv.empty() ? s.seqlens_q : s.seqlens_kv);
  }
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& presets() {
  static const std::vector<std::pair<std::string, std::string>> list = [] {
    std::vector<std::pair<std::string, std::string>> l;
    for (const Preset& p : preset_table()) l.emplace_back(p.name, p.about);
    return l;
  }();
  return list;
}

CaseSpec spec_from_flags(const ProblemFlags& f) {
  CaseSpec s = base_spec(f);
  if (f.format) {
    const std::optional<QkvFormat> fmt = parse_format(*f.format);
    if (!fmt) bad_flag("--format", *f.format, "bshd, sbhd or thd", "pass one of those");
    s.format = *fmt;
  }
  apply_lengths(f, s);
  if (f.heads) {
    s.h_q = *f.heads;
    if (!f.preset) s.h_kv = *f.heads;  // MHA unless told otherwise
  }
  if (f.kv_heads) s.h_kv = *f.kv_heads;
  if (f.head_dim) s.d_qk = s.d_v = *f.head_dim;
  if (f.head_dim_qk) s.d_qk = *f.head_dim_qk;
  if (f.head_dim_v) s.d_v = *f.head_dim_v;
  if (f.mask) {
    const std::optional<MaskType> m = parse_mask(*f.mask);
    if (!m)
      bad_flag("--mask", *f.mask,
               "no_mask, causal, causal_bottom_right, padding, padding_causal, padding_causal_bottom_right or arbitrary",
               "pass one of those");
    s.mask = *m;
  }
  if (f.window) {
    const std::vector<int64_t> w = parse_ints("--window", *f.window, "255,0");
    if (w.size() != 2) bad_flag("--window", *f.window, "L,R (each -1 for unbounded)", "e.g. --window 255,0");
    s.window = {w[0], w[1]};
  }
  if (f.dtype) s.dtype = parse_dtype(*f.dtype);
  if (f.scale) s.softmax_scale = *f.scale;
  if (f.softcap) s.softcap = *f.softcap;
  if (f.bias) s.bias = parse_bias(*f.bias);
  if (f.dropout) s.dropout_p = *f.dropout;
  if (f.seed) s.seed = *f.seed;
  if (f.offset) s.offset = *f.offset;
  if (f.softmax_type) s.softmax_type = *parse_softmax_type(*f.softmax_type);  // CLI11 checked the name
  s.return_max_logit = f.max_logit;
  s.backward = f.backward;
  return s;
}

uint64_t data_seed(const ProblemFlags& f) { return f.seed.value_or(0); }

Device tensor_device(const ProblemFlags& f) {
  const int gpus = cuda_device_count();
  if (!f.device) return gpus > 0 ? Device::cuda(0) : Device::cpu();
  const std::string& d = *f.device;
  if (d == "cpu") return Device::cpu();
  int index = -1;
  if (d == "cuda") index = 0;
  else if (d.rfind("cuda:", 0) == 0 && d.size() > 5 && d.find_first_not_of("0123456789", 5) == std::string::npos)
    index = std::atoi(d.c_str() + 5);
  if (index < 0) bad_flag("--device", d, "cpu, cuda or cuda:N", "pass one of those (explain also takes sm80, sm86, sm89, sm90)");
  if (index >= gpus)
    fail(ErrorKind::runtime, "no such CUDA device", d,
         gpus == 0 ? std::string("a CUDA device (this machine has none)") : "cuda:0 to cuda:" + std::to_string(gpus - 1),
         "use --device cpu to run on the CPU reference");
  return Device::cuda(index);
}

void note_if_slow_on_cpu(const CaseSpec& spec, std::FILE* out) {
  // The reference does a few GFLOP/s per core (fp64, exact): past ~20 GFLOP a
  // run takes tens of seconds or more.
  const double flops = testing::forward_flops(spec) + (spec.backward ? testing::backward_flops(spec) : 0.0);
  if (flops > 2e10)
    std::fprintf(out, "note:      %.3g GFLOP per run is a lot for the CPU reference: expect minutes; shrink the\n"
                "           problem (--seqlen, --heads) for a quick look\n",
                flops / 1e9);
}

Policy policy_from(const ProblemFlags& f) {
  Policy p = Policy::from_env();
  if (f.backend) p.forced = *f.backend;
  return p;
}

}  // namespace attn::cli
