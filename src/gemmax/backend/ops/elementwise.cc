#include "gemmax/backend/ops/elementwise.h"

#include "gemmax/base/error.h"

namespace gemmax {

void validate(const FillArgs& args) {}

void validate(const CopyArgs& args) {}

void validate(const AddArgs& args) {}

void validate(const AxpyArgs& args) {}

void validate(const ScaleArgs& args) {}

void validate(const SumSquaresArgs& args) {}

void validate(const ScaledSumForwardArgs& args) {}

void validate(const ScaledSumBackwardArgs& args) {}

void validate(const TransposeGroupsArgs& args) {}

}  // namespace gemmax
