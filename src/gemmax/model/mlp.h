// The dense GeGLU MLP of a decoder layer with its two norms (docs/MODEL.md §3, §4.5):
//   out = RMSNorm( (gelu_tanh(a . Wg^T) * (a . Wu^T)) . Wd^T ; post_feedforward_layernorm_1 ),
//   a = RMSNorm(h; pre_feedforward_layernorm)
// The dense layer (ModelConfig::has_moe() false) has no post_feedforward_layernorm_1: out is the
// down projection itself, which the layer's post_feedforward_layernorm reads.
#pragma once

#include "gemmax/model/context.h"
#include "gemmax/model/weights.h"

namespace gemmax {

struct MlpActs {
  Tensor normed, rstd_in;   // a
  Tensor gate_up;           // [T, 2*Fs] = a . [Wg; Wu]^T, one matmul
  Tensor act;               // [T, Fs]
  Tensor proj, rstd_post;   // act . Wd^T
  Tensor out;               // [T, D]; the dense layer: proj itself

  void drop_unsaved() {
    gemmax::drop_unsaved({&normed, &rstd_in, &gate_up, &act, &proj, &rstd_post, &out});
  }
};

// Fills in the activations `acts` does not hold yet.
void mlp_forward(const LayerContext& ctx, const LayerWeights& w, const Tensor& h, MlpActs& acts);
// dh += the gradient through the block; weight gradients accumulate into g.
void mlp_backward(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                  const Tensor& h, const MlpActs& acts, const Tensor& dout, const Tensor& dh);

}  // namespace gemmax
