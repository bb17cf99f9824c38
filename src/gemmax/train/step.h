// The device state of a training run and one training step on it.
//
// A step runs entirely on the backend: zero the gradients, forward and backward, the global
// gradient norm, clipping and AdamW. Nothing is read back inside it; afterwards the host reads the
// step's scalars (losses, gradient norm) once. The trainer and the memory plan
// (train/memory_plan.h) run this same code, so the plan sees exactly what a step allocates.
//
// With a comm of more than one rank the state is this rank's FSDP shard (parallel/fsdp.h): the step
// gathers weights and reduce-scatters gradients per layer, and sums the losses and the gradient
// norm over ranks, so the scalars the host reads are the global batch's.
#pragma once

#include <memory>
#include <vector>

#include "gemmax/backend/backend.h"
#include "gemmax/parallel/fsdp.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/train/optimizer.h"
#include "gemmax/train/train_hooks.h"

namespace gemmax {

struct TrainState {
  ShardLayout layout;                // what of each parameter this rank holds, and where
  Tensor weights, grads;             // flat buffers in the weight dtype (MemKind::Params, Grads)
  Tensor scalars;                    // float64 [StepScalars::kCount]: the step's losses and
                                     // gradient norm
  std::unique_ptr<AdamW> optimizer;  // holds the moments (MemKind::OptState)
  Comm* comm = nullptr;              // FSDP: the ranks (null: one device)
  FsdpOptions fsdp;
  const TrainHooks* hooks = nullptr;  // tests: after_backward (null: none)

  bool sharded() const { return layout.sharded(); }
};

// Allocates the state (weights zero, moments zero). With `comm` of more than one rank: this rank's
// FSDP shard, laid out by ShardLayout::fsdp.
TrainState make_train_state(Backend& be, const ParamTable& table,
                            const std::vector<bool>& trainable, DType weight_dtype,
                            const AdamWConfig& config, Comm* comm = nullptr,
                            const FsdpOptions& fsdp = FsdpOptions());

// Puts whole-model weights (host, laid out like the table) into the state: all of them on one
// device, this rank's pieces under FSDP.
void upload_weights(Backend& be, const ParamTable& table, TrainState& state, const Tensor& full);

// One step of `in` with learning rate `lr`; t is the 1-based update count. `vocab`: the global
// batch's vocabulary-parallel inputs (FSDP with fsdp_embedding=vocab_parallel).
void train_step(Backend& be, Gemma4Model& model, TrainState& state, const StepInputs& in, double lr,
                int64_t t, const VocabInputs& vocab = VocabInputs());

// What the host reads of a step: its losses and gradient norms, from one read of the scalars.
struct StepResult {
  LossInfo loss;
  double raw_grad_norm = 0;  // before clipping
  double grad_norm = 0;      // after clipping
  bool applied = true;       // false: a non-finite scalar kept the update from applying
};
StepResult read_step(Backend& be, const Gemma4Model& model, const TrainState& state,
                     const StepInputs& in);

}  // namespace gemmax
