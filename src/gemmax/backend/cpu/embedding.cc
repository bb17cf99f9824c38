// The embedding lookup and its gradient.
#include <algorithm>

#include "gemmax/backend/cpu/common.h"
#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cpu/simd.h"
#include "gemmax/backend/cpu/vec_math.h"

namespace gemmax {
using namespace cpu;

void CpuBackend::do_embedding_forward(const EmbeddingForwardArgs& args, NoDims) {
  const auto& [x, tokens, table, scale] = args;
  if (is_wide(x) || is_wide(table)) return reference_.do_embedding_forward(args, {});
  const int64_t n = tokens.numel(), vocab = table.dim(0), d = table.dim(1);
  GEMMAX_CHECK(x.numel() == n * d, "embedding_forward: x ", x.str(), " for ", n, " tokens");
  const int32_t* tok = tokens.data<int32_t>();
  for (int64_t t = 0; t < n; ++t)
    GEMMAX_CHECK(tok[t] >= 0 && tok[t] < vocab, "token id ", tok[t], " at position ", t,
                 " is outside the vocabulary [0, ", vocab, ")");
  dispatch2<float, bf16>(x, table, "embedding_forward", [&]<class T, class W>() {
    const W* tab = table.data<W>();
    T* out = x.data<T>();
    const float s = float(scale);
#pragma omp parallel for if (n * d > kParallelMin)
    for (int64_t t = 0; t < n; ++t) {
      const W* row = tab + tok[t] * d;
      T* o = out + t * d;
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) o[i] = from_f32<T>(to_f32(row[i]) * s);
    }
  });
}

void CpuBackend::do_embedding_backward(const EmbeddingBackwardArgs& args, NoDims) {
  const auto& [dtable, dx, tokens, scale] = args;
  if (is_wide(dtable) || is_wide(dx)) return reference_.do_embedding_backward(args, {});
  const int64_t n = tokens.numel(), d = dtable.dim(1);
  const int32_t* tok = tokens.data<int32_t>();
  dispatch2<float, bf16>(dtable, dx, "embedding_backward", [&]<class W, class T>() {
    W* dt = dtable.data<W>();
    const T* g = dx.data<T>();
    const float s = float(scale);
    // Columns split over threads; tokens in order within each: repeated tokens add into the
    // same row in a fixed order.
#pragma omp parallel for if (n * d > kParallelMin)
    for (int64_t c0 = 0; c0 < d; c0 += 64)
      for (int64_t t = 0; t < n; ++t) {
        W* row = dt + tok[t] * d;
        const T* gr = g + t * d;
        const int64_t c1 = std::min(d, c0 + 64);
#pragma omp simd
        for (int64_t i = c0; i < c1; ++i)
          row[i] = from_f32<W>(to_f32(row[i]) + to_f32(from_f32<W>(to_f32(gr[i]) * s)));
      }
  });
}

}  // namespace gemmax
