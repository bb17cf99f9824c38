#include "gemmax/parallel/comm_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <map>

#include "gemmax/base/error.h"
#include "gemmax/parallel/collective_watchdog.h"

namespace gemmax {
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA error in ", what, ": ", cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail("NCCL error in ", what, ": ", ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType t, const std::string& what) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
    case DType::U8:
      return ncclUint8;
  }
  fail("collective ", what, ": no NCCL type for ", dtype_name(t));
}

// Destructors and the watchdog's thread must not throw: what fails there is said on stderr.
void warn_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess && e != cudaErrorCudartUnloading)
    std::fprintf(stderr, "gemmax: nccl comm: %s: %s\n", what, cudaGetErrorString(e));
}

}  // namespace

// The watchdog's view of the device: each collective's completion event, the communicator's
// asynchronous error, its abort. Runs on the watchdog's thread, so it sets the device first.
struct NcclWatchedDevice final : CollectiveWatchdog::Device {
  ncclComm_t* comm;
  int device;
  NcclWatchedDevice(ncclComm_t* c, int d) : comm(c), device(d) {}
  bool done(void* token) override {
    warn_cuda(cudaSetDevice(device), "cudaSetDevice (watchdog)");
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(token));
    // Any answer but "not ready" ends the wait: an error is the communicator's (async_error)
    // or the step's own to report.
    if (e != cudaSuccess && e != cudaErrorNotReady) cudaGetLastError();
    return e != cudaErrorNotReady;
  }
  std::string async_error() override {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(*comm, &async);
    if (r != ncclSuccess) return str_cat("ncclCommGetAsyncError: ", ncclGetErrorString(r));
    if (async == ncclSuccess || async == ncclInProgress) return "";
    return ncclGetErrorString(async);
  }
  void abort_comm() override {
    const ncclResult_t r = ncclCommAbort(*comm);
    if (r != ncclSuccess)
      std::fprintf(stderr, "gemmax: nccl comm: ncclCommAbort: %s\n", ncclGetErrorString(r));
    *comm = nullptr;  // aborted: not destroyed again
  }
  void release(void* token) override {
    warn_cuda(cudaSetDevice(device), "cudaSetDevice (watchdog)");
    warn_cuda(cudaEventDestroy(static_cast<cudaEvent_t>(token)), "cudaEventDestroy (watchdog)");
  }
};

struct NcclComm::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t compute = nullptr, stream = nullptr;
  cudaEvent_t ready = nullptr;  // recorded on the compute stream before each collective
  std::map<uint64_t, cudaEvent_t> done;  // until complete(); the watchdog destroys them
  uint64_t next_id = 1;
  int device = 0;
  bool own_stream = false;
  std::unique_ptr<NcclWatchedDevice> watched;
  std::unique_ptr<CollectiveWatchdog> watchdog;  // destroyed first (declared last)
};

NcclComm::NcclComm(Comm& bootstrap, int device, void* compute_stream, void* comm_stream)
    : Comm(bootstrap.rank(), bootstrap.size()),
      bootstrap_(bootstrap),
      impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  impl_->compute = static_cast<cudaStream_t>(compute_stream);
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  ncclUniqueId id;
  if (rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  Tensor host = Tensor::empty({int64_t(sizeof id)}, DType::U8, MemKind::Workspace);
  std::memcpy(host.raw(), &id, sizeof id);
  bootstrap.broadcast(host, 0, "the NCCL unique id").wait();
  std::memcpy(&id, host.raw(), sizeof id);
  check_nccl(ncclCommInitRank(&impl_->comm, size(), id, rank()), "ncclCommInitRank");
  impl_->stream = static_cast<cudaStream_t>(comm_stream);
  impl_->own_stream = comm_stream == nullptr;
  if (impl_->own_stream)
    check_cuda(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking),
               "cudaStreamCreate");
  check_cuda(cudaEventCreateWithFlags(&impl_->ready, cudaEventDisableTiming), "cudaEventCreate");
  // A hung collective ends the job instead of the run waiting forever: the watchdog aborts the
  // communicator, this rank says which collective, and the bootstrap comm aborts every rank.
  impl_->watched = std::make_unique<NcclWatchedDevice>(&impl_->comm, device);
  impl_->watchdog = std::make_unique<CollectiveWatchdog>(
      *impl_->watched,
      [this](const std::string& message) {
        std::fprintf(stderr, "error: rank %d of %d: %s. Aborting every rank.\n", rank(), size(),
                     message.c_str());
        std::fflush(stderr);
      },
      [this] { bootstrap_.abort(3); });
  impl_->watchdog->start(std::chrono::milliseconds(100));
}

void NcclComm::set_timeout(double seconds) { impl_->watchdog->set_timeout(seconds); }
void NcclComm::set_progress(const std::string& where) { impl_->watchdog->set_progress(where); }
void NcclComm::abort(int code) { bootstrap_.abort(code); }

