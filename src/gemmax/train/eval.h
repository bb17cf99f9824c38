// Evaluation: the loss of held-out data under the current weights, with MaxText's keys
// (eval_interval, eval_steps, eval_per_device_batch_size, target_eval_loss) and metric names
// (eval/avg_loss, eval/avg_perplexity, eval/total_loss, eval/total_weights, eval/moe_lb_loss,
// eval/avg_moe_lb_loss).
//
// An eval batch runs the training step's forward alone (Gemma4Model::forward_only: no backward,
// no gradient, no activation kept past its layer): its loss is the training step's, bit for bit,
// on the same batch, under FSDP too. Weights, gradients, moments and the training data's
// position are never touched, and every evaluation reads its data from the start, so a run
// evaluates the same batches whether it was resumed or not.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gemmax/config/train_config.h"
#include "gemmax/data/loader.h"
#include "gemmax/train/step.h"

namespace gemmax {

// The sums of one evaluation, as MaxText accumulates them.
struct EvalResult {
  int64_t batches = 0;
  double total_loss = 0;      // eval/total_loss: the cross-entropy summed over counted targets
  int64_t total_weights = 0;  // eval/total_weights: the counted targets
  double moe_lb_loss = 0;     // eval/moe_lb_loss: the batches' load-balance losses, summed

  double avg_loss() const { return Gemma4Model::ce_mean(total_loss, total_weights); }
  double avg_perplexity() const;
  double avg_moe_lb_loss() const { return batches > 0 ? moe_lb_loss / double(batches) : 0.0; }
};

// One eval batch on the device, through the training step's forward: its losses (as read_step
// reports a step's) and the cross-entropy sum behind them. Reads state.weights and writes
// state.scalars only (state.grads may be absent). Collective under FSDP.
struct EvalBatchLoss {
  LossInfo loss;
  double ce_sum = 0;
};
EvalBatchLoss eval_batch(Backend& be, Gemma4Model& model, TrainState& state, const Batch& batch);

// The state of evaluation alone (gemmax eval): the weights (this rank's FSDP shard when `comm`
// has several ranks) and the scalars; no gradient buffer, no optimizer.
TrainState make_eval_state(Backend& be, const ParamTable& table, DType weight_dtype,
                           Comm* comm = nullptr, const FsdpOptions& fsdp = FsdpOptions());

// The tokenizer_type a run reads tokenizer_path with. dataset_type=hf: auto, the kind the file
// holds, whatever tokenizer_type says (MaxText's HF pipeline loads tokenizer_path with
// transformers' AutoTokenizer, so its base.yml's tokenizer_type: "sentencepiece" does not apply).
std::string run_tokenizer_type(const TrainConfig& config);

// The training data's options from the config (this rank's rows of the global batch).
DataOptions run_data_options(const TrainConfig& config, int64_t vocab_size, int rank, int ranks);

// The eval data's options from the run's: eval_per_device_batch_size rows, and eval_dataset_path
// (else the built-in corpus's held-out part, or the same synthetic batch). Throws an Error naming
// the key when there is no eval set (shards without eval_dataset_path) or the batch is too big.
DataOptions eval_data_options(const TrainConfig& config, const DataOptions& train);

class Evaluator {
 public:
  // Opens the eval data (throws Error for a missing or too small eval set).
  Evaluator(const TrainConfig& config, const DataOptions& train);

  // After `steps_done` of a run of `steps`: every eval_interval steps, and at the end.
  bool due(int64_t steps_done, int64_t steps) const {
    return interval_ > 0 && (steps_done % interval_ == 0 || steps_done == steps);
  }
  // eval_steps batches (or one pass over the eval set) from its start.
  EvalResult run(Backend& be, Gemma4Model& model, TrainState& state);
  std::string describe() const;  // "4 batches of <the eval data>", for logs
  double target_loss() const { return target_loss_; }

 private:
  std::unique_ptr<DataLoader> data_;
  nlohmann::json start_;
  int64_t interval_ = -1, steps_ = -1;
  double target_loss_ = 0;
};

// The run's evaluator, or null: eval_interval=-1, or no eval set (shards without
// eval_dataset_path, synthetic data), which adds a line saying so to `notes`.
std::unique_ptr<Evaluator> make_evaluator(const TrainConfig& config, const DataOptions& train,
                                          std::vector<std::string>& notes);

}  // namespace gemmax
