// Validation's sequence step (validate_internal.h): cu_seqlens' dtype, rank,
// length and device, then (with check_seqlens) their values read to the host,
// and the sequence lengths of the call: thd's from cu_seqlens and
// max_seqlen_q/kv, bshd/sbhd's from the tensors.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attn/problem.h"
#include "core/sequences.h"
#include "core/validate_internal.h"

namespace attn::detail {
namespace {

bool is_padding_mask(MaskType m) {
  return m == MaskType::padding || m == MaskType::padding_causal ||
         m == MaskType::padding_causal_bottom_right;
}

// Checks one cu_seqlens tensor's dtype, rank, length and device.
void check_cu_seqlens_shape(const TensorView& cu, const char* name, const Device& device, int64_t batch_expected) {
  if (cu.dtype != DType::i32)
    bad_type(std::string(name) + " has the wrong dtype", dtype_name(cu.dtype), "int32",
             std::string("convert ") + name + " to int32");
  if (cu.rank != 1)
    bad_value(std::string(name) + " must be one-dimensional", cu.shape_str(), "[batch + 1]",
              "pass the cumulative sequence lengths as a 1-d int32 tensor starting at 0");
  if (cu.size(0) < 1)
    bad_value(std::string(name) + " is empty", cu.shape_str(), "[batch + 1] with a leading 0",
              "pass [0, len_0, len_0 + len_1, ...]");
  require_device(cu, name, device);
  // size - 1 against the batch: batch + 1 would overflow for a batch near 2^63.
  if (batch_expected >= 0 && cu.size(0) - 1 != batch_expected)
    bad_value(std::string(name) + " has the wrong length", str(cu.size(0)),
              std::to_string(static_cast<uint64_t>(batch_expected) + 1) + " (batch + 1 = " + str(batch_expected) + " + 1)",
              "pass one offset per sequence plus the leading 0");
}

// Checks the values of one cu_seqlens tensor (read by check_cu_seqlens below) and
// returns the longest sequence in it.
int64_t check_cu_seqlens_values(const std::vector<int32_t>& v, const char* name, int64_t tokens,
                                int64_t padded_len, QkvFormat f) {
  if (v[0] != 0)
    bad_value(std::string(name) + "[0] must be 0", str(v[0]), "0",
              "cumulative lengths start at 0: [0, len_0, len_0 + len_1, ...]");
  int64_t longest = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] < v[i - 1])
      bad_value(std::string(name) + " decreases at index " + str(static_cast<int64_t>(i)),
                str(v[i - 1]) + " then " + str(v[i]), "non-decreasing offsets",
                "pass cumulative sums of the (non-negative) sequence lengths");
    longest = std::max<int64_t>(longest, v[i] - v[i - 1]);
  }
  if (f == QkvFormat::thd && v.back() != tokens)
    bad_value(std::string(name) + "'s last entry differs from the number of tokens", str(v.back()),
              str(tokens) + " (the tokens dimension of the packed tensor)",
              "the last offset must equal the total token count; check that cu_seqlens and the tensors describe the same batch");
  if (f != QkvFormat::thd && longest > padded_len)
    bad_value(std::string(name) + " holds a sequence longer than the padded tensor", str(longest),
              "at most " + str(padded_len) + " (the tensor's sequence dimension)",
              "cu_seqlens of a padded batch give the true lengths, each at most the padded length");
  return longest;
}

// Shapes of both cu_seqlens, then (with check_seqlens) their values, read
// together: the read waits for the device, and the GPU idles from then until
// the call's kernel starts. Returns the longest sequences, -1 when not read.
std::pair<int64_t, int64_t> check_cu_seqlens(const Inputs& in, const Options& o, const Device& device,
                                             int64_t batch_q, int64_t batch_kv, int64_t tokens_q,
                                             int64_t tokens_kv, int64_t padded_q, int64_t padded_kv) {
  check_cu_seqlens_shape(in.cu_seqlens_q, "cu_seqlens_q", device, batch_q);
  check_cu_seqlens_shape(in.cu_seqlens_kv, "cu_seqlens_kv", device, batch_kv);
  if (!o.check_seqlens) return {-1, -1};
  // validate_*() also answer shape-only questions on views without data; the
  // values they read here must exist.
  for (auto [t, name] : {std::pair{&in.cu_seqlens_q, "cu_seqlens_q"}, {&in.cu_seqlens_kv, "cu_seqlens_kv"}})
    if (t->data == nullptr && t->numel() > 0)
      bad_value(std::string(name) + " has no data to check", "a null data pointer for " + t->shape_str(),
                "the offsets' memory (check_seqlens reads them)",
                std::string("pass ") + name + "'s memory, or turn check_seqlens off and give max_seqlen_q/kv");
  const detail::Int32Pair v = detail::read_int32_pair(in.cu_seqlens_q, in.cu_seqlens_kv);
  return {check_cu_seqlens_values(v.first, "cu_seqlens_q", tokens_q, padded_q, o.qkv_format),
          check_cu_seqlens_values(v.second, "cu_seqlens_kv", tokens_kv, padded_kv, o.qkv_format)};
}

}  // namespace

