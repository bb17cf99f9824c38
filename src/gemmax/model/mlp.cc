#include "gemmax/model/mlp.h"

namespace gemmax {

void mlp_forward(const LayerContext& ctx, const LayerWeights& w, const Tensor& h, MlpActs& a) {
  Backend& be = ctx.be;
  const int64_t T = ctx.tokens(), D = ctx.cfg.d_model, F = w.mlp_down.dim(1);  // layer_mlp_dim
  using enum ActClass;
  if (!a.normed.defined()) {
    a.normed = ctx.act_tensor({T, D}, Other);
    a.rstd_in = ctx.stat_tensor({T}, Other);
    ctx.rmsnorm(a.normed, a.rstd_in, h, w.pre_mlp_norm);
  }
  if (!a.gate_up.defined()) {
    a.gate_up = ctx.act_tensor({T, 2 * F}, Matmul);
    be.matmul(a.gate_up, a.normed, false, w.mlp_gate_up, true, false);
  }
  if (!a.act.defined()) {
    a.act = ctx.act_tensor({T, F}, Other);
    be.geglu_forward(a.act, a.gate_up, Tensor());
  }
  if (!a.proj.defined()) {
    a.proj = ctx.act_tensor({T, D}, Matmul);
    be.matmul(a.proj, a.act, false, w.mlp_down, true, false);
  }
  if (!ctx.cfg.has_moe()) {  // the dense layer: the layer's post_feedforward_layernorm reads proj
    a.out = a.proj;
    return;
  }
  if (!a.out.defined()) {
    a.out = ctx.act_tensor({T, D}, Other);
    a.rstd_post = ctx.stat_tensor({T}, Other);
    ctx.rmsnorm(a.out, a.rstd_post, a.proj, w.post_mlp_norm);
  }
}

void mlp_backward(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                  const Tensor& h, const MlpActs& a, const Tensor& dout, const Tensor& dh) {
  Backend& be = ctx.be;
  const int64_t T = ctx.tokens(), D = ctx.cfg.d_model, F = w.mlp_down.dim(1);  // layer_mlp_dim
  Tensor dproj = dout;
  if (ctx.cfg.has_moe()) {
    dproj = ctx.work({T, D});
    be.rmsnorm_backward(dproj, g.post_mlp_norm, dout, a.proj, w.post_mlp_norm, a.rstd_post, 1.0,
                        false);
  }
  be.matmul(g.mlp_down, dproj, true, a.act, false, true);
  Tensor dact = ctx.work({T, F});
  be.matmul(dact, dproj, false, w.mlp_down, false, false);
  dproj = Tensor();
  Tensor dgate_up = ctx.work({T, 2 * F});
  be.geglu_backward(dgate_up, Tensor(), dact, a.gate_up, Tensor());
  dact = Tensor();
  be.matmul(g.mlp_gate_up, dgate_up, true, a.normed, false, true);
  Tensor dnormed = ctx.work({T, D});
  be.matmul(dnormed, dgate_up, false, w.mlp_gate_up, false, false);
  dgate_up = Tensor();
  be.rmsnorm_backward(dh, g.pre_mlp_norm, dnormed, h, w.pre_mlp_norm, a.rstd_in, 1.0, true);
}

}  // namespace gemmax
