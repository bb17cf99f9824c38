#include "gemmax/backend/ops/norm_rope.h"

#include "gemmax/base/error.h"

namespace gemmax {

void validate(const RmsnormForwardArgs& args) {}

void validate(const RmsnormBackwardArgs& args) {}

void validate(const RopeTableArgs& args) {}

void validate(const RopeArgs& args) {}

}  // namespace gemmax
