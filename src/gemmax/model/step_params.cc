#include "gemmax/model/step_params.h"

#include <cmath>

#include "gemmax/base/error.h"
#include "gemmax/model/head.h"

namespace gemmax {

WholeParams::WholeParams(Backend& be, const ParamTable& table, const ModelOptions& opt,
                         const Tensor& weights, const Tensor& grads)
    : be_(be),
      table_(table),
      opt_(opt),
      weights_(bind_model(table, weights)),
      grads_(grads.defined() ? bind_model(table, grads) : ModelWeights()) {}

Tensor WholeParams::embed(const StepInputs& in) {
  const int64_t D = table_.config().d_model;
  Tensor x = be_.alloc({in.tokens_count(), D}, opt_.act, MemKind::Activations);
  be_.embedding_forward(
      {.x = x, .tokens = in.tokens, .table = weights_.embed, .scale = std::sqrt(double(D))});
  return x;
}

LayerWeights WholeParams::layer(int64_t l, Pass) {
  return compute_weights(be_, weights_.layers[size_t(l)], opt_.act, opt_.float32_gate_logits);
}

void WholeParams::head(const StepInputs& in, const Tensor& x, double grad_scale, const Tensor& loss,
                       const Tensor& dx) {
  const HeadWeights hw{compute_copy(be_, weights_.embed, head_dot_dtype(opt_)),
                       weights_.final_norm};
  const HeadWeights hg{grads_.embed, grads_.final_norm};
  head_loss(be_, table_.config(), in, opt_, hw, x, grad_scale, loss,
            grads_.embed.defined() ? &hg : nullptr, dx.defined() ? &dx : nullptr);
}

PerLayerInputWeights StepParams::per_layer_weights() {
  fail("the per-layer inputs of the small block (gemma4-e2b/e4b) are not built under FSDP yet; "
       "train it on one rank");
}

PerLayerInputWeights StepParams::per_layer_grads() { return per_layer_weights(); }

PerLayerInputWeights WholeParams::per_layer_weights() {
  const PerLayerInputWeights& w = weights_.per_layer;
  return {w.table, compute_copy(be_, w.model_proj, opt_.act), w.proj_norm, {}};
}

LayerWeights WholeParams::layer_grads(int64_t l) {
  return grads_.layers.empty() ? LayerWeights() : grads_.layers[size_t(l)];
}

void WholeParams::embed_backward(const StepInputs& in, const Tensor& dx) {
  if (!grads_.embed.defined()) return;  // a frozen base
  be_.embedding_backward({.dtable = grads_.embed,
                          .dx = dx,
                          .tokens = in.tokens,
                          .scale = std::sqrt(double(table_.config().d_model))});
}

}  // namespace gemmax
