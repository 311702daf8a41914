// What run and check will allocate in host memory for a problem, and a refusal
// up front when it cannot fit: an attn::Error naming the bytes instead of a
// std::bad_alloc (or the OOM killer) halfway through filling the inputs.
#pragma once

#include <cstdint>
#include <string>

#include "testing/case.h"

namespace attn::cli {

// Host bytes of one case's tensors (inputs, outputs, gradients) in `dtype`.
// Saturates at INT64_MAX rather than wrapping.
int64_t case_bytes(const testing::CaseSpec& spec, DType dtype);
// Peak host bytes of `attn run` / `attn check` on this spec; `on_cpu`: the
// tensors themselves live in host memory (else only the staging copies do).
int64_t run_host_bytes(const testing::CaseSpec& spec, bool on_cpu);
int64_t check_host_bytes(const testing::CaseSpec& spec);
// MemAvailable from /proc/meminfo, else physical pages x page size; -1 unknown.
int64_t available_host_bytes();
// Throws attn::Error (what, got: the bytes, expected: what is available, fix)
// when `needed` exceeds the available host memory.
void require_host_memory(const std::string& command, int64_t needed);

}  // namespace attn::cli
