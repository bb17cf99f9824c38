// One Gemma-4 decoder layer (docs/MODEL.md §3):
//   h = x + RMSNorm(Attention(x); post_attention_layernorm)
//   f = RMSNorm( MLP(h) + MoE(h) ; post_feedforward_layernorm )
//   y = (h + f) * layer_scalar
// The dense layer (gemma4-31b, ModelConfig::has_moe() false) has no MoE and no
// post_feedforward_layernorm_1: f = RMSNorm( MLP(h) ; post_feedforward_layernorm ).
// The small block (gemma4-e2b/e4b) adds the layer's per-layer input to h + f before the scalar
// (model/per_layer_inputs.h), and its last layers attend with earlier layers' K/V.
//
// Remat (docs/TRAINING.md §10): the forward fills in only the activations its LayerActs does not
// hold yet, and drop_unsaved(remat_policy) then releases what the remat policy does not keep. The
// backward first re-runs the forward on the same LayerActs, which recomputes exactly what was
// released: everything under `full`, all but the matmul outputs under `minimal`, nothing under
// `none`.
#pragma once

#include "gemmax/model/attention.h"
#include "gemmax/model/mlp.h"
#include "gemmax/model/moe.h"
#include "gemmax/model/per_layer_inputs.h"

namespace gemmax {

// The layer's own activation: the post-feedforward norm's.
struct PostFfwNormOthers {  // ActClass::Other
  Tensor f, rstd;           // f = RMSNorm(ffn_in()) [T, D] and its rstd
};
using PostFfwNormActs = RematActs<NoActs, PostFfwNormOthers>;

// The layer's activations: its blocks' and nothing else, so drop_unsaved() reaches them all.
struct LayerActs {
  AttentionActs attn;  // attn.out is h, the residual after attention [T, D]
  MlpActs mlp;
  MoeActs moe;               // moe.out is MLP out + MoE out [T, D]
  PostFfwNormActs post_ffw;  // f
  LayerInputActs pli;        // the small block's per-layer input (model/per_layer_inputs.h)

  const Tensor& h() const { return attn.out; }
  // What the post-feedforward norm reads: MLP + MoE, or the dense layer's MLP output.
  const Tensor& ffn_in(const ModelConfig& c) const { return c.has_moe() ? moe.out : mlp.out; }
  void drop_unsaved(RematPolicy remat) {
    attn.drop_unsaved(remat);
    mlp.drop_unsaved(remat);
    moe.drop_unsaved(remat);
    post_ffw.drop_unsaved(remat);
    pli.drop_unsaved(remat);
  }
};
// A member outside the blocks above would be missed by drop_unsaved(): add a block instead.
static_assert(sizeof(LayerActs) == sizeof(AttentionActs) + sizeof(MlpActs) + sizeof(MoeActs) +
                                       sizeof(PostFfwNormActs) + sizeof(LayerInputActs));

// Fills in what `acts` does not hold and writes y (skipped when y is undefined: the backward's
// recompute does not need the output).
void layer_forward(const LayerContext& ctx, int64_t layer, const LayerWeights& w, const Tensor& x,
                   const Tensor& y, LayerActs& acts);
// Re-runs the forward to fill in what the remat policy released, then writes dx (the gradient
// w.r.t. the layer input) from dy; weight gradients accumulate into g.
void layer_backward(const LayerContext& ctx, int64_t layer, const LayerWeights& w,
                    const LayerWeights& g, const Tensor& x, LayerActs& acts, const Tensor& dy,
                    const Tensor& dx);

}  // namespace gemmax
