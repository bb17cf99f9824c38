// The token embedding and its gradient.
#pragma once

#include "gemmax/backend/ops/op_args.h"

namespace gemmax {

// x[t] = table[tokens[t]] * scale (tokens int32 [T], table [V, D], x [T, D]; the table may be
// wider than x and is applied at its own precision before the one rounding of x).
struct EmbeddingForwardArgs {
  const Tensor& x;
  const Tensor& tokens;
  const Tensor& table;
  double scale = 1.0;
};
// dtable[tokens[t]] += dx[t] * scale (a weight gradient: always accumulates).
struct EmbeddingBackwardArgs {
  const Tensor& dtable;
  const Tensor& dx;
  const Tensor& tokens;
  double scale = 1.0;
};

void validate(const EmbeddingForwardArgs& args);
void validate(const EmbeddingBackwardArgs& args);

#define GEMMAX_EMBEDDING_OPS(X)                                \
  X(embedding_forward, EmbeddingForwardArgs, NormsElementwise) \
  X(embedding_backward, EmbeddingBackwardArgs, NormsElementwise)

}  // namespace gemmax
