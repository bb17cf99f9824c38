// The optimizer on flat buffers.
#pragma once

#include "gemmax/backend/ops/op_args.h"

namespace gemmax {

struct AdamWStep {
  double lr = 0, b1 = 0.9, b2 = 0.95, eps = 1e-8, eps_root = 0, weight_decay = 0;
  double clip_norm = 0;  // global-norm clipping threshold on sqrt(scalars[kGradSumSq]); 0: off
  int64_t t = 1;         // 1-based step count for bias correction
};

// AdamW with the gradient scaled by min(1, clip_norm / sqrt(scalars[kGradSumSq])). The update is
// skipped (param, m, v unchanged) unless every slot of `scalars` (the step's StepScalars) is
// finite: a non-finite loss or gradient never reaches the weights. param, m, v [n] in the master
// dtype; grad [n].
struct AdamwStepArgs {
  const Tensor& param;
  const Tensor& grad;
  const Tensor& m;
  const Tensor& v;
  AdamWStep step;
  const Tensor& scalars;
};

// The clipping factor of AdamW: min(1, clip_norm / norm) (1 when clip_norm is 0).
inline double clip_factor(double clip_norm, double norm) {
  return clip_norm > 0 && norm > clip_norm ? clip_norm / norm : 1.0;
}

void validate(const AdamwStepArgs& args);

#define GEMMAX_OPTIMIZER_OPS(X) X(adamw_step, AdamwStepArgs, Optimizer)

}  // namespace gemmax
