// RMSNorm over the last dimension, and split-half RoPE.
#pragma once

#include "gemmax/backend/ops/op_args.h"

namespace gemmax {

// y = [residual +] x * rstd * w * out_scale with rstd = (mean(x^2) + eps)^-1/2 computed and saved
// per row (stat dtype). `w` may be undefined (the scale-free norm); `residual` may be undefined.
// The scale is multiplied in fp32 before the one rounding to y's dtype (seed change 2), or, with
// round_before_scale, x * rstd is first rounded to y's dtype and multiplied by w rounded to y's
// dtype in that dtype (MaxText before that change; bf16 runs only differ).
struct RmsnormForwardArgs {
  const Tensor& y;
  const Tensor& rstd;
  const Tensor& x;
  const Tensor& w = kNoTensor;
  double eps = 0;
  double out_scale = 1.0;
  const Tensor& residual = kNoTensor;
  bool round_before_scale = false;
};
// dx (+)= rstd * (g - xhat * mean(g * xhat)), g = dy * w * out_scale; dw += sum_rows
// dy * xhat * out_scale (dw: in w's dtype; both undefined for the scale-free norm).
struct RmsnormBackwardArgs {
  const Tensor& dx;
  const Tensor& dw = kNoTensor;
  const Tensor& dy;
  const Tensor& x;
  const Tensor& w = kNoTensor;
  const Tensor& rstd;
  double out_scale = 1.0;
  bool accumulate_dx = false;
};
// table [T, hd/2, 2] (stat dtype) = cos and sin of positions[t] * inv_freq[i] (inv_freq: fp64
// [hd/2], zeros for dimensions that do not rotate): computed once per step and kind of layer, then
// read by every rotation.
struct RopeTableArgs {
  const Tensor& table;
  const Tensor& positions;
  const Tensor& inv_freq;
};
// In place on x [T, heads, hd]: pair (i, i + hd/2) of token t rotates by the table's angle (t, i).
// inverse = true rotates back: that is the backward.
struct RopeArgs {
  const Tensor& x;
  const Tensor& table;
  bool inverse = false;
};

void validate(const RmsnormForwardArgs& args);
void validate(const RmsnormBackwardArgs& args);
void validate(const RopeTableArgs& args);
void validate(const RopeArgs& args);

#define GEMMAX_NORM_ROPE_OPS(X)                              \
  X(rmsnorm_forward, RmsnormForwardArgs, NormsElementwise)   \
  X(rmsnorm_backward, RmsnormBackwardArgs, NormsElementwise) \
  X(rope_table, RopeTableArgs, NormsElementwise)             \
  X(rope, RopeArgs, NormsElementwise)

}  // namespace gemmax
