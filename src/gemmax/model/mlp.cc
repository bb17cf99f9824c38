#include "gemmax/model/mlp.h"

namespace gemmax {

void mlp_forward(const LayerContext& ctx, const LayerWeights& w, const Tensor& h, MlpActs& a) {
  Backend& be = ctx.be;
  const int64_t T = ctx.tokens(), D = ctx.cfg.d_model, F = ctx.cfg.mlp_dim;
  const double eps = ctx.cfg.norm_eps;
  a.normed = ctx.alloc({T, D});
  a.rstd_in = ctx.alloc_stat({T});
  be.rmsnorm_forward(a.normed, a.rstd_in, h, w.pre_mlp_norm, eps, 1.0);
  a.gate_up = ctx.alloc({T, 2 * F});
  be.matmul(a.gate_up, a.normed, false, w.mlp_gate_up, true, false);
  a.act = ctx.alloc({T, F});
  be.geglu_forward(a.act, a.gate_up);
  a.proj = ctx.alloc({T, D});
  be.matmul(a.proj, a.act, false, w.mlp_down, true, false);
  a.out = ctx.alloc({T, D});
  a.rstd_post = ctx.alloc_stat({T});
  be.rmsnorm_forward(a.out, a.rstd_post, a.proj, w.post_mlp_norm, eps, 1.0);
}

void mlp_backward(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                  const Tensor& h, const MlpActs& a, const Tensor& dout, const Tensor& dh) {
  Backend& be = ctx.be;
  const int64_t T = ctx.tokens(), D = ctx.cfg.d_model, F = ctx.cfg.mlp_dim;
  Tensor dproj = ctx.alloc({T, D}, MemKind::Workspace);
  be.rmsnorm_backward(dproj, g.post_mlp_norm, dout, a.proj, w.post_mlp_norm, a.rstd_post, 1.0,
                      false);
  be.matmul(g.mlp_down, dproj, true, a.act, false, true);
  Tensor dact = ctx.alloc({T, F}, MemKind::Workspace);
  be.matmul(dact, dproj, false, w.mlp_down, false, false);
  Tensor dgate_up = ctx.alloc({T, 2 * F}, MemKind::Workspace);
  be.geglu_backward(dgate_up, dact, a.gate_up);
  be.matmul(g.mlp_gate_up, dgate_up, true, a.normed, false, true);
  Tensor dnormed = ctx.alloc({T, D}, MemKind::Workspace);
  be.matmul(dnormed, dgate_up, false, w.mlp_gate_up, false, false);
  be.rmsnorm_backward(dh, g.pre_mlp_norm, dnormed, h, w.pre_mlp_norm, a.rstd_in, 1.0, true);
}

}  // namespace gemmax
