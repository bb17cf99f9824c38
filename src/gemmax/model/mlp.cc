#include "gemmax/model/mlp.h"

#include "gemmax/model/lora/lora_linear.h"

namespace gemmax {

void mlp_forward(const LayerContext& ctx, const LayerWeights& w, const Tensor& h, MlpActs& a) {
  Backend& be = ctx.be;
  const int64_t T = ctx.tokens(), D = ctx.cfg.d_model, F = w.mlp_down.dim(1);  // layer_mlp_dim
  const LayerAdapters& lora = w.lora;
  using enum ActClass;
  if (!a.normed.defined()) {
    a.normed = ctx.act_tensor({T, D}, Other);
    a.rstd_in = ctx.stat_tensor({T}, Other);
    ctx.rmsnorm(a.normed, a.rstd_in, h, w.pre_mlp_norm);
  }
  if (!a.gate_up.defined() && !lora.mlp_split()) {
    a.gate_up = ctx.act_tensor({T, 2 * F}, Matmul);
    be.matmul({.c = a.gate_up,
               .a = a.normed,
               .trans_a = false,
               .b = w.mlp_gate_up,
               .trans_b = true,
               .accumulate = false});
  } else if (!a.gate_up.defined()) {
    a.gate_up = ctx.act_tensor({T, F}, Matmul);
    a.up = ctx.act_tensor({T, F}, Matmul);
    for (const bool up : {false, true})
      be.matmul({.c = up ? a.up : a.gate_up,
                 .a = a.normed,
                 .trans_a = false,
                 .b = w.mlp_gate_up.rows(up ? F : 0, up ? 2 * F : F),
                 .trans_b = true,
                 .accumulate = false});
    if (lora.mlp_gate.defined()) lora_forward(ctx, lora.mlp_gate, a.normed, a.gate_up, a.lora_gate);
    if (lora.mlp_up.defined()) lora_forward(ctx, lora.mlp_up, a.normed, a.up, a.lora_up);
  }
  if (!a.act.defined()) {
    a.act = ctx.act_tensor({T, F}, Other);
    be.geglu_forward(
        {.a = a.act, .h = a.gate_up, .up = a.up, .round_gelu = !ctx.opt.activations_in_float32});
  }
  if (!a.proj.defined()) {
    a.proj = ctx.act_tensor({T, D}, Matmul);
    be.matmul({.c = a.proj,
               .a = a.act,
               .trans_a = false,
               .b = w.mlp_down,
               .trans_b = true,
               .accumulate = false});
    if (lora.mlp_down.defined()) lora_forward(ctx, lora.mlp_down, a.act, a.proj, a.lora_down);
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
  const bool split = w.lora.mlp_split();
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
  if (g.mlp_down.defined())
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
  if (w.lora.mlp_down.defined())
    lora_backward(ctx, w.lora.mlp_down, g.lora.mlp_down, a.act, a.lora_down, dproj, dact);
  dproj = Tensor();
  // The gate and up gradients: one [T, 2F] tensor, or two [T, F] halves (split).
  Tensor dgate_up = ctx.work({T, split ? F : 2 * F});
  Tensor dup = split ? ctx.work({T, F}) : Tensor();
  be.geglu_backward({.dh = dgate_up,
                     .dup = dup,
                     .da = dact,
                     .h = a.gate_up,
                     .up = a.up,
                     .round_gelu = !ctx.opt.activations_in_float32});
  dact = Tensor();
  // (dout, the weight's rows): the fused product, or its two halves.
  std::vector<std::pair<Tensor, Tensor>> parts;
  if (split)
    parts = {{dgate_up, w.mlp_gate_up.rows(0, F)}, {dup, w.mlp_gate_up.rows(F, 2 * F)}};
  else
    parts = {{dgate_up, w.mlp_gate_up}};
  if (g.mlp_gate_up.defined())
    for (size_t i = 0; i < parts.size(); ++i)
      be.matmul(
          {.c = split ? g.mlp_gate_up.rows(int64_t(i) * F, int64_t(i + 1) * F) : g.mlp_gate_up,
           .a = parts[i].first,
           .trans_a = true,
           .b = a.normed,
           .trans_b = false,
           .accumulate = true});
  Tensor dnormed = ctx.work({T, D});
  for (size_t i = 0; i < parts.size(); ++i)
    be.matmul({.c = dnormed,
               .a = parts[i].first,
               .trans_a = false,
               .b = parts[i].second,
               .trans_b = false,
               .accumulate = i > 0});
  if (w.lora.mlp_gate.defined())
    lora_backward(ctx, w.lora.mlp_gate, g.lora.mlp_gate, a.normed, a.lora_gate, dgate_up, dnormed);
  if (w.lora.mlp_up.defined())
    lora_backward(ctx, w.lora.mlp_up, g.lora.mlp_up, a.normed, a.lora_up, dup, dnormed);
  parts.clear();
  dgate_up = dup = Tensor();
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
