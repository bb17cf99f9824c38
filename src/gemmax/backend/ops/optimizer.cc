#include "gemmax/backend/ops/optimizer.h"

#include "gemmax/base/error.h"

namespace gemmax {

void validate(const AdamwStepArgs& args) {}

}  // namespace gemmax
