// Where the stages of one training step find their weights and leave their gradients.
//
// Gemma4Model::forward_backward walks a step (embedding, layers, output head, layers backward,
// embedding backward) and asks a StepParams at each stage. On one device (WholeParams) that binds
// the flat weight and gradient buffers and casts each layer's matrices to the compute dtype while
// the layer runs. Under FSDP (parallel/fsdp.h) it all-gathers a layer's weights from the ranks'
// shards (the next layer's gather in flight while this one computes), and reduce-scatters a layer's
// gradients as soon as its backward is done.
#pragma once

#include "gemmax/model/context.h"
#include "gemmax/model/weights.h"

namespace gemmax {

class StepParams {
 public:
  enum class Pass { Forward, Backward };
  virtual ~StepParams() = default;

  // x_0 = the embedding of in.tokens (allocated here).
  virtual Tensor embed(const StepInputs& in) = 0;
  // Layer l's compute weights, for its forward, or for its backward (and the remat recompute
  // inside it). The views stay valid until layer_done(l, pass).
  virtual LayerWeights layer(int64_t l, Pass pass) = 0;
  // Where layer l's backward accumulates its weight gradients (zero when handed out); valid until
  // layer_done(l, Pass::Backward).
  virtual LayerWeights layer_grads(int64_t l) = 0;
  virtual void layer_done(int64_t l, Pass pass) = 0;
  // The tied, soft-capped head: adds the sum of the cross-entropy over in's counted targets into
  // `loss` and writes dx, the gradient w.r.t. x of grad_scale times that sum (head_loss).
  virtual void head(const StepInputs& in, const Tensor& x, double grad_scale, const Tensor& loss,
                    const Tensor& dx) = 0;
  // The embedding's gradient from dx_0 (it adds to the head's: the table is tied).
  virtual void embed_backward(const StepInputs& in, const Tensor& dx) = 0;
  // The small block's model-level per-layer-input weights (compute dtype for the projection)
  // and where their gradients accumulate; valid for the step.
  virtual PerLayerInputWeights per_layer_weights();
  virtual PerLayerInputWeights per_layer_grads();
};

// One device: the weights and gradients are flat buffers laid out like the registry. Without
// gradients (an undefined buffer) the weights are frozen: the backward still runs through them to
// its inputs (a LoRA run's adapters, model/lora/), but computes no gradient of theirs.
class WholeParams final : public StepParams {
 public:
  WholeParams(Backend& be, const ParamTable& table, const ModelOptions& opt, const Tensor& weights,
              const Tensor& grads);

  Tensor embed(const StepInputs& in) override;
  LayerWeights layer(int64_t l, Pass pass) override;
  LayerWeights layer_grads(int64_t l) override;
  void layer_done(int64_t, Pass) override {}
  void head(const StepInputs& in, const Tensor& x, double grad_scale, const Tensor& loss,
            const Tensor& dx) override;
  void embed_backward(const StepInputs& in, const Tensor& dx) override;
  PerLayerInputWeights per_layer_weights() override;
  PerLayerInputWeights per_layer_grads() override { return grads_.per_layer; }

 private:
  Backend& be_;
  const ParamTable& table_;
  ModelOptions opt_;
  ModelWeights weights_, grads_;
};

}  // namespace gemmax
