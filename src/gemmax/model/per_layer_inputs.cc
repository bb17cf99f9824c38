#include "gemmax/model/per_layer_inputs.h"

#include <cmath>

#include "gemmax/model/lora/lora_linear.h"

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
  be.embedding_forward({.x = rows,
                        .tokens = ctx.in.tokens,
                        .table = w.table,
                        .scale = std::sqrt(double(d.P) / 2.0)});
  Tensor cols = ctx.work({d.L * d.P, d.T});
  be.transpose_groups(
      {.out = cols.view({1, d.L * d.P, d.T}), .in = rows.view({1, d.T, d.L * d.P})});
  rows = Tensor();
  Tensor ident = ctx.work({d.L, d.T, d.P});
  be.transpose_groups({.out = ident, .in = cols.view({d.L, d.P, d.T})});
  cols = Tensor();

  a.ctx = ctx.alloc({d.L, d.T, d.P});
  const LoraPair& lora = w.model_proj_lora;
  if (lora.defined()) lora_in(ctx, lora, x0, a.lora_proj);  // each layer's rows of B add theirs
  for (int64_t l = 0; l < d.L; ++l) {
    const Tensor out = a.ctx.flat_slice(l * d.T * d.P, {d.T, d.P});
    be.matmul({.c = out,
               .a = x0,
               .trans_a = false,
               .b = layer_rows(w.model_proj, l, d),
               .trans_b = true,
               .accumulate = false});
    if (lora.defined())
      be.matmul({.c = out,
                 .a = a.lora_proj,
                 .trans_a = false,
                 .b = lora.b.rows(l * d.P, (l + 1) * d.P),
                 .trans_b = true,
                 .accumulate = true});
  }
  be.scale({.x = a.ctx, .alpha = 1.0 / std::sqrt(double(d.D))});
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
  be.rmsnorm_backward({.dx = dctx.view({d.L * d.T, d.P}),
                       .dw = g.proj_norm,
                       .dy = dpli.view({d.L * d.T, d.P}),
                       .x = a.ctx.view({d.L * d.T, d.P}),
                       .w = w.proj_norm,
                       .rstd = a.rstd,
                       .out_scale = 1.0 / std::sqrt(2.0),
                       .accumulate_dx = false});
  be.scale({.x = dctx, .alpha = 1.0 / std::sqrt(double(d.D))});
  const LoraPair &lora = w.model_proj_lora, &lora_g = g.model_proj_lora;
  Tensor u = lora.defined() ? ctx.work({d.T, lora.a.dim(0)}) : Tensor();  // s dctx . B
  for (int64_t l = 0; l < d.L; ++l) {
    const Tensor dl = dctx.flat_slice(l * d.T * d.P, {d.T, d.P});
    if (g.model_proj.defined())
      be.matmul({.c = layer_rows(g.model_proj, l, d),
                 .a = dl,
                 .trans_a = true,
                 .b = x0,
                 .trans_b = false,
                 .accumulate = true});
    be.matmul({.c = dx0,
               .a = dl,
               .trans_a = false,
               .b = layer_rows(w.model_proj, l, d),
               .trans_b = false,
               .accumulate = true});
    if (!lora.defined()) continue;
    const int64_t r0 = l * d.P, r1 = (l + 1) * d.P;
    be.matmul({.c = lora_g.b.rows(r0, r1),
               .a = dl,
               .trans_a = true,
               .b = a.lora_proj,
               .trans_b = false,
               .accumulate = true});
    be.matmul({.c = u,
               .a = dl,
               .trans_a = false,
               .b = lora.b.rows(r0, r1),
               .trans_b = false,
               .accumulate = l > 0});
  }
  dctx = Tensor();
  if (lora.defined()) {
    be.scale({.x = u, .alpha = lora.scale});
    lora_in_backward(ctx, lora, lora_g, x0, u, dx0);
  }
  if (!g.table.defined()) return;  // frozen
  // The table's rows: dpli back to [T, L*P].
  Tensor cols = ctx.work({d.L * d.P, d.T});
  be.transpose_groups({.out = cols.view({d.L, d.P, d.T}), .in = dpli});
  Tensor rows = ctx.work({d.T, d.L * d.P});
  be.transpose_groups(
      {.out = rows.view({1, d.T, d.L * d.P}), .in = cols.view({1, d.L * d.P, d.T})});
  cols = Tensor();
  be.embedding_backward({.dtable = g.table,
                         .dx = rows,
                         .tokens = ctx.in.tokens,
                         .scale = std::sqrt(double(d.P) / 2.0)});
}

