#include "gemmax/model/head.h"

namespace gemmax {

double head_loss(Backend& be, const ModelConfig& cfg, const StepInputs& in, DType act,
                 const HeadWeights& w, const Tensor& x, int64_t num_tiles, double grad_scale,
                 const HeadWeights* g, const Tensor* dx) {
  const int64_t T = in.tokens_count(), D = cfg.d_model, V = cfg.vocab_size;
  GEMMAX_CHECK(num_tiles > 0 && T % num_tiles == 0, "num_vocab_tiling=", num_tiles,
               " must divide the tokens per step (per_device_batch_size x max_target_length = ",
               T, ")");
  const int64_t C = T / num_tiles;
  Tensor y = be.alloc({C, D}, act, MemKind::Workspace);
  Tensor rstd = be.alloc({C}, stat_dtype(act), MemKind::Workspace);
  Tensor logits = be.alloc({C, V}, act, MemKind::Workspace);
  Tensor dy = g ? be.alloc({C, D}, act, MemKind::Workspace) : Tensor();
  double loss_sum = 0;
  for (int64_t tile = 0; tile < num_tiles; ++tile) {
    const Tensor xt = x.rows(tile * C, (tile + 1) * C);
    be.rmsnorm_forward(y, rstd, xt, w.final_norm, cfg.norm_eps, 1.0);
    be.matmul(logits, y, false, w.embed, true, false);
    loss_sum += be.softcap_cross_entropy(logits, in.targets.rows(tile * C, (tile + 1) * C),
                                         in.target_mask.rows(tile * C, (tile + 1) * C),
                                         cfg.final_logits_soft_cap, grad_scale, g != nullptr);
    if (!g) continue;
    // logits now holds dz = dloss/d(y . Emb^T).
    be.matmul(g->embed, logits, true, y, false, true);
    be.matmul(dy, logits, false, w.embed, false, false);
    be.rmsnorm_backward(dx->rows(tile * C, (tile + 1) * C), g->final_norm, dy, xt, w.final_norm,
                        rstd, 1.0, false);
  }
  return loss_sum;
}

Tensor head_logits(Backend& be, const ModelConfig& cfg, DType act, const HeadWeights& w,
                   const Tensor& x) {
  const int64_t T = x.dim(0), D = cfg.d_model, V = cfg.vocab_size;
  Tensor y = be.alloc({T, D}, act, MemKind::Workspace);
  Tensor rstd = be.alloc({T}, stat_dtype(act), MemKind::Workspace);
  be.rmsnorm_forward(y, rstd, x, w.final_norm, cfg.norm_eps, 1.0);
  Tensor logits = be.alloc({T, V}, act, MemKind::Workspace);
  be.matmul(logits, y, false, w.embed, true, false);
  // With every row masked out the loss op only applies the soft-cap, in place.
  Tensor targets = be.zeros({T}, DType::I32, MemKind::Workspace);
  be.softcap_cross_entropy(logits, targets, targets, cfg.final_logits_soft_cap, 0.0, false);
  return logits;
}

}  // namespace gemmax
