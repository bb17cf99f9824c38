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
  Tensor gate_up;    // [T, 2*Fs] = a . [Wg; Wu]^T, one matmul; split: a . Wg^T [T, Fs]
  Tensor up;         // split only: a . Wu^T [T, Fs]
  Tensor proj;       // act . Wd^T [T, D]
  Tensor lora_gate, lora_up, lora_down;  // the adapters' x . A^T, scaled (model/lora/)
};
struct MlpOthers {         // ActClass::Other
  Tensor normed, rstd_in;  // a
  Tensor act;              // [T, Fs]
  Tensor rstd_post;        // the post-norm's rstd
  Tensor out;              // [T, D]; the dense layer: proj itself
};
using MlpActs = RematActs<MlpMatmuls, MlpOthers>;

// With an adapter on gate_proj or up_proj (LayerAdapters::mlp_split) the gate and the up product
// are two matmuls over the fused weight's halves, so that each adapter adds into its own output.
//
// Fills in the activations `acts` does not hold yet.
void mlp_forward(const LayerContext& ctx, const LayerWeights& w, const Tensor& h, MlpActs& acts);
// dh += the gradient through the block; weight gradients accumulate into g where it has them.
void mlp_backward(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                  const Tensor& h, const MlpActs& acts, const Tensor& dout, const Tensor& dh);

}  // namespace gemmax
