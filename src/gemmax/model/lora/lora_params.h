// The StepParams of a LoRA run (model/step_params.h): the frozen base's weights come from `base`
// (WholeParams or FsdpParams without gradients, or the NF4 base of QLoRA), the adapters from their
// own flat buffers (fp32 masters, cast to the compute dtype per layer as the base's matrices are)
// with their gradients beside them. The base computes no gradient of its own; the backward runs
// through its matrices to the adapters.
#pragma once

#include "gemmax/model/lora/adapters.h"
#include "gemmax/model/step_params.h"

namespace gemmax {

// Adapters bound to their weights (host or device, flat, laid out like table->params()): what
// inference takes (model/decode.h, model/generate.h). Empty: no adapters.
struct BoundAdapters {
  const AdapterTable* table = nullptr;
  Tensor weights;
  explicit operator bool() const { return table != nullptr; }
};

// Layer l's adapters as the layer computes with them: compute-dtype copies of their masters in
// `weights` (the router's in its product's dtype, fp32 with float32_gate_logits), each with its
// dropout mask's seed when a training step gives one.
LayerAdapters compute_adapters(Backend& be, const AdapterTable& adapters, const Tensor& weights,
                               int64_t layer, const ModelOptions& opt,
                               std::optional<DropoutStep> dropout_seed = std::nullopt);
// The same of per_layer_model_projection's adapter (undefined where there is none).
LoraPair compute_model_proj_adapter(Backend& be, const AdapterTable& adapters,
                                    const Tensor& weights, const ModelOptions& opt,
                                    std::optional<DropoutStep> dropout_seed = std::nullopt);

class LoraParams final : public StepParams {
 public:
  // weights, grads: flat buffers laid out like adapters.params() (grads undefined: no backward).
  // dropout_seed: a training step's (the masks of every layer's adapters derive from it); none:
  // no dropout (evaluation).
  LoraParams(Backend& be, StepParams& base, const AdapterTable& adapters, const ModelOptions& opt,
             const Tensor& weights, const Tensor& grads,
             std::optional<DropoutStep> dropout_seed = std::nullopt);

  Tensor embed(const StepInputs& in) override { return base_.embed(in); }
  LayerWeights layer(int64_t l, Pass pass) override;
  LayerWeights layer_grads(int64_t l) override;
  void layer_done(int64_t l, Pass pass) override { base_.layer_done(l, pass); }
  void head(const StepInputs& in, const Tensor& x, double grad_scale, const Tensor& loss,
            const Tensor& dx) override {
    base_.head(in, x, grad_scale, loss, dx);
  }
  void embed_backward(const StepInputs& in, const Tensor& dx) override {
    base_.embed_backward(in, dx);
  }
  PerLayerInputWeights per_layer_weights() override;
  PerLayerInputWeights per_layer_grads() override;

 private:
  Backend& be_;
  StepParams& base_;
  const AdapterTable& adapters_;
  ModelOptions opt_;
  Tensor weights_, grads_;
  std::optional<DropoutStep> seed_;
};

}  // namespace gemmax
