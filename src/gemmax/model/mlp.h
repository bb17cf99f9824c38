// The dense GeGLU MLP of a decoder layer with its two norms (docs/MODEL.md §3, §4.5):
//   out = RMSNorm( (gelu_tanh(a . Wg^T) * (a . Wu^T)) . Wd^T ; post_feedforward_layernorm_1 ),
//   a = RMSNorm(h; pre_feedforward_layernorm)
// The dense layer (ModelConfig::has_moe() false) has no post_feedforward_layernorm_1: out is the
// down projection itself, which the layer's post_feedforward_layernorm reads.
#pragma once

#include "gemmax/model/context.h"
#include "gemmax/model/weights.h"

namespace gemmax {

struct MlpMatmuls {  // ActClass::Matmul
  Tensor gate_up;    // [T, 2*Fs] = a . [Wg; Wu]^T, one matmul
  Tensor proj;       // act . Wd^T [T, D]
};
struct MlpOthers {         // ActClass::Other
  Tensor normed, rstd_in;  // a
  Tensor act;              // [T, Fs]
  Tensor rstd_post;        // the post-norm's rstd
  Tensor out;              // [T, D]; the dense layer: proj itself
};
using MlpActs = RematActs<MlpMatmuls, MlpOthers>;

// Fills in the activations `acts` does not hold yet.
void mlp_forward(const LayerContext& ctx, const LayerWeights& w, const Tensor& h, MlpActs& acts);
// dh += the gradient through the block; weight gradients accumulate into g.
void mlp_backward(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                  const Tensor& h, const MlpActs& acts, const Tensor& dout, const Tensor& dh);

}  // namespace gemmax
