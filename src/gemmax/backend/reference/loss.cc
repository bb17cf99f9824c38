// Soft-capped cross-entropy on a tile of logits, with its gradient written in place.
#include <algorithm>
#include <cmath>
#include <vector>

#include "gemmax/backend/reference/dispatch.h"
#include "gemmax/backend/reference/reference_backend.h"

namespace gemmax {

void ReferenceBackend::softcap_cross_entropy(const Tensor& logits, const Tensor& loss,
                                             const Tensor& targets, const Tensor& mask, double cap,
                                             double grad_scale, bool write_grad) {
  const int64_t C = logits.dim(0), V = logits.dim(1);
  GEMMAX_CHECK(targets.numel() == C && mask.numel() == C, "softcap_cross_entropy: logits ",
               logits.str(), " targets ", targets.str(), " mask ", mask.str());
  const int32_t* tgt = targets.data<int32_t>();
  const int32_t* msk = mask.data<int32_t>();
  for (int64_t r = 0; r < C; ++r)  // checked before the parallel loop, which cannot throw
    GEMMAX_CHECK(msk[r] == 0 || (tgt[r] >= 0 && tgt[r] < V), "target id ", tgt[r],
                 " is outside the vocabulary [0, ", V, ")");
  std::vector<double> row_loss(size_t(C), 0.0);  // summed in row order below
  ref::dispatch_float(logits, [&]<class T>() {
    T* pl = logits.data<T>();
#pragma omp parallel for
    for (int64_t r = 0; r < C; ++r) {
      T* row = pl + r * V;
      if (cap > 0)
        for (int64_t v = 0; v < V; ++v) row[v] = T(cap * std::tanh(double(row[v]) / cap));
      double mx = double(row[0]);
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(row[v]));
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
      const double lse = mx + std::log(sum);
      if (msk[r] != 0) row_loss[size_t(r)] = lse - double(row[tgt[r]]);
      if (!write_grad) continue;
      const double g = msk[r] != 0 ? grad_scale : 0.0;
      for (int64_t v = 0; v < V; ++v) {
        const double c = double(row[v]);
        double dc = g * (std::exp(c - lse) - (v == tgt[r] && msk[r] != 0 ? 1.0 : 0.0));
        if (cap > 0) dc *= 1.0 - (c / cap) * (c / cap);
        row[v] = T(dc);
      }
    }
  });
  double total = 0;
  for (double l : row_loss) total += l;
  ref::add_to_scalar(loss, total);
}

}  // namespace gemmax
