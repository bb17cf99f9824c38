// The routed mixture of experts of a decoder layer (docs/MODEL.md §4.6, docs/TRAINING.md §2-7):
//   router: z = RMSNorm_noscale(h) * router.scale * D^-1/2; logits = z . Wr^T
//            probs = softmax(logits); top-k; renormalise; * per_expert_scale
//   experts: e = RMSNorm(h; pre_feedforward_layernorm_2); token copies sorted
//   by expert;
//            grouped matmuls over contiguous groups; weighted combine in fp32
//   out = residual + RMSNorm(combined; post_feedforward_layernorm_2)
// and the layer's load-balance loss on the router probabilities.
//
// Two switches choose how the experts run (ModelOptions, docs/SEED.md):
// - moe_fuse_permute_combine: the first grouped matmul reads its rows straight from e through the
//   sort (no [T*K, D] copy of the tokens) and the second writes its rows back in token order, so
//   the combine is a contiguous weighted sum; off: explicit permute and combine gathers around
//   grouped matmuls on sorted rows.
// - moe_fused_gate_up: one grouped matmul over the fused [E, 2F, D] gate_up weight; off: two, over
//   its gate and up halves, whose backward handles a missing half as zero.
#pragma once

#include "gemmax/model/context.h"
#include "gemmax/model/weights.h"

namespace gemmax {

// One layer's MoE activations, by the class the remat policy keeps them by (RematActs).
struct MoeMatmuls {  // ActClass::Matmul: kept under remat none and minimal
  Tensor logits;     // [T, E]
  Tensor gate_up;    // [T*K, 2F]; split layout: the gate half [T*K, F]
  Tensor up;         // [T*K, F], split layout only
  Tensor y;          // [T*K, D] expert outputs: in expert order, or in token order with the fused
                     // combine
  Tensor lora_router, lora_gate_up, lora_down;  // the adapters' x . A^T, scaled (model/lora/)
};
struct MoeOthers {  // ActClass::Other: kept under remat none only
  // router
  Tensor router_in, rstd_router;  // z [T, D]
  Tensor probs;                   // [T, E] softmax over all experts
  Tensor idx;                     // int32 [T, K] chosen experts
  Tensor weights;                 // [T, K] combine weights
  Tensor density;                 // [B, E] fraction of each sequence's tokens per expert
  // experts
  Tensor normed, rstd_in;  // e [T, D]
  Routing routing;
  Tensor xs;                   // [T*K, D] token copies in expert order (no fused permute)
  Tensor act;                  // [T*K, F]
  Tensor combined, rstd_post;  // m [T, D]
  Tensor out;                  // residual + RMSNorm(m) [T, D]
};
using MoeActs = RematActs<MoeMatmuls, MoeOthers>;

// Fills in the activations `acts` does not hold yet; acts.out = residual + the block's output (the
// layer's dense MLP output: the sum the post-feedforward norm reads). The load-balance loss,
// weighted and shared by the layers, adds into ctx.lb_loss when that is defined.
void moe_forward(const LayerContext& ctx, const LayerWeights& w, const Tensor& h,
                 const Tensor& residual, MoeActs& acts);
// dh += the gradient through the block (experts, router and the load-balance loss); weight
// gradients accumulate into g where it has them.
void moe_backward(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                  const Tensor& h, const MoeActs& acts, const Tensor& dout, const Tensor& dh);

// The backward of the expert gate/up grouped matmuls in the split layout: from the gate and up
// halves' gradients (either may be undefined: a half whose gradient is absent contributes nothing),
// dlhs [T*K, D] is written through `dlhs_rows` and the halves' weight gradients accumulate into
// g_gate_up [E, 2F, D] (undefined: frozen, none computed); lhs is read through `lhs_rows`.
void expert_gate_up_backward_split(Backend& be, const Tensor& dlhs, const Tensor& g_gate_up,
                                   const Tensor& dgate, const Tensor& dup, const Tensor& lhs,
                                   const Tensor& gate_up, const Tensor& group_sizes,
                                   const Tensor& lhs_rows, const Tensor& dlhs_rows);

}  // namespace gemmax
