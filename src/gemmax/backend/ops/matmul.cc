#include "gemmax/backend/ops/matmul.h"

#include "gemmax/backend/ops/check.h"

namespace gemmax {

void validate(const MatmulArgs& args) {
  const auto& [c, a, trans_a, b, trans_b, accumulate] = args;
  GEMMAX_CHECK(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2, "matmul needs 2-D tensors, got ",
               a.str(), " ", b.str(), " ", c.str());
  const int64_t M = trans_a ? a.dim(1) : a.dim(0), K = trans_a ? a.dim(0) : a.dim(1);
  const int64_t Kb = trans_b ? b.dim(1) : b.dim(0), N = trans_b ? b.dim(0) : b.dim(1);
  GEMMAX_CHECK(K == Kb && c.dim(0) == M && c.dim(1) == N, "matmul shapes: op(", a.str(),
               trans_a ? ")^T" : ")", " . op(", b.str(), trans_b ? ")^T" : ")", " -> ", c.str());
  GEMMAX_CHECK(a.dtype() == b.dtype(), "matmul input dtypes differ: ", a.str(), " ", b.str());
}

}  // namespace gemmax
