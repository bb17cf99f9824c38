#include "gemmax/backend/ops/attention.h"

#include "gemmax/base/error.h"

namespace gemmax {

void validate(const AttentionForwardArgs& args) {}

void validate(const AttentionBackwardArgs& args) {}

void validate(const AttentionDecodeArgs& args) {}

}  // namespace gemmax
