#include "gemmax/backend/ops/matmul.h"

#include "gemmax/base/error.h"

namespace gemmax {

void validate(const MatmulArgs& args) {}

}  // namespace gemmax