void layer_input_forward(const LayerContext& ctx, const LayerWeights& w, const Tensor& h,
                         const Tensor& f, const Tensor& pli_l, LayerInputActs& a,
                         const Tensor& y) {
  Backend& be = ctx.be;
  const int64_t T = ctx.tokens(), D = ctx.cfg.d_model, P = ctx.cfg.per_layer_input_dim;
  using enum ActClass;
  if (!a.r.defined()) {
    a.r = ctx.act_tensor({T, D}, Other);
    be.add({.out = a.r, .a = h, .b = f});
  }
  if (!a.gate.defined()) {
    a.gate = ctx.act_tensor({T, P}, Matmul);
    be.matmul({.c = a.gate,
               .a = a.r,
               .trans_a = false,
               .b = w.pli_gate,
               .trans_b = true,
               .accumulate = false});
    if (w.lora.pli_gate.defined()) lora_forward(ctx, w.lora.pli_gate, a.r, a.gate, a.lora_gate);
  }
  if (!a.act.defined()) {
    a.act = ctx.act_tensor({T, P}, Other);
    be.geglu_forward({.a = a.act, .h = a.gate, .up = pli_l});
  }
  if (!a.proj.defined()) {
    a.proj = ctx.act_tensor({T, D}, Matmul);
    be.matmul({.c = a.proj,
               .a = a.act,
               .trans_a = false,
               .b = w.pli_proj,
               .trans_b = true,
               .accumulate = false});
    if (w.lora.pli_proj.defined()) lora_forward(ctx, w.lora.pli_proj, a.act, a.proj, a.lora_proj);
  }
  if (!a.fn.defined()) {
    a.fn = ctx.act_tensor({T, D}, Other);
    a.rstd = ctx.stat_tensor({T}, Other);
    ctx.rmsnorm(a.fn, a.rstd, a.proj, w.pli_post_norm, 1.0, f);
  }
  if (y.defined()) be.scaled_sum_forward({.y = y, .a = h, .b = a.fn, .s = w.layer_scalar});
}

void layer_input_backward(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                          const Tensor& h, const Tensor& pli_l, const LayerInputActs& a,
                          const Tensor& dy, const Tensor& dr, const Tensor& dpli_l) {
  Backend& be = ctx.be;
  const int64_t T = ctx.tokens(), D = ctx.cfg.d_model, P = ctx.cfg.per_layer_input_dim;
  // y = (h + fn) * s, fn = f + RMSNorm(proj): dr = dy * s is d(h + f) so far.
  be.scaled_sum_backward({.dab = dr,
                          .ds = ctx.grad_or_scratch(g.layer_scalar, w.layer_scalar),
                          .dy = dy,
                          .a = h,
                          .b = a.fn,
                          .s = w.layer_scalar});
  Tensor dproj = ctx.work({T, D});
  be.rmsnorm_backward({.dx = dproj,
                       .dw = g.pli_post_norm,
                       .dy = dr,
                       .x = a.proj,
                       .w = w.pli_post_norm,
                       .rstd = a.rstd,
                       .out_scale = 1.0,
                       .accumulate_dx = false});
  if (g.pli_proj.defined())
    be.matmul({.c = g.pli_proj,
               .a = dproj,
               .trans_a = true,
               .b = a.act,
               .trans_b = false,
               .accumulate = true});
  Tensor dact = ctx.work({T, P});
  be.matmul({.c = dact,
             .a = dproj,
             .trans_a = false,
             .b = w.pli_proj,
             .trans_b = false,
             .accumulate = false});
  if (w.lora.pli_proj.defined())
    lora_backward(ctx, w.lora.pli_proj, g.lora.pli_proj, a.act, a.lora_proj, dproj, dact);
  dproj = Tensor();
  Tensor dgate = ctx.work({T, P});
  be.geglu_backward({.dh = dgate, .dup = dpli_l, .da = dact, .h = a.gate, .up = pli_l});
  dact = Tensor();
  if (g.pli_gate.defined())
    be.matmul({.c = g.pli_gate,
               .a = dgate,
               .trans_a = true,
               .b = a.r,
               .trans_b = false,
               .accumulate = true});
  be.matmul({.c = dr,
             .a = dgate,
             .trans_a = false,
             .b = w.pli_gate,
             .trans_b = false,
             .accumulate = true});  // the gate reads r = h + f
  if (w.lora.pli_gate.defined())
    lora_backward(ctx, w.lora.pli_gate, g.lora.pli_gate, a.r, a.lora_gate, dgate, dr);
}

}  // namespace gemmax
