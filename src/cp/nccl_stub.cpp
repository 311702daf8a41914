// Builds without NCCL: the transport factory exists but refuses (communicator.cpp
// checks nccl_available() first, so this is never reached by a well-formed call).
#include "cp/nccl_transport.h"

namespace attn::cp::internal {

std::unique_ptr<Transport> nccl_transport(const Communicator&, int, void*) {
  fail(ErrorKind::unsupported, "context parallelism over NCCL is not part of this build", "", "",
       "install NCCL and rebuild (cmake/nccl.cmake)");
}

}  // namespace attn::cp::internal
