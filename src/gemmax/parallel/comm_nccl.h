// The NCCL comm: collectives on device buffers, ordered with a CUDA stream (the CUDA backend's).
//
// NCCL is bootstrapped over MPI: rank 0 makes the unique id and the bootstrap comm broadcasts it.
// A collective runs on the backend's comm stream after the work already queued on its compute
// stream;
// wait() makes the compute stream wait for it (a device-side dependency, no host synchronisation),
// so that the next layer's all-gather overlaps this layer's kernels as on the host. Built wherever
// CUDA and NCCL are found (GEMMAX_NCCL); needs a GPU per rank to run. A watchdog thread gives
// each collective comm_timeout_seconds on the device (the MPI comm's deadline).
#pragma once

#include <memory>
#include <string>

#include "gemmax/parallel/comm.h"

namespace gemmax {

class NcclComm final : public Comm {
 public:
  // `bootstrap`: a host comm over the same ranks (MpiComm); `device`: this rank's CUDA device;
  // `compute_stream`: the cudaStream_t the backend runs its kernels on; `comm_stream`: the one
  // its collectives run on (CudaBackend::comm_stream(); null: a stream of the comm's own).
  NcclComm(Comm& bootstrap, int device, void* compute_stream, void* comm_stream = nullptr);
  ~NcclComm() override;
  std::string name() const override { return "nccl"; }
  // A collective still running on the device after `seconds` (comm_timeout_seconds; 0: no
  // deadline), or an error NCCL reports, aborts the communicator and every rank, naming the
  // collective (parallel/collective_watchdog.h).
  void set_timeout(double seconds) override;
  void set_progress(const std::string& where) override;
  void abort(int code) override;

 protected:
  uint64_t start(const Collective& c) override;
  void complete(uint64_t id) override;

 private:
  struct Impl;
  Comm& bootstrap_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gemmax
