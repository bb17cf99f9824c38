#include "gemmax/model/moe.h"

#include <cmath>

#include "gemmax/model/lora/lora_linear.h"

namespace gemmax {
namespace {

struct Dims {
  int64_t T, D, E, K, F;
};

Dims dims(const LayerContext& ctx) {
  const ModelConfig& c = ctx.cfg;
  return {ctx.tokens(), c.d_model, c.num_experts, c.num_experts_per_tok, c.moe_mlp_dim};
}

// The load-balance density's factor: 1, or 1/K where it counts each of a token's K choices as
// MaxText 0.2.5 does (load_balance_density=per_choice); the term and its gradient scale alike.
double density_factor(const ModelConfig& c) {
  return c.load_balance_density == LoadBalanceDensity::PerChoice
             ? 1.0 / double(c.num_experts_per_tok)
             : 1.0;
}

// Rows [begin, begin + rows) of each expert's gate_up weight: the gate or the up half.
GmmRows half(const Tensor& in, const Tensor& out, int64_t F, bool up, bool accumulate = false) {
  GmmRows r;
  r.in = in;
  r.out = out;
  r.weight_begin = up ? F : 0;
  r.weight_rows = F;
  r.accumulate = accumulate;
  return r;
}

GmmRows rows_of(const Tensor& in, const Tensor& out) {
  GmmRows r;
  r.in = in;
  r.out = out;
  return r;
}

// dlhs = dout . W_g for every row: in place (the weights read transposed inside the grouped matmul)
// or, with moe_dlhs_in_place off, through a materialised transposed copy W_g^T and the forward's
// grouped matmul (seed Part 3's "off").
void expert_dlhs(const LayerContext& ctx, const Tensor& dlhs, const Tensor& dout,
                 const Tensor& weight, const Tensor& group_sizes, const Tensor& dout_rows,
                 const Tensor& dlhs_rows) {
  Backend& be = ctx.be;
  if (ctx.opt.moe_dlhs_in_place) {
    be.gmm_dlhs({.dlhs = dlhs,
                 .dout = dout,
                 .rhs = weight,
                 .group_sizes = group_sizes,
                 .rows = rows_of(dlhs_rows, dout_rows)});
    return;
  }
  Tensor transposed = ctx.work({weight.dim(0), weight.dim(2), weight.dim(1)});
  be.transpose_groups({.out = transposed, .in = weight});
  be.gmm({.out = dlhs,
          .lhs = dout,
          .rhs = transposed,
          .group_sizes = group_sizes,
          .rows = rows_of(dout_rows, dlhs_rows)});
}

// Rounds x to the activation dtype in place (through a workspace copy): float32_weight_sum=false
// rounds the combine's weights and their gradient, as MaxText's routing weights are bf16.
void round_to_act(const LayerContext& ctx, const Tensor& x) {
  Tensor low = ctx.work(x.shape());
  ctx.be.copy({.dst = low, .src = x});
  ctx.be.copy({.dst = x, .src = low});
}

bool round_weight_sum(const LayerContext& ctx, const Tensor& weights) {
  return !ctx.opt.float32_weight_sum && weights.dtype() != ctx.act();
}

// The combine's weights: the router's, or a rounded copy of them.
Tensor combine_weights(const LayerContext& ctx, const Tensor& weights) {
  if (!round_weight_sum(ctx, weights)) return weights;
  Tensor rounded = ctx.work_stat(weights.shape());
  ctx.be.copy({.dst = rounded, .src = weights});
  round_to_act(ctx, rounded);
  return rounded;
}

// float32_gate_logits (MaxText's gate_norm and GateLogit in fp32): the router's norm, input,
// logits and their gradients in fp32 in a bf16 run; the activation dtype otherwise.
DType gate_dtype(const LayerContext& ctx) {
  return ctx.opt.float32_gate_logits && ctx.act() == DType::BF16 ? DType::F32 : ctx.act();
}

Tensor widened(const LayerContext& ctx, const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor w = ctx.be.alloc(x.shape(), dtype, MemKind::Workspace);
  ctx.be.copy({.dst = w, .src = x});
  return w;
}

}  // namespace

void moe_forward(const LayerContext& ctx, const LayerWeights& w, const Tensor& h,
                 const Tensor& residual, MoeActs& acts) {
  MoeOthers& a = acts;
  MoeMatmuls& m = acts;
  Backend& be = ctx.be;
  const ModelConfig& c = ctx.cfg;
  const Dims d = dims(ctx);
  const bool fuse = ctx.opt.moe_fuse_permute_combine;
  using enum ActClass;

  // Router.
  const DType gate = gate_dtype(ctx);
  if (!a.router_in.defined()) {
    a.router_in = be.alloc({d.T, d.D}, gate, ctx.act_kind(Other));
    a.rstd_router = ctx.stat_tensor({d.T}, Other);
    ctx.rmsnorm(a.router_in, a.rstd_router, widened(ctx, h, gate), w.router_scale,
                1.0 / std::sqrt(double(d.D)));
  }
  if (!m.logits.defined()) {
    GEMMAX_CHECK(w.router_proj.dtype() == gate, "the router's logits run in ", dtype_name(gate),
                 " but its matrix is ", w.router_proj.str());
    m.logits = be.alloc({d.T, d.E}, gate, ctx.act_kind(Matmul));
    be.matmul({.c = m.logits,
               .a = a.router_in,
               .trans_a = false,
               .b = w.router_proj,
               .trans_b = true,
               .accumulate = false});
    if (w.lora.router_proj.defined())
      lora_forward(ctx, w.lora.router_proj, a.router_in, m.logits, m.lora_router);
  }
  if (!a.probs.defined()) {
    a.probs = ctx.stat_tensor({d.T, d.E}, Other);
    a.idx = ctx.int_tensor({d.T, d.K}, Other);
    a.weights = ctx.stat_tensor({d.T, d.K}, Other);
    be.router_forward({.probs = a.probs,
                       .idx = a.idx,
                       .weights = a.weights,
                       .logits = m.logits,
                       .per_expert_scale = w.router_expert_scale,
                       .renormalize = c.norm_topk_prob});
  }
  if (!a.density.defined()) {
    a.density = ctx.stat_tensor({ctx.in.batch, d.E}, Other);
    be.load_balance_forward({.density = a.density,
                             .loss = ctx.lb_loss,
                             .probs = a.probs,
                             .idx = a.idx,
                             .seq = ctx.in.seq,
                             .coefficient = ctx.aux_weight * double(d.E) * double(d.E) *
                                            density_factor(c)});
  }

  // Experts: sort token copies by expert, grouped matmuls, weighted combine.
  if (!a.normed.defined()) {
    a.normed = ctx.act_tensor({d.T, d.D}, Other);
    a.rstd_in = ctx.stat_tensor({d.T}, Other);
    ctx.rmsnorm(a.normed, a.rstd_in, h, w.pre_moe_norm);
  }
  Routing& r = a.routing;
  if (!r.order.defined()) {
    r.order = ctx.int_tensor({d.T * d.K}, Other);
    r.inverse = ctx.int_tensor({d.T * d.K}, Other);
    r.token = ctx.int_tensor({d.T * d.K}, Other);
    r.group_sizes = ctx.int_tensor({d.E}, Other);
    be.route_sort({.routing = r, .idx = a.idx, .num_experts = d.E});
  }
  if (!fuse && !a.xs.defined()) {
    a.xs = ctx.act_tensor({d.T * d.K, d.D}, Other);
    be.permute({.xs = a.xs, .x = a.normed, .order = r.order, .k = d.K});
  }
  const Tensor& lhs = fuse ? a.normed : a.xs;
  const Tensor lhs_rows = fuse ? r.token : Tensor();
  const LoraGroupedInput gate_up_in{lhs, r.group_sizes, lhs_rows, fuse ? r.order : Tensor(), {}};
  if (!m.gate_up.defined()) {
    if (ctx.opt.moe_fused_gate_up) {
      m.gate_up = ctx.act_tensor({d.T * d.K, 2 * d.F}, Matmul);
      be.gmm({.out = m.gate_up,
              .lhs = lhs,
              .rhs = w.experts_gate_up,
              .group_sizes = r.group_sizes,
              .rows = rows_of(lhs_rows, Tensor())});
      if (w.lora.experts_gate_up.defined())
        lora_grouped_forward(ctx, w.lora.experts_gate_up, gate_up_in, {{m.gate_up}},
                             m.lora_gate_up);
    } else {
      m.gate_up = ctx.act_tensor({d.T * d.K, d.F}, Matmul);
      m.up = ctx.act_tensor({d.T * d.K, d.F}, Matmul);
      be.gmm({.out = m.gate_up,
              .lhs = lhs,
              .rhs = w.experts_gate_up,
              .group_sizes = r.group_sizes,
              .rows = half(lhs_rows, Tensor(), d.F, false)});
      be.gmm({.out = m.up,
              .lhs = lhs,
              .rhs = w.experts_gate_up,
              .group_sizes = r.group_sizes,
              .rows = half(lhs_rows, Tensor(), d.F, true)});
      if (w.lora.experts_gate_up.defined())
        lora_grouped_forward(ctx, w.lora.experts_gate_up, gate_up_in,
                             {{m.gate_up, 0, d.F}, {m.up, d.F, d.F}}, m.lora_gate_up);
    }
  }
  if (!a.act.defined()) {
    a.act = ctx.act_tensor({d.T * d.K, d.F}, Other);
    be.geglu_forward({.a = a.act,
                      .h = m.gate_up,
                      .up = m.up,
                      .round_gelu = !ctx.opt.activations_in_float32});
  }
  if (!m.y.defined()) {
    m.y = ctx.act_tensor({d.T * d.K, d.D}, Matmul);
    be.gmm({.out = m.y,
            .lhs = a.act,
            .rhs = w.experts_down,
            .group_sizes = r.group_sizes,
            .rows = rows_of(Tensor(), fuse ? r.order : Tensor())});
    if (w.lora.experts_down.defined())
      lora_grouped_forward(ctx, w.lora.experts_down,
                           {a.act, r.group_sizes, {}, {}, fuse ? r.order : Tensor()}, {{m.y}},
                           m.lora_down);
  }
  if (!a.combined.defined()) {
    a.combined = ctx.act_tensor({d.T, d.D}, Other);
    be.combine_forward({.m = a.combined,
                        .y = m.y,
                        .inverse = fuse ? Tensor() : r.inverse,
                        .weights = combine_weights(ctx, a.weights)});
  }
  if (!a.out.defined()) {
    a.out = ctx.act_tensor({d.T, d.D}, Other);
    a.rstd_post = ctx.stat_tensor({d.T}, Other);
    ctx.rmsnorm(a.out, a.rstd_post, a.combined, w.post_moe_norm, 1.0, residual);
  }
}

void expert_gate_up_backward_split(Backend& be, const Tensor& dlhs, const Tensor& g_gate_up,
                                   const Tensor& dgate, const Tensor& dup, const Tensor& lhs,
                                   const Tensor& gate_up, const Tensor& group_sizes,
                                   const Tensor& lhs_rows, const Tensor& dlhs_rows) {
  const int64_t F = gate_up.dim(1) / 2;
  bool written = false;
  for (const bool up : {false, true}) {
    const Tensor& d = up ? dup : dgate;
    if (!d.defined()) continue;
    be.gmm_dlhs({.dlhs = dlhs,
                 .dout = d,
                 .rhs = gate_up,
                 .group_sizes = group_sizes,
                 .rows = half(dlhs_rows, Tensor(), F, up, written)});
    if (g_gate_up.defined())
      be.gmm_drhs({.drhs = g_gate_up,
                   .lhs = lhs,
                   .dout = d,
                   .group_sizes = group_sizes,
                   .rows = half(lhs_rows, Tensor(), F, up)});
    written = true;
  }
  if (!written) be.fill({.x = dlhs, .value = 0.0});
}

void moe_backward(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                  const Tensor& h, const MoeActs& acts, const Tensor& dout, const Tensor& dh) {
  const MoeOthers& a = acts;
  const MoeMatmuls& m = acts;
  Backend& be = ctx.be;
  const ModelConfig& c = ctx.cfg;
  const Dims d = dims(ctx);
  const bool fuse = ctx.opt.moe_fuse_permute_combine;
  const Routing& r = a.routing;
  const Tensor& lhs = fuse ? a.normed : a.xs;
  const Tensor lhs_rows = fuse ? r.token : Tensor();   // where the first matmul's rows come from
  const Tensor copy_rows = fuse ? r.order : Tensor();  // where each sorted row's copy lives

  // Experts, in reverse.
  Tensor dcombined = ctx.work({d.T, d.D});
  be.rmsnorm_backward({.dx = dcombined,
                       .dw = g.post_moe_norm,
                       .dy = dout,
                       .x = a.combined,
                       .w = w.post_moe_norm,
                       .rstd = a.rstd_post,
                       .out_scale = 1.0,
                       .accumulate_dx = false});
  Tensor dy = ctx.work({d.T * d.K, d.D});
  Tensor dweights = ctx.work_stat({d.T, d.K});
  be.combine_backward({.dy = dy,
                       .dweights = dweights,
                       .dm = dcombined,
                       .y = m.y,
                       .order = fuse ? Tensor() : r.order,
                       .weights = combine_weights(ctx, a.weights)});
  dcombined = Tensor();
  if (round_weight_sum(ctx, a.weights)) round_to_act(ctx, dweights);
  Tensor dact = ctx.work({d.T * d.K, d.F});
  expert_dlhs(ctx, dact, dy, w.experts_down, r.group_sizes, copy_rows, Tensor());
  if (g.experts_down.defined())
    be.gmm_drhs({.drhs = g.experts_down,
                 .lhs = a.act,
                 .dout = dy,
                 .group_sizes = r.group_sizes,
                 .rows = rows_of(Tensor(), copy_rows)});
  if (w.lora.experts_down.defined())
    lora_grouped_backward(ctx, w.lora.experts_down, g.lora.experts_down,
                          {a.act, r.group_sizes, {}, {}, copy_rows}, m.lora_down, {{dy}}, dact);
  dy = Tensor();
  const LoraGroupedInput gate_up_in{lhs, r.group_sizes, lhs_rows, copy_rows, {}};
  Tensor dxs = ctx.work({d.T * d.K, d.D});  // in expert order, or token-copy order when fused
  if (ctx.opt.moe_fused_gate_up) {
    Tensor dgate_up = ctx.work({d.T * d.K, 2 * d.F});
    be.geglu_backward({.dh = dgate_up,
                       .da = dact,
                       .h = m.gate_up,
                       .round_gelu = !ctx.opt.activations_in_float32});
    dact = Tensor();
    expert_dlhs(ctx, dxs, dgate_up, w.experts_gate_up, r.group_sizes, Tensor(), copy_rows);
    if (g.experts_gate_up.defined())
      be.gmm_drhs({.drhs = g.experts_gate_up,
                   .lhs = lhs,
                   .dout = dgate_up,
                   .group_sizes = r.group_sizes,
                   .rows = rows_of(lhs_rows, Tensor())});
    if (w.lora.experts_gate_up.defined())
      lora_grouped_backward(ctx, w.lora.experts_gate_up, g.lora.experts_gate_up, gate_up_in,
                            m.lora_gate_up, {{dgate_up}}, dxs);
  } else {
    Tensor dgate = ctx.work({d.T * d.K, d.F}), dup = ctx.work({d.T * d.K, d.F});
    be.geglu_backward({.dh = dgate,
                       .dup = dup,
                       .da = dact,
                       .h = m.gate_up,
                       .up = m.up,
                       .round_gelu = !ctx.opt.activations_in_float32});
    dact = Tensor();
    expert_gate_up_backward_split(be, dxs, g.experts_gate_up, dgate, dup, lhs, w.experts_gate_up,
                                  r.group_sizes, lhs_rows, copy_rows);
    if (w.lora.experts_gate_up.defined())
      lora_grouped_backward(ctx, w.lora.experts_gate_up, g.lora.experts_gate_up, gate_up_in,
                            m.lora_gate_up, {{dgate, 0, d.F}, {dup, d.F, d.F}}, dxs);
  }
  Tensor dnormed = ctx.work({d.T, d.D});
  be.permute_backward({.dx = dnormed,
                       .dxs = dxs,
                       .inverse = fuse ? Tensor() : r.inverse,
                       .k = d.K,
                       .accumulate = false});
  dxs = Tensor();
  be.rmsnorm_backward({.dx = dh,
                       .dw = g.pre_moe_norm,
                       .dy = dnormed,
                       .x = h,
                       .w = w.pre_moe_norm,
                       .rstd = a.rstd_in,
                       .out_scale = 1.0,
                       .accumulate_dx = true});
  dnormed = Tensor();

  // Router. The layer's load-balance loss w E^2 mean_{b,e}(density * mean_s p) has, for every
  // token s of sequence b, dL/dp[e] = w E density[b, e] / (B S); times this layer's share.
  Tensor lb_dprobs = ctx.work_stat({ctx.in.batch, d.E});
  be.copy({.dst = lb_dprobs, .src = a.density});
  be.scale({.x = lb_dprobs,
            .alpha = ctx.aux_weight * double(d.E) / double(d.T) * density_factor(c)});
  const DType gate = gate_dtype(ctx);
  Tensor dlogits = be.alloc({d.T, d.E}, gate, MemKind::Workspace);
  be.router_backward(
      {.dlogits = dlogits,
       .dper_expert_scale = ctx.grad_or_scratch(g.router_expert_scale, w.router_expert_scale),
       .dweights = dweights,
       .probs = a.probs,
       .idx = a.idx,
       .per_expert_scale = w.router_expert_scale,
       .renormalize = c.norm_topk_prob,
       .lb_dprobs = lb_dprobs,
       .seq = ctx.in.seq});
  dweights = Tensor();
  lb_dprobs = Tensor();
  if (g.router_proj.defined())
    be.matmul({.c = g.router_proj,
               .a = dlogits,
               .trans_a = true,
               .b = a.router_in,
               .trans_b = false,
               .accumulate = true});
  Tensor drouter_in = be.alloc({d.T, d.D}, gate, MemKind::Workspace);
  be.matmul({.c = drouter_in,
             .a = dlogits,
             .trans_a = false,
             .b = w.router_proj,
             .trans_b = false,
             .accumulate = false});
  if (w.lora.router_proj.defined())
    lora_backward(ctx, w.lora.router_proj, g.lora.router_proj, a.router_in, m.lora_router, dlogits,
                  drouter_in);
  dlogits = Tensor();
  // In fp32 the norm's dx is rounded once (the gradient of the widening cast) and added to dh.
  const bool wide = gate != ctx.act();
  const Tensor dx = wide ? be.alloc({d.T, d.D}, gate, MemKind::Workspace) : dh;
  be.rmsnorm_backward({.dx = dx,
                       .dw = g.router_scale,
                       .dy = drouter_in,
                       .x = widened(ctx, h, gate),
                       .w = w.router_scale,
                       .rstd = a.rstd_router,
                       .out_scale = 1.0 / std::sqrt(double(d.D)),
                       .accumulate_dx = !wide});
  if (!wide) return;
  drouter_in = Tensor();
  const Tensor dx_act = ctx.work({d.T, d.D});
  be.copy({.dst = dx_act, .src = dx});
  be.add({.out = dh, .a = dh, .b = dx_act});
}

}  // namespace gemmax
