// The small block's per-layer inputs (gemma4-e2b/e4b; docs/MODEL.md §3.2).
//
// Model level, from the tokens and the scaled embedding x0 [T, D]:
//   pli[l] = ( table[tokens][:, l] * sqrt(P) + RMSNorm(x0 . W_l^T / sqrt(D); proj_norm) ) / sqrt(2)
// with table [V, L*P] (layer l's columns l*P .. l*P+P-1) and W_l the rows l*P .. l*P+P-1 of
// per_layer_model_projection [L*P, D]; pli is laid out [L, T, P], so each layer's is contiguous.
// In layer l, after the feed-forward residual r = h + f:
//   y = ( r + RMSNorm( (gelu(r . G^T) * pli[l]) . Pr^T ; post_per_layer_input_norm ) ) * s
// (G per_layer_input_gate [P, D], Pr per_layer_projection [D, P], s layer_scalar).
#pragma once

#include "gemmax/model/context.h"
#include "gemmax/model/weights.h"

namespace gemmax {

// What the model-level part keeps for its backward (all of it: L*T*P values, a few layers' worth
// of the residual stream).
struct PerLayerInputActs {
  Tensor pli;        // [L, T, P] the layers' inputs
  Tensor ctx, rstd;  // [L, T, P] x0's projection (scaled), its norm's rstd [L*T]
  Tensor lora_proj;  // model_proj's adapter: x0 . A^T, scaled (model/lora/)
};

// pli from the tokens and x0 (compute-dtype weights in w; the table may be the fp32 master).
void per_layer_inputs_forward(const LayerContext& ctx, const PerLayerInputWeights& w,
                              const Tensor& x0, PerLayerInputActs& acts);
// From dpli [L, T, P] (consumed: scaled in place): gradients into g (where it has them), and
// dx0 += the gradient through x0's projection.
void per_layer_inputs_backward(const LayerContext& ctx, const PerLayerInputWeights& w,
                               const PerLayerInputWeights& g, const Tensor& x0,
                               const PerLayerInputActs& acts, const Tensor& dpli,
                               const Tensor& dx0);

// The layer part, from h and f (the post-feedforward norm's output): writes y (if defined) and
// fills in what acts does not hold.
struct LayerInputMatmuls {      // ActClass::Matmul
  Tensor gate;                  // r . G^T [T, P]
  Tensor proj;                  // act . Pr^T [T, D]
  Tensor lora_gate, lora_proj;  // the adapters' x . A^T, scaled (model/lora/)
};
struct LayerInputOthers {  // ActClass::Other
  Tensor r;                // h + f [T, D]: what the gate reads
  Tensor act;              // gelu(gate) * pli[l]
  Tensor rstd;             // proj's norm's rstd
  Tensor fn;               // f + RMSNorm(proj) [T, D]: y = (h + fn) * s
};
using LayerInputActs = RematActs<LayerInputMatmuls, LayerInputOthers>;
void layer_input_forward(const LayerContext& ctx, const LayerWeights& w, const Tensor& h,
                         const Tensor& f, const Tensor& pli_l, LayerInputActs& acts,
                         const Tensor& y);
// From dy: dr = d(h + f) (written), dpli_l (written), weight gradients (layer_scalar's too) into
// g.
void layer_input_backward(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                          const Tensor& h, const Tensor& pli_l, const LayerInputActs& acts,
                          const Tensor& dy, const Tensor& dr, const Tensor& dpli_l);

}  // namespace gemmax
