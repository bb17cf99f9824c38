#include "gemmax/model/head.h"

#include <vector>

namespace gemmax {
std::vector<TileBlock> tile_blocks(int64_t B, int64_t S, int64_t num_tiles, int64_t tile) {
  const int64_t Cs = S / num_tiles;
  if (B == 1 || num_tiles == 1) return {{tile * B * Cs, 0, B * Cs}};
  std::vector<TileBlock> blocks;
  for (int64_t b = 0; b < B; ++b) blocks.push_back({b * S + tile * Cs, b * Cs, Cs});
  return blocks;
}

void head_loss(Backend& be, const ModelConfig& cfg, const StepInputs& in, const ModelOptions& opt,
               const HeadWeights& w, const Tensor& x, double grad_scale, const Tensor& loss,
               const HeadWeights* g, const Tensor* dx) {
  const int64_t B = in.batch, S = in.seq, D = cfg.d_model, V = cfg.vocab_size;
  const int64_t num_tiles = opt.num_vocab_tiling;
  const DType act = opt.act, dot = head_dot_dtype(opt);
  GEMMAX_CHECK(w.embed.dtype() == dot, "the head's table is ", w.embed.str(),
               ", its product runs in ", dtype_name(dot));
  GEMMAX_CHECK(num_tiles > 0 && S % num_tiles == 0, "num_vocab_tiling=", num_tiles,
               " must divide the sequence length max_target_length=", S,
               " (the head tiles positions along the sequence)");
  const int64_t C = B * (S / num_tiles);  // tokens per tile
  Tensor y = be.alloc({C, D}, act, MemKind::Workspace);
  Tensor rstd = be.alloc({C}, stat_dtype(act), MemKind::Workspace);
  Tensor targets = be.alloc({C}, DType::I32, MemKind::Workspace);
  Tensor mask = be.alloc({C}, DType::I32, MemKind::Workspace);
  Tensor logits = be.alloc({C, V}, dot, MemKind::Workspace);
  const bool backward = dx != nullptr;
  Tensor dy = backward ? be.alloc({C, D}, act, MemKind::Workspace) : Tensor();
  // logits_dot_in_fp32: the product reads the normalised input widened and writes dy wide, which
  // is rounded once to the activation dtype.
  Tensor y_dot = dot == act ? y : be.alloc({C, D}, dot, MemKind::Workspace);
  Tensor dy_dot = !backward || dot == act ? dy : be.alloc({C, D}, dot, MemKind::Workspace);
  for (int64_t tile = 0; tile < num_tiles; ++tile) {
    const std::vector<TileBlock> blocks = tile_blocks(B, S, num_tiles, tile);
    for (const TileBlock& k : blocks) {
      const int64_t r0 = k.row, r1 = k.row + k.count, t0 = k.token, t1 = k.token + k.count;
      be.rmsnorm_forward({.y = y.rows(r0, r1),
                          .rstd = rstd.rows(r0, r1),
                          .x = x.rows(t0, t1),
                          .w = w.final_norm,
                          .eps = cfg.norm_eps,
                          .out_scale = 1.0,
                          .round_before_scale = !opt.norm_scale_in_fp32});
      be.copy({.dst = targets.rows(r0, r1), .src = in.targets.rows(t0, t1)});
      be.copy({.dst = mask.rows(r0, r1), .src = in.target_mask.rows(t0, t1)});
    }
    if (dot != act) be.copy({.dst = y_dot, .src = y});
    be.matmul({.c = logits,
               .a = y_dot,
               .trans_a = false,
               .b = w.embed,
               .trans_b = true,
               .accumulate = false});
    be.softcap_cross_entropy({.logits = logits,
                              .loss = loss,
                              .targets = targets,
                              .mask = mask,
                              .cap = cfg.final_logits_soft_cap,
                              .grad_scale = grad_scale,
                              .write_grad = backward});
    if (!backward) continue;
    // logits now holds dz = dloss/d(y . Emb^T).
    if (g && g->embed.defined())
      be.matmul({.c = g->embed,
                 .a = logits,
                 .trans_a = true,
                 .b = y_dot,
                 .trans_b = false,
                 .accumulate = true});
    be.matmul({.c = dy_dot,
               .a = logits,
               .trans_a = false,
               .b = w.embed,
               .trans_b = false,
               .accumulate = false});
    if (dot != act) be.copy({.dst = dy, .src = dy_dot});
    for (const TileBlock& k : blocks) {
      const int64_t r0 = k.row, r1 = k.row + k.count, t0 = k.token, t1 = k.token + k.count;
      be.rmsnorm_backward({.dx = dx->rows(t0, t1),
                           .dw = g ? g->final_norm : Tensor(),
                           .dy = dy.rows(r0, r1),
                           .x = x.rows(t0, t1),
                           .w = w.final_norm,
                           .rstd = rstd.rows(r0, r1),
                           .out_scale = 1.0,
                           .accumulate_dx = false});
    }
  }
}

Tensor head_logits(Backend& be, const ModelConfig& cfg, const ModelOptions& opt,
                   const HeadWeights& w, const Tensor& x) {
  const int64_t T = x.dim(0), D = cfg.d_model, V = cfg.vocab_size;
  const DType act = opt.act, dot = head_dot_dtype(opt);
  Tensor y = be.alloc({T, D}, act, MemKind::Workspace);
  Tensor rstd = be.alloc({T}, stat_dtype(act), MemKind::Workspace);
  be.rmsnorm_forward({.y = y,
                      .rstd = rstd,
                      .x = x,
                      .w = w.final_norm,
                      .eps = cfg.norm_eps,
                      .out_scale = 1.0,
                      .round_before_scale = !opt.norm_scale_in_fp32});
  Tensor y_dot = y;
  if (dot != act)
    y_dot = be.alloc({T, D}, dot, MemKind::Workspace), be.copy({.dst = y_dot, .src = y});
  Tensor logits = be.alloc({T, V}, dot, MemKind::Workspace);
  be.matmul({.c = logits,
             .a = y_dot,
             .trans_a = false,
             .b = w.embed,
             .trans_b = true,
             .accumulate = false});
  // With every row masked out the loss op only applies the soft-cap, in place.
  Tensor targets = be.zeros({T}, DType::I32, MemKind::Workspace);
  Tensor unused = be.zeros({1}, DType::F64, MemKind::Workspace);
  be.softcap_cross_entropy({.logits = logits,
                            .loss = unused,
                            .targets = targets,
                            .mask = targets,
                            .cap = cfg.final_logits_soft_cap,
                            .grad_scale = 0.0,
                            .write_grad = false});
  return logits;
}

}  // namespace gemmax
