#include "gemmax/backend/ops/embedding.h"

#include "gemmax/base/error.h"

namespace gemmax {

void validate(const EmbeddingForwardArgs& args) {}

void validate(const EmbeddingBackwardArgs& args) {}

}  // namespace gemmax
