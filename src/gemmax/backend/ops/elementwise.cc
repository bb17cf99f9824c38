#include "gemmax/backend/ops/elementwise.h"

#include "gemmax/backend/ops/check.h"

namespace gemmax {

void validate(const FillArgs&) {}

void validate(const CopyArgs& args) {
  GEMMAX_CHECK(args.dst.numel() == args.src.numel(), "copy: ", args.src.str(), " into ",
               args.dst.str());
}

void validate(const AddArgs& args) {
  op_check::same(args.out, args.a, "add");
  op_check::same(args.a, args.b, "add");
}

void validate(const AxpyArgs& args) { op_check::same(args.y, args.x, "axpy"); }

void validate(const ScaleArgs&) {}

void validate(const SumSquaresArgs& args) {
  GEMMAX_CHECK(args.sum.dtype() == DType::F64 && args.sum.numel() == 1,
               "sum_squares: the sum must be a float64 device scalar, got ", args.sum.str());
}

void validate(const ScaledSumForwardArgs& args) {
  const auto& [y, a, b, s] = args;
  op_check::same(y, a, "scaled_sum_forward");
  op_check::same(a, b, "scaled_sum_forward");
  GEMMAX_CHECK(s.numel() == 1, "scaled_sum_forward: the scale must have one element, got ",
               s.str());
}

void validate(const ScaledSumBackwardArgs& args) {
  const auto& [dab, ds, dy, a, b, s] = args;
  op_check::same(dab, dy, "scaled_sum_backward");
  op_check::same(a, dy, "scaled_sum_backward");
  op_check::same(b, dy, "scaled_sum_backward");
  GEMMAX_CHECK(s.numel() == 1 && ds.numel() == 1 && ds.dtype() == s.dtype(),
               "scaled_sum_backward: scale ", s.str(), " and its gradient ", ds.str(),
               " must have one element of one dtype");
}

void validate(const DropoutArgs& args) {
  op_check::same(args.y, args.x, "dropout");
  const DType dt = args.x.dtype();
  GEMMAX_CHECK(dt == DType::BF16 || dt == DType::F32 || dt == DType::F64,
               "dropout: bfloat16, float32 or float64 tensors, got ", args.x.str());
  GEMMAX_CHECK(args.p >= 0 && args.p < 1, "dropout: the probability must be in [0, 1), got ",
               args.p);
}

void validate(const TransposeGroupsArgs& args) {
  const auto& [out, in] = args;
  GEMMAX_CHECK(in.ndim() == 3 && out.ndim() == 3 && out.dim(0) == in.dim(0) &&
                   out.dim(1) == in.dim(2) && out.dim(2) == in.dim(1) && out.dtype() == in.dtype(),
               "transpose_groups: ", in.str(), " into ", out.str());
}

}  // namespace gemmax
