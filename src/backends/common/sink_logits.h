// Where a GPU kernel finds the softmax's sink logit of query head h (docs/
// SEMANTICS.md "Softmax sinks"): plain data, filled on the host; read on the
// device with sink_logit() (softmax_sink.cuh).
#pragma once

#include <cstdint>

#include "attn/problem.h"

namespace attn::detail {

struct SinkLogits {
  int kind = 0;  // 0 none (vanilla: -inf), 1 the constant 0 (off-by-one), 2 logits[h * stride] (learnable)
  const float* logits = nullptr;
  int64_t stride = 1;
};

// The call's sinks: `sink` is Inputs::sink (read only for learnable).
inline SinkLogits sink_logits_of(SoftmaxType type, const TensorView& sink) {
  SinkLogits s;
  if (type == SoftmaxType::off_by_one) s.kind = 1;
  if (type == SoftmaxType::learnable) {
    s.kind = 2;
    s.logits = static_cast<const float*>(sink.data);
    s.stride = sink.strides_elems[0];
  }
  return s;
}
inline SinkLogits sink_logits_of(const Problem& p, const TensorView& sink) { return sink_logits_of(p.softmax_type, sink); }

}  // namespace attn::detail
