// The output head's loss on a tile of rows: softcapped cross-entropy, whole, or with the
// vocabulary split over ranks (parallel/vocab_parallel.h).
#pragma once

#include "gemmax/backend/ops/op_args.h"

namespace gemmax {

// logits [C, V] holds z = y . Emb^T. With c = cap * tanh(z / cap) (cap 0: c = z), loss[0] += sum
// over rows with mask != 0 of logsumexp(c) - c[target] (loss: a float64 device scalar). On return
// logits holds c, or, if write_grad, dz = grad_scale * [mask != 0] * (softmax(c) - onehot(target))
// * (1 - (c / cap)^2).
struct SoftcapCrossEntropyArgs {
  const Tensor& logits;
  const Tensor& loss;
  const Tensor& targets;
  const Tensor& mask;
  double cap = 0;
  double grad_scale = 1.0;
  bool write_grad = false;
};

// The vocabulary-parallel passes: logits [R, Vl] hold this rank's columns of the vocabulary for R
// rows; targets (int32 [R]) hold each row's target column on this rank, or -1 (another rank's
// column); stats is float64 [3, R]: row max, sum of exponentials, target logit. Between the passes
// the caller combines the stats over the ranks: the max of stats[0] after pass 1, the sums of
// stats[1] and stats[2] after pass 2. The three passes give softcap_cross_entropy's loss and
// gradient. A backend without them fails: it trains FSDP with fsdp_embedding=gather.
//
// Pass 1: logits <- c = cap tanh(z / cap) (cap 0: z), in place; stats[0][r] = max_v c[r, v].
struct VocabCeMaxArgs {
  const Tensor& logits;
  const Tensor& stats;
  double cap = 0;
};
// Pass 2: stats[1][r] = sum_v exp(c[r, v] - stats[0][r]); stats[2][r] = c[r, targets[r]], or 0.
struct VocabCeSumsArgs {
  const Tensor& logits;
  const Tensor& stats;
  const Tensor& targets;
};
// Pass 3: with lse = stats[0] + log(stats[1]): loss[0] += sum over rows r in [loss_begin,
// loss_end) with mask != 0 of lse[r] - stats[2][r]; if write_grad, logits <- dz = grad_scale
// [mask != 0] (exp(c - lse) - [v == targets[r]]) (1 - (c / cap)^2).
struct VocabCeFinishArgs {
  const Tensor& logits;
  const Tensor& loss;
  const Tensor& stats;
  const Tensor& targets;
  const Tensor& mask;
  double cap = 0;
  double grad_scale = 1.0;
  int64_t loss_begin = 0, loss_end = 0;
  bool write_grad = false;
};

void validate(const SoftcapCrossEntropyArgs& args);
void validate(const VocabCeMaxArgs& args);
void validate(const VocabCeSumsArgs& args);
void validate(const VocabCeFinishArgs& args);

#define GEMMAX_LOSS_OPS(X) X(softcap_cross_entropy, SoftcapCrossEntropyArgs, HeadLoss)
// Optional: the Backend's defaults fail with a message naming fsdp_embedding=gather.
#define GEMMAX_VOCAB_LOSS_OPS(X)              \
  X(vocab_ce_max, VocabCeMaxArgs, HeadLoss)   \
  X(vocab_ce_sums, VocabCeSumsArgs, HeadLoss) \
  X(vocab_ce_finish, VocabCeFinishArgs, HeadLoss)

}  // namespace gemmax
