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
#include <optional>
#include <vector>

#include "gemmax/backend/backend.h"
#include "gemmax/model/gemma4.h"
#include "gemmax/model/lora/adapters.h"
#include "gemmax/model/lora/nf4_base.h"
#include "gemmax/parallel/fsdp.h"
#include "gemmax/train/optimizer.h"
#include "gemmax/train/train_hooks.h"

namespace gemmax {

// A LoRA run's frozen base (model/lora/, docs/LORA.md): the model's weights in the compute
// dtype, whole on one device or this rank's FSDP pieces, with no gradient and no Adam moments.
struct FrozenBase {
  ShardLayout layout;
  Tensor weights;              // MemKind::Params; undefined with nf4
  std::optional<Nf4Base> nf4;  // QLoRA (lora_weight_qtype=nf4): the base instead of `weights`
};

struct TrainState {
  ShardLayout layout;                // what of each parameter this rank holds, and where
  Tensor weights, grads;             // flat buffers in the weight dtype (MemKind::Params, Grads)
  Tensor scalars;                    // float64 [StepScalars::kCount]: the step's losses and
                                     // gradient norm
  std::unique_ptr<AdamW> optimizer;  // holds the moments (MemKind::OptState)
  Comm* comm = nullptr;              // FSDP: the ranks (null: one device)
  FsdpOptions fsdp;
  const TrainHooks* hooks = nullptr;  // tests: after_backward (null: none)
  // A LoRA run: the state above is the adapters' (whole and alike on every rank; their
  // gradients all-reduced), `base` the frozen model, sharded like a full run's weights.
  const AdapterTable* adapters = nullptr;
  FrozenBase base;
  uint64_t dropout_seed = 0;  // each step's LoRA dropout masks derive from it and the step

  // Several ranks (FSDP): the batch is one rank's share, and the weights (a LoRA run's base)
  // are sharded.
  bool sharded() const { return comm != nullptr; }
  // Where the model's weights are: the trained ones, or a LoRA run's frozen base.
  const ShardLayout& model_layout() const { return adapters != nullptr ? base.layout : layout; }
  const Tensor& model_weights() const { return adapters != nullptr ? base.weights : weights; }
  // What the trained parameters are: the model's, or a LoRA run's adapters.
  const ParamTable& trained_table(const Gemma4Model& model) const {
    return adapters != nullptr ? adapters->params() : model.params();
  }
};

// Allocates the state (weights zero, moments zero). With `comm` of more than one rank: this rank's
// FSDP shard, laid out by ShardLayout::fsdp.
TrainState make_train_state(Backend& be, const ParamTable& table,
                            const std::vector<bool>& trainable, DType weight_dtype,
                            const AdamWConfig& config, Comm* comm = nullptr,
                            const FsdpOptions& fsdp = FsdpOptions());

// A LoRA run's state: the frozen base in `base_dtype` (the compute dtype; whole, or this rank's
// FSDP pieces with `comm` of more than one rank) and the adapters' weights, gradients and moments
// in `adapter_dtype` (weight_dtype).
// With qtype nf4 the base's matrices are NF4 blocks of nf4_block elements (model/lora/nf4_base.h).
TrainState make_lora_train_state(Backend& be, const ParamTable& table, const AdapterTable& adapters,
                                 DType base_dtype, DType adapter_dtype, const AdamWConfig& config,
                                 Comm* comm = nullptr, const FsdpOptions& fsdp = FsdpOptions(),
                                 LoraWeightQtype qtype = LoraWeightQtype::None,
                                 int64_t nf4_block = 64);

// The StepParams of a LoRA run's frozen base, as the state holds it: whole, FSDP pieces (bf16), or
// NF4 blocks (on one rank or gathered per layer). `vocab`: the sharded batch's (FSDP, bf16);
// `backward`: a backward follows the forward.
std::unique_ptr<StepParams> frozen_base_params(Backend& be, const Gemma4Model& model,
                                               const TrainState& state, const VocabInputs& vocab,
                                               bool backward);

// Puts whole-model weights (host, laid out like the table) into the state: all of them on one
// device, this rank's pieces under FSDP; a LoRA run's into its frozen base.
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
