// The memory plan of a training step: the peak bytes per category (parameters, gradients, optimizer
// state, saved activations, workspace, data) and the phase of the step where each peaks.
//
// The plan is derived, not hand-kept: the run's own setup and training step run once against a
// PlanningBackend (backend/planning_backend.h) wrapped around the backend that will train, which
// allocates nothing and counts every allocation in the model's order. Under FSDP
// (ici_fsdp_parallelism = N > 1) the step is rank 0's sharded step on a PlanningComm of N ranks
// (parallel/planning_comm.h), which moves nothing: the plan is then per rank (every rank allocates
// alike), without MPI and without allocating, and counts the bytes each collective would move. It
// therefore follows the backend, the remat policy, the tiling, the sharding and every switch; the
// trainer prints it before the first step (and refuses a run above max_memory_gb) and beside the
// measured peaks at the end, which tests check are equal to the byte, on every rank.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gemmax/backend/backend.h"
#include "gemmax/base/memory.h"
#include "gemmax/config/model_config.h"
#include "gemmax/model/context.h"
#include "gemmax/model/lora/adapters.h"
#include "gemmax/parallel/comm.h"
#include "gemmax/parallel/fsdp.h"

namespace gemmax {

struct MemoryPlanInput {
  ModelConfig model;
  int64_t batch = 1, seq = 1;  // per device
  ModelOptions options;        // dtype, remat, tiling, switches
  DType weight = DType::F32;   // `weight_dtype`: master weights, gradients, Adam moments
  int64_t fsdp = 1;            // ranks the parameters are sharded over (ici_fsdp_parallelism)
  FsdpOptions fsdp_options;    // the sharding switches (fsdp > 1)
  std::string freeze;          // frozen parameters have no Adam moments
  // A LoRA run (docs/LORA.md): its adapters in `weight`, the frozen base in the compute dtype.
  std::optional<LoraOptions> lora;
};

struct MemoryPlan {
  struct Item {
    MemKind kind;
    std::string what;
    int64_t bytes;
  };
  MemoryPlanInput input;
  std::vector<Item> items;                   // what the categories hold (static ones in full)
  std::array<int64_t, kNumMemKinds> peak{};  // planned peak per category
  std::array<std::string, kNumMemKinds> peak_phase{};  // where each peaks
  int64_t peak_total = 0;                              // planned peak of the sum
  std::string total_phase;                             // where the total peaks
  CommStats comm;  // what one step's collectives move, per rank (FSDP)
};

// The plan of a run on `backend` (whose own allocations the plan does not touch); per rank of an
// FSDP run.
MemoryPlan plan_memory(const MemoryPlanInput& input, Backend& backend);

// A table of the plan; with `measured`, a column of the measured peaks beside it.
std::string format_memory_plan(const MemoryPlan& plan, const MemoryTracker* measured = nullptr);

}  // namespace gemmax
