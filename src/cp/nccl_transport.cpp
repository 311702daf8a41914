// The ring's Transport over NCCL: each exchange is one ncclGroup of a send to
// the next rank and a receive from the previous one, on a communication stream
// that first waits for the compute stream's work so far; the compute stream
// waits on the transfers only where it reads what they bring.
#include "cp/nccl_transport.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "core/cuda_check.h"

namespace attn::cp::internal {

void nccl_check(ncclResult_t r, const char* call, ncclComm_t comm) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  std::string detail = ncclGetErrorString(r);
  if (const char* last = comm ? ncclGetLastError(comm) : nullptr; last && *last) detail += ": " + std::string(last);
  fail(ErrorKind::runtime, std::string(call) + " failed", detail, "ncclSuccess",
       "check that every rank runs the same calls (NCCL_DEBUG=WARN says more)");
}
#define ATTN_NCCL(call) ::attn::cp::internal::nccl_check((call), #call, comm_)

namespace {

class NcclTransport : public Transport {
 public:
  NcclTransport(const Communicator& c, int device, void* compute)
      : comm_(static_cast<ncclComm_t>(c.nccl_comm)), rank_(c.rank), size_(c.size),
        compute_(static_cast<cudaStream_t>(compute)) {
    int n = 0, r = 0;
    ATTN_NCCL(ncclCommCount(comm_, &n));
    ATTN_NCCL(ncclCommUserRank(comm_, &r));
    if (n != size_ || r != rank_)
      fail(ErrorKind::value, "context parallelism: the communicator does not match its rank and size",
           "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " given, the NCCL communicator has rank " +
               std::to_string(r) + " of " + std::to_string(n),
           "the NCCL communicator's own rank and size", "pass ncclCommUserRank / ncclCommCount of the communicator");
    ATTN_CUDA(cudaSetDevice(device));
    ATTN_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ATTN_CUDA(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    ATTN_CUDA(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclTransport() override {
    // Released once their queued work completes; the ring waited for it already.
    cudaEventDestroy(ready_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(stream_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void start(const void* send, void* recv, int64_t bytes) override {
    ATTN_CUDA(cudaEventRecord(ready_, compute_));
    ATTN_CUDA(cudaStreamWaitEvent(stream_, ready_, 0));
    ATTN_NCCL(ncclGroupStart());
    ATTN_NCCL(ncclSend(send, static_cast<size_t>(bytes), ncclUint8, (rank_ + 1) % size_, comm_, stream_));
    ATTN_NCCL(ncclRecv(recv, static_cast<size_t>(bytes), ncclUint8, (rank_ - 1 + size_) % size_, comm_, stream_));
    ATTN_NCCL(ncclGroupEnd());
    ATTN_CUDA(cudaEventRecord(done_, stream_));  // after every exchange queued so far
  }
  void wait() override { ATTN_CUDA(cudaStreamWaitEvent(compute_, done_, 0)); }

  void all_gather_host(const void* mine, void* all, int64_t bytes) override {
    void* dev = nullptr;
    ATTN_CUDA(cudaMallocAsync(&dev, static_cast<size_t>(bytes * (size_ + 1)), stream_));
    char* gathered = static_cast<char*>(dev) + bytes;
    ATTN_CUDA(cudaMemcpyAsync(dev, mine, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
    ATTN_NCCL(ncclAllGather(dev, gathered, static_cast<size_t>(bytes), ncclUint8, comm_, stream_));
    ATTN_CUDA(cudaMemcpyAsync(all, gathered, static_cast<size_t>(bytes * size_), cudaMemcpyDeviceToHost, stream_));
    ATTN_CUDA(cudaFreeAsync(dev, stream_));
    ATTN_CUDA(cudaStreamSynchronize(stream_));  // once per call, before the ring
  }

 private:
  ncclComm_t comm_;
  int rank_, size_;
  cudaStream_t compute_, stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
};

}  // namespace

std::unique_ptr<Transport> nccl_transport(const Communicator& comm, int device, void* compute_stream) {
  return std::make_unique<NcclTransport>(comm, device, compute_stream);
}

}  // namespace attn::cp::internal

namespace attn::cp {

std::vector<unsigned char> nccl_unique_id() {
  ncclUniqueId id;
  ncclComm_t comm_ = nullptr;
  ATTN_NCCL(ncclGetUniqueId(&id));
  return {reinterpret_cast<unsigned char*>(&id), reinterpret_cast<unsigned char*>(&id) + sizeof id};
}

Communicator nccl_init(const std::vector<unsigned char>& unique_id, int rank, int size, int device) {
  if (unique_id.size() != sizeof(ncclUniqueId))
    fail(ErrorKind::value, "context parallelism: not an NCCL unique id", std::to_string(unique_id.size()) + " bytes",
         std::to_string(sizeof(ncclUniqueId)) + " bytes from attn.cp.Communicator.unique_id() or ncclGetUniqueId",
         "make the id once on rank 0 and send the same bytes to every rank");
  if (size < 1 || rank < 0 || rank >= size)
    fail(ErrorKind::value, "context parallelism: bad rank or size", std::to_string(rank) + " of " + std::to_string(size),
         "0 <= rank < size", "pass this process's rank and the number of ranks");
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof id);
  ATTN_CUDA(cudaSetDevice(device));
  ncclComm_t comm_ = nullptr;
  ATTN_NCCL(ncclCommInitRank(&comm_, size, id, rank));
  return {comm_, rank, size};
}

void nccl_destroy(Communicator& comm) {
  if (!comm.nccl_comm) return;
  ncclComm_t comm_ = static_cast<ncclComm_t>(comm.nccl_comm);
  ATTN_NCCL(ncclCommDestroy(comm_));
  comm.nccl_comm = nullptr;
}

}  // namespace attn::cp
