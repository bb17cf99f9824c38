#include "gemmax/model/attention.h"

#include "gemmax/model/lora/lora_linear.h"

namespace gemmax {
namespace {

struct Dims {
  int64_t T, D, H, KV, hd;
  bool shared_kv;  // K = V: no v projection; v is the raw k projection
};

Dims dims(const LayerContext& ctx, int64_t layer) {
  const ModelConfig& c = ctx.cfg;
  return {ctx.tokens(),
          c.d_model,
          c.num_heads,
          c.layer_kv_heads(layer),
          c.layer_head_dim(layer),
          !c.layer_has_v_proj(layer)};
}

AttentionShape attention_shape(const LayerContext& ctx, int64_t layer, const Dims& d) {
  return {ctx.in.batch, ctx.in.seq, d.H,
          d.KV,         d.hd,       ctx.cfg.is_global(layer) ? 0 : ctx.cfg.sliding_window,
          ctx.opt.attention_bf16_scores || ctx.opt.attention_bf16_softmax,
          ctx.opt.attention_bf16_softmax,
          ctx.in.one_segment};
}

// dq (released) rotated back and through the per-head q norm: the gradient of the raw q
// projection [T, H*hd].
Tensor q_norm_backward(const LayerContext& ctx, const Dims& d, const LayerWeights& w,
                       const LayerWeights& g, const AttentionActs& a, const Tensor& rope,
                       Tensor& dq) {
  ctx.be.rope({.x = dq, .table = rope, .inverse = true});
  Tensor dq_raw = ctx.work({d.T, d.H * d.hd});
  ctx.be.rmsnorm_backward({.dx = dq_raw,
                           .dw = g.q_norm,
                           .dy = dq,
                           .x = a.q_raw.view(dq.shape()),
                           .w = w.q_norm,
                           .rstd = a.rstd_q,
                           .out_scale = 1.0,
                           .accumulate_dx = false});
  dq = Tensor();
  return dq_raw;
}

// The q projection's weight gradient and its part of da (added to the k/v part when da holds
// one, written otherwise), then the input norm: dx += RMSNorm backward of da.
void q_proj_and_input_backward(const LayerContext& ctx, const Dims& d, const LayerWeights& w,
                               const LayerWeights& g, const Tensor& x, const AttentionActs& a,
                               Tensor& dq_raw, Tensor da, const Tensor& dx) {
  Backend& be = ctx.be;
  if (g.q_proj.defined())
    be.matmul({.c = g.q_proj,
               .a = dq_raw,
               .trans_a = true,
               .b = a.normed,
               .trans_b = false,
               .accumulate = true});
  const bool add_to_kv = da.defined();
  if (!add_to_kv) da = ctx.work({d.T, d.D});
  be.matmul({.c = da,
             .a = dq_raw,
             .trans_a = false,
             .b = w.q_proj,
             .trans_b = false,
             .accumulate = add_to_kv});
  if (w.lora.q_proj.defined())
    lora_backward(ctx, w.lora.q_proj, g.lora.q_proj, a.normed, a.lora_q, dq_raw, da);
  dq_raw = Tensor();
  be.rmsnorm_backward({.dx = dx,
                       .dw = g.input_norm,
                       .dy = da,
                       .x = x,
                       .w = w.input_norm,
                       .rstd = a.rstd_in,
                       .out_scale = 1.0,
                       .accumulate_dx = true});
}

}  // namespace

void attention_forward(const LayerContext& ctx, int64_t layer, const LayerWeights& w,
                       const Tensor& x, AttentionActs& a) {
  attention_project(ctx, layer, w, x, a);
  if (ctx.attention_core) {
    ctx.attention_core->attend(ctx, layer, a);
  } else if (!a.attn.defined()) {
    const Dims d = dims(ctx, layer);
    a.attn = ctx.act_tensor({d.T, d.H, d.hd}, ActClass::Other);
    a.lse = ctx.stat_tensor({ctx.in.batch, d.H, ctx.in.seq}, ActClass::Other);
    ctx.be.attention_forward({.o = a.attn,
                              .lse = a.lse,
                              .q = a.q,
                              .k = a.k,
                              .v = a.v,
                              .segment_ids = ctx.in.segment_ids,
                              .shape = attention_shape(ctx, layer, d)});
  }
  attention_output(ctx, layer, w, x, a);
}

void attention_project(const LayerContext& ctx, int64_t layer, const LayerWeights& w,
                       const Tensor& x, AttentionActs& a) {
  Backend& be = ctx.be;
  const Dims d = dims(ctx, layer);
  const Tensor& rope = ctx.cfg.is_global(layer) ? ctx.rope_global : ctx.rope_local;
  using enum ActClass;

  if (!a.normed.defined()) {
    a.normed = ctx.act_tensor({d.T, d.D}, Other);
    a.rstd_in = ctx.stat_tensor({d.T}, Other);
    ctx.rmsnorm(a.normed, a.rstd_in, x, w.input_norm);
  }
  if (!a.q_raw.defined()) {
    a.q_raw = ctx.act_tensor({d.T, d.H * d.hd}, Matmul);
    be.matmul({.c = a.q_raw,
               .a = a.normed,
               .trans_a = false,
               .b = w.q_proj,
               .trans_b = true,
               .accumulate = false});
    if (w.lora.q_proj.defined()) lora_forward(ctx, w.lora.q_proj, a.normed, a.q_raw, a.lora_q);
  }
  if (ctx.cfg.kv_shared(layer)) {  // the donor's normed, rotated K/V: nothing to project
    const int64_t donor = ctx.cfg.kv_donor(layer);
    GEMMAX_CHECK(ctx.donor_kv && ctx.donor_kv->k[size_t(donor)].defined(), "layer ", layer,
                 " reads the K/V of layer ", donor, ", which are not there");
    a.k = ctx.donor_kv->k[size_t(donor)];
    a.v = ctx.donor_kv->v[size_t(donor)];
  }
  if (!a.k.defined() && !a.k_raw.defined()) {
    a.k_raw = ctx.act_tensor({d.T, d.KV * d.hd}, Matmul);
    be.matmul({.c = a.k_raw,
               .a = a.normed,
               .trans_a = false,
               .b = w.k_proj,
               .trans_b = true,
               .accumulate = false});
    if (w.lora.k_proj.defined()) lora_forward(ctx, w.lora.k_proj, a.normed, a.k_raw, a.lora_k);
  }
  if (!a.v.defined() && !a.v_raw.defined()) {
    if (d.shared_kv) {
      a.v_raw = a.k_raw;
    } else {
      a.v_raw = ctx.act_tensor({d.T, d.KV * d.hd}, Matmul);
      be.matmul({.c = a.v_raw,
                 .a = a.normed,
                 .trans_a = false,
                 .b = w.v_proj,
                 .trans_b = true,
                 .accumulate = false});
      if (w.lora.v_proj.defined()) lora_forward(ctx, w.lora.v_proj, a.normed, a.v_raw, a.lora_v);
    }
  }

  // Per-head norms: rows of head_dim. q and k are then rotated in place.
  if (!a.q.defined()) {
    a.q = ctx.act_tensor({d.T, d.H, d.hd}, Other);
    a.rstd_q = ctx.stat_tensor({d.T * d.H}, Other);
    ctx.rmsnorm(a.q, a.rstd_q, a.q_raw.view(a.q.shape()), w.q_norm);
    be.rope({.x = a.q, .table = rope, .inverse = false});
  }
  if (!a.k.defined()) {
    a.k = ctx.act_tensor({d.T, d.KV, d.hd}, Other);
    a.rstd_k = ctx.stat_tensor({d.T * d.KV}, Other);
    ctx.rmsnorm(a.k, a.rstd_k, a.k_raw.view(a.k.shape()), w.k_norm);
    be.rope({.x = a.k, .table = rope, .inverse = false});
  }
  if (!a.v.defined()) {
    a.v = ctx.act_tensor({d.T, d.KV, d.hd}, Other);
    a.rstd_v = ctx.stat_tensor({d.T * d.KV}, Other);
    ctx.rmsnorm(a.v, a.rstd_v, a.v_raw.view(a.v.shape()), Tensor());
  }
  if (ctx.donor_kv && !ctx.recompute && !ctx.cfg.kv_shared(layer)) {
    ctx.donor_kv->k[size_t(layer)] = a.k;  // kept for the sharing layers (the step's end)
    ctx.donor_kv->v[size_t(layer)] = a.v;
  }
}

void attention_output(const LayerContext& ctx, int64_t layer, const LayerWeights& w,
                      const Tensor& x, AttentionActs& a) {
  Backend& be = ctx.be;
  const Dims d = dims(ctx, layer);
  using enum ActClass;
  if (!a.proj.defined()) {
    a.proj = ctx.act_tensor({d.T, d.D}, Matmul);
    const Tensor attn2d = a.attn.view({d.T, d.H * d.hd});
    be.matmul({.c = a.proj,
               .a = attn2d,
               .trans_a = false,
               .b = w.o_proj,
               .trans_b = true,
               .accumulate = false});
    if (w.lora.o_proj.defined()) lora_forward(ctx, w.lora.o_proj, attn2d, a.proj, a.lora_o);
  }
  if (!a.out.defined()) {
    a.out = ctx.act_tensor({d.T, d.D}, Other);
    a.rstd_post = ctx.stat_tensor({d.T}, Other);
    ctx.rmsnorm(a.out, a.rstd_post, a.proj, w.post_attn_norm, 1.0, x);
  }
}

// Temporaries are released as soon as they are consumed: the peak is what memory_plan.cc
// counts for this block.
void attention_backward(const LayerContext& ctx, int64_t layer, const LayerWeights& w,
                        const LayerWeights& g, const Tensor& x, const AttentionActs& a,
                        const Tensor& dout, const Tensor& dx) {
  Backend& be = ctx.be;
  const Dims d = dims(ctx, layer);
  const Tensor& rope = ctx.cfg.is_global(layer) ? ctx.rope_global : ctx.rope_local;

  // out = RMSNorm(proj), proj = attn . Wo^T
  Tensor dproj = ctx.work({d.T, d.D});
  be.rmsnorm_backward({.dx = dproj,
                       .dw = g.post_attn_norm,
                       .dy = dout,
                       .x = a.proj,
                       .w = w.post_attn_norm,
                       .rstd = a.rstd_post,
                       .out_scale = 1.0,
                       .accumulate_dx = false});
  const Tensor attn2d = a.attn.view({d.T, d.H * d.hd});
  if (g.o_proj.defined())
    be.matmul({.c = g.o_proj,
               .a = dproj,
               .trans_a = true,
               .b = attn2d,
               .trans_b = false,
               .accumulate = true});
  Tensor dattn = ctx.work({d.T, d.H, d.hd});
  be.matmul({.c = dattn.view({d.T, d.H * d.hd}),
             .a = dproj,
             .trans_a = false,
             .b = w.o_proj,
             .trans_b = false,
             .accumulate = false});
  if (w.lora.o_proj.defined())
    lora_backward(ctx, w.lora.o_proj, g.lora.o_proj, attn2d, a.lora_o, dproj,
                  dattn.view({d.T, d.H * d.hd}));
  dproj = Tensor();

  Tensor dq = ctx.work({d.T, d.H, d.hd}), dk = ctx.work({d.T, d.KV, d.hd});
  Tensor dv = ctx.work({d.T, d.KV, d.hd});
  be.attention_backward({.dq = dq,
                         .dk = dk,
                         .dv = dv,
                         .dout = dattn,
                         .q = a.q,
                         .k = a.k,
                         .v = a.v,
                         .o = a.attn,
                         .lse = a.lse,
                         .segment_ids = ctx.in.segment_ids,
                         .shape = attention_shape(ctx, layer, d)});
  dattn = Tensor();

  if (ctx.cfg.kv_shared(layer)) {  // dk, dv are the donor's: kept for its backward
    const size_t donor = size_t(ctx.cfg.kv_donor(layer));
    for (auto [from, to] : {std::pair{&dk, &ctx.donor_kv->dk[donor]},
                            std::pair{&dv, &ctx.donor_kv->dv[donor]}}) {
      if (to->defined()) {
        be.axpy({.y = *to, .alpha = 1.0, .x = *from});
      } else {
        *to = be.alloc(from->shape(), from->dtype(), MemKind::Workspace);
        be.copy({.dst = *to, .src = *from});
      }
      *from = Tensor();
    }
    Tensor dq_raw = q_norm_backward(ctx, d, w, g, a, rope, dq);
    q_proj_and_input_backward(ctx, d, w, g, x, a, dq_raw, Tensor(), dx);
    return;
  }
  if (ctx.donor_kv && ctx.donor_kv->k[size_t(layer)].defined()) {  // a donor: add the readers'
    DonorKv& kv = *ctx.donor_kv;
    const size_t l = size_t(layer);
    if (kv.dk[l].defined()) be.axpy({.y = dk, .alpha = 1.0, .x = kv.dk[l]});
    if (kv.dv[l].defined()) be.axpy({.y = dv, .alpha = 1.0, .x = kv.dv[l]});
    kv.k[l] = kv.v[l] = kv.dk[l] = kv.dv[l] = Tensor();  // every reader is done
  }

  // RoPE backward rotates back; then the per-head norms.
  Tensor dq_raw = q_norm_backward(ctx, d, w, g, a, rope, dq);
  be.rope({.x = dk, .table = rope, .inverse = true});
  Tensor dk_raw = ctx.work({d.T, d.KV * d.hd});
  be.rmsnorm_backward({.dx = dk_raw,
                       .dw = g.k_norm,
                       .dy = dk,
                       .x = a.k_raw.view(dk.shape()),
                       .w = w.k_norm,
                       .rstd = a.rstd_k,
                       .out_scale = 1.0,
                       .accumulate_dx = false});
  dk = Tensor();
  Tensor da = ctx.work({d.T, d.D});
  if (d.shared_kv) {
    // v is the raw k projection too: its gradient joins k's before Wk.
    be.rmsnorm_backward({.dx = dk_raw,
                         .dy = dv,
                         .x = a.v_raw.view(dv.shape()),
                         .rstd = a.rstd_v,
                         .out_scale = 1.0,
                         .accumulate_dx = true});
    dv = Tensor();
    be.matmul({.c = da,
               .a = dk_raw,
               .trans_a = false,
               .b = w.k_proj,
               .trans_b = false,
               .accumulate = false});
  } else {
    Tensor dv_raw = ctx.work({d.T, d.KV * d.hd});
    be.rmsnorm_backward({.dx = dv_raw,
                         .dy = dv,
                         .x = a.v_raw.view(dv.shape()),
                         .rstd = a.rstd_v,
                         .out_scale = 1.0,
                         .accumulate_dx = false});
    dv = Tensor();
    if (g.v_proj.defined())
      be.matmul({.c = g.v_proj,
                 .a = dv_raw,
                 .trans_a = true,
                 .b = a.normed,
                 .trans_b = false,
                 .accumulate = true});
    be.matmul({.c = da,
               .a = dv_raw,
               .trans_a = false,
               .b = w.v_proj,
               .trans_b = false,
               .accumulate = false});
    if (w.lora.v_proj.defined())
      lora_backward(ctx, w.lora.v_proj, g.lora.v_proj, a.normed, a.lora_v, dv_raw, da);
    be.matmul({.c = da,
               .a = dk_raw,
               .trans_a = false,
               .b = w.k_proj,
               .trans_b = false,
               .accumulate = true});
  }
  if (g.k_proj.defined())
    be.matmul({.c = g.k_proj,
               .a = dk_raw,
               .trans_a = true,
               .b = a.normed,
               .trans_b = false,
               .accumulate = true});
  if (w.lora.k_proj.defined())
    lora_backward(ctx, w.lora.k_proj, g.lora.k_proj, a.normed, a.lora_k, dk_raw, da);
  dk_raw = Tensor();
  q_proj_and_input_backward(ctx, d, w, g, x, a, dq_raw, da, dx);
}

}  // namespace gemmax
