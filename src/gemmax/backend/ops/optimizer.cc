#include "gemmax/backend/ops/optimizer.h"

#include "gemmax/backend/backend.h"
#include "gemmax/backend/ops/check.h"

namespace gemmax {

void validate(const AdamwStepArgs& args) {
  const auto& [param, grad, m, v, step, scalars] = args;
  GEMMAX_CHECK(
      grad.numel() == param.numel() && m.numel() == param.numel() && v.numel() == param.numel(),
      "adamw_step: param ", param.str(), " grad ", grad.str(), " m ", m.str(), " v ", v.str());
  GEMMAX_CHECK(scalars.dtype() == DType::F64 && scalars.numel() == StepScalars::kCount,
               "adamw_step: the step scalars must be float64 [", int64_t(StepScalars::kCount),
               "], got ", scalars.str());
}

}  // namespace gemmax
