// The flash kernels' parameters from a validated Problem and the caller's
// views (both backends, both passes), and the backward's workspace.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attn/backend.h"
#include "attn/problem.h"
#include "backends/flash/params.h"

namespace attn::flash {

struct Strides {
  int64_t batch, row, head;
};

// (sequence, token, head) strides of a q-like view in format f; thd has no
// batch stride (its sequences start at cu_seqlens offsets).
Strides strides_of(const TensorView& t, QkvFormat f);

FwdParams forward_params(const Problem& p, const ForwardArgs& a);

// Device workspace of one backward call: per row lse and D, the fp32 dQ
// accumulator, and deterministic mode's counters, one per (sequence, query
// head, query tile of `semaphore_block_m` rows: the smallest tile of the
// backend's rows, so the count bounds every row's).
int64_t backward_workspace_bytes(const Problem& p, int semaphore_block_m);

// The forward's fields, dout / dq / dk / dv and their strides, and the
// workspace carved for ctx's stream (deterministic mode's counters zeroed).
// `tail_bytes` more of the same workspace follow it for the backend's own
// use (256-byte aligned), their start in *tail: one request for both.
BwdParams backward_params(const Problem& p, const BackwardArgs& a, int semaphore_block_m, const RunContext& ctx,
                          int64_t tail_bytes = 0, void** tail = nullptr);

}  // namespace attn::flash
