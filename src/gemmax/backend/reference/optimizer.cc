// The AdamW update (docs/TRAINING.md §12: optax adamw, decoupled decay scaled by lr).
#include <cmath>

#include "gemmax/backend/reference/common.h"
#include "gemmax/backend/reference/reference_backend.h"

namespace gemmax {
using ref::check_same;

void ReferenceBackend::do_adamw_step(const AdamwStepArgs& args, NoDims) {
  const auto& [param, grad, m, v, s, scalars] = args;
  check_same(param, grad, "adamw_step");
  check_same(param, m, "adamw_step");
  check_same(param, v, "adamw_step");
  const double* sc = scalars.data<double>();
  for (int64_t i = 0; i < StepScalars::kCount; ++i)
    if (!std::isfinite(sc[i])) return;  // a non-finite step is not applied
  const double grad_scale = clip_factor(s.clip_norm, std::sqrt(sc[StepScalars::kGradSumSq]));
  const double bc1 = 1.0 - std::pow(s.b1, double(s.t));
  const double bc2 = 1.0 - std::pow(s.b2, double(s.t));
  dispatch<float, bf16, double>(param, "adamw_step", [&]<class T>() {
    T *p = param.data<T>(), *pm = m.data<T>(), *pv = v.data<T>();
    const T* g = grad.data<T>();
    const int64_t n = param.numel();
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
      const double gi = double(g[i]) * grad_scale;
      const double mi = s.b1 * double(pm[i]) + (1.0 - s.b1) * gi;
      const double vi = s.b2 * double(pv[i]) + (1.0 - s.b2) * gi * gi;
      pm[i] = T(mi);
      pv[i] = T(vi);
      const double update = (mi / bc1) / (std::sqrt(vi / bc2 + s.eps_root) + s.eps);
      p[i] = T(double(p[i]) - s.lr * (update + s.weight_decay * double(p[i])));
    }
  });
}

}  // namespace gemmax
