// The embedding lookup and the tied, soft-capped output head with the table sharded along the
// vocabulary, without gathering it (fsdp_embedding=vocab_parallel; docs/FSDP.md).
//
// Rank r holds vocabulary rows [r Vs, r Vs + Vr) of the table. Both run tile by tile along the
// sequence (num_vocab_tiling; seed change 5, vocabulary tiling along the sequence:
// docs/SEED.md#each-change): tile t holds C of every rank's tokens, and every rank processes the
// tile's N C tokens against its own rows:
//   lookup    each rank embeds the tile's tokens that fall in its rows (zero rows for the rest)
//             and a reduce-scatter hands every rank the sum for its own tokens: exact, since one
//             rank contributes each row;
//   head      the tile's normalised activations are all-gathered; each rank computes the logits of
//             its vocabulary columns, and the softmax's max and sum of exponentials are combined
//             over ranks by two small all-reduces (vocab_ce_* of the Backend); each rank adds the
//             table gradient of its own rows, and the gradient w.r.t. the activations (fp32 partial
//             sums over each rank's columns) is reduce-scattered back to the tokens' ranks;
//   lookup backward  the tile's gradients are all-gathered and each rank adds those of tokens in
//             its rows to its piece of the table gradient.
// The traffic is proportional to the global batch's tokens instead of the table: smaller while the
// global batch has fewer tokens than about the vocabulary (EmbeddingBytes in parallel/fsdp.h).
#pragma once

#include "gemmax/parallel/comm.h"
#include "gemmax/parallel/fsdp.h"
#include "gemmax/model/context.h"

namespace gemmax {

// This rank's vocabulary rows: [first, first + rows) of the table; `piece` rows are stored.
struct VocabSlice {
  int64_t first = 0, rows = 0, piece = 0;
};
VocabSlice vocab_slice(int64_t vocab_size, int64_t ranks, int64_t rank);

// x [T, D] = the embedding of in.tokens (scaled by sqrt(D)); table: this rank's [piece, D] rows in
// the weight dtype.
void vocab_parallel_embed(Backend& be, Comm& comm, const ModelConfig& cfg, const ModelOptions& opt,
                          const StepInputs& in, const VocabInputs& vocab, const Tensor& table,
                          const Tensor& x);
// dtable [piece, D] += the lookup's gradient for this rank's rows, from every rank's dx.
void vocab_parallel_embed_backward(Backend& be, Comm& comm, const ModelConfig& cfg,
                                   const ModelOptions& opt, const StepInputs& in,
                                   const VocabInputs& vocab, const Tensor& dx,
                                   const Tensor& dtable);
// head_loss with the table's rows split over ranks: table [rows, D] (compute dtype), dtable
// [rows, D] (the weight dtype; accumulates), dnorm accumulates.
void vocab_parallel_head(Backend& be, Comm& comm, const ModelConfig& cfg, const ModelOptions& opt,
                         const StepInputs& in, const VocabInputs& vocab, const Tensor& table,
                         const Tensor& final_norm, const Tensor& x, double grad_scale,
                         const Tensor& loss, const Tensor& dtable, const Tensor& dnorm,
                         const Tensor& dx);

}  // namespace gemmax
