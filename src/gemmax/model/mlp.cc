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
    be.matmul({.c = a.gate_up,
               .a = a.normed,
               .trans_a = false,
               .b = w.mlp_gate_up,
               .trans_b = true,
               .accumulate = false});
  }
  if (!a.act.defined()) {
    a.act = ctx.act_tensor({T, F}, Other);
    be.geglu_forward(
        {.a = a.act, .h = a.gate_up, .round_gelu = !ctx.opt.activations_in_float32});
  }
  if (!a.proj.defined()) {
    a.proj = ctx.act_tensor({T, D}, Matmul);
    be.matmul({.c = a.proj,
               .a = a.act,
               .trans_a = false,
               .b = w.mlp_down,
               .trans_b = true,
               .accumulate = false});
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
    be.rmsnorm_backward({.dx = dproj,
                         .dw = g.post_mlp_norm,
                         .dy = dout,
                         .x = a.proj,
                         .w = w.post_mlp_norm,
                         .rstd = a.rstd_post,
                         .out_scale = 1.0,
                         .accumulate_dx = false});
  }
  be.matmul({.c = g.mlp_down,
             .a = dproj,
             .trans_a = true,
             .b = a.act,
             .trans_b = false,
             .accumulate = true});
  Tensor dact = ctx.work({T, F});
  be.matmul({.c = dact,
             .a = dproj,
             .trans_a = false,
             .b = w.mlp_down,
             .trans_b = false,
             .accumulate = false});
  dproj = Tensor();
  Tensor dgate_up = ctx.work({T, 2 * F});
  be.geglu_backward(
      {.dh = dgate_up, .da = dact, .h = a.gate_up, .round_gelu = !ctx.opt.activations_in_float32});
  dact = Tensor();
  be.matmul({.c = g.mlp_gate_up,
             .a = dgate_up,
             .trans_a = true,
             .b = a.normed,
             .trans_b = false,
             .accumulate = true});
  Tensor dnormed = ctx.work({T, D});
  be.matmul({.c = dnormed,
             .a = dgate_up,
             .trans_a = false,
             .b = w.mlp_gate_up,
             .trans_b = false,
             .accumulate = false});
  dgate_up = Tensor();
  be.rmsnorm_backward({.dx = dh,
                       .dw = g.pre_mlp_norm,
                       .dy = dnormed,
                       .x = h,
                       .w = w.pre_mlp_norm,
                       .rstd = a.rstd_in,
                       .out_scale = 1.0,
                       .accumulate_dx = true});
}

}  // namespace gemmax
