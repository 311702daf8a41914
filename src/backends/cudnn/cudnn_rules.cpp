// cuDNN's known limits as data (see cudnn_rules.h).
#include "backends/cudnn/cudnn_rules.h"

#include <cstdint>
#include <string>
#include <utility>

#include "attn/mask_rule.h"
#include "backends/common/device_reasons.h"

namespace attn::cudnn {
namespace {

std::string version_name(int v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

MaskPlan mask_plan(const Problem& p) {
  MaskPlan m;
  m.ragged = p.qkv_format == QkvFormat::thd;
  m.diagonal = p.window_left >= 0 || p.window_right >= 0;
  // Bottom-right and top-left are the same band when every sequence has
  // s_q == s_kv (shift 0): then cuDNN gets the top-left form, which is the
  // common, fast path and allows bias and dropout (transformers' causal
  // masks are bottom-right for KV-cache decoding).
  const bool same_lengths = !m.ragged && !p.has_seqlens && p.s_q == p.s_kv;
  m.bottom_right = m.diagonal && p.bottom_right && !same_lengths;
  // attn's window is inclusive: j >= i + shift - left. cuDNN keeps j > i + shift - L.
  if (p.window_left >= 0) m.left_bound = p.window_left + 1;
  if (p.window_right >= 0) m.right_bound = p.window_right;
  // Sequence lengths: always for thd and padded batches. Also for a band with
  // s_q > s_kv, which cuDNN only aligns with explicit lengths (full ones here).
  m.padding = m.ragged || p.has_seqlens || (m.diagonal && p.s_q > p.s_kv);
  return m;
}

bool may_have_empty_rows(const Problem& p) {
  const MaskPlan m = mask_plan(p);
  if (m.ragged || p.has_seqlens) return true;  // rows past a sequence's length, empty sequences
  if (p.s_kv == 0) return true;
  if (!m.diagonal) return false;
  // Without per-sequence lengths the visible range moves monotonically with i,
  // so the first and the last row tell whether any row is empty.
  const int64_t shift = alignment_shift<int64_t>(p.bottom_right, p.s_q, p.s_kv);
  for (int64_t i : {int64_t{0}, p.s_q - 1})
    if (i >= 0 && visible_keys<int64_t>(i, p.s_q, p.s_kv, shift, p.window_left, p.window_right).empty()) return true;
  return false;
}

std::vector<std::string> static_reasons(const Problem& p, const DeviceInfo& dev, int version) {
  std::vector<std::string> no = detail::gpu_device_reasons(p, dev);
  if (!p.device.is_cuda()) return no;
  if (version < 90000) no.push_back("needs cuDNN >= 9.0; this process loaded cuDNN " + version_name(version));
  if (!(p.dtype == DType::bf16 || p.dtype == DType::f16))
    no.push_back(std::string("dtype ") + dtype_name(p.dtype) +
                 ": cuDNN's fused attention takes bfloat16 or float16 (unfused runs float32)");
  // cuDNN checks each tensor's pointer and strides against 16 bytes when it
  // runs the graph, not when it builds it: refused here.
  if (std::string r = detail::row_alignment_reason(p, "cudnn"); !r.empty()) no.push_back(std::move(r));
  if (p.has_sink()) {
    const std::string sink = std::string("softmax_type=") + softmax_type_name(p.softmax_type) + " (a softmax sink)";
    const std::string elsewhere = "; flash_sm90, flash_sm80 and unfused run it";
    if (version < 91300) no.push_back(sink + " needs cuDNN >= 9.13; loaded " + version_name(version) + elsewhere);
    if (p.pass == Pass::backward && p.deterministic && p.sink_grad)
      no.push_back("a deterministic backward with dsink: cuDNN's dsink sum is not bitwise repeatable (three runs "
                   "on an H100 differed in the last bits); flash_sm80 runs it bitwise");
    if (p.return_max_logit)
      no.push_back("return_max_logit with " + sink + ": cuDNN's per-row Max, where attn reads the max logit, "
                   "includes the sink's logit" + elsewhere);
  }

  // Head dims: multiples of 8; at most 128 before Hopper, 256 on Hopper.
  const int64_t max_d = dev.sm == 90 ? 256 : 128;
  for (auto [name, d] : {std::pair<const char*, int64_t>{"head_dim_qk", p.d_qk}, {"head_dim_v", p.d_v}}) {
    if (d > max_d) no.push_back(std::string(name) + "=" + str(d) + " > " + str(max_d) + " on sm" + str(dev.sm));
    if (d % 8 != 0) no.push_back(std::string(name) + "=" + str(d) + " is not a multiple of 8");
  }

  if (p.mask == MaskType::arbitrary)
    no.push_back("mask=arbitrary: cuDNN's graph takes no boolean mask tensor here; unfused runs it");
  if (p.softcap > 0)
    no.push_back("softcap: cuDNN applies it only as a score modifier that excludes its masks; "
                 "flash_sm80 and unfused run it");
  if (p.bias == BiasType::alibi)
    no.push_back("ALiBi with caller-given slopes: cuDNN's ALiBi uses its own fixed slopes; unfused runs it");

  const MaskPlan m = mask_plan(p);
  const bool dropout = p.dropout_p > 0;
  if (p.bias == BiasType::post_scale_bias) {
    if (m.ragged) no.push_back("post_scale_bias with qkv_format=thd: use bshd/sbhd with this backend, or unfused");
    if (p.bias_dtype != p.dtype)
      no.push_back(std::string("bias dtype ") + dtype_name(p.bias_dtype) + " differs from q's " +
                   dtype_name(p.dtype) + "; cuDNN takes a bias of the input dtype");
    if (p.bias_shape[2] != p.s_q || p.bias_shape[3] != p.s_kv)
      no.push_back("bias shape [" + str(p.bias_shape[0]) + ", " + str(p.bias_shape[1]) + ", " + str(p.bias_shape[2]) +
                   ", " + str(p.bias_shape[3]) + "] broadcasts over a sequence dimension; cuDNN needs [.., s_q, s_kv]");
    if (p.pass == Pass::backward && p.bias_grad && (p.bias_shape[0] != 1 || p.bias_shape[1] != p.h_q))
      no.push_back("a bias gradient for bias shape [" + str(p.bias_shape[0]) + ", " + str(p.bias_shape[1]) +
                   ", s_q, s_kv]: cuDNN computes dbias only for [1, h_q, s_q, s_kv]");
  }
  if (m.bottom_right && (p.bias != BiasType::none || dropout))
    no.push_back("bottom-right alignment (mask " + std::string(mask_name(p.mask)) +
                 (p.has_window() ? " with window" : "") + ") together with " + (dropout ? "dropout" : "a bias") +
                 ": cuDNN aligns bottom-right only without bias and dropout");
  if (m.bottom_right && version < 90600 && (p.s_q % 64 != 0 || p.s_kv % 64 != 0))
    no.push_back("bottom-right alignment with s_q=" + str(p.s_q) + ", s_kv=" + str(p.s_kv) +
                 " needs cuDNN >= 9.6 (or lengths that are multiples of 64); loaded " + version_name(version));
  if (p.window_left >= 0 && version < 90200)
    no.push_back("a sliding window needs cuDNN >= 9.2; loaded " + version_name(version));
  if (p.window_left >= 0 && version < 91002 && (dropout || p.bias != BiasType::none))
    no.push_back("a sliding window with dropout or bias needs cuDNN >= 9.10.2; loaded " + version_name(version));
  if (m.ragged && p.h_q != p.h_kv && version < 90600)
    no.push_back("thd with grouped KV heads needs cuDNN >= 9.6; loaded " + version_name(version));
  // Seen on H100s with cuDNN 9.19 (2026-11-27): thd backwards whose
  // sequences leave rows of the bucketed [b, h, s, d] views empty gave wrong
  // dk/dv (rel. error 0.02-1.1, values near 3e38) in 3 of 4 runs of the
  // cross-pass grid, depending on what lay in memory past the sequences (the
  // same code passed on another machine). cuDNN's ragged kernels read rows
  // past a sequence and scale them by a masked probability of 0, which keeps
  // a NaN or huge value there (cudnn-frontend issue #624 describes it for the
  // forward). Refused until a run with NaN past every tensor passes.
  if (p.pass == Pass::backward && m.ragged)
    no.push_back("qkv_format=thd backward: cuDNN's ragged backward read memory past the sequences and gave wrong "
                 "dk/dv on an H100 (cuDNN 9.19); flash_sm90, flash_sm80 and unfused run it");
  if (p.pass == Pass::backward && p.deterministic && m.ragged && dev.sm / 10 == 8)
    no.push_back("deterministic backward with qkv_format=thd: cuDNN has none on sm_8x");
  if (dropout && p.dropout_p >= 1.0) no.push_back("dropout_p=1 leaves nothing to scale");
  // Ragged offsets are int32 element offsets.
  const int64_t widest = std::max(p.d_qk, p.d_v);
  if (m.ragged && std::max(p.total_q * p.h_q, p.total_kv * p.h_kv) * widest >= (int64_t{1} << 31))
    no.push_back("thd tensors of 2^31 or more elements: cuDNN's ragged offsets are 32-bit; split the batch");
  return no;
}

}  // namespace attn::cudnn
