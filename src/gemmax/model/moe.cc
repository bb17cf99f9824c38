#include "gemmax/model/moe.h"

#include <cmath>

namespace gemmax {

void moe_forward(const LayerContext& ctx, const LayerWeights& w, const Tensor& h, MoeActs& a) {
  Backend& be = ctx.be;
  const ModelConfig& c = ctx.cfg;
  const int64_t T = ctx.tokens(), D = c.d_model, E = c.num_experts, K = c.num_experts_per_tok;
  const int64_t F = c.moe_mlp_dim;
  using enum ActClass;

  // Router.
  if (!a.router_in.defined()) {
    a.router_in = ctx.act_tensor({T, D}, Other);
    a.rstd_router = ctx.stat_tensor({T}, Other);
    be.rmsnorm_forward(a.router_in, a.rstd_router, h, w.router_scale, c.norm_eps,
                       1.0 / std::sqrt(double(D)));
  }
  if (!a.logits.defined()) {
    a.logits = ctx.act_tensor({T, E}, Matmul);
    be.matmul(a.logits, a.router_in, false, w.router_proj, true, false);
  }
  if (!a.probs.defined()) {
    a.probs = ctx.stat_tensor({T, E}, Other);
    a.idx = ctx.int_tensor({T, K}, Other);
    a.weights = ctx.stat_tensor({T, K}, Other);
    be.router_forward(a.probs, a.idx, a.weights, a.logits, w.router_expert_scale,
                      c.norm_topk_prob);
  }
  if (!a.density.defined()) {
    a.density = ctx.stat_tensor({ctx.in.batch, E}, Other);
    const double balance = be.load_balance_forward(a.density, a.probs, a.idx, ctx.in.seq);
    a.lb_loss = c.load_balance_loss_weight * double(E) * double(E) * balance;
  }

  // Experts: sort token copies by expert, two grouped matmuls, weighted combine.
  if (!a.normed.defined()) {
    a.normed = ctx.act_tensor({T, D}, Other);
    a.rstd_in = ctx.stat_tensor({T}, Other);
    be.rmsnorm_forward(a.normed, a.rstd_in, h, w.pre_moe_norm, c.norm_eps, 1.0);
  }
  if (!a.routing.order.defined()) {
    a.routing.order = ctx.int_tensor({T * K}, Other);
    a.routing.inverse = ctx.int_tensor({T * K}, Other);
    a.routing.group_sizes = ctx.int_tensor({E}, Other);
    be.route_sort(a.routing, a.idx, E);
  }
  if (!a.xs.defined()) {
    a.xs = ctx.act_tensor({T * K, D}, Other);
    be.permute(a.xs, a.normed, a.routing.order, K);
  }
  if (!a.gate_up.defined()) {
    a.gate_up = ctx.act_tensor({T * K, 2 * F}, Matmul);
    be.gmm(a.gate_up, a.xs, w.experts_gate_up, a.routing.group_sizes);
  }
  if (!a.act.defined()) {
    a.act = ctx.act_tensor({T * K, F}, Other);
    be.geglu_forward(a.act, a.gate_up);
  }
  if (!a.y.defined()) {
    a.y = ctx.act_tensor({T * K, D}, Matmul);
    be.gmm(a.y, a.act, w.experts_down, a.routing.group_sizes);
  }
  if (!a.combined.defined()) {
    a.combined = ctx.act_tensor({T, D}, Other);
    be.combine_forward(a.combined, a.y, a.routing.inverse, a.weights);
  }
  if (!a.out.defined()) {
    a.out = ctx.act_tensor({T, D}, Other);
    a.rstd_post = ctx.stat_tensor({T}, Other);
    be.rmsnorm_forward(a.out, a.rstd_post, a.combined, w.post_moe_norm, c.norm_eps, 1.0);
  }
}

void moe_backward(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                  const Tensor& h, const MoeActs& a, const Tensor& dout, const Tensor& dh) {
  Backend& be = ctx.be;
  const ModelConfig& c = ctx.cfg;
  const int64_t T = ctx.tokens(), D = c.d_model, E = c.num_experts, K = c.num_experts_per_tok;
  const int64_t F = c.moe_mlp_dim;

  // Experts, in reverse.
  Tensor dcombined = ctx.work({T, D});
  be.rmsnorm_backward(dcombined, g.post_moe_norm, dout, a.combined, w.post_moe_norm, a.rstd_post,
                      1.0, false);
  Tensor dy = ctx.work({T * K, D});
  Tensor dweights = ctx.work_stat({T, K});
  be.combine_backward(dy, dweights, dcombined, a.y, a.routing.order, a.weights);
  dcombined = Tensor();
  Tensor dact = ctx.work({T * K, F});
  be.gmm_dlhs(dact, dy, w.experts_down, a.routing.group_sizes);
  be.gmm_drhs(g.experts_down, a.act, dy, a.routing.group_sizes);
  dy = Tensor();
  Tensor dgate_up = ctx.work({T * K, 2 * F});
  be.geglu_backward(dgate_up, dact, a.gate_up);
  dact = Tensor();
  Tensor dxs = ctx.work({T * K, D});
  be.gmm_dlhs(dxs, dgate_up, w.experts_gate_up, a.routing.group_sizes);
  be.gmm_drhs(g.experts_gate_up, a.xs, dgate_up, a.routing.group_sizes);
  dgate_up = Tensor();
  Tensor dnormed = ctx.work({T, D});
  be.permute_backward(dnormed, dxs, a.routing.inverse, K, false);
  dxs = Tensor();
  be.rmsnorm_backward(dh, g.pre_moe_norm, dnormed, h, w.pre_moe_norm, a.rstd_in, 1.0, true);
  dnormed = Tensor();

  // Router. The layer's load-balance loss w E^2 mean_{b,e}(density * mean_s p) has, for every
  // token s of sequence b, dL/dp[e] = w E density[b, e] / (B S); times this layer's share.
  Tensor lb_dprobs = ctx.work_stat({ctx.in.batch, E});
  be.copy(lb_dprobs, a.density);
  be.scale(lb_dprobs, ctx.aux_weight * double(E) / double(T));
  Tensor dlogits = ctx.work({T, E});
  be.router_backward(dlogits, g.router_expert_scale, dweights, a.probs, a.idx,
                     w.router_expert_scale, c.norm_topk_prob, lb_dprobs, ctx.in.seq);
  dweights = Tensor();
  lb_dprobs = Tensor();
  be.matmul(g.router_proj, dlogits, true, a.router_in, false, true);
  Tensor drouter_in = ctx.work({T, D});
  be.matmul(drouter_in, dlogits, false, w.router_proj, false, false);
  dlogits = Tensor();
  be.rmsnorm_backward(dh, g.router_scale, drouter_in, h, w.router_scale, a.rstd_router,
                      1.0 / std::sqrt(double(D)), true);
}

}  // namespace gemmax
