// One Gemma-4 decoder layer (gemma4.md §3):
//   h = x + Attention(x)
//   f = RMSNorm( MLP(h) + MoE(h) ; post_feedforward_layernorm )
//   y = (h + f) * layer_scalar
#pragma once

#include "gemmax/model/attention.h"
#include "gemmax/model/mlp.h"
#include "gemmax/model/moe.h"

namespace gemmax {

struct LayerActs {
  AttentionActs attn;
  Tensor h;                 // residual after attention [T, D]
  MlpActs mlp;
  MoeActs moe;
  Tensor ffn_sum;           // MLP out + MoE out [T, D]
  Tensor rstd_ffw, ffn;     // f = RMSNorm(ffn_sum)
};

// Writes y; acts holds what the backward needs.
void layer_forward(const LayerContext& ctx, int64_t layer, const LayerWeights& w, const Tensor& x,
                   const Tensor& y, LayerActs& acts);
// Writes dx (the gradient w.r.t. the layer input) from dy; weight gradients accumulate into g.
void layer_backward(const LayerContext& ctx, int64_t layer, const LayerWeights& w,
                    const LayerWeights& g, const Tensor& x, const LayerActs& acts,
                    const Tensor& dy, const Tensor& dx);

}  // namespace gemmax
