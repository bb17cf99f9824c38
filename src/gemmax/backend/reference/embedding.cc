// The embedding lookup and its gradient.
#include "gemmax/backend/reference/common.h"
#include "gemmax/backend/reference/reference_backend.h"

namespace gemmax {
using ref::calc_t;

void ReferenceBackend::do_embedding_forward(const EmbeddingForwardArgs& args, NoDims) {
  const auto& [x, tokens, table, scale] = args;
  const int64_t n = tokens.numel(), vocab = table.dim(0), d = table.dim(1);
  const int32_t* tok = tokens.data<int32_t>();
  for (int64_t t = 0; t < n; ++t)  // checked before the parallel loop, which cannot throw
    GEMMAX_CHECK(tok[t] >= 0 && tok[t] < vocab, "token id ", tok[t], " at position ", t,
                 " is outside the vocabulary [0, ", vocab, ")");
  // The table may be wider than x (fp32 master table, bf16 activations): one rounding.
  dispatch2<float, bf16, double>(x, table, "embedding_forward", [&]<class T, class W>() {
    const W* tab = table.data<W>();
    T* out = x.data<T>();
#pragma omp parallel for
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < d; ++i) out[t * d + i] = T(double(tab[tok[t] * d + i]) * scale);
    }
  });
}

void ReferenceBackend::do_embedding_backward(const EmbeddingBackwardArgs& args, NoDims) {
  const auto& [dtable, dx, tokens, scale] = args;
  const int64_t n = tokens.numel(), d = dtable.dim(1);
  const int32_t* tok = tokens.data<int32_t>();
  dispatch2<float, bf16, double>(dtable, dx, "embedding_backward", [&]<class W, class T>() {
    W* dt = dtable.data<W>();
    const T* g = dx.data<T>();
    // Serial over tokens (repeated tokens add into the same row), vectorised over columns.
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < d; ++i) {
        W& out = dt[tok[t] * d + i];
        out = W(calc_t<W>(out) + calc_t<W>(W(double(g[t * d + i]) * scale)));
      }
  });
}

}  // namespace gemmax
