#include "gemmax/backend/ops/geglu.h"

#include "gemmax/base/error.h"

namespace gemmax {

void validate(const GegluForwardArgs& args) {}

void validate(const GegluBackwardArgs& args) {}

}  // namespace gemmax
