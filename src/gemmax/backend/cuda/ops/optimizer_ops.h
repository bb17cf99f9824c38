// The AdamW update.
#pragma once

#include <cmath>

#include "gemmax/backend/cuda/kernels/elementwise.h"
#include "gemmax/backend/cuda/ops/common.h"

namespace gemmax::cuda::ops {

template <class P>
void adamw_step(P& p, const AdamwStepArgs& args, NoDims) {
  const auto& [param, grad, m, v, st, scalars] = args;
  // The cuda kernels update param, m and v of one dtype from a gradient of that dtype.
  check_same(param, grad, "adamw_step");
  check_same(param, m, "adamw_step");
  check_same(param, v, "adamw_step");
  if (param.numel() == 0) return;
  const kern::AdamWArgs a{st.lr,
                          st.b1,
                          st.b2,
                          st.eps,
                          st.eps_root,
                          st.weight_decay,
                          st.clip_norm,
                          1.0 - std::pow(st.b1, double(st.t)),
                          1.0 - std::pow(st.b2, double(st.t))};
  dispatch<float, bf16, double>(param, "adamw_step", [&]<class T>() {
    const bool vec = vec_ok<T>(kern::kVec<T>, {&param, &grad, &m, &v});
    p.template launch<kern::AdamWKernel>(
        stride_launch(vec ? param.numel() / kern::kVec<T> + 1 : param.numel(), 256, 65536),
        ptr<T>(param),
        const_cast<const T*>(ptr<T>(grad)), ptr<T>(m), ptr<T>(v), param.numel(), a,
        const_cast<const double*>(ptr<double>(scalars)), int(StepScalars::kCount),
        int(StepScalars::kGradSumSq), const_cast<const kern::DeviceError*>(p.errors()), vec);
  });
}

}  // namespace gemmax::cuda::ops
