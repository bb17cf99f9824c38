#include "gemmax/model/gemma4.h"

#include <cmath>
#include <vector>

#include "gemmax/model/head.h"
#include "gemmax/model/layer.h"
#include "gemmax/model/per_layer_inputs.h"
#include "gemmax/model/weights.h"

namespace gemmax {

namespace {

void check_dtypes(const Tensor& weights, DType act) {
  const DType w = weights.dtype();
  GEMMAX_CHECK(w == act || (act == DType::BF16 && w == DType::F32), "weights are ", dtype_name(w),
               " with activations in ", dtype_name(act),
               ": supported are equal dtypes, or bfloat16 activations with "
               "float32 weights");
}

}  // namespace

Gemma4Model::Gemma4Model(const ModelConfig& config, Backend& backend, const ModelOptions& options)
    : table_(config), be_(backend), options_(options) {
  const ModelConfig& c = table_.config();
  rope_local_ = be_.to_device(
      rope_inv_freq(c.head_dim, c.local_rope_theta, c.local_rope_proportion), MemKind::Data);
  rope_global_ =
      be_.to_device(rope_inv_freq(c.global_head_dim, c.global_rope_theta, c.global_rope_proportion),
                    MemKind::Data);
}

LayerContext Gemma4Model::context(const StepInputs& in, const Tensor& scalars) const {
  const ModelConfig& c = config();
  // Each of the `replicas` batches of a data-parallel step adds its share of the mean over the
  // global batch's sequences.
  LayerContext ctx{be_,
                   c,
                   in,
                   options_,
                   rope_table(be_, in, rope_local_, options_.act),
                   rope_table(be_, in, rope_global_, options_.act),
                   c.load_balance_loss_weight / double(c.num_layers) / double(in.replicas),
                   scalars.defined() ? scalars.flat_slice(StepScalars::kLbSum, {1}) : Tensor()};
  return ctx;
}

namespace {

std::string layer_phase(const char* what, const ModelConfig& c, int64_t l) {
  return str_cat(what, " of layer ", l, c.is_global(l) ? " (global)" : "");
}

void check_scalars(const Tensor& scalars) {
  GEMMAX_CHECK(scalars.dtype() == DType::F64 && scalars.numel() == StepScalars::kCount,
               "the step scalars must be float64 [", int64_t(StepScalars::kCount), "], got ",
               scalars.str());
}

}  // namespace

void Gemma4Model::forward_backward(const StepInputs& in, const Tensor& weights, const Tensor& grads,
                                   const Tensor& scalars) {
  check_dtypes(weights, options_.act);
  GEMMAX_CHECK(grads.dtype() == weights.dtype(), "gradients ", grads.str(), " for weights ",
               weights.str());
  WholeParams params(be_, table_, options_, weights, grads);
  forward_backward(in, params, scalars);
}

void Gemma4Model::forward_backward(const StepInputs& in, StepParams& P, const Tensor& scalars) {
  using Pass = StepParams::Pass;
  const ModelConfig& c = config();
  const int64_t L = c.num_layers, T = in.tokens_count(), D = c.d_model;
  const DType act = options_.act;
  check_scalars(scalars);
  MemoryTracker& mem = be_.tracker();
  be_.fill({.x = scalars.flat_slice(StepScalars::kCeSum, {1}), .value = 0.0});
  be_.fill({.x = scalars.flat_slice(StepScalars::kLbSum, {1}), .value = 0.0});
  LayerContext ctx = context(in, scalars);

  // Forward. xs[l] is layer l's input; under full remat it is all a layer keeps. Each layer
  // computes with compute-dtype weights that live only while it runs.
  std::vector<Tensor> xs(L + 1);
  std::vector<LayerActs> acts(L);
  mem.set_phase("embedding");
  xs[0] = P.embed(in);
  // The small block: per-layer inputs from the tokens and x_0; donors' K/V for the sharing layers.
  DonorKv donor_kv(L);
  if (c.num_kv_shared_layers > 0) ctx.donor_kv = &donor_kv;
  PerLayerInputActs pli_acts;
  PerLayerInputWeights pli_w;
  if (c.has_per_layer_inputs()) {
    pli_w = P.per_layer_weights();
    per_layer_inputs_forward(ctx, pli_w, xs[0], pli_acts);
    ctx.per_layer_inputs = pli_acts.pli;
    ctx.d_per_layer_inputs = be_.alloc(pli_acts.pli.shape(), act, MemKind::Workspace);
  }
  for (int64_t l = 0; l < L; ++l) {
    mem.set_phase(layer_phase("forward", c, l));
    {
      const LayerWeights w = P.layer(l, Pass::Forward);
      xs[l + 1] = be_.alloc({T, D}, act, MemKind::Activations);
      layer_forward(ctx, l, w, xs[l], xs[l + 1], acts[l]);
      acts[l].drop_unsaved(options_.remat);
    }
    P.layer_done(l, Pass::Forward);
  }

  // Head: loss and its gradient, tile by tile.
  mem.set_phase("output head", StepPart::OutputHead);
  Tensor dx = be_.alloc({T, D}, act, MemKind::Workspace);
  P.head(in, xs[L], ce_grad_scale(in), scalars.flat_slice(StepScalars::kCeSum, {1}), dx);
  xs[L] = Tensor();

  // Backward through the layers, last to first; each re-runs its forward for what the remat
  // policy did not keep.
  Tensor dx_prev = be_.alloc({T, D}, act, MemKind::Workspace);
  for (int64_t l = L - 1; l >= 0; --l) {
    mem.set_phase(layer_phase("backward", c, l));
    {
      const LayerWeights w = P.layer(l, Pass::Backward);
      const LayerWeights g = P.layer_grads(l);
      layer_backward(ctx, l, w, g, xs[l], acts[l], dx, dx_prev);
    }
    P.layer_done(l, Pass::Backward);
    acts[l] = LayerActs();
    if (l > 0) xs[l] = Tensor();
    std::swap(dx, dx_prev);
  }
  mem.set_phase("embedding backward");
  if (c.has_per_layer_inputs())
    per_layer_inputs_backward(ctx, pli_w, P.per_layer_grads(), xs[0], pli_acts,
                              ctx.d_per_layer_inputs, dx);
  P.embed_backward(in, dx);
}

double Gemma4Model::ce_grad_scale(const StepInputs& in) {
  return 1.0 / (double(in.total_targets) + 1e-8);
}

LossInfo Gemma4Model::losses(const Tensor& host_scalars, const StepInputs& in) const {
  LossInfo info;
  info.num_targets = in.total_targets;
  info.ce_loss = ce_mean(get_as_double(host_scalars, StepScalars::kCeSum), in.total_targets);
  info.lb_loss = get_as_double(host_scalars, StepScalars::kLbSum);
  info.total_loss = info.ce_loss + info.lb_loss;
  return info;
}

LossInfo Gemma4Model::forward_backward(const StepInputs& in, const Tensor& weights,
                                       const Tensor& grads) {
  const Tensor scalars = be_.zeros({StepScalars::kCount}, DType::F64, MemKind::Workspace);
  forward_backward(in, weights, grads, scalars);
  return losses(be_.to_host(scalars), in);
}

Tensor Gemma4Model::forward_only(const StepInputs& in, StepParams& P, const Tensor& scalars) {
  const ModelConfig& c = config();
  const int64_t L = c.num_layers, T = in.tokens_count(), D = c.d_model;
  check_scalars(scalars);
  MemoryTracker& mem = be_.tracker();
  be_.fill({.x = scalars.flat_slice(StepScalars::kCeSum, {1}), .value = 0.0});
  be_.fill({.x = scalars.flat_slice(StepScalars::kLbSum, {1}), .value = 0.0});
  // The training step's own forward (its remat policy, so its buffers: what the memory plan
  // covers); what a layer keeps for a backward is freed as soon as the layer is done.
  LayerContext ctx = context(in, scalars);
  mem.set_phase("embedding");
  Tensor x = P.embed(in);
  // The small block: per-layer inputs from the tokens and x_0; donors' K/V for the sharing layers.
  DonorKv donor_kv(L);
  if (c.num_kv_shared_layers > 0) ctx.donor_kv = &donor_kv;
  PerLayerInputActs pli_acts;
  if (c.has_per_layer_inputs()) {
    per_layer_inputs_forward(ctx, P.per_layer_weights(), x, pli_acts);
    ctx.per_layer_inputs = pli_acts.pli;
  }
  for (int64_t l = 0; l < L; ++l) {
    mem.set_phase(layer_phase("forward", c, l));
    {
      const LayerWeights w = P.layer(l, StepParams::Pass::Forward);
      Tensor y = be_.alloc({T, D}, options_.act, MemKind::Activations);
      LayerActs acts;
      layer_forward(ctx, l, w, x, y, acts);
      x = y;
    }
    P.layer_done(l, StepParams::Pass::Forward);
  }
  mem.set_phase("output head");
  P.head(in, x, ce_grad_scale(in), scalars.flat_slice(StepScalars::kCeSum, {1}), Tensor());
  return x;
}

LossInfo Gemma4Model::forward(const StepInputs& in, const Tensor& weights, Tensor* logits) {
  check_dtypes(weights, options_.act);
  const Tensor scalars = be_.zeros({StepScalars::kCount}, DType::F64, MemKind::Workspace);
  WholeParams params(be_, table_, options_, weights, Tensor());
  const Tensor x = forward_only(in, params, scalars);
  const LossInfo info = losses(be_.to_host(scalars), in);
  if (logits) {
    const ModelWeights W = bind_model(table_, weights);
    const HeadWeights hw{compute_copy(be_, W.embed, head_dot_dtype(options_)), W.final_norm};
    *logits = head_logits(be_, config(), options_, hw, x);
  }
  return info;
}

}  // namespace gemmax
