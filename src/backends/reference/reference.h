// The `reference` backend: exact attention on the CPU (fp64 accumulation, every
// feature of docs/SEMANTICS.md, multi-threaded). The oracle of every test.
#pragma once

#include "attn/backend.h"

namespace attn::reference {

// Computes on host tensors. Trusts a validated Problem.
void forward(const Problem& p, const ForwardArgs& args);
void backward(const Problem& p, const BackwardArgs& args);

// The registered backend object.
const Backend& backend();

}  // namespace attn::reference
