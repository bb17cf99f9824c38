#include "gemmax/model/lora/lora_linear.h"

namespace gemmax {
namespace {

// drop(x): x itself without dropout, else a workspace copy with PEFT's dropout applied.
Tensor dropped(const LayerContext& ctx, const LoraPair& w, const Tensor& x) {
  if (w.dropout == 0) return x;
  Tensor d = ctx.be.alloc(x.shape(), x.dtype(), MemKind::Workspace);
  ctx.be.dropout({.y = d, .x = x, .p = w.dropout, .seed = w.dropout_seed});
  return d;
}

int64_t rank_of(const LoraPair& w) { return w.a.dim(w.a.ndim() - 2); }

}  // namespace

void lora_in(const LayerContext& ctx, const LoraPair& w, const Tensor& x, Tensor& xa) {
  Backend& be = ctx.be;
  xa = be.alloc({x.dim(0), rank_of(w)}, x.dtype(), ctx.act_kind(ActClass::Matmul));
  be.matmul({.c = xa, .a = dropped(ctx, w, x), .trans_a = false, .b = w.a, .trans_b = true});
  be.scale({.x = xa, .alpha = w.scale});
}

void lora_forward(const LayerContext& ctx, const LoraPair& w, const Tensor& x, const Tensor& y,
                  Tensor& xa) {
  lora_in(ctx, w, x, xa);
  ctx.be.matmul({.c = y, .a = xa, .trans_a = false, .b = w.b, .trans_b = true, .accumulate = true});
}

void lora_in_backward(const LayerContext& ctx, const LoraPair& w, const LoraPair& g,
                      const Tensor& x, const Tensor& u, const Tensor& dx) {
  Backend& be = ctx.be;
  be.matmul({.c = g.a,
             .a = u,
             .trans_a = true,
             .b = dropped(ctx, w, x),
             .trans_b = false,
             .accumulate = true});
  if (w.dropout == 0) {
    be.matmul({.c = dx, .a = u, .trans_a = false, .b = w.a, .trans_b = false, .accumulate = true});
    return;
  }
  // The dropout's backward is the same mask on the gradient.
  Tensor du = be.alloc(dx.shape(), dx.dtype(), MemKind::Workspace);
  be.matmul({.c = du, .a = u, .trans_a = false, .b = w.a, .trans_b = false});
  be.dropout({.y = du, .x = du, .p = w.dropout, .seed = w.dropout_seed});
  be.add({.out = dx, .a = dx, .b = du});
}

void lora_backward(const LayerContext& ctx, const LoraPair& w, const LoraPair& g, const Tensor& x,
                   const Tensor& xa, const Tensor& dy, const Tensor& dx) {
  Backend& be = ctx.be;
  be.matmul({.c = g.b, .a = dy, .trans_a = true, .b = xa, .trans_b = false, .accumulate = true});
  Tensor u = be.alloc({dy.dim(0), rank_of(w)}, dy.dtype(), MemKind::Workspace);
  be.matmul({.c = u, .a = dy, .trans_a = false, .b = w.b, .trans_b = false});
  be.scale({.x = u, .alpha = w.scale});
  lora_in_backward(ctx, w, g, x, u, dx);
}

namespace {

int64_t sorted_rows(const LoraGroupedInput& in) {
  return in.x_rows.defined() ? in.x_rows.numel() : in.x.dim(0);
}

GmmRows output_rows(const LoraGroupedInput& in, const LoraGroupedOutput& o, bool accumulate) {
  GmmRows r;
  r.out = in.y_rows;
  r.weight_begin = o.b_begin;
  r.weight_rows = o.b_rows;
  r.accumulate = accumulate;
  return r;
}

}  // namespace

void lora_grouped_forward(const LayerContext& ctx, const LoraPair& w, const LoraGroupedInput& in,
                          std::initializer_list<LoraGroupedOutput> ys, Tensor& xa) {
  Backend& be = ctx.be;
  GEMMAX_CHECK(w.dropout == 0, "the experts' adapters take no dropout");
  xa = be.alloc({sorted_rows(in), rank_of(w)}, in.x.dtype(), ctx.act_kind(ActClass::Matmul));
  GmmRows from_x;
  from_x.in = in.x_rows;
  be.gmm({.out = xa, .lhs = in.x, .rhs = w.a, .group_sizes = in.group_sizes, .rows = from_x});
  be.scale({.x = xa, .alpha = w.scale});
  for (const LoraGroupedOutput& y : ys)
    be.gmm({.out = y.y,
            .lhs = xa,
            .rhs = w.b,
            .group_sizes = in.group_sizes,
            .rows = output_rows(in, y, true)});
}

void lora_grouped_backward(const LayerContext& ctx, const LoraPair& w, const LoraPair& g,
                           const LoraGroupedInput& in, const Tensor& xa,
                           std::initializer_list<LoraGroupedOutput> dys, const Tensor& dx) {
  Backend& be = ctx.be;
  Tensor u = be.alloc(xa.shape(), xa.dtype(), MemKind::Workspace);
  bool first = true;
  for (const LoraGroupedOutput& dy : dys) {
    be.gmm_drhs({.drhs = g.b,
                 .lhs = xa,
                 .dout = dy.y,
                 .group_sizes = in.group_sizes,
                 .rows = output_rows(in, dy, false)});
    be.gmm_dlhs({.dlhs = u,
                 .dout = dy.y,
                 .rhs = w.b,
                 .group_sizes = in.group_sizes,
                 .rows = output_rows(in, dy, !first)});
    first = false;
  }
  be.scale({.x = u, .alpha = w.scale});
  GmmRows from_x;
  from_x.in = in.x_rows;
  be.gmm_drhs({.drhs = g.a, .lhs = in.x, .dout = u, .group_sizes = in.group_sizes, .rows = from_x});
  GmmRows into_dx;
  into_dx.in = in.dx_rows;
  into_dx.accumulate = true;
  be.gmm_dlhs({.dlhs = dx, .dout = u, .rhs = w.a, .group_sizes = in.group_sizes, .rows = into_dx});
}

}  // namespace gemmax
