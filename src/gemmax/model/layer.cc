#include "gemmax/model/layer.h"

namespace gemmax {
namespace {

double read_scalar(Backend& be, const Tensor& t) { return get_as_double(be.to_host(t), 0); }

}  // namespace

void layer_forward(const LayerContext& ctx, int64_t layer, const LayerWeights& w, const Tensor& x,
                   const Tensor& y, LayerActs& a) {
  Backend& be = ctx.be;
  const int64_t T = ctx.tokens(), D = ctx.cfg.d_model;
  using enum ActClass;
  attention_forward(ctx, layer, w, x, a.attn);
  if (!a.h.defined()) {
    a.h = ctx.act_tensor({T, D}, Other);
    be.add(a.h, x, a.attn.out);
  }

  mlp_forward(ctx, w, a.h, a.mlp);
  moe_forward(ctx, w, a.h, a.moe);
  if (!a.ffn_sum.defined()) {
    a.ffn_sum = ctx.act_tensor({T, D}, Other);
    be.add(a.ffn_sum, a.mlp.out, a.moe.out);
  }
  if (!a.ffn.defined()) {
    a.ffn = ctx.act_tensor({T, D}, Other);
    a.rstd_ffw = ctx.stat_tensor({T}, Other);
    be.rmsnorm_forward(a.ffn, a.rstd_ffw, a.ffn_sum, w.post_ffw_norm, ctx.cfg.norm_eps, 1.0);
  }

  if (!y.defined()) return;
  be.add(y, a.h, a.ffn);
  be.scale(y, read_scalar(be, w.layer_scalar));
}

void layer_backward(const LayerContext& ctx, int64_t layer, const LayerWeights& w,
                    const LayerWeights& g, const Tensor& x, LayerActs& a, const Tensor& dy,
                    const Tensor& dx) {
  Backend& be = ctx.be;
  const int64_t T = ctx.tokens(), D = ctx.cfg.d_model;

  // Remat: fill in what the forward did not keep (its buffers are this layer's workspace).
  LayerContext recompute = ctx;
  recompute.recompute = true;
  layer_forward(recompute, layer, w, x, Tensor(), a);

  // y = (h + f) * s:  ds = dy . (h + f);  d(h + f) = dy * s.
  {
    Tensor hf = ctx.work({T, D});
    be.add(hf, a.h, a.ffn);
    Tensor ds = be.alloc({1}, g.layer_scalar.dtype(), MemKind::Workspace);
    be.fill(ds, be.dot(dy, hf));
    be.axpy(g.layer_scalar, 1.0, ds);
  }
  Tensor dh = ctx.work({T, D});
  be.copy(dh, dy);
  be.scale(dh, read_scalar(be, w.layer_scalar));

  // f = RMSNorm(mlp + moe): both branches receive the same gradient and add into dh.
  Tensor dsum = ctx.work({T, D});
  be.rmsnorm_backward(dsum, g.post_ffw_norm, dh, a.ffn_sum, w.post_ffw_norm, a.rstd_ffw, 1.0,
                      false);
  mlp_backward(ctx, w, g, a.h, a.mlp, dsum, dh);
  moe_backward(ctx, w, g, a.h, a.moe, dsum, dh);
  dsum = Tensor();

  // h = x + attention(x)
  be.copy(dx, dh);
  attention_backward(ctx, layer, w, g, x, a.attn, dh, dx);
}

}  // namespace gemmax