void derive_sequences(const Options& o, const Inputs& in, int64_t padded_batch, int64_t padded_s_q,
                      int64_t padded_s_kv, Problem& p) {
  const QkvFormat f = o.qkv_format;
  // Sequences: thd needs cu_seqlens; padded bshd/sbhd may give them.
  const bool has_cu_q = in.cu_seqlens_q.defined(), has_cu_kv = in.cu_seqlens_kv.defined();
  if (f == QkvFormat::thd && !(has_cu_q && has_cu_kv))
    bad_value(std::string("qkv_format=thd needs cu_seqlens_q and cu_seqlens_kv"),
              std::string(has_cu_q ? "cu_seqlens_q only" : has_cu_kv ? "cu_seqlens_kv only" : "neither"),
              "both: int32 [batch + 1] token offsets of each packed sequence",
              "pass both (for self-attention the same tensor twice)");
  if (f != QkvFormat::thd && has_cu_q != has_cu_kv)
    bad_value("cu_seqlens_q and cu_seqlens_kv must be given together",
              has_cu_q ? "cu_seqlens_q only" : "cu_seqlens_kv only", "both or neither",
              "pass both (for self-attention the same tensor twice)");
  if (f != QkvFormat::thd && has_cu_q && !is_padding_mask(o.mask))
    bad_value(std::string("cu_seqlens with qkv_format=") + format_name(f) + " need a padding mask",
              std::string("mask=") + mask_name(o.mask),
              "padding, padding_causal or padding_causal_bottom_right",
              std::string("use mask=\"padding") +
                  (o.mask == MaskType::causal ? "_causal" : o.mask == MaskType::causal_bottom_right ? "_causal_bottom_right" : "") +
                  "\" so the true lengths apply, or drop cu_seqlens");
  p.has_seqlens = has_cu_q;
  if (f == QkvFormat::thd) {
    p.batch = in.cu_seqlens_q.rank == 1 ? in.cu_seqlens_q.size(0) - 1 : 0;
    const auto [longest_q, longest_kv] = check_cu_seqlens(in, o, p.device, -1, p.batch, p.total_q, p.total_kv, 0, 0);
    auto resolve_max = [&](int64_t given, int64_t longest, const char* name) -> int64_t {
      if (given < 0) bad_value(std::string(name) + " is negative", str(given), ">= 0 (0: derive from cu_seqlens)", "pass the longest sequence length");
      if (given == 0) {
        if (longest < 0)
          bad_value(std::string(name) + " is needed when check_seqlens is off", "0", "the longest sequence length",
                    std::string("pass ") + name + ", or keep check_seqlens on so attn reads it from cu_seqlens");
        return longest;
      }
      if (longest >= 0 && given < longest)
        bad_value(std::string(name) + " is smaller than the longest sequence", str(given), ">= " + str(longest),
                  std::string("pass ") + name + " >= the longest sequence (or 0 to derive it)");
      return given;
    };
    p.s_q = resolve_max(o.max_seqlen_q, longest_q, "max_seqlen_q");
    p.s_kv = resolve_max(o.max_seqlen_kv, longest_kv, "max_seqlen_kv");
  } else {
    p.batch = padded_batch;
    p.s_q = padded_s_q;
    p.s_kv = padded_s_kv;
    if (has_cu_q) {
      check_cu_seqlens(in, o, p.device, p.batch, p.batch, 0, 0, p.s_q, p.s_kv);
    }
  }
}

}  // namespace attn::detail
