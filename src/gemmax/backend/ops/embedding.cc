#include "gemmax/backend/ops/embedding.h"

#include "gemmax/backend/ops/check.h"

namespace gemmax {

// Token ids are data: each backend checks their range where it reads them.
void validate(const EmbeddingForwardArgs& args) {
  const auto& [x, tokens, table, scale] = args;
  GEMMAX_CHECK(table.ndim() == 2 && tokens.dtype() == DType::I32 &&
                   x.numel() == tokens.numel() * table.dim(1),
               "embedding_forward: x ", x.str(), " for ", tokens.numel(), " tokens of table ",
               table.str());
}

void validate(const EmbeddingBackwardArgs& args) {
  const auto& [dtable, dx, tokens, scale] = args;
  GEMMAX_CHECK(dtable.ndim() == 2 && tokens.dtype() == DType::I32 &&
                   dx.numel() == tokens.numel() * dtable.dim(1),
               "embedding_backward: dx ", dx.str(), " for ", tokens.numel(), " tokens of table ",
               dtable.str());
}

}  // namespace gemmax
