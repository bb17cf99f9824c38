// A comm over two: collectives on device buffers go to one (NCCL, on the cuda backend's
// streams), those on host buffers (counts, flags, digests, the config) to the other (MPI). FSDP
// and the trainer then use one comm whatever their buffers hold: `mpirun -np N gemmax train
// backend=cuda` runs the layers' gathers and reduce-scatters over NCCL and its control messages
// over MPI.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "gemmax/parallel/comm.h"

namespace gemmax {

class DeviceRoutingComm final : public Comm {
 public:
  // `host` must outlive this comm; `device` spans the same ranks.
  DeviceRoutingComm(Comm& host, std::unique_ptr<Comm> device);
  ~DeviceRoutingComm() override;
  std::string name() const override;
  void set_progress(const std::string& where) override {
    host_.set_progress(where);
    device_->set_progress(where);
  }
  void set_timeout(double seconds) override {  // both: the NCCL comm has a deadline of its own
    host_.set_timeout(seconds);
    device_->set_timeout(seconds);
  }
  void abort(int code) override { host_.abort(code); }

 protected:
  uint64_t start(const Collective& c) override;
  void complete(uint64_t id) override;

 private:
  Comm& host_;
  std::unique_ptr<Comm> device_;
  std::map<uint64_t, CommRequest> pending_;
  uint64_t next_id_ = 1;
};

}  // namespace gemmax
