// The ring's Transport over NCCL (nccl_transport.cpp; built where NCCL is found).
#pragma once

#include <memory>

#include "attn/cp.h"

namespace attn::cp::internal {

// Exchanges on a communication stream of its own, ordered after the work queued
// on `compute_stream` (events, no host syncs). Throws attn::Error when this
// build lacks NCCL or the communicator disagrees with comm.rank / comm.size.
std::unique_ptr<Transport> nccl_transport(const Communicator& comm, int device, void* compute_stream);

}  // namespace attn::cp::internal
