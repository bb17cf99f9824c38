#include "gemmax/backend/ops/gmm.h"

#include "gemmax/base/error.h"

namespace gemmax {

void validate(const GmmArgs& args) {}

void validate(const GmmDlhsArgs& args) {}

void validate(const GmmDrhsArgs& args) {}

}  // namespace gemmax
