// What validation's two files share: validate.cpp (tensors, shapes, masks,
// bias, outputs, the entry points) and validate_sequences.cpp (cu_seqlens
// and the sequence lengths). Each failure is an attn::Error with what / got /
// expected / fix.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "attn/error.h"
#include "attn/problem.h"

namespace attn::detail {

inline std::string str(int64_t v) { return std::to_string(v); }

// items with sep between them (a list of reasons, of backends).
inline std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? sep : "") + items[i];
  return s;
}

[[noreturn]] inline void bad_value(std::string what, std::string got, std::string expected, std::string fix) {
  fail(ErrorKind::value, std::move(what), std::move(got), std::move(expected), std::move(fix));
}
[[noreturn]] inline void bad_type(std::string what, std::string got, std::string expected, std::string fix) {
  fail(ErrorKind::type, std::move(what), std::move(got), std::move(expected), std::move(fix));
}

// A view with elements points at them: a null data pointer with a non-zero
// size would be dereferenced by the first backend that reads it.
inline void require_data(const TensorView& t, const char* name) {
  if (t.defined() && t.data == nullptr && t.numel() > 0)
    bad_value(std::string(name) + " has no data", "a null data pointer for " + t.shape_str(),
              "the address of the tensor's first element",
              std::string("pass ") + name + "'s memory (make_view(ptr, ...)), or leave it out where it is optional");
}

// Every tensor of a call that is about to run has its memory (require_data).
// Apart from validate_*(), which also answers shape-only questions (explain,
// the CLI's plans) on views without data; forward() and backward() call these.
void require_tensor_data(const ForwardArgs& args);
void require_tensor_data(const BackwardArgs& args);

inline void require_device(const TensorView& t, const char* name, const Device& expected) {
  if (!(t.device == expected))
    bad_value(std::string(name) + " is on another device than q", device_name(t.device),
              device_name(expected) + " (q's device)",
              std::string("move ") + name + " to " + device_name(expected));
}

// sink, dsink, max_logit: fp32 [heads_q] on p's device.
void check_per_head(const TensorView& t, const char* name, const Problem& p);
// The sink logits p.softmax_type asks for (learnable: fp32 [heads_q]), and none otherwise.
void check_sink(const TensorView& sink, const Problem& p);
// lse: fp32 [batch, heads_q, seq_q] (bshd, sbhd) or [heads_q, tokens_q] (thd) on p's device.
void check_lse(const TensorView& lse, const Problem& p);
// alibi_slopes: fp32 [heads_q] or [batch, heads_q] on p's device; true for the latter.
bool check_alibi_slopes(const TensorView& a, const Problem& p);

// Problem::row_alignment_bytes of these views (undefined ones skipped).
int row_alignment(std::initializer_list<const TensorView*> views);

// The call's sequences into p: batch, s_q, s_kv and has_seqlens. thd takes
// them from cu_seqlens (both required) and max_seqlen_q/kv; bshd/sbhd from
// the tensors (padded_batch, padded_s_q, padded_s_kv), with cu_seqlens
// optional under a padding mask. With o.check_seqlens the values of
// cu_seqlens are read to the host and checked. Reads p's qkv_format, device,
// total_q and total_kv.
void derive_sequences(const Options& o, const Inputs& in, int64_t padded_batch, int64_t padded_s_q,
                      int64_t padded_s_kv, Problem& p);

}  // namespace attn::detail
