// The routed mixture of experts of a decoder layer (gemma4.md §4.6, training.md §2-7):
//   router:  z = RMSNorm_noscale(h) * router.scale * D^-1/2;  logits = z . Wr^T
//            probs = softmax(logits); top-k; renormalise; * per_expert_scale
//   experts: e = RMSNorm(h; pre_feedforward_layernorm_2); token copies sorted by expert;
//            grouped matmuls over contiguous groups; weighted combine in fp32
//   out = RMSNorm(combined; post_feedforward_layernorm_2)
// and the layer's load-balance loss on the router probabilities.
#pragma once

#include "gemmax/model/context.h"
#include "gemmax/model/weights.h"

namespace gemmax {

struct MoeActs {
  // router
  Tensor router_in, rstd_router;   // z [T, D]
  Tensor logits;                   // [T, E]
  Tensor probs;                    // [T, E] softmax over all experts
  Tensor idx;                      // int32 [T, K] chosen experts
  Tensor weights;                  // [T, K] combine weights
  Tensor density;                  // [B, E] fraction of each sequence's tokens per expert
  double lb_loss = 0;              // this layer's load-balance loss (weighted, before the layer mean)
  // experts
  Tensor normed, rstd_in;          // e [T, D]
  Routing routing;
  Tensor xs;                       // [T*K, D] token copies in expert order
  Tensor gate_up;                  // [T*K, 2F]
  Tensor act;                      // [T*K, F]
  Tensor y;                        // [T*K, D] expert outputs, expert order
  Tensor combined, rstd_post;      // m [T, D]
  Tensor out;                      // [T, D]

  void drop_unsaved() {
    gemmax::drop_unsaved({&router_in, &rstd_router, &logits, &probs, &idx, &weights, &density,
                          &normed, &rstd_in, &routing.order, &routing.inverse,
                          &routing.group_sizes, &xs, &gate_up, &act, &y, &combined, &rstd_post,
                          &out});
  }
};

// Fills in the activations `acts` does not hold yet.
void moe_forward(const LayerContext& ctx, const LayerWeights& w, const Tensor& h, MoeActs& acts);
// dh += the gradient through the block (experts, router and the load-balance loss).
void moe_backward(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                  const Tensor& h, const MoeActs& acts, const Tensor& dout, const Tensor& dh);

}  // namespace gemmax
