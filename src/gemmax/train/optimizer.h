// AdamW over the flat parameter buffer, with clipping by global norm (docs/TRAINING.md §12).
//
// Frozen parameters (config `freeze`) have no optimizer state and are never updated; the
// moments hold the trainable parameters only, back to back in registry order.
#pragma once

#include <string>
#include <vector>

#include "gemmax/backend/backend.h"
#include "gemmax/config/config.h"
#include "gemmax/io/safetensors.h"
#include "gemmax/model/params.h"

namespace gemmax {

struct AdamWConfig {
  double b1 = 0.9, b2 = 0.95, eps = 1e-8, eps_root = 0.0;
  double weight_decay = 0.1;  // decoupled, scaled by the learning rate, on every parameter
  double clip_norm = 1.0;     // gradient_clipping_threshold; 0: no clipping
  static AdamWConfig from(const Config& config);
};

class AdamW {
 public:
  // `trainable[i]` says whether table.specs()[i] is trained.
  AdamW(Backend& be, const ParamTable& table, const std::vector<bool>& trainable, DType dtype,
        const AdamWConfig& config);

  // One update of `weights` from `grads` (both full flat buffers); `t` is the 1-based update count.
  // Writes the gradient's sum of squares over the trainable parameters into scalars[kGradSumSq],
  // clips by its square root and applies AdamW, on the device; the update is skipped if any of the
  // step's scalars is not finite (Backend::adamw_step).
  void step(const Tensor& weights, const Tensor& grads, const Tensor& scalars, double lr,
            int64_t t);
  const AdamWConfig& config() const { return cfg_; }

  // The first trainable parameter, in registry order, whose gradient holds a NaN or an infinity,
  // as "name (element i: value)"; "" if there is none. Reads the gradients back one parameter at
  // a time: for naming the culprit of a non-finite step, not for every step.
  std::string first_nonfinite_gradient(const Tensor& grads) const;

  // The moments of each trainable parameter, named "mu.<name>" and "nu.<name>" (views).
  NamedTensors named_state() const;
  int64_t num_trainable() const { return m_.numel(); }

 private:
  // A run of adjacent trainable parameters: [begin, begin + count) of the flat buffers,
  // [state_begin, state_begin + count) of the moments.
  struct Segment {
    int64_t begin, count, state_begin;
  };

  Backend& be_;
  const ParamTable& table_;
  std::vector<bool> trainable_;
  AdamWConfig cfg_;
  std::vector<Segment> segments_;
  Tensor m_, v_;
};

// Test hook: before updates first_t .. first_t + count - 1 (1-based), the first element of the
// gradient of parameter `name` is set to NaN, as a numerical blow-up in the backward would.
// An empty name disarms it.
void inject_nonfinite_gradient_for_testing(const std::string& name, int64_t first_t, int64_t count);

}  // namespace gemmax
