// A comm that is rank 0 of `size` ranks and moves nothing.
//
// The memory plan of an FSDP run (train/memory_plan.h) runs the sharded training step on a
// PlanningBackend and this comm: every buffer the step would allocate around its collectives is
// allocated (counted) in the same order as in the real run, so the plan is derived, not estimated,
// and its stats() are the bytes a step moves.
#pragma once

#include "gemmax/parallel/comm.h"

namespace gemmax {

class PlanningComm final : public Comm {
 public:
  explicit PlanningComm(int size) : Comm(0, size) {}
  std::string name() const override { return "planning"; }

 protected:
  uint64_t start(const Collective&) override { return 0; }
  void complete(uint64_t) override {}
};

}  // namespace gemmax