NcclComm::~NcclComm() {
  impl_->watchdog.reset();  // stops polling; destroys the events it held
  if (impl_->ready) warn_cuda(cudaEventDestroy(impl_->ready), "releasing an event");
  if (impl_->stream && impl_->own_stream)
    warn_cuda(cudaStreamDestroy(impl_->stream), "releasing the comm stream");
  if (impl_->comm) {  // null once the watchdog aborted it
    const ncclResult_t r = ncclCommDestroy(impl_->comm);
    if (r != ncclSuccess)
      std::fprintf(stderr, "gemmax: nccl comm: ncclCommDestroy: %s\n", ncclGetErrorString(r));
  }
}

uint64_t NcclComm::start(const Collective& c) {
  Impl& m = *impl_;
  // The collective follows whatever the compute stream has queued (the cast of a shard, the
  // backward that wrote a gradient).
  check_cuda(cudaEventRecord(m.ready, m.compute), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(m.stream, m.ready, 0), "cudaStreamWaitEvent");
  const std::string& what = c.what;
  switch (c.kind) {
    case Collective::AllGather:
      check_nccl(ncclAllGather(c.send.raw(), c.recv.raw(), size_t(c.send.numel()),
                               nccl_type(c.recv.dtype(), what), m.comm, m.stream),
                 "ncclAllGather");
      break;
    case Collective::ReduceScatter:
      check_nccl(ncclReduceScatter(c.send.raw(), c.recv.raw(), size_t(c.recv.numel()),
                                   nccl_type(c.recv.dtype(), what), ncclSum, m.comm, m.stream),
                 "ncclReduceScatter");
      break;
    case Collective::AllReduce:
      // NCCL's ring gives every rank the same bits.
      check_nccl(ncclAllReduce(c.recv.raw(), c.recv.raw(), size_t(c.recv.numel()),
                               nccl_type(c.recv.dtype(), what),
                               c.op == ReduceOp::Max ? ncclMax : ncclSum, m.comm, m.stream),
                 "ncclAllReduce");
      break;
    case Collective::Broadcast:
      check_nccl(ncclBroadcast(c.recv.raw(), c.recv.raw(), size_t(c.recv.numel()),
                               nccl_type(c.recv.dtype(), what), c.root, m.comm, m.stream),
                 "ncclBroadcast");
      break;
    case Collective::AllToAll: {
      const ncclDataType_t type = nccl_type(c.recv.dtype(), what);
      const size_t elem = dtype_size(c.recv.dtype());
      size_t out = 0, in = 0;
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      for (int q = 0; q < size(); ++q) {
        const size_t s = size_t(c.send_counts[q]), r = size_t(c.recv_counts[q]);
        if (s > 0)
          check_nccl(ncclSend(static_cast<const char*>(c.send.raw()) + out * elem, s, type, q,
                              m.comm, m.stream),
                     "ncclSend");
        if (r > 0)
          check_nccl(
              ncclRecv(static_cast<char*>(c.recv.raw()) + in * elem, r, type, q, m.comm, m.stream),
              "ncclRecv");
        out += s, in += r;
      }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd");
      break;
    }
    case Collective::Barrier: {
      // A one-element all-reduce that the host waits for (below, under the watchdog).
      void* dev = nullptr;
      check_cuda(cudaMallocAsync(&dev, sizeof(float), m.stream), "cudaMallocAsync");
      check_nccl(ncclAllReduce(dev, dev, 1, ncclFloat32, ncclSum, m.comm, m.stream),
                 "ncclAllReduce (barrier)");
      check_cuda(cudaFreeAsync(dev, m.stream), "cudaFreeAsync");
      break;
    }
  }
  cudaEvent_t ev = nullptr;
  check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventRecord(ev, m.stream), "cudaEventRecord");
  const uint64_t id = m.next_id++;
  m.done[id] = ev;
  m.watchdog->watch(id, str_cat("the ", collective_name(c.kind), what.empty() ? "" : " of ", what),
                    ev);
  if (c.kind == Collective::Barrier)
    check_cuda(cudaEventSynchronize(ev), str_cat("the barrier ", what).c_str());
  return id;
}

void NcclComm::complete(uint64_t id) {
  Impl& m = *impl_;
  auto it = m.done.find(id);
  GEMMAX_CHECK(it != m.done.end(), "no NCCL collective #", id);
  check_cuda(cudaStreamWaitEvent(m.compute, it->second, 0), "cudaStreamWaitEvent");
  // The watchdog destroys the event once the collective has completed.
  m.watchdog->host_done(id);
  m.done.erase(it);
  ncclResult_t async = ncclSuccess;
  check_nccl(ncclCommGetAsyncError(m.comm, &async), "ncclCommGetAsyncError");
  check_nccl(async, "a collective");
}

}  // namespace gemmax

extern "C" gemmax::Comm* gemmax_make_nccl_comm(gemmax::Comm* bootstrap, int device,
                                               void* compute_stream, void* comm_stream) {
  return new gemmax::NcclComm(*bootstrap, device, compute_stream, comm_stream);
}
