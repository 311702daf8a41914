// attn::cp::forward / backward: a plain call without a communicator, else the
// ring over NCCL on the caller's device and stream.
#include <memory>

#include "attn/cp.h"
#include "cp/nccl_transport.h"

namespace attn::cp {
namespace {

std::unique_ptr<Transport> transport_for(const Communicator& comm, const TensorView& q, void* stream) {
  if (!nccl_available())
    fail(ErrorKind::unsupported, "context parallelism over NCCL is not part of this build", "cp communicator given",
         "attn built with NCCL (cmake/nccl.cmake found no nccl.h / libnccl)",
         "install NCCL (PyTorch's nvidia-nccl package or the CUDA toolkit's) or set NCCL_ROOT, and rebuild");
  if (!q.device.is_cuda())
    fail(ErrorKind::type, "context parallelism over NCCL needs CUDA tensors", device_name(q.device), "cuda",
         "move q, k, v to this rank's GPU");
  return internal::nccl_transport(comm, q.device.index, stream);
}

}  // namespace

bool nccl_available() {
#ifdef ATTN_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

void forward(const Options& opts, const ForwardArgs& local, const Communicator& comm, const RunContext& ctx,
             const Policy& policy) {
  if (!comm.nccl_comm) {
    attn::forward(opts, local, ctx, policy);
    return;
  }
  ring_forward(opts, local, *transport_for(comm, local.in.q, ctx.stream), policy, ctx);
}

void backward(const Options& opts, const BackwardArgs& local, const Communicator& comm, const RunContext& ctx,
              const Policy& policy) {
  if (!comm.nccl_comm) {
    attn::backward(opts, local, ctx, policy);
    return;
  }
  ring_backward(opts, local, *transport_for(comm, local.in.q, ctx.stream), policy, ctx);
}

}  // namespace attn::cp
