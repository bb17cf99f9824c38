// GeGLU: a = gelu_tanh(gate) * up [m, F].
//
// round_gelu (MaxText's activations_in_float32=false): gelu(gate) is rounded to the activation
// dtype before the product, and in the backward the gradient of that rounded value is rounded
// too (the cotangent of a bf16 value is bf16); false: computed wide, one rounding per output.
#pragma once

#include "gemmax/backend/ops/op_args.h"

namespace gemmax {

// Fused rows: h = [gate | up] [m, 2F] (up undefined), or the two halves in separate tensors
// h = gate [m, F] and up [m, F].
struct GegluForwardArgs {
  const Tensor& a;
  const Tensor& h;
  const Tensor& up = kNoTensor;
  bool round_gelu = false;
};
// Gradients into dh (fused [m, 2F], dup undefined) or into the halves dh = dgate and dup; either
// half may be undefined (not needed), and is then not written.
struct GegluBackwardArgs {
  const Tensor& dh = kNoTensor;
  const Tensor& dup = kNoTensor;
  const Tensor& da;
  const Tensor& h;
  const Tensor& up = kNoTensor;
  bool round_gelu = false;
};

// The rows of a GeGLU: m rows of F; `stride` elements between rows of h (F split, 2F fused).
struct GegluDims {
  int64_t m = 0, F = 0, stride = 0;
  bool split = false;  // up in a tensor of its own
};

GegluDims validate(const GegluForwardArgs& args);
GegluDims validate(const GegluBackwardArgs& args);

#define GEMMAX_GEGLU_OPS(X)                            \
  X(geglu_forward, GegluForwardArgs, NormsElementwise) \
  X(geglu_backward, GegluBackwardArgs, NormsElementwise)

}  // namespace gemmax
