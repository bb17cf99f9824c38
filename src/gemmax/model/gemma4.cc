#include "gemmax/model/gemma4.h"

#include <cmath>
#include <vector>

#include "gemmax/model/head.h"
#include "gemmax/model/layer.h"
#include "gemmax/model/weights.h"

namespace gemmax {

namespace {

void check_dtypes(const Tensor& weights, DType act) {
  const DType w = weights.dtype();
  GEMMAX_CHECK(w == act || (act == DType::BF16 && w == DType::F32), "weights are ",
               dtype_name(w), " with activations in ", dtype_name(act),
               ": supported are equal dtypes, or bfloat16 activations with float32 weights");
}

}  // namespace

Gemma4Model::Gemma4Model(const ModelConfig& config, Backend& backend, const ModelOptions& options)
    : table_(config), be_(backend), options_(options) {
  const ModelConfig& c = table_.config();
  rope_local_ = be_.to_device(rope_inv_freq(c.head_dim, c.local_rope_theta, c.local_rope_proportion),
                              MemKind::Data);
  rope_global_ = be_.to_device(
      rope_inv_freq(c.global_head_dim, c.global_rope_theta, c.global_rope_proportion),
      MemKind::Data);
}

LayerContext Gemma4Model::context(const StepInputs& in) const {
  const ModelConfig& c = config();
  return LayerContext{be_,         c,           in,
                      options_.act, rope_local_, rope_global_,
                      c.load_balance_loss_weight / double(c.num_layers)};
}

Tensor Gemma4Model::embed(const StepInputs& in, const Tensor& embed_table) const {
  Tensor x = be_.alloc({in.tokens_count(), config().d_model}, options_.act, MemKind::Activations);
  be_.embedding_forward(x, in.tokens, embed_table, std::sqrt(double(config().d_model)));
  return x;
}

LossInfo Gemma4Model::forward_backward(const StepInputs& in, const Tensor& weights,
                                       const Tensor& grads) {
  const ModelConfig& c = config();
  const int64_t L = c.num_layers, T = in.tokens_count(), D = c.d_model;
  const DType act = options_.act;
  check_dtypes(weights, act);
  GEMMAX_CHECK(grads.dtype() == weights.dtype(), "gradients ", grads.str(), " for weights ",
               weights.str());
  LayerContext ctx = context(in);
  ctx.remat = options_.remat;
  const ModelWeights W = bind_model(table_, weights);
  const ModelWeights G = bind_model(table_, grads);

  // Forward. xs[l] is layer l's input; under full remat it is all a layer keeps. Each layer
  // computes with a compute-dtype copy of its weights that lives only while it runs.
  std::vector<Tensor> xs(L + 1);
  std::vector<LayerActs> acts(L);
  xs[0] = embed(in, W.embed);
  double lb_sum = 0;
  for (int64_t l = 0; l < L; ++l) {
    const LayerWeights w = compute_weights(be_, W.layers[l], act);
    xs[l + 1] = be_.alloc({T, D}, act, MemKind::Activations);
    layer_forward(ctx, l, w, xs[l], xs[l + 1], acts[l]);
    lb_sum += acts[l].moe.lb_loss;
    acts[l].drop_unsaved();
  }

  // Head: loss and its gradient, tile by tile.
  LossInfo info;
  info.num_targets = in.num_targets;
  const double ce_scale = 1.0 / (double(in.num_targets) + 1e-8);
  Tensor dx = be_.alloc({T, D}, act, MemKind::Workspace);
  double ce_sum = 0;
  {
    const HeadWeights hw{compute_copy(be_, W.embed, act), W.final_norm};
    const HeadWeights hg{G.embed, G.final_norm};
    ce_sum = head_loss(be_, c, in, act, hw, xs[L], options_.num_vocab_tiling, ce_scale, &hg, &dx);
  }
  xs[L] = Tensor();

  // Backward through the layers, last to first; each re-runs its forward for what the remat
  // policy did not keep.
  Tensor dx_prev = be_.alloc({T, D}, act, MemKind::Workspace);
  for (int64_t l = L - 1; l >= 0; --l) {
    {
      const LayerWeights w = compute_weights(be_, W.layers[l], act);
      layer_backward(ctx, l, w, G.layers[l], xs[l], acts[l], dx, dx_prev);
    }
    acts[l] = LayerActs();
    if (l > 0) xs[l] = Tensor();
    std::swap(dx, dx_prev);
  }
  be_.embedding_backward(G.embed, dx, in.tokens, std::sqrt(double(D)));

  info.ce_loss = ce_sum * ce_scale;
  info.lb_loss = lb_sum / double(L);
  info.total_loss = info.ce_loss + info.lb_loss;
  return info;
}

LossInfo Gemma4Model::forward(const StepInputs& in, const Tensor& weights, Tensor* logits) {
  const ModelConfig& c = config();
  const int64_t L = c.num_layers, T = in.tokens_count(), D = c.d_model;
  const DType act = options_.act;
  check_dtypes(weights, act);
  LayerContext ctx = context(in);
  ctx.remat = RematPolicy::Full;  // nothing is kept: a layer's internals are its workspace
  const ModelWeights W = bind_model(table_, weights);
  Tensor x = embed(in, W.embed);
  double lb_sum = 0;
  for (int64_t l = 0; l < L; ++l) {
    const LayerWeights w = compute_weights(be_, W.layers[l], act);
    Tensor y = be_.alloc({T, D}, act, MemKind::Activations);
    LayerActs acts;
    layer_forward(ctx, l, w, x, y, acts);
    lb_sum += acts.moe.lb_loss;
    x = y;
  }
  const HeadWeights hw{compute_copy(be_, W.embed, act), W.final_norm};
  LossInfo info;
  info.num_targets = in.num_targets;
  const double ce_scale = 1.0 / (double(in.num_targets) + 1e-8);
  info.ce_loss = ce_scale * head_loss(be_, c, in, act, hw, x, options_.num_vocab_tiling, 0.0,
                                      nullptr, nullptr);
  info.lb_loss = lb_sum / double(L);
  info.total_loss = info.ce_loss + info.lb_loss;
  if (logits) *logits = head_logits(be_, c, act, hw, x);
  return info;
}

}  // namespace gemmax
