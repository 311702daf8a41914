// What cuDNN's SDPA graph can run, predicted from the problem alone (no GPU, no
// graph building), so selection and `attn explain --device sm80` avoid its known
// limits instead of failing. Each reason names the value and the limit.
// Mirrors the checks of cudnn-frontend's SDPA node for the cuDNN versions we
// support; a graph build on the real device (cudnn_backend.cpp) backs it up.
#pragma once

#include <string>
#include <vector>

#include "attn/backend.h"

namespace attn::cudnn {

// How the backend maps a Problem onto cuDNN's mask vocabulary.
struct MaskPlan {
  bool padding = false;       // pass per-sequence lengths (padding mask)
  bool ragged = false;        // thd: ragged offsets into packed tensors
  bool diagonal = false;      // a band is set (causal and/or window)
  bool bottom_right = false;  // band aligned bottom-right
  int64_t left_bound = -1;    // cuDNN's exclusive left bound (attn's left + 1), -1: none
  int64_t right_bound = -1;   // cuDNN's inclusive right bound, -1: none
};

MaskPlan mask_plan(const Problem& p);

// Empty when cuDNN `version` (e.g. 91900) is expected to run p on dev.
std::vector<std::string> static_reasons(const Problem& p, const DeviceInfo& dev, int version);

// True when some query row can see no key (padding, windows at the edges,
// bottom-right with s_q > s_kv): those rows need attn's own out = 0 / lse = -inf.
bool may_have_empty_rows(const Problem& p);

}  // namespace attn::cudnn
