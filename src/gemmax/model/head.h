// The output head and loss (gemma4.md §2, §4.8; training.md §8, §9):
//   logits = cap * tanh( RMSNorm(x; norm) . Emb^T / cap ),  loss = masked mean cross-entropy.
// The head runs over tiles of token rows, so at most [rows per tile, vocab] logits exist at
// once. Each tile's loss gradient is formed right after its loss: the head is the last op of
// the forward, so its backward needs no second pass over recomputed logits.
#pragma once

#include "gemmax/model/context.h"

namespace gemmax {

struct HeadWeights {
  Tensor embed;       // [V, D] (tied)
  Tensor final_norm;  // [D]
};

// Returns the sum over counted targets of the cross-entropy. With grads: dx (written) is the
// gradient w.r.t. x of grad_scale * that sum, and the embedding / final-norm gradients
// accumulate into g.
double head_loss(Backend& be, const ModelConfig& cfg, const StepInputs& in, DType act,
                 const HeadWeights& w, const Tensor& x, int64_t num_tiles, double grad_scale,
                 const HeadWeights* g, const Tensor* dx);

// The soft-capped logits of every position, [T, V] (for checks and sampling, not training).
Tensor head_logits(Backend& be, const ModelConfig& cfg, DType act, const HeadWeights& w,
                   const Tensor& x);

}  // namespace gemmax
