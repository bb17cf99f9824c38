// AdamW (optax adamw, decoupled decay scaled by lr).
#include <algorithm>
#include <cmath>

#include "gemmax/backend/cpu/common.h"
#include "gemmax/backend/cpu/cpu_backend.h"
#include "gemmax/backend/cpu/simd.h"
#include "gemmax/backend/cpu/vec_math.h"

namespace gemmax {
using namespace cpu;

namespace {

struct AdamWConstants {
  float gs, b1, b2, eps, eps_root, inv_bc1, inv_bc2, lr, wd;
};

GEMMAX_SIMD_BODY void adamw(float* p, float* m, float* v, const float* g, int64_t n,
                            AdamWConstants c) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * c.gs;
    const float mi = c.b1 * m[i] + (1.0f - c.b1) * gi;
    const float vi = c.b2 * v[i] + (1.0f - c.b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi * c.inv_bc1) / (std::sqrt(vi * c.inv_bc2 + c.eps_root) + c.eps);
    p[i] = p[i] - c.lr * (update + c.wd * p[i]);
  }
}
GEMMAX_AVX512 void adamw_avx512(float* p, float* m, float* v, const float* g, int64_t n,
                                AdamWConstants c) {
  adamw(p, m, v, g, n, c);
}

}  // namespace

void CpuBackend::do_adamw_step(const AdamwStepArgs& args, NoDims) {
  const auto& [param, grad, m, v, s, scalars] = args;
  if (is_wide(param)) return reference_.do_adamw_step(args, {});
  check_same(param, grad, "adamw_step");
  check_same(param, m, "adamw_step");
  check_same(param, v, "adamw_step");
  GEMMAX_CHECK(param.dtype() == DType::F32, "adamw_step: float32 master weights, got ",
               param.str());
  GEMMAX_CHECK(scalars.dtype() == DType::F64 && scalars.numel() == StepScalars::kCount,
               "adamw_step: the step scalars must be float64 [", int64_t(StepScalars::kCount),
               "], got ", scalars.str());
  const double* sc = scalars.data<double>();
  for (int64_t i = 0; i < StepScalars::kCount; ++i)
    if (!std::isfinite(sc[i])) return;  // a non-finite step is not applied
  const AdamWConstants c{float(clip_factor(s.clip_norm, std::sqrt(sc[StepScalars::kGradSumSq]))),
                         float(s.b1),
                         float(s.b2),
                         float(s.eps),
                         float(s.eps_root),
                         float(1.0 / (1.0 - std::pow(s.b1, double(s.t)))),
                         float(1.0 / (1.0 - std::pow(s.b2, double(s.t)))),
                         float(s.lr),
                         float(s.weight_decay)};
  float *p = param.data<float>(), *pm = m.data<float>(), *pv = v.data<float>();
  const float* g = grad.data<float>();
  const int64_t n = param.numel();
  const bool avx512 = wide_vectors(isa_);
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    if (avx512)
      adamw_avx512(p + i, pm + i, pv + i, g + i, len, c);
    else
      adamw(p + i, pm + i, pv + i, g + i, len, c);
  }
}

}  // namespace gemmax
