// The dense matmul.
#pragma once

#include "gemmax/backend/ops/op_args.h"

namespace gemmax {

// c = op(a) . op(b) (+ c if accumulate), op(x) = x^T when trans. 2-D; a and b share one dtype, c
// may be wider; products accumulate in fp32 or wider.
struct MatmulArgs {
  const Tensor& c;
  const Tensor& a;
  bool trans_a = false;
  const Tensor& b;
  bool trans_b = false;
  bool accumulate = false;
};

void validate(const MatmulArgs& args);

#define GEMMAX_MATMUL_OPS(X) X(matmul, MatmulArgs, Matmul)

}  // namespace gemmax
