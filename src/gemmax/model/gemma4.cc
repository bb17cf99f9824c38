#include "gemmax/model/gemma4.h"

#include <cmath>
#include <vector>

#include "gemmax/model/head.h"
#include "gemmax/model/layer.h"
#include "gemmax/model/weights.h"

namespace gemmax {

RematPolicy parse_remat_policy(const std::string& name) {
  if (name == "none") return RematPolicy::None;
  if (name == "full") return RematPolicy::Full;
  fail("unknown remat_policy '", name, "': expected one of full, none");
}

Gemma4Model::Gemma4Model(const ModelConfig& config, Backend& backend, const ModelOptions& options)
    : table_(config), be_(backend), options_(options) {
  const ModelConfig& c = table_.config();
  rope_local_ = be_.to_device(rope_inv_freq(c.head_dim, c.local_rope_theta, c.local_rope_proportion),
                              MemKind::Workspace);
  rope_global_ = be_.to_device(
      rope_inv_freq(c.global_head_dim, c.global_rope_theta, c.global_rope_proportion),
      MemKind::Workspace);
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
  GEMMAX_CHECK(weights.dtype() == options_.act, "weights are ", dtype_name(weights.dtype()),
               " but dtype is ", dtype_name(options_.act),
               "; mixed precision is not implemented: set dtype equal to weight_dtype");
  const LayerContext ctx = context(in);
  const ModelWeights W = bind_model(table_, weights);
  const ModelWeights G = bind_model(table_, grads);

  // Forward. xs[l] is layer l's input; under full remat it is all a layer keeps.
  std::vector<Tensor> xs(L + 1);
  std::vector<LayerActs> acts(L);
  xs[0] = embed(in, W.embed);
  double lb_sum = 0;
  for (int64_t l = 0; l < L; ++l) {
    xs[l + 1] = be_.alloc({T, D}, options_.act, MemKind::Activations);
    layer_forward(ctx, l, W.layers[l], xs[l], xs[l + 1], acts[l]);
    lb_sum += acts[l].moe.lb_loss;
    if (options_.remat == RematPolicy::Full) acts[l] = LayerActs();
  }

  // Head: loss and its gradient, tile by tile.
  LossInfo info;
  info.num_targets = in.num_targets;
  const double ce_scale = 1.0 / (double(in.num_targets) + 1e-8);
  Tensor dx = be_.alloc({T, D}, options_.act, MemKind::Workspace);
  const HeadWeights hw{W.embed, W.final_norm}, hg{G.embed, G.final_norm};
  const double ce_sum =
      head_loss(be_, c, in, options_.act, hw, xs[L], options_.num_vocab_tiling, ce_scale, &hg, &dx);
  xs[L] = Tensor();

  // Backward through the layers, last to first.
  Tensor dx_prev = be_.alloc({T, D}, options_.act, MemKind::Workspace);
  for (int64_t l = L - 1; l >= 0; --l) {
    if (options_.remat == RematPolicy::Full) {
      Tensor y = be_.alloc({T, D}, options_.act, MemKind::Workspace);
      layer_forward(ctx, l, W.layers[l], xs[l], y, acts[l]);
    }
    layer_backward(ctx, l, W.layers[l], G.layers[l], xs[l], acts[l], dx, dx_prev);
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
  const LayerContext ctx = context(in);
  const ModelWeights W = bind_model(table_, weights);
  Tensor x = embed(in, W.embed);
  double lb_sum = 0;
  for (int64_t l = 0; l < L; ++l) {
    Tensor y = be_.alloc({T, D}, options_.act, MemKind::Activations);
    LayerActs acts;
    layer_forward(ctx, l, W.layers[l], x, y, acts);
    lb_sum += acts.moe.lb_loss;
    x = y;
  }
  const HeadWeights hw{W.embed, W.final_norm};
  LossInfo info;
  info.num_targets = in.num_targets;
  const double ce_scale = 1.0 / (double(in.num_targets) + 1e-8);
  info.ce_loss = ce_scale * head_loss(be_, c, in, options_.act, hw, x, options_.num_vocab_tiling,
                                      0.0, nullptr, nullptr);
  info.lb_loss = lb_sum / double(L);
  info.total_loss = info.ce_loss + info.lb_loss;
  if (logits) *logits = head_logits(be_, c, options_.act, hw, x);
  return info;
}

}  // namespace gemmax
