// The whole Gemma-4 text model: embedding, decoder layers, output head and loss, with the
// backward written out by hand (docs/MODEL.md §2; docs/TRAINING.md §8-10).
#pragma once

#include <cstdint>
#include <string>

#include "gemmax/backend/backend.h"
#include "gemmax/model/context.h"
#include "gemmax/model/params.h"
#include "gemmax/model/step_params.h"

namespace gemmax {

// The losses of a batch, from the step scalars (StepScalars, read on the host).
struct LossInfo {
  double ce_loss = 0;       // masked mean cross-entropy
  double lb_loss = 0;       // load-balance loss, mean over layers (weight included)
  double total_loss = 0;    // ce_loss + lb_loss: what the gradients are of
  int64_t num_targets = 0;  // of the global batch
};

// The weights (and gradients) are in the weight dtype: equal to options.act, or fp32 with bf16
// activations (mixed precision: fp32 masters and gradients, bf16 compute copies per layer).
class Gemma4Model {
 public:
  Gemma4Model(const ModelConfig& config, Backend& backend, const ModelOptions& options);

  const ModelConfig& config() const { return table_.config(); }
  const ParamTable& params() const { return table_; }
  const ModelOptions& options() const { return options_; }
  Backend& backend() const { return be_; }

  // The step of one batch on the device: the gradient of total_loss accumulates into `grads` (a
  // flat buffer laid out like `weights`; the caller zeroes it) and the loss sums are written to
  // scalars[kCeSum], scalars[kLbSum] (a float64 [StepScalars::kCount] device vector). Nothing is
  // read back to the host.
  void forward_backward(const StepInputs& in, const Tensor& weights, const Tensor& grads,
                        const Tensor& scalars);
  // The same step with the weights and gradients wherever `params` keeps them (FSDP shards).
  void forward_backward(const StepInputs& in, StepParams& params, const Tensor& scalars);
  // The step's forward alone (evaluation): the losses into `scalars` as forward_backward writes
  // them, bit for bit, with no backward and no gradient (`params` may have none); a layer's
  // activations are freed when it is done. Returns the final hidden states x_L.
  Tensor forward_only(const StepInputs& in, StepParams& params, const Tensor& scalars);
  // The losses of a step from its scalars, read on the host.
  LossInfo losses(const Tensor& host_scalars, const StepInputs& in) const;

  // forward_backward, then one read of its losses (tests and tools).
  LossInfo forward_backward(const StepInputs& in, const Tensor& weights, const Tensor& grads);
  // Loss only. If `logits` is given it receives the soft-capped logits [T, V].
  LossInfo forward(const StepInputs& in, const Tensor& weights, Tensor* logits = nullptr);

  // The mean cross-entropy of `targets` counted targets whose losses sum to ce_sum: the one
  // formula of a step's lm_loss and of evaluation's eval/avg_loss.
  static double ce_mean(double ce_sum, int64_t targets) {
    return ce_sum * (1.0 / (double(targets) + 1e-8));
  }

 private:
  LayerContext context(const StepInputs& in, const Tensor& scalars) const;
  // The cross-entropy is a mean over the (global) batch's counted targets (docs/TRAINING.md §9).
  static double ce_grad_scale(const StepInputs& in);

  ParamTable table_;
  Backend& be_;
  ModelOptions options_;
  Tensor rope_local_, rope_global_;  // RoPE inverse frequencies of sliding and global layers
};

}  // namespace gemmax
