#include "gemmax/model/per_layer_inputs.h"

#include <cmath>

namespace gemmax {

namespace {

struct Dims {
  int64_t L, T, P, D;
};
Dims dims(const LayerContext& ctx) {
  const ModelConfig& c = ctx.cfg;
  return {c.num_layers, ctx.tokens(), c.per_layer_input_dim, c.d_model};
}

// Rows l*P .. l*P+P-1 of per_layer_model_projection: layer l's [P, D].
Tensor layer_rows(const Tensor& model_proj, int64_t l, const Dims& d) {
  return model_proj.flat_slice(l * d.P * d.D, {d.P, d.D});
}

}  // namespace

void per_layer_inputs_forward(const LayerContext& ctx, const PerLayerInputWeights& w,
                              const Tensor& x0, PerLayerInputActs& a) {
  Backend& be = ctx.be;
  const Dims d = dims(ctx);
  // The table's rows [T, L*P], transposed twice into [L, T, P]: [L*P, T], then per layer.
  // sqrt(P) and the final 1/sqrt(2) in the one lookup scale.
  Tensor rows = ctx.work({d.T, d.L * d.P});
  be.embedding_forward(rows, ctx.in.tokens, w.table, std::sqrt(double(d.P) / 2.0));
  Tensor cols = ctx.work({d.L * d.P, d.T});
  be.transpose_groups(cols.view({1, d.L * d.P, d.T}), rows.view({1, d.T, d.L * d.P}));
  rows = Tensor();
  Tensor ident = ctx.work({d.L, d.T, d.P});
  be.transpose_groups(ident, cols.view({d.L, d.P, d.T}));
  cols = Tensor();

  a.ctx = ctx.alloc({d.L, d.T, d.P});
  for (int64_t l = 0; l < d.L; ++l)
    be.matmul(a.ctx.flat_slice(l * d.T * d.P, {d.T, d.P}), x0, false,
              layer_rows(w.model_proj, l, d), true, false);
  be.scale(a.ctx, 1.0 / std::sqrt(double(d.D)));
  a.rstd = ctx.alloc_stat({d.L * d.T});
  a.pli = ctx.alloc({d.L, d.T, d.P});
  ctx.rmsnorm(a.pli.view({d.L * d.T, d.P}), a.rstd, a.ctx.view({d.L * d.T, d.P}), w.proj_norm,
              1.0 / std::sqrt(2.0), ident.view({d.L * d.T, d.P}));
}

void per_layer_inputs_backward(const LayerContext& ctx, const PerLayerInputWeights& w,
                               const PerLayerInputWeights& g, const Tensor& x0,
                               const PerLayerInputActs& a, const Tensor& dpli,
                               const Tensor& dx0) {
  Backend& be = ctx.be;
  const Dims d = dims(ctx);
  // The normed projection: pli = ident + RMSNorm(ctx) / sqrt(2).
  Tensor dctx = ctx.work({d.L, d.T, d.P});
  be.rmsnorm_backward(dctx.view({d.L * d.T, d.P}), g.proj_norm, dpli.view({d.L * d.T, d.P}),
                      a.ctx.view({d.L * d.T, d.P}), w.proj_norm, a.rstd, 1.0 / std::sqrt(2.0),
                      false);
  be.scale(dctx, 1.0 / std::sqrt(double(d.D)));
  for (int64_t l = 0; l < d.L; ++l) {
    const Tensor dl = dctx.flat_slice(l * d.T * d.P, {d.T, d.P});
    be.matmul(layer_rows(g.model_proj, l, d), dl, true, x0, false, true);
    be.matmul(dx0, dl, false, layer_rows(w.model_proj, l, d), false, true);
  }
  dctx = Tensor();
  // The table's rows: dpli back to [T, L*P].
  Tensor cols = ctx.work({d.L * d.P, d.T});
  be.transpose_groups(cols.view({d.L, d.P, d.T}), dpli);
  Tensor rows = ctx.work({d.T, d.L * d.P});
  be.transpose_groups(rows.view({1, d.T, d.L * d.P}), cols.view({1, d.L * d.P, d.T}));
  cols = Tensor();
  be.embedding_backward(g.table, rows, ctx.in.tokens, std::sqrt(double(d.P) / 2.0));
}

void layer_input_forward(const LayerContext& ctx, const LayerWeights& w, const Tensor& h,
                         const Tensor& f, const Tensor& pli_l, LayerInputActs& a,
                         const Tensor& y) {
  Backend& be = ctx.be;
  const int64_t T = ctx.tokens(), D = ctx.cfg.d_model, P = ctx.cfg.per_layer_input_dim;
  using enum ActClass;
  if (!a.r.defined()) {
    a.r = ctx.act_tensor({T, D}, Other);
    be.add(a.r, h, f);
  }
  if (!a.gate.defined()) {
    a.gate = ctx.act_tensor({T, P}, Matmul);
    be.matmul(a.gate, a.r, false, w.pli_gate, true, false);
  }
  if (!a.act.defined()) {
    a.act = ctx.act_tensor({T, P}, Other);
    be.geglu_forward(a.act, a.gate, pli_l);
  }
  if (!a.proj.defined()) {
    a.proj = ctx.act_tensor({T, D}, Matmul);
    be.matmul(a.proj, a.act, false, w.pli_proj, true, false);
  }
  if (!a.fn.defined()) {
    a.fn = ctx.act_tensor({T, D}, Other);
    a.rstd = ctx.stat_tensor({T}, Other);
    ctx.rmsnorm(a.fn, a.rstd, a.proj, w.pli_post_norm, 1.0, f);
  }
  if (y.defined()) be.scaled_sum_forward(y, h, a.fn, w.layer_scalar);
}

void layer_input_backward(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                          const Tensor& h, const Tensor& pli_l, const LayerInputActs& a,
                          const Tensor& dy, const Tensor& dr, const Tensor& dpli_l) {
  Backend& be = ctx.be;
  const int64_t T = ctx.tokens(), D = ctx.cfg.d_model, P = ctx.cfg.per_layer_input_dim;
  // y = (h + fn) * s, fn = f + RMSNorm(proj): dr = dy * s is d(h + f) so far.
  be.scaled_sum_backward(dr, g.layer_scalar, dy, h, a.fn, w.layer_scalar);
  Tensor dproj = ctx.work({T, D});
  be.rmsnorm_backward(dproj, g.pli_post_norm, dr, a.proj, w.pli_post_norm, a.rstd, 1.0, false);
  be.matmul(g.pli_proj, dproj, true, a.act, false, true);
  Tensor dact = ctx.work({T, P});
  be.matmul(dact, dproj, false, w.pli_proj, false, false);
  dproj = Tensor();
  Tensor dgate = ctx.work({T, P});
  be.geglu_backward(dgate, dpli_l, dact, a.gate, pli_l);
  dact = Tensor();
  be.matmul(g.pli_gate, dgate, true, a.r, false, true);
  be.matmul(dr, dgate, false, w.pli_gate, false, true);  // the gate reads r = h + f
}

}  // namespace gemmax
