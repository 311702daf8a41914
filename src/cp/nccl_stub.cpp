// Builds without NCCL: the transport factory exists but refuses (communicator.cpp
// checks nccl_available() first, so this is never reached by a well-formed call).
#include "cp/nccl_transport.h"

namespace attn::cp::internal {

std::unique_ptr<Transport> nccl_transport(const Communicator&, int, void*) {
  fail(ErrorKind::unsupported, "context parallelism over NCCL is not part of this build", "", "",
       "install NCCL and rebuild (cmake/nccl.cmake)");
}

}  // namespace attn::cp::internal

namespace attn::cp {

namespace {
[[noreturn]] void no_nccl() {
  fail(ErrorKind::unsupported, "context parallelism over NCCL is not part of this build", "", "attn built with NCCL",
       "install NCCL (PyTorch's nvidia-nccl package or the CUDA toolkit's) or set NCCL_ROOT, and rebuild");
}
}  // namespace

std::vector<unsigned char> nccl_unique_id() { no_nccl(); }
Communicator nccl_init(const std::vector<unsigned char>&, int, int, int) { no_nccl(); }
void nccl_destroy(Communicator&) { no_nccl(); }

}  // namespace attn::cp
