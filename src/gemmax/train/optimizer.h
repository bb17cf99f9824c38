// AdamW over the flat parameter buffer, with clipping by global norm (training.md §12).
#pragma once

#include "gemmax/backend/backend.h"
#include "gemmax/config/config.h"

namespace gemmax {

struct AdamWConfig {
  double b1 = 0.9, b2 = 0.95, eps = 1e-8, eps_root = 0.0;
  double weight_decay = 0.1;  // decoupled, scaled by the learning rate, on every parameter
  double clip_norm = 1.0;     // gradient_clipping_threshold; 0: no clipping
  static AdamWConfig from(const Config& config);
};

struct GradNorms {
  double raw = 0;      // before clipping
  double clipped = 0;  // after clipping
};

class AdamW {
 public:
  AdamW(Backend& be, int64_t num_params, DType dtype, const AdamWConfig& config);

  // One update of `weights` from `grads`; `t` is the 1-based update count.
  GradNorms step(const Tensor& weights, const Tensor& grads, double lr, int64_t t);

  const Tensor& mu() const { return m_; }
  const Tensor& nu() const { return v_; }

 private:
  Backend& be_;
  AdamWConfig cfg_;
  Tensor m_, v_;
};

}  // namespace gemmax
