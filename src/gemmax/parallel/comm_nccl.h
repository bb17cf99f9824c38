// The NCCL comm: collectives on device buffers, ordered with a CUDA stream (the CUDA backend's).
//
// NCCL is bootstrapped over MPI: rank 0 makes the unique id and the bootstrap comm broadcasts it.
// A collective runs on the backend's comm stream after the work already queued on its compute
// stream;
// wait() makes the compute stream wait for it (a device-side dependency, no host synchronisation),
// so that the next layer's all-gather overlaps this layer's kernels as on the host. Built wherever
// CUDA and NCCL are found (GEMMAX_NCCL); needs a GPU per rank to run. A watchdog thread gives
// each collective comm_timeout_seconds on the device (the MPI comm's deadline).
//
// The class is compiled into the cuda module (libgemmax_cuda.so) with the backend, so that the
// binary links no CUDA library; the binary reaches it through make_nccl_comm.
#pragma once

#include <memory>
#include <string>

#include "gemmax/parallel/comm.h"

namespace gemmax {

// The module's NcclComm (arguments as its constructor's). Throws gemmax::Error when the cuda
// module cannot be loaded or was built without NCCL, naming what to do.
std::unique_ptr<Comm> make_nccl_comm(Comm& bootstrap, int device, void* compute_stream,
                                     void* comm_stream);

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

// The module's entry point for make_nccl_comm (module_api.h's kNcclCommEntry).
extern "C" gemmax::Comm* gemmax_make_nccl_comm(gemmax::Comm* bootstrap, int device,
                                               void* compute_stream, void* comm_stream);
