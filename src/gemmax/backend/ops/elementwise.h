// Elementwise ops and reductions. Tensors of one op have the same number of elements; `copy`
// converts dtype, the others keep one dtype unless stated.
#pragma once

#include "gemmax/backend/ops/op_args.h"

namespace gemmax {

// x = value
struct FillArgs {
  const Tensor& x;
  double value = 0;
};
// dst = src, converting dtype
struct CopyArgs {
  const Tensor& dst;
  const Tensor& src;
};
// out = a + b
struct AddArgs {
  const Tensor& out;
  const Tensor& a;
  const Tensor& b;
};
// y += alpha x
struct AxpyArgs {
  const Tensor& y;
  double alpha = 0;
  const Tensor& x;
};
// x *= alpha
struct ScaleArgs {
  const Tensor& x;
  double alpha = 0;
};
// sum[0] += sum_i x_i^2, in fp64 (sum: a float64 device scalar).
struct SumSquaresArgs {
  const Tensor& sum;
  const Tensor& x;
};
// y = (a + b) * s[0], s a device scalar (layer_scalar: in its own dtype, applied before the one
// rounding of y).
struct ScaledSumForwardArgs {
  const Tensor& y;
  const Tensor& a;
  const Tensor& b;
  const Tensor& s;
};
// dab = dy * s[0]; ds[0] += sum_i dy_i (a_i + b_i) (ds in s's dtype).
struct ScaledSumBackwardArgs {
  const Tensor& dab;
  const Tensor& ds;
  const Tensor& dy;
  const Tensor& a;
  const Tensor& b;
  const Tensor& s;
};
// y = x * keep(i) / (1 - p): LoRA's dropout of the adapter's input (PEFT's nn.Dropout). keep(i)
// is dropout_keep(seed, i, ...) of base/dropout_mask.h, the same elements on every backend; the
// product is taken in float32 (float64 for float64 tensors) and rounded once. y may be x. The
// backward is the same op on the gradient, with the same seed. 0 <= p < 1.
struct DropoutArgs {
  const Tensor& y;
  const Tensor& x;
  double p = 0;
  uint64_t seed = 0;
};
// out[g] = in[g]^T for in [G, r, c], out [G, c, r].
struct TransposeGroupsArgs {
  const Tensor& out;
  const Tensor& in;
};

void validate(const FillArgs& args);
void validate(const CopyArgs& args);
void validate(const AddArgs& args);
void validate(const AxpyArgs& args);
void validate(const ScaleArgs& args);
void validate(const SumSquaresArgs& args);
void validate(const ScaledSumForwardArgs& args);
void validate(const ScaledSumBackwardArgs& args);
void validate(const DropoutArgs& args);
void validate(const TransposeGroupsArgs& args);

#define GEMMAX_ELEMENTWISE_OPS(X)                                 \
  X(fill, FillArgs, NormsElementwise)                             \
  X(copy, CopyArgs, NormsElementwise)                             \
  X(add, AddArgs, NormsElementwise)                               \
  X(axpy, AxpyArgs, NormsElementwise)                             \
  X(scale, ScaleArgs, NormsElementwise)                           \
  X(sum_squares, SumSquaresArgs, NormsElementwise)                \
  X(scaled_sum_forward, ScaledSumForwardArgs, NormsElementwise)   \
  X(scaled_sum_backward, ScaledSumBackwardArgs, NormsElementwise) \
  X(dropout, DropoutArgs, NormsElementwise)                       \
  X(transpose_groups, TransposeGroupsArgs, GroupedMatmul)

}  // namespace gemmax
