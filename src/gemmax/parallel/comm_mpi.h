// The Open MPI comm: collectives on host buffers (the reference and cpu backends).
//
// MPI advances a non-blocking collective only while some thread is inside MPI, so a comm owns a
// progress thread that makes every MPI call of the process after MPI_Init: it starts the
// collectives in the order they were submitted and tests them until they complete, while the
// caller computes. That is what lets FSDP overlap the next layer's all-gather with the current
// layer's compute.
//
// Faults: a collective that does not complete within the timeout (comm_timeout_seconds) makes the
// rank ask every other rank where it stands (over a second communicator that the progress threads
// answer even when their caller is stuck), print which ranks have not reached the collective or do
// not answer, and abort the job (MPI_Abort): every rank exits non-zero. A rank that dies is
// reported by mpirun, which ends the others.
#pragma once

#include <memory>
#include <string>

#include "gemmax/parallel/comm.h"

namespace gemmax {

class MpiComm final : public Comm {
 public:
  // MPI_COMM_WORLD. Initialises MPI (once per process; before any other thread calls MPI).
  static std::unique_ptr<MpiComm> world(int* argc, char*** argv);
  ~MpiComm() override;  // finalises MPI

  std::string name() const override { return "mpi"; }
  void set_timeout(double seconds) override;
  void set_progress(const std::string& where) override;
  void abort(int code) override;

 protected:
  uint64_t start(const Collective& c) override;
  void complete(uint64_t id) override;

 private:
  struct Impl;
  MpiComm(std::unique_ptr<Impl> impl, int rank, int size);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gemmax

// The MPI comm lives in a shared module, libgemmax_mpi.so, that make_world (world.h) loads only
// when an MPI launcher started several ranks: the binary links no MPI library.
inline constexpr const char kMpiModuleFile[] = "libgemmax_mpi.so";
// The module's entry points: the interface it was built for (GEMMAX_MODULE_INTERFACE and the
// compiler's version, as the cuda module's), and MpiComm::world.
extern "C" const char* gemmax_mpi_interface();
extern "C" gemmax::Comm* gemmax_mpi_world(int* argc, char*** argv);
