// The soft-capped cross-entropy of one vocabulary tile, with its gradient written in place:
// one parallel pass per row (cap, max, log-sum-exp, gradient), row losses summed in row order.
#include <cmath>
#include <vector>

#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cpu/dispatch.h"
#include "gemmax/backend/cpu/vec_math.h"

namespace gemmax {
using namespace cpu;

void CpuBackend::softcap_cross_entropy(const Tensor& logits, const Tensor& loss,
                                       const Tensor& targets, const Tensor& mask, double cap,
                                       double grad_scale, bool write_grad) {
  if (is_wide(logits))
    return reference_.softcap_cross_entropy(logits, loss, targets, mask, cap, grad_scale,
                                            write_grad);
  const int64_t C = logits.dim(0), V = logits.dim(1);
  GEMMAX_CHECK(targets.numel() == C && mask.numel() == C, "softcap_cross_entropy: logits ",
               logits.str(), " targets ", targets.str(), " mask ", mask.str());
  const int32_t* tgt = targets.data<int32_t>();
  const int32_t* msk = mask.data<int32_t>();
  for (int64_t r = 0; r < C; ++r)
    GEMMAX_CHECK(msk[r] == 0 || (tgt[r] >= 0 && tgt[r] < V), "target id ", tgt[r],
                 " is outside the vocabulary [0, ", V, ")");
  std::vector<double> row_loss(static_cast<size_t>(C), 0.0);
  const float fcap = float(cap), inv_cap = cap > 0 ? float(1.0 / cap) : 0.0f;
  dispatch(logits, [&]<class T>() {
    T* pl = logits.data<T>();
#pragma omp parallel for if (C * V > (1 << 16))
    for (int64_t r = 0; r < C; ++r) {
      T* row = pl + r * V;
      // The cap, rounded to the logits' dtype (bf16 logits: MaxText caps in bf16, then fp32).
      float mx = -INFINITY;
      if (cap > 0) {
#pragma omp simd reduction(max : mx)
        for (int64_t v = 0; v < V; ++v) {
          row[v] = from_f32<T>(fcap * tanh_approx(to_f32(row[v]) * inv_cap));
          mx = std::max(mx, to_f32(row[v]));
        }
      } else {
#pragma omp simd reduction(max : mx)
        for (int64_t v = 0; v < V; ++v) mx = std::max(mx, to_f32(row[v]));
      }
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t v = 0; v < V; ++v) sum += double(exp_approx(to_f32(row[v]) - mx));
      const double lse = double(mx) + std::log(sum);
      if (msk[r] != 0) row_loss[size_t(r)] = lse - double(to_f32(row[tgt[r]]));
      if (!write_grad) continue;
      const float g = msk[r] != 0 ? float(grad_scale) : 0.0f, flse = float(lse);
      const int64_t target = msk[r] != 0 ? tgt[r] : -1;
#pragma omp simd
      for (int64_t v = 0; v < V; ++v) {
        const float c = to_f32(row[v]);
        float dc = g * (exp_approx(c - flse) - (v == target ? 1.0f : 0.0f));
        if (cap > 0) dc *= 1.0f - (c * inv_cap) * (c * inv_cap);
        row[v] = from_f32<T>(dc);
      }
    }
  });
  double total = 0;
  for (double l : row_loss) total += l;
  add_to_scalar(loss, total);
}

}  // namespace gemmax
