// The tensor-core grouped matmuls of bfloat16 runs. Each returns false when it does not apply
// (another dtype, fast kernels off), and the caller runs the plain kernels.
#pragma once

#include "gemmax/backend/cuda/kernels/gmm_tiles.h"
#include "gemmax/backend/cuda/ops/common.h"

namespace gemmax::cuda::ops {

template <class E, class P>
bool gmm_fast(P&, const Tensor&, const Tensor&, const Tensor&, const kern::GmmArgs&) {
  return false;
}
template <class E, class P>
bool gmm_dlhs_fast(P&, const Tensor&, const Tensor&, const Tensor&, const kern::GmmArgs&) {
  return false;
}
template <class E, class TC, class P>
bool gmm_drhs_fast(P&, const Tensor&, const Tensor&, const Tensor&, const kern::GmmArgs&) {
  return false;
}

}  // namespace gemmax::cuda::ops
