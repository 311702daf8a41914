// Names of the problem's enums and the one-line problem summary.
#include <cstdio>
#include <sstream>

#include "attn/problem.h"

namespace attn {

const char* format_name(QkvFormat f) {
  switch (f) {
    case QkvFormat::bshd: return "bshd";
    case QkvFormat::sbhd: return "sbhd";
    case QkvFormat::thd: return "thd";
  }
  return "?";
}

const char* mask_name(MaskType m) {
  switch (m) {
    case MaskType::no_mask: return "no_mask";
    case MaskType::causal: return "causal";
    case MaskType::causal_bottom_right: return "causal_bottom_right";
    case MaskType::padding: return "padding";
    case MaskType::padding_causal: return "padding_causal";
    case MaskType::padding_causal_bottom_right: return "padding_causal_bottom_right";
    case MaskType::arbitrary: return "arbitrary";
  }
  return "?";
}

const char* bias_name(BiasType b) {
  switch (b) {
    case BiasType::none: return "none";
    case BiasType::post_scale_bias: return "post_scale_bias";
    case BiasType::alibi: return "alibi";
  }
  return "?";
}

const char* softmax_type_name(SoftmaxType t) {
  switch (t) {
    case SoftmaxType::vanilla: return "vanilla";
    case SoftmaxType::off_by_one: return "off-by-one";
    case SoftmaxType::learnable: return "learnable";
  }
  return "?";
}

std::optional<QkvFormat> parse_format(const std::string& s) {
  for (QkvFormat f : {QkvFormat::bshd, QkvFormat::sbhd, QkvFormat::thd})
    if (s == format_name(f)) return f;
  return std::nullopt;
}

std::optional<MaskType> parse_mask(const std::string& s) {
  for (MaskType m : {MaskType::no_mask, MaskType::causal, MaskType::causal_bottom_right,
                     MaskType::padding, MaskType::padding_causal,
                     MaskType::padding_causal_bottom_right, MaskType::arbitrary})
    if (s == mask_name(m)) return m;
  return std::nullopt;
}

std::optional<SoftmaxType> parse_softmax_type(const std::string& s) {
  for (SoftmaxType t : {SoftmaxType::vanilla, SoftmaxType::off_by_one, SoftmaxType::learnable})
    if (s == softmax_type_name(t)) return t;
  if (s == "off_by_one") return SoftmaxType::off_by_one;
  return std::nullopt;
}

std::string describe_problem(const Problem& p) {
  std::ostringstream os;
  os << (p.pass == Pass::forward ? "fwd " : "bwd ") << format_name(p.qkv_format) << ' '
     << dtype_name(p.dtype) << " on " << device_name(p.device) << " b=" << p.batch
     << " s_q=" << p.s_q << " s_kv=" << p.s_kv;
  if (p.qkv_format == QkvFormat::thd) os << " t_q=" << p.total_q << " t_kv=" << p.total_kv;
  os << " h=" << p.h_q << '/' << p.h_kv << " d=" << p.d_qk << '/' << p.d_v
     << " mask=" << mask_name(p.mask);
  if (p.has_window()) os << " window=(" << p.window_left << ',' << p.window_right << ')';
  if (p.has_window() || p.bias == BiasType::alibi)
    os << (p.bottom_right ? " bottom-right" : " top-left");
  char scale[32];
  std::snprintf(scale, sizeof scale, "%.6g", p.softmax_scale);
  os << " scale=" << scale;
  if (p.softcap > 0) os << " softcap=" << p.softcap;
  if (p.bias != BiasType::none) os << " bias=" << bias_name(p.bias);
  if (p.dropout_p > 0 && p.rng_state_in_memory) os << " dropout=" << p.dropout_p << " rng_state=tensor";
  if (p.dropout_p > 0 && !p.rng_state_in_memory)
    os << " dropout=" << p.dropout_p << " seed=" << p.seed << " offset=" << p.offset;
  if (p.has_sink()) os << " softmax=" << softmax_type_name(p.softmax_type);
  if (p.sink_grad) os << " dsink";
  if (p.deterministic) os << " deterministic";
  if (p.return_lse) os << " lse";
  if (p.return_max_logit) os << " max_logit";
  if (p.capturing) os << " capturing";
  return os.str();
}

}  // namespace attn
