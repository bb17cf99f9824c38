#include "gemmax/backend/ops/moe.h"

#include "gemmax/base/error.h"

namespace gemmax {

void validate(const RouterForwardArgs& args) {}

void validate(const RouterBackwardArgs& args) {}

void validate(const LoadBalanceForwardArgs& args) {}

void validate(const RouteSortArgs& args) {}

void validate(const PermuteArgs& args) {}

void validate(const PermuteBackwardArgs& args) {}

void validate(const CombineForwardArgs& args) {}

void validate(const CombineBackwardArgs& args) {}

}  // namespace gemmax
