#include "gemmax/model/layer.h"

namespace gemmax {

namespace {

// Layer l's slice [T, P] of the per-layer inputs [L, T, P] (or of their gradient).
Tensor layer_slice(const LayerContext& ctx, const Tensor& all, int64_t layer) {
  const int64_t T = ctx.tokens(), P = ctx.cfg.per_layer_input_dim;
  return all.flat_slice(layer * T * P, {T, P});
}

}  // namespace

void layer_forward(const LayerContext& ctx, int64_t layer, const LayerWeights& w, const Tensor& x,
                   const Tensor& y, LayerActs& a) {
  const int64_t T = ctx.tokens(), D = ctx.cfg.d_model;
  attention_forward(ctx, layer, w, x, a.attn);
  mlp_forward(ctx, w, a.h(), a.mlp);
  if (ctx.cfg.has_moe()) moe_forward(ctx, w, a.h(), a.mlp.out, a.moe);
  if (!a.post_ffw.f.defined()) {
    a.post_ffw.f = ctx.act_tensor({T, D}, ActClass::Other);
    a.post_ffw.rstd = ctx.stat_tensor({T}, ActClass::Other);
    ctx.rmsnorm(a.post_ffw.f, a.post_ffw.rstd, a.ffn_in(ctx.cfg), w.post_ffw_norm);
  }
  if (ctx.cfg.has_per_layer_inputs())
    layer_input_forward(ctx, w, a.h(), a.post_ffw.f, layer_slice(ctx, ctx.per_layer_inputs, layer),
                        a.pli, y);
  else if (y.defined())
    ctx.be.scaled_sum_forward({.y = y, .a = a.h(), .b = a.post_ffw.f, .s = w.layer_scalar});
}

void layer_backward(const LayerContext& ctx, int64_t layer, const LayerWeights& w,
                    const LayerWeights& g, const Tensor& x, LayerActs& a, const Tensor& dy,
                    const Tensor& dx) {
  Backend& be = ctx.be;
  const int64_t T = ctx.tokens(), D = ctx.cfg.d_model;

  // Remat: fill in what the forward did not keep (its buffers are this layer's workspace). The
  // load-balance loss was summed by the forward already.
  LayerContext recompute = ctx;
  recompute.recompute = true;
  recompute.lb_loss = Tensor();
  layer_forward(recompute, layer, w, x, Tensor(), a);

  // y = (h + f) * s: d(h + f) = dy * s; ds += dy . (h + f).
  Tensor dh = ctx.work({T, D});
  if (ctx.cfg.has_per_layer_inputs())  // y = (h + f + per-layer input term) * s
    layer_input_backward(ctx, w, g, a.h(), layer_slice(ctx, ctx.per_layer_inputs, layer), a.pli,
                         dy, dh, layer_slice(ctx, ctx.d_per_layer_inputs, layer));
  else
    be.scaled_sum_backward({.dab = dh,
                            .ds = ctx.grad_or_scratch(g.layer_scalar, w.layer_scalar),
                            .dy = dy,
                            .a = a.h(),
                            .b = a.post_ffw.f,
                            .s = w.layer_scalar});

  // f = RMSNorm(mlp + moe): both branches receive the same gradient and add into dh.
  Tensor dsum = ctx.work({T, D});
  be.rmsnorm_backward({.dx = dsum,
                       .dw = g.post_ffw_norm,
                       .dy = dh,
                       .x = a.ffn_in(ctx.cfg),
                       .w = w.post_ffw_norm,
                       .rstd = a.post_ffw.rstd,
                       .out_scale = 1.0,
                       .accumulate_dx = false});
  mlp_backward(ctx, w, g, a.h(), a.mlp, dsum, dh);
  if (ctx.cfg.has_moe()) moe_backward(ctx, w, g, a.h(), a.moe, dsum, dh);
  dsum = Tensor();

  // h = x + attention(x)
  be.copy({.dst = dx, .src = dh});
  attention_backward(ctx, layer, w, g, x, a.attn, dh, dx);
}

}  // namespace gemmax
